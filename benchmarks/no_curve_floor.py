"""What :data:`ecolaunch.caps.limits.NO_CURVE_FLOOR_SHARE` costs a job without a curve, on measured cap sweeps.

For each board in the shipped traces (the Zeus NSDI '23 sweeps of an A40, a V100, a P100 and an RTX 6000, and the
H200 sweep of 2026-11-30 without its noisy ``mlp`` rows), every workload's slowdown at the lowest measured cap at
or above the share of the board's default limit (the highest cap in its sweep), against that default. Prints one
row per board and, with ``--json``, the figures docs/threat-model.md cites.

    python benchmarks/no_curve_floor.py [--share 0.8] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from ecolaunch.caps.limits import NO_CURVE_FLOOR_SHARE

DATA = Path(__file__).resolve().parent.parent / "ecolaunch" / "sim" / "data"
ZEUS = ("a40", "v100", "p100", "rtx6000")


def sweeps() -> dict[str, list[dict[float, float]]]:
    """board -> one {cap W: time per iteration or epoch} per workload."""
    out: dict[str, list[dict[float, float]]] = {}
    for board in ZEUS:
        runs: dict[tuple, dict[float, float]] = defaultdict(dict)
        with open(DATA / f"summary_power_{board}.csv") as f:
            for r in csv.DictReader(f):
                key = (r["dataset"], r["network"], r["batch_size"], r["optimizer"])
                runs[key][float(r["power_limit"])] = float(r["time_per_epoch"])
        out[board] = list(runs.values())
    runs = defaultdict(dict)
    with open(DATA / "h200_cap_sweep.csv") as f:
        for r in csv.DictReader(f):
            if r["workload"] != "mlp":  # launch-bound and noisy (SOURCE.md): not a curve
                runs[r["workload"]][float(r["power_cap_w"])] = float(r["iter_time_s"])
    out["h200"] = list(runs.values())
    return out


def figures(share: float) -> dict[str, dict[str, float]]:
    rows = {}
    for board, runs in sweeps().items():
        slow = []
        for run in runs:
            top = max(run)
            caps = [c for c in run if c >= share * top - 1e-9]
            cap = min(caps)
            slow.append(100.0 * (run[cap] / run[top] - 1.0))
        slow.sort()
        rows[board] = {"workloads": len(slow), "median_pct": round(statistics.median(slow), 1),
                       "p90_pct": round(slow[math.ceil(0.9 * len(slow)) - 1], 1), "max_pct": round(slow[-1], 1)}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=NO_CURVE_FLOOR_SHARE)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = figures(args.share)
    if args.json:
        print(json.dumps({"share": args.share, "boards": rows}, indent=1))
        return
    print(f"slowdown at the lowest measured cap >= {args.share:g} x the board's default limit")
    for board, r in rows.items():
        print(f"{board:8} {r['workloads']:3} workloads  median {r['median_pct']:5.1f} %  p90 {r['p90_pct']:5.1f} %  "
              f"max {r['max_pct']:5.1f} %")


if __name__ == "__main__":
    main()
