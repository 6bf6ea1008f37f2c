"""How much a profiled window's time misreads, from Zeus's own profiling windows: the size of the measured world's
repeating window error (:attr:`ecolaunch.sim.measured.Noise.persistent_time`).

    python benchmarks/window_error.py [--data ../shared/data/zeus-nsdi23] [--ratio 1.1] [--json]

Zeus's GlobalPowerLimitOptimizer profiled real training jobs one window per power limit
(``profile_windows/<GPU>+<model>+gpu<ids>.csv``, You et al., NSDI '23, Apache-2.0). At limits that cannot bind a job
(at least ``--ratio`` times the power it drew in that window) its windows should last equally long; how much they
differ is what one window misreads. For each job with two or more such windows: the windows' relative standard
deviation of time (and of power, for what it is worth: limits just above the draw still shape it). The median over
the jobs is the total window error of a real training job. The measured world's independent part is 1 %
(:attr:`~ecolaunch.sim.measured.Noise.time`: ecolaunch's profiler against the reference sweep of the same day on an
H200), so the part taken as repeating is ``sqrt(median² - independent²)``: one sweep per job cannot tell the two apart,
so this is the upper reading (none repeating is the lower: the world before the change).

``--json`` prints ``{"jobs": [{"gpu", "model", "gpus", "windows", "time_spread_pct", "power_spread_pct"}],
"median_time_spread_pct", "range_time_spread_pct": [min, max], "median_power_spread_pct", "independent_pct",
"persistent_pct"}``.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from _common import emit


def window_errors(data: Path, ratio: float) -> dict:
    from ecolaunch.profile.zeus_data import load_profile_windows
    from ecolaunch.sim.measured import Noise

    jobs = []
    for sweep in load_profile_windows(data):
        loose = [p for p in sweep.points if p.power_cap_w >= ratio * p.power_w]
        if len(loose) < 2:
            continue
        times, powers = [p.iter_time_s for p in loose], [p.power_w for p in loose]
        jobs.append({"gpu": sweep.gpu, "model": sweep.workload, "gpus": sweep.num_gpus, "windows": len(loose),
                     "time_spread_pct": round(100 * statistics.stdev(times) / statistics.fmean(times), 2),
                     "power_spread_pct": round(100 * statistics.stdev(powers) / statistics.fmean(powers), 2)})
    spreads = [j["time_spread_pct"] for j in jobs]
    median = statistics.median(spreads)
    independent = 100 * Noise().time
    return {"jobs": jobs, "median_time_spread_pct": round(median, 2),
            "range_time_spread_pct": [min(spreads), max(spreads)],
            "median_power_spread_pct": round(statistics.median(j["power_spread_pct"] for j in jobs), 2),
            "independent_pct": independent,
            "persistent_pct": round(math.sqrt(max(0.0, median ** 2 - independent ** 2)), 2)}


def main() -> None:
    from ecolaunch.profile.zeus_data import DEFAULT_DATA_DIR

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR, help="the Zeus NSDI '23 data folder")
    parser.add_argument("--ratio", type=float, default=1.1,
                        help="a limit at least this many times the window's power cannot bind (default 1.1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.ratio >= 1.0:
        parser.error(f"--ratio must be a number >= 1, got {args.ratio}")
    result = window_errors(args.data, args.ratio)
    lines = [f"{'GPU':<6}{'model':<20}{'GPUs':>5}{'windows':>9}{'time %':>9}{'power %':>9}"]
    lines += [f"{j['gpu']:<6}{j['model']:<20}{j['gpus']:>5}{j['windows']:>9}{j['time_spread_pct']:>9.2f}"
              f"{j['power_spread_pct']:>9.2f}" for j in result["jobs"]]
    lines.append(f"median time spread {result['median_time_spread_pct']:.2f} % (range "
                 f"{result['range_time_spread_pct'][0]:.2f}-{result['range_time_spread_pct'][1]:.2f} %), power "
                 f"{result['median_power_spread_pct']:.2f} %; independent part {result['independent_pct']:.1f} %: "
                 f"repeating part {result['persistent_pct']:.2f} %")
    emit(result, args.json, "\n".join(lines))


if __name__ == "__main__":
    main()
