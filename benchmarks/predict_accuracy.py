"""``ecolaunch predict`` at measured caps: does it answer what was measured?

    python benchmarks/predict_accuracy.py [--json]

For every measured curve (the vendored H200 sweep: ``mm``, ``bw``, ``mlp`` at every 50 W from 700 to 200 W, and
every Zeus summary curve on its board), the job is given three of its caps as ``cap_points`` (the maximum, the
middle and the lowest measured cap, as profiling would give three) with its uncapped time and power, and
``ecolaunch predict``'s function (:func:`ecolaunch.cli.predict_cmd.predict_scenarios`, the shipped weights) is asked
for the job alone on the board at each of those caps (*at measured caps*: the goal is time within 1 %, power within
2 %) and at every other measured cap of the curve (*between*: an interpolation, scored against the measurement it
never saw). Time error = predicted normalized throughput against the measured time at the max / the time at the
cap; power error = predicted board power against the measured one. Prints the worst and mean absolute errors, and
how many measured points read *faster* than uncapped (a cap cannot speed a job up: noise of input-bound jobs, which
``predict`` answers as uncapped speed, the monotone reading); the goal is scored on the other points.
"""

from __future__ import annotations

import argparse
import statistics

from _common import emit


def curves() -> list:
    from ecolaunch.sim.truth import h200_truths, zeus_truths

    return [*h200_truths(include_mlp=True), *zeus_truths()]


def run() -> dict:
    from ecolaunch.cli.predict_cmd import predict_scenarios
    from ecolaunch.devices.catalogue import lookup

    at: dict[str, list[float]] = {"time": [], "power": []}
    between: dict[str, list[float]] = {"time": [], "power": []}
    faster: dict[str, list[float]] = {"time": [], "power": []}  # measured faster than uncapped (noise)
    n = 0
    for c in curves():
        pts = sorted(c.points, key=lambda p: p.power_cap_w)
        if len(pts) < 3:
            continue
        gpu = lookup(c.gpu_model)
        given = [pts[-1], pts[len(pts) // 2], pts[0]]
        top = pts[-1]
        job = {"id": "j", "iter_time_s": top.iter_time_s, "power_w": top.power_w, "memory_mib": 1000,
               "cap_points": [{"power_cap_w": p.power_cap_w, "iter_time_s": p.iter_time_s, "power_w": p.power_w}
                              for p in given]}
        asks = [p for p in pts if gpu.power_limit_min_w <= p.power_cap_w <= gpu.power_limit_max_w]
        results = predict_scenarios([(gpu, p.power_cap_w, [job]) for p in asks])
        for p, r in zip(asks, results):
            time_err = abs(r["jobs"][0]["normalized_throughput"] / (top.iter_time_s / p.iter_time_s) - 1.0) * 100.0
            power_err = abs(r["gpu_power_w"] / p.power_w - 1.0) * 100.0
            bucket = faster if p.iter_time_s < top.iter_time_s else at if p in given else between
            bucket["time"].append(time_err)
            bucket["power"].append(power_err)
        n += 1

    def summary(d: dict[str, list[float]]) -> dict:
        return {"points": len(d["time"]),
                "time_max_pct": round(max(d["time"]), 3), "time_mean_pct": round(statistics.mean(d["time"]), 3),
                "power_max_pct": round(max(d["power"]), 3), "power_mean_pct": round(statistics.mean(d["power"]), 3)}

    return {"curves": n, "at_measured_caps": summary(at), "between_measured_caps": summary(between),
            "measured_faster_than_uncapped": summary(faster)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = run()
    a, b, f = r["at_measured_caps"], r["between_measured_caps"], r["measured_faster_than_uncapped"]
    table = (f"{r['curves']} measured curves (H200 sweep, Zeus)\n"
             f"at measured caps ({a['points']}):      time max {a['time_max_pct']:.3f} % mean {a['time_mean_pct']:.3f} %, "
             f"power max {a['power_max_pct']:.3f} % mean {a['power_mean_pct']:.3f} %  (goal: 1 % / 2 %)\n"
             f"between measured caps ({b['points']}): time max {b['time_max_pct']:.2f} % mean {b['time_mean_pct']:.2f} %, "
             f"power max {b['power_max_pct']:.2f} % mean {b['power_mean_pct']:.2f} %\n"
             f"measured faster than uncapped ({f['points']}, answered as uncapped): time max {f['time_max_pct']:.2f} %")
    emit(r, args.json, table)


if __name__ == "__main__":
    main()
