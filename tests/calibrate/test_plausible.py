"""Issue 41 item 4: calibration windows that cannot be true (``ecolaunch.calibrate.plausible``), the host's load
that makes the calibrator measure such a window again (``readings.host_busy``), and the measured data the
tolerance stands on (docs/admin.md, "Windows that cannot be true")."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from ecolaunch.calibrate.plausible import MIN_TOLERANCE, check_pair, reference, tolerance
from ecolaunch.calibrate.readings import HostLoad, host_busy


def alone(workload: str, it: float = 0.1, util: float | None = 99.0, cap: float = 700.0, iters: int = 50,
          cv: float | None = 1.0) -> dict:
    return {"workload": workload, "power_cap_w": cap, "iters": iters, "iter_time_s": it, "iter_time_cv_pct": cv,
            "sm_util_pct": util}


def pair(a: str, b: str, thr: tuple, sharing: str = "time-slicing", iters: int = 50, cv: float = 1.0) -> dict:
    return {"workloads": [a, b], "sharing": sharing, "power_cap_w": 700.0,
            "jobs": [{"workload": a, "iters": iters, "iter_time_cv_pct": cv, "normalized_throughput": thr[0]},
                     {"workload": b, "iters": iters, "iter_time_cv_pct": cv, "normalized_throughput": thr[1]}]}


REFS = [alone("mm"), alone("bw"), alone("mlp", util=55.6)]


def test_the_issues_windows_cannot_be_true() -> None:
    # a busy host: time-sliced mm+mm at 1.53 / 1.54 of solo speed, bw+bw at 1.69 / 0.24
    assert check_pair(pair("mm", "mm", (1.53, 1.54)), REFS, on_gpu=True) == (
        "mm ran 1.53 times its speed alone (at most 1.05: sharing a GPU never makes a job faster); "
        "mm ran 1.54 times its speed alone (at most 1.05: sharing a GPU never makes a job faster); "
        "time-slicing kept the GPU busy 3.04 of the time (1.53 x 99 % + 1.54 x 99 % busy alone; at most 1.05: "
        "the two never run at once)")
    why = check_pair(pair("bw", "bw", (1.69, 0.24)), REFS, on_gpu=True)
    assert why is not None and why.startswith("bw ran 1.69 times its speed alone") and "busy 1.91" in why
    # a job faster than alone cannot be under MPS either, nor on a simulated GPU's stand-ins
    assert check_pair(pair("bw", "bw", (1.69, 0.24), sharing="mps"), REFS, on_gpu=True).startswith("bw ran 1.69")
    assert check_pair(pair("bw", "bw", (1.69, 0.24)), REFS, on_gpu=False).startswith("bw ran 1.69")


def test_what_time_slicing_allows_passes() -> None:
    assert check_pair(pair("mm", "mm", (0.49, 0.50)), REFS, on_gpu=True) is None
    assert check_pair(pair("mm", "bw", (0.52, 0.52)), REFS, on_gpu=True) is None  # 1.03 busy: within 5 %
    assert check_pair(pair("mm", "mm", (1.04, 0.01)), REFS, on_gpu=True) is None  # noise within the tolerance
    # jobs that leave the GPU idle share it well: mlp keeps it busy 55.6 % alone, so 0.85 + 0.85 fits
    assert check_pair(pair("mlp", "mlp", (0.85, 0.85)), REFS, on_gpu=True) is None
    assert check_pair(pair("mlp", "mlp", (0.95, 0.95)), REFS, on_gpu=True).startswith(
        "time-slicing kept the GPU busy 1.06 of the time (0.95 x 56 % + 0.95 x 56 % busy alone")


def test_busier_than_time_slicing_allows_counts_only_where_it_time_slices_a_gpu() -> None:
    both = pair("mm", "bw", (0.6, 0.6))
    assert check_pair(both, REFS, on_gpu=True).startswith("time-slicing kept the GPU busy 1.19 of the time")
    assert check_pair(both, REFS, on_gpu=False) is None  # CPU stand-ins run side by side
    assert check_pair({**both, "sharing": "mps"}, REFS, on_gpu=True) is None  # MPS runs kernels at once
    # without a reference's utilization, or a job's throughput, the sum is unknown: no verdict on it
    assert check_pair(both, [alone("mm", util=None), alone("bw")], on_gpu=True) is None
    assert check_pair(pair("mm", "bw", (0.9, None)), REFS, on_gpu=True) is None


def test_a_window_of_few_noisy_iterations_widens_the_tolerance() -> None:
    steady = alone("mm", iters=50, cv=1.0)
    assert tolerance(steady, {"iters": 50, "iter_time_cv_pct": 1.0}) == MIN_TOLERANCE
    assert tolerance(None, {}) == MIN_TOLERANCE  # a window that says nothing of its spread: the floor
    # 4 iterations with a 30 % spread each side: 2.33 x hypot(0.15, 0.15) = 0.49
    assert tolerance(alone("mm", iters=4, cv=30.0), {"iters": 4, "iter_time_cv_pct": 30.0}) == pytest.approx(
        0.4943, abs=1e-3)
    noisy = [alone("mm", iters=4, cv=30.0)]
    assert check_pair(pair("mm", "mm", (1.2, 0.3), iters=4, cv=30.0), noisy, on_gpu=False) is None
    assert check_pair(pair("mm", "mm", (1.2, 0.3)), [steady], on_gpu=False) is not None


def test_the_reference_is_the_latest_measurement_alone_at_the_pairs_cap() -> None:
    first, other_cap, again = alone("mm", it=0.2), alone("mm", it=0.3, cap=450.0), alone("mm", it=0.1)
    assert reference([first, other_cap, again], "mm", 700.2) is again
    assert reference([first, other_cap], "mm", 700.0) is first
    assert reference([first], "bw", 700.0) is None and reference([first], "mm", None) is None


def test_a_host_is_busy_when_others_take_the_cpu_the_workers_need() -> None:
    assert host_busy(0.6, workers=2, cpus=2) and not host_busy(0.3, workers=2, cpus=2)
    assert not host_busy(5.0, workers=2, cpus=8) and host_busy(6.0, workers=2, cpus=8)
    assert not host_busy(None, workers=1, cpus=2)
    load = HostLoad([])
    load.start()
    sum(i * i for i in range(200_000))  # this process's own work is not the others'
    others = load.stop()
    assert others is not None and others >= 0.0


def _rows(name: str) -> list[dict]:
    with resources.files("ecolaunch.sim").joinpath("data", name).open() as f:
        return list(csv.DictReader(f))


def test_the_measured_data_the_tolerance_stands_on() -> None:
    # Gavel's measured single-GPU pairs (under MPS, which shares more than time-slicing): no job ran faster than
    # alone, by any margin
    solo = {(r["gpu"], r["job_type"]): float(r["throughput"]) for r in _rows("gavel_solo_sf1.csv")}
    ratios = [float(r[f"throughput_{s}"]) / solo[(r["gpu"], r[f"job_{s}"])] for r in _rows("gavel_pairs_sf1.csv")
              for s in "ab" if float(r["throughput_a"]) or float(r["throughput_b"])]
    assert len(ratios) > 3000 and max(ratios) <= 1.0 + 1e-9
    # EaCO's V100 jobs time-sliced together: the GPU utilization of each set is the sum of its jobs' alone, within
    # the tolerance (time-slicing adds busy time up; it never runs two jobs' kernels at once)
    exclusive = {r["job_id"]: float(r["avg_gpu_util_pct"]) for r in _rows("eaco_exclusive_table1_2.csv")}
    shares = [float(r["avg_gpu_util_pct"]) / sum(exclusive[j] for j in r["job_set"].split("&"))
              for r in _rows("eaco_colocated_table3_4.csv")]
    assert len(shares) == 6 and max(abs(s - 1.0) for s in shares) <= MIN_TOLERANCE
    assert max(abs(s - 1.0) for s in shares) > MIN_TOLERANCE - 0.01  # and the tolerance is no wider than needed
