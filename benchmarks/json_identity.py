"""Every benchmark's ``--json``, snapshotted and compared: the check of a refactor's rule "behaviour stays".

    python benchmarks/json_identity.py --out DIR [--tree DIR] [--only NAME ...] [--data-dir DIR]
    python benchmarks/json_identity.py --compare BEFORE AFTER [--only NAME ...] [--json]

**Snapshot** (``--out``): runs each benchmark of ``--tree`` (default: the checkout this script is in) that has a
``--json`` option, the scripts of that tree, as a subprocess of this Python with ``PYTHONPATH`` and the working
directory at that tree, on its quickest settings that still go through its code paths (:data:`BENCHMARKS`), one after
the other, and writes its JSON to ``DIR/<name>.json`` (sorted keys; the tree's path, the run's temporary folder and
the home folder written as ``<tree>``, ``<tmp>`` and ``<home>``, so two trees compare). ``DIR/manifest.json`` records
each benchmark's argv and seconds. The environment is fixed: no ``ECOLAUNCH_*``, ``PET_*`` or ``TORCHELASTIC_*``
variables, the tree's ``tests/data/no-policy.toml`` as admin policy, one BLAS thread, every cache in the run's
temporary folder (nothing trained earlier is reused). Benchmarks that need a real GPU are left out
(:data:`DEVICE_ONLY`), and a slow one (:attr:`Benchmark.slow`) runs only when ``--only`` names it. The measured data
(``--data-dir``, default ``../shared/data`` beside this checkout) is passed to the scripts that take a folder;
``model_fit.py`` takes none and reads ``../shared/data`` beside the tree measured.

**Compare** (``--compare BEFORE AFTER``): two snapshot folders, benchmark by benchmark. Deterministic figures must be
equal; a key a benchmark declares volatile (timings, wall clock, latencies: :attr:`Benchmark.volatile`, each with its
reason) is compared on its structure only (same keys, same types, same lengths). Prints one row per benchmark:
``identical``, ``structure-only`` (equal but for volatile values) or ``DIFFERENT`` with the first differing key path;
``--json`` prints the rows instead. Exit status 1 if anything differs or is missing.

The settings are a snapshot's contract: a snapshot compares only with one taken by the same settings (the manifest's
argv is compared too). Before a refactor: ``--out benchmarks/results/identity/<commit>``; after it: ``--out`` into a
temporary folder and ``--compare`` the two.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600

#: the tiny made-up table in Lucid's format that tests/test_lowutil_pairs_benchmark.py uses (Lucid's data is not
#: shipped): enough to go through every row and subset of lowutil_pairs.py; this checkout's, whatever tree runs
LUCID_TINY = REPO / "tests" / "data" / "lucid-tiny"


def _lucid_table(tmp: Path) -> None:
    shutil.copytree(LUCID_TINY, tmp / "lucid")


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One benchmark run: its script in ``benchmarks/``, its argv (``{tmp}``: the run's temporary folder, ``{data}``:
    the measured data folder) and the keys whose values are volatile, each with why. A volatile pattern without a dot
    matches a key of that name (fnmatch) anywhere; with dots, the whole path (``cases.*.p50_ms``)."""

    name: str
    argv: tuple[str, ...]
    volatile: Mapping[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    #: volatile patterns whose value may be null in one run and a number in another (none measured that time)
    nullable: frozenset[str] = frozenset()
    #: left out of a run unless named by ``--only`` (too slow for the ten minutes a snapshot aims at)
    slow: bool = False

    @property
    def script(self) -> str:
        return self.argv[0]


WALL = "wall-clock time of the run"
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("cap_control", ("cap_control.py", "--only", "H200", "--iterations", "600", "--json"),
              {"wall_s": WALL}),
    Benchmark("compare_runs", ("compare_runs.py", "benchmarks/results/issue36/1-before/energy.json",
                               "benchmarks/results/issue36/1-after/energy.json", "--json")),
    # slow: every case fills its host (up to 256 jobs placed one by one) before it times a decision; no option shrinks
    # that (about 5 minutes on 2 loaded cores)
    Benchmark("decision_latency", ("decision_latency.py", "--repeat", "2", "--json"),
              {"p50_ms": "latency of a decision", "p99_ms": "latency of a decision"}, slow=True),
    Benchmark("eaco_reproduction", ("eaco_reproduction.py", "--json")),
    Benchmark("energy", ("energy.py", "--no-folds", "--seeds", "2", "--trace", "power-budget", "--out", "{tmp}/energy",
                         "--cache", "{tmp}/cache", "--json")),
    Benchmark("fault_injection", ("fault_injection.py", "--rounds", "2", "--cap-launchers", "1", "--seed", "0",
                                  "--json"),
              {"restore_p*_s": "seconds from a SIGKILL to the cap restored (null when none was measured)",
               "restores_measured": "a restore is timed only if the killed launcher had set its cap by then",
               "sigkills": "a drawn kill counts only if its process still runs at the drawn moment",
               "wall_s": WALL},
              nullable=frozenset({"restore_p*_s"})),
    Benchmark("hook_overhead", ("hook_overhead.py", "--repeats", "1", "--json"),
              {"*_ns": "timeit of a call", "import_ms": "wall time of an import"}),
    Benchmark("launch_overhead", ("launch_overhead.py", "--rounds", "1", "--json"),
              {"ratio_median": "ratio of two wall times", "ecolaunch_s": WALL, "torchrun_s": WALL}),
    Benchmark("lowutil_pairs", ("lowutil_pairs.py", "--data", "{tmp}/lucid", "--bootstrap", "50", "--json"),
              setup=_lucid_table),
    Benchmark("measured_types", ("measured_types.py", "--no-holdout", "--zeus-dir", "{data}/zeus-nsdi23",
                                 "--cache", "{tmp}/cache", "--json"),
              {"run_s": WALL}),
    Benchmark("model_fit", ("model_fit.py", "--json")),
    Benchmark("no_curve_floor", ("no_curve_floor.py", "--json")),
    Benchmark("pace_matching", ("pace_matching.py", "--seeds", "2", "--kind", "ResNet-50 (batch size 64)",
                                "--size", "1+1", "--json"),
              {"multinode.wall_s": "wall-clock time of the two real launchers",
               "multinode.plan": "the plan lists the nodes in the order they reached torch's rendezvous, a race "
                                 "between the two launchers (same_plan says whether they agreed)"}),
    Benchmark("pair_prediction", ("pair_prediction.py", "--fast", "--folds", "2", "--epochs", "2",
                                  "--synthetic", "100", "--json"),
              {"train_s": "wall-clock time of a training"}),
    Benchmark("powercap_accuracy", ("powercap_accuracy.py", "--data", "{data}/zeus-nsdi23", "--json")),
    Benchmark("predict_accuracy", ("predict_accuracy.py", "--json")),
    Benchmark("queue_caps", ("queue_caps.py", "--seeds", "2", "--trace", "workstation-measured", "--weight", "4",
                             "--lift", "1", "--json")),
    Benchmark("sim_speed", ("sim_speed.py", "--jobs", "300", "--hosts", "1", "--json"),
              {"wall_s": WALL, "trace_s": WALL}),
    Benchmark("state_contention", ("state_contention.py", "--procs", "2", "--cycles", "3", "--gpus", "2", "--json"),
              {"p50_ms": "lock wait", "p99_ms": "lock wait", "wall_s": WALL}),
    Benchmark("teardown_loop", ("teardown_loop.py", "--runs", "1", "--load", "0", "--launcher", "both", "--json")),
    Benchmark("train_gnn", ("train_gnn.py", "--fast", "--epochs", "2", "--synthetic", "50", "--out",
                            "{tmp}/gnn/weights.pt", "--quiet", "--json"),
              {"data_s": "wall-clock time to build the data", "train_s": "wall-clock time of the training"}),
    Benchmark("window_error", ("window_error.py", "--data", "{data}/zeus-nsdi23", "--json")),
)
# Scripts with a --json option that are not run, and why.
DEVICE_ONLY = {
    "gpu_check.py": "validates an install on a real NVIDIA GPU (its figures measure the GPU)",
    "device_check.sh": "the device machine's check: pytest -m gpu, gpu_check.py and calibration on a real GPU",
}


# ---- comparing ---------------------------------------------------------------------------------------------------

def _is_volatile(path: tuple[str, ...], volatile: Mapping[str, str]) -> bool:
    for pattern in volatile:
        if "." in pattern:
            if any(fnmatch.fnmatchcase(".".join(path[:i]), pattern) for i in range(1, len(path) + 1)):
                return True
        elif any(fnmatch.fnmatchcase(key, pattern) for key in path):
            return True
    return False


def _kind(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value) if value is None else "bool"
    if isinstance(value, int | float):
        return "number"  # a timing rounded to a whole number is still a timing
    return type(value).__name__


def _equal(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def first_difference(before: object, after: object, volatile: Mapping[str, str] = {},
                     nullable: frozenset[str] = frozenset(),
                     path: tuple[str, ...] = ()) -> tuple[str | None, bool]:
    """The first key path (``a.b.0.c``) where ``after`` differs from ``before``, or None; and whether a volatile value
    differed (equal on structure only). Dict keys are walked in sorted order; under a volatile key only the structure
    counts: the same keys, lengths and kinds (numbers are one kind; under a ``nullable`` key null is a number too)."""
    loose = _is_volatile(path, volatile)
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(set(before) | set(after))
        changed = False
        for key in keys:
            if key not in before or key not in after:
                return ".".join((*path, key)) + (" (missing after)" if key in before else " (new after)"), changed
            where, moved = first_difference(before[key], after[key], volatile, nullable, (*path, key))
            if where is not None:
                return where, changed or moved
            changed = changed or moved
        return None, changed
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return (".".join(path) or "<root>") + f" (length {len(before)} -> {len(after)})", False
        changed = False
        for i, (b, a) in enumerate(zip(before, after)):
            where, moved = first_difference(b, a, volatile, nullable, (*path, str(i)))
            if where is not None:
                return where, changed or moved
            changed = changed or moved
        return None, changed
    if _equal(before, after):
        return None, False
    if loose and _kind(before) == _kind(after):
        return None, True
    if loose and {_kind(before), _kind(after)} == {"number", "None"} and _is_volatile(path, dict.fromkeys(nullable)):
        return None, True
    return (".".join(path) or "<root>") + f" ({json.dumps(before)[:40]} -> {json.dumps(after)[:40]})", False


def compare_docs(before: object, after: object, volatile: Mapping[str, str] = {},
                 nullable: frozenset[str] = frozenset()) -> dict:
    """One benchmark's verdict: ``{"verdict": "identical" | "structure-only" | "DIFFERENT", "where": path | None}``."""
    where, moved = first_difference(before, after, volatile, nullable)
    if where is not None:
        return {"verdict": "DIFFERENT", "where": where}
    return {"verdict": "structure-only" if moved else "identical", "where": None}


def compare_dirs(before: Path, after: Path, benchmarks: tuple[Benchmark, ...] = BENCHMARKS) -> list[dict]:
    """Every benchmark's verdict between two snapshot folders (a missing or unreadable file, or another argv, is
    DIFFERENT)."""
    manifests = [_read(d / "manifest.json") or {} for d in (before, after)]
    rows = []
    for bench in benchmarks:
        docs = [_read(d / f"{bench.name}.json") for d in (before, after)]
        runs = [m.get("benchmarks", {}).get(bench.name, {}) for m in manifests]
        row = {"benchmark": bench.name, "seconds": [r.get("seconds") for r in runs]}
        if docs[0] is None or docs[1] is None:
            missing = " and ".join(str(d) for d, doc in zip((before, after), docs) if doc is None)
            row.update(verdict="DIFFERENT", where=f"<no {bench.name}.json in {missing}>")
        elif runs[0].get("argv") != runs[1].get("argv"):
            row.update(verdict="DIFFERENT", where=f"<argv {runs[0].get('argv')} -> {runs[1].get('argv')}>")
        else:
            row.update(compare_docs(docs[0], docs[1], bench.volatile, bench.nullable))
        rows.append(row)
    return rows


def _read(path: Path) -> object | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---- snapshotting ------------------------------------------------------------------------------------------------

def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "ECOLAUNCH_", "TORCHELASTIC_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(PYTHONPATH=str(tree), ECOLAUNCH_POLICY=str(tree / "tests" / "data" / "no-policy.toml"),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def _neutral(text: str, tree: Path, tmp: Path) -> str:
    """The run's own paths as placeholders, so snapshots of two trees compare and name no machine's folders."""
    for path, name in ((tmp, "<tmp>"), (tree, "<tree>"), (Path.home(), "<home>")):
        for spelled in {str(path), str(path.resolve())}:
            text = text.replace(spelled, name)
    return text


def snapshot(bench: Benchmark, tree: Path, data: Path, out: Path) -> dict:
    """Run one benchmark of ``tree``; write ``out/<name>.json``; return ``{"argv", "seconds", "ok", "error"}``."""
    tmp = Path(tempfile.mkdtemp(prefix=f"identity-{bench.name}-"))
    try:
        if bench.setup is not None:
            bench.setup(tmp)
        argv = [a.replace("{tmp}", str(tmp)).replace("{data}", str(data)) for a in bench.argv]
        cmd = [sys.executable, str(tree / "benchmarks" / argv[0]), *argv[1:]]
        start = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"argv": list(bench.argv), "seconds": TIMEOUT_S, "ok": False, "error": f"timed out ({TIMEOUT_S} s)"}
        seconds = round(time.perf_counter() - start, 1)
        run = {"argv": list(bench.argv), "seconds": seconds, "ok": False, "error": None}
        if done.returncode != 0:
            run["error"] = f"exit {done.returncode}: " + _neutral(done.stderr.strip()[-500:], tree, tmp)
            return run
        try:
            doc = json.loads(_neutral(done.stdout, tree, tmp))
        except ValueError as e:
            run["error"] = f"stdout is not JSON: {e}"
            return run
        (out / f"{bench.name}.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        run["ok"] = True
        return run
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _selected(only: list[str] | None) -> tuple[Benchmark, ...]:
    if not only:
        return tuple(b for b in BENCHMARKS if not b.slow)
    names = {b.name for b in BENCHMARKS}
    unknown = sorted(set(only) - names)
    if unknown:
        raise SystemExit(f"Error: no benchmark {', '.join(unknown)}; choose from {', '.join(sorted(names))}")
    return tuple(b for b in BENCHMARKS if b.name in only)


def _table(rows: list[dict], seconds_header: str) -> str:
    lines = [f"{'benchmark':<18} {seconds_header:>13}  verdict"]
    for r in rows:
        secs = "/".join("-" if s is None else f"{s:.0f}" for s in r["seconds"])
        where = f"  {r['where']}" if r["where"] else ""
        lines.append(f"{r['benchmark']:<18} {secs:>13}  {r['verdict']}{where}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="take a snapshot into this folder")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"), help="compare two snapshots")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose benchmarks run (default: this one)")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data",
                        help="the measured data (Zeus's zeus-nsdi23 folder within; default: ../shared/data)")
    parser.add_argument("--only", action="append", metavar="NAME", help="these benchmarks only (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args()
    if (args.out is None) == (args.compare is None):
        parser.error("give one of --out DIR or --compare BEFORE AFTER")
    benchmarks = _selected(args.only)
    if args.compare:
        rows = compare_dirs(*args.compare, benchmarks)
        if args.json:
            json.dump({"rows": rows, "different": sum(r["verdict"] == "DIFFERENT" for r in rows)}, sys.stdout,
                      indent=2)
            sys.stdout.write("\n")
        else:
            print(_table(rows, "seconds b/a"))
        return 1 if any(r["verdict"] == "DIFFERENT" for r in rows) else 0
    tree = args.tree.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = (_read(manifest_path) or {}) if args.only else {}
    manifest.setdefault("benchmarks", {})
    manifest["device_only"] = DEVICE_ONLY
    total = time.perf_counter()
    failed = 0
    for bench in benchmarks:
        run = snapshot(bench, tree, args.data_dir.resolve(), args.out)
        manifest["benchmarks"][bench.name] = {"argv": run["argv"], "seconds": run["seconds"]}
        failed += not run["ok"]
        status = "ok" if run["ok"] else f"FAILED: {run['error']}"
        print(f"{bench.name:<18} {run['seconds']:>7.1f} s  {status}", flush=True)
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    slow = [b.name for b in BENCHMARKS if b.slow and b not in benchmarks]
    print(f"{len(benchmarks)} benchmarks in {time.perf_counter() - total:.0f} s; not run: "
          + ", ".join(DEVICE_ONLY) + " (need a real GPU)" + (f", {', '.join(slow)} (slow: --only runs it)" if slow else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
