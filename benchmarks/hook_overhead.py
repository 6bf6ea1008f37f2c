"""What ``ecolaunch.step()`` costs in a training loop, idle (not launched by ecolaunch) and active.

Measures, with ``timeit`` (median over repeats of many calls):

- ``idle_step_ns``: ``ecolaunch.step()`` with ``ECOLAUNCH_HOOK_DIR`` unset (goal: < 1000 ns);
- ``empty_call_ns``: a Python function that does nothing, for scale;
- ``active_step_ns``: ``step()`` writing stamps to a temporary hook directory (one 8-byte ``os.write``);
- ``active_track_item_ns``: per-item cost of ``for x in ecolaunch.track(range(n))`` over a bare loop, active
  (idle, ``track`` returns its argument, so a loop over it costs nothing extra);
- ``import_ms``: median wall time of ``import ecolaunch`` in fresh interpreters, and whether that import
  loaded torch or torch_geometric (it must not).

Usage: ``python benchmarks/hook_overhead.py [--json] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ecolaunch  # noqa: E402
from ecolaunch.profile import hooks  # noqa: E402

_IMPORT_PROBE = (
    "import sys, time; t = time.perf_counter(); import ecolaunch; dt = time.perf_counter() - t; "
    "print(dt * 1e3, int('torch' in sys.modules), int('torch_geometric' in sys.modules))"
)


def per_call_ns(fn, number: int, repeats: int) -> float:
    return statistics.median(t / number * 1e9 for t in timeit.repeat(fn, number=number, repeat=repeats))


def loop_ns(make_iterable, n: int, repeats: int) -> float:
    def run() -> None:
        for _ in make_iterable(n):
            pass

    return per_call_ns(run, 1, repeats) / n


def import_probe(runs: int) -> tuple[float, bool, bool]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOLAUNCH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    times, torch_seen, pyg_seen = [], False, False
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        times.append(float(out[0]))
        torch_seen |= out[1] == "1"
        pyg_seen |= out[2] == "1"
    return statistics.median(times), torch_seen, pyg_seen


def measure(repeats: int) -> dict[str, float | bool]:
    saved = dict(os.environ)
    hooks.reconfigure({k: v for k, v in saved.items() if not k.startswith("ECOLAUNCH_")})

    def empty() -> None:
        return None

    idle = per_call_ns(ecolaunch.step, 1_000_000, repeats)
    empty_ns = per_call_ns(empty, 1_000_000, repeats)
    with tempfile.TemporaryDirectory() as d:
        hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": d})
        active = per_call_ns(ecolaunch.step, 20_000, repeats)
        tracked = loop_ns(lambda n: ecolaunch.track(range(n)), 20_000, repeats)
        bare = loop_ns(range, 20_000, repeats)
        hooks.reconfigure({})
    hooks.reconfigure(saved)
    import_ms, torch_seen, pyg_seen = import_probe(5)
    return {
        "idle_step_ns": round(idle, 1),
        "empty_call_ns": round(empty_ns, 1),
        "active_step_ns": round(active, 1),
        "active_track_item_ns": round(tracked - bare, 1),
        "import_ms": round(import_ms, 2),
        "import_loads_torch": torch_seen,
        "import_loads_torch_geometric": pyg_seen,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--repeats", type=int, default=15, help="timeit repeats (median is reported)")
    args = ap.parse_args(argv)
    r = measure(args.repeats)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"ecolaunch hook overhead (median of {args.repeats} repeats; Python {sys.version.split()[0]})")
    rows = [
        ("idle step()", f"{r['idle_step_ns']:.1f} ns/call", "goal < 1000 ns"),
        ("empty Python call", f"{r['empty_call_ns']:.1f} ns/call", "for scale"),
        ("active step()", f"{r['active_step_ns']:.1f} ns/call", "one 8-byte os.write"),
        ("active track() item", f"{r['active_track_item_ns']:.1f} ns/item", "over a bare for loop"),
        ("import ecolaunch", f"{r['import_ms']:.2f} ms", "fresh interpreter, median of 5"),
        ("import loads torch", str(r["import_loads_torch"]), "must be False"),
        ("import loads torch_geometric", str(r["import_loads_torch_geometric"]), "must be False"),
    ]
    width = max(len(a) for a, _, _ in rows)
    for a, b, c in rows:
        print(f"  {a:<{width}}  {b:>16}  {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
