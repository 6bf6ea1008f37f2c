"""The ground-truth cap sweep of benchmarks/gpu_check.py, in its own process (so that no CUDA context outlives it).

    python benchmarks/_cap_sweep.py --workloads mm,bw --caps 700,575,450,325,200 --settle-s 0.6 --measure-s 2.0 \\
        --result FILE

For each workload of ``ecolaunch.calibrate.canned`` and each cap: set the cap through ecolaunch's backend selection
(NVML, or the simulated GPUs of ``ECOLAUNCH_SIMULATE``), run ``settle-s`` seconds, then measure ``measure-s`` seconds:
iteration time (each iteration synchronized), board power and J per iteration from the energy counter; then the
first cap once more, last (``repeat``: a second window at the same cap some seconds later, what one window's mean is
off from another's: ``capchoice.WINDOW_ERROR_PCT``). The cap found at the start is restored in a ``finally``. Writes
``{"workloads": {name: {"what", "points": [...], "repeat": point}}, "error": null or why, "stand_in_load": bool}``
to FILE (also on failure) and prints nothing. Needs root on real GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def sweep_worker(names: list[str], caps: list[float], settle_s: float, measure_s: float, out: Path) -> int:
    """The sweep's own process: sets each cap through ecolaunch's backend, measures, restores in ``finally``."""
    from ecolaunch.errors import EcolaunchError
    from ecolaunch.calibrate.canned import build, open_meter, run_for

    doc: dict[str, Any] = {"workloads": {}, "error": None, "stand_in_load": False}
    original = meter = None
    try:
        for name in names:
            workload = build(name)
            meter = open_meter(workload.device, workload.name)
            if meter.backend is None:
                raise RuntimeError(f"no GPU to measure: {meter.error}")
            doc["stand_in_load"] = meter.stand_in
            if original is None:
                original = meter.snapshot().power_limit_w
            run_for(workload, settle_s)  # warm-up at the cap the GPU has
            points = []
            for cap in [*caps, caps[0]]:  # the first cap again, last: a second window at it
                meter.backend.set_power_limit(meter.uuid, cap)
                run_for(workload, settle_s)
                start_j = meter.energy_j()
                iters, wall_s = run_for(workload, measure_s)
                end_j = meter.energy_j()
                snap = meter.snapshot()
                joules = None if start_j is None or end_j is None else end_j - start_j
                points.append({"power_cap_w": cap, "iters": iters, "iter_time_s": wall_s / iters,
                               "power_w": None if joules is None else joules / wall_s,
                               "j_per_iter": None if joules is None else joules / iters,
                               "enforced_w": snap.power_limit_enforced_w, "util_gpu_pct": snap.util_gpu_pct})
            doc["workloads"][name] = {"what": workload.what, "points": points[:-1], "repeat": points[-1]}
            del workload
    except (EcolaunchError, RuntimeError) as e:
        doc["error"] = f"{e}" + (f" (HINT: {e.hint})" if getattr(e, "hint", None) else "")
    finally:
        try:
            if meter is not None and meter.backend is not None and original is not None:
                meter.backend.set_power_limit(meter.uuid, original)
        except EcolaunchError as e:
            doc["error"] = "; ".join(filter(None, [doc["error"], f"could not restore {original:g} W: {e}"]))
        out.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", required=True, help="comma-separated names of ecolaunch.calibrate.canned")
    parser.add_argument("--caps", required=True, help="comma-separated caps in W, in the order to measure them")
    parser.add_argument("--settle-s", type=float, default=0.6)
    parser.add_argument("--measure-s", type=float, default=2.0)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    return sweep_worker(args.workloads.split(","), [float(c) for c in args.caps.split(",")], args.settle_s,
                        args.measure_s, args.result)


if __name__ == "__main__":
    sys.exit(main())
