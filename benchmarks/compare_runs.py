"""Two runs of ``benchmarks/energy.py`` side by side, paired by seed: what a change moved.

    python benchmarks/compare_runs.py BEFORE.json AFTER.json [--rename OLD=NEW ...] [--json]

The measured world is frozen while its issues are open: a change to the launcher's rules or to the world is its own
commit, with the figures before and after (docs/benchmarks.md). Run ``energy.py --json --out DIR`` on the commit before
and on the commit after, with the same seeds, traces and policies, and give this script the two ``energy.json`` files.
For every trace and policy in both: node energy, dynamic GPU energy (where both runs report it), mean JCT and the
share of jobs over their bound, each as the mean of the per-seed differences (after minus before; energies and JCT
in % of before) with its 95 % interval (Student's t on the seeds, as ``energy.py``); and each run's node energy against
``exclusive``. ``--rename OLD=NEW`` reads the before run's row ``OLD`` as ``NEW`` (a row renamed between the runs:
``curve=curve-untold`` when the bare rule lost the name ``curve``). Runs on different seeds are refused.

``--json`` prints ``{"seeds": [...], "traces": {TRACE: {POLICY: {FIGURE: {"mean", "ci95"}}}}}`` with the figures
``node_energy_pct``, ``gpu_dynamic_energy_pct``, ``mean_jct_pct``, ``violations_pp``, ``before_vs_exclusive_pct``,
``after_vs_exclusive_pct``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import emit, mean_ci95


def _stat(values: list[float]) -> dict:
    mean, half = mean_ci95(values)
    return {"mean": round(mean, 3), "ci95": None if half is None else round(half, 3)}


def _pct(after: list[float], before: list[float]) -> list[float]:
    return [100.0 * (a / b - 1.0) for a, b in zip(after, before)]


def compare(before: dict, after: dict, rename: dict[str, str]) -> dict:
    if before["seeds"] != after["seeds"]:
        raise SystemExit(f"compare_runs.py: the runs are on different seeds ({before['seeds']} and "
                         f"{after['seeds']}): run both with the same --seeds and --first-seed")
    out: dict = {"seeds": after["seeds"], "traces": {}}
    for trace, rows_after in after["traces"].items():
        rows_before = {rename.get(p, p): r for p, r in before["traces"].get(trace, {}).items()}
        figures: dict = {}
        for policy, a in rows_after.items():
            b = rows_before.get(policy)
            if b is None:
                continue
            pa, pb = a["per_seed"], b["per_seed"]
            f = {"node_energy_pct": _stat(_pct(pa["node_energy_kwh"], pb["node_energy_kwh"])),
                 "mean_jct_pct": _stat(_pct(pa["mean_jct_s"], pb["mean_jct_s"])),
                 "violations_pp": _stat([x - y for x, y in zip(pa["qos_violations_pct"], pb["qos_violations_pct"])])}
            if "gpu_dynamic_energy_kwh" in pa and "gpu_dynamic_energy_kwh" in pb:
                f["gpu_dynamic_energy_pct"] = _stat(_pct(pa["gpu_dynamic_energy_kwh"], pb["gpu_dynamic_energy_kwh"]))
            for side, rows in (("before", rows_before), ("after", rows_after)):
                excl = rows.get("exclusive")
                if excl is not None and policy != "exclusive":
                    f[f"{side}_vs_exclusive_pct"] = _stat(_pct(rows[policy]["per_seed"]["node_energy_kwh"],
                                                               excl["per_seed"]["node_energy_kwh"]))
            figures[policy] = f
        if figures:
            out["traces"][trace] = figures
    return out


def _pm(stat: dict | None) -> str:
    if stat is None:
        return "-"
    return f"{stat['mean']:+.2f}" + ("" if stat["ci95"] is None else f" ± {stat['ci95']:.2f}")


def table(result: dict) -> str:
    lines = ["| trace | policy | node energy % | dynamic GPU energy % | mean JCT % | over bound, pp "
             "| vs exclusive before → after % |", "|---|---|---|---|---|---|---|"]
    for trace, rows in result["traces"].items():
        for policy, f in rows.items():
            vs = (f"{_pm(f.get('before_vs_exclusive_pct'))} → {_pm(f.get('after_vs_exclusive_pct'))}"
                  if "after_vs_exclusive_pct" in f else "-")
            lines.append(f"| {trace} | {policy} | {_pm(f['node_energy_pct'])} | {_pm(f.get('gpu_dynamic_energy_pct'))} "
                         f"| {_pm(f['mean_jct_pct'])} | {_pm(f['violations_pp'])} | {vs} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                        help="read the before run's row OLD as NEW (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rename = {}
    for item in args.rename:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            parser.error(f"--rename takes OLD=NEW, got {item!r}")
        rename[old] = new
    docs = []
    for path in (args.before, args.after):
        try:
            docs.append(json.loads(path.read_text()))
        except (OSError, ValueError) as e:
            print(f"compare_runs.py: cannot read {path}: {e}", file=sys.stderr)
            raise SystemExit(1) from None
    result = compare(docs[0], docs[1], rename)
    emit(result, args.json, table(result))


if __name__ == "__main__":
    main()
