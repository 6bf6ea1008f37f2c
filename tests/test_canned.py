"""The canned workloads: CPU versions, the measurement inside the loop, the energy through the backend selection."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ecolaunch.calibrate import canned
from ecolaunch.calibrate.canned import NAMES, Workload, build, measure, run_for

SPEC = "4xA100-SXM4-80GB"


@pytest.mark.parametrize("name", NAMES)
def test_every_workload_runs_on_cpu(name: str) -> None:
    w = build(name, "cpu")
    assert (w.name, w.device) == (name, "cpu")
    assert w.what
    iters, wall_s = run_for(w, 0.0)
    assert iters == 1 and wall_s > 0


def test_unknown_workload_and_device_are_value_errors() -> None:
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        build("nope", "cpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        build("mm", "tpu")


class _Counter:
    """An energy counter that gains 2 J per iteration."""

    def __init__(self) -> None:
        self.joules = 100.0

    def step(self) -> None:
        self.joules += 2.0


def test_measure_counts_only_the_iterations_after_warmup() -> None:
    counter = _Counter()
    marks = []
    w = Workload("fake", "cpu", "nothing", counter.step)
    figures = measure(w, 10, 4, lambda: counter.joules, lambda: marks.append(1))
    assert len(marks) == 10  # every iteration is marked, warm-up included
    assert figures["timed_iters"] == 6
    assert figures["energy_j"] == pytest.approx(12.0)
    assert figures["j_per_iter"] == pytest.approx(2.0)
    assert figures["run_j_per_iter"] == pytest.approx(2.0)
    assert figures["power_w"] == pytest.approx(12.0 / figures["wall_s"])
    assert figures["iter_time_s"] == pytest.approx(figures["wall_s"] / 6)


def test_measure_without_a_counter_gives_none() -> None:
    w = Workload("fake", "cpu", "nothing", lambda: None)
    figures = measure(w, 3, 0, None, lambda: None)
    assert figures["timed_iters"] == 3
    assert figures["energy_j"] is figures["j_per_iter"] is figures["power_w"] is figures["run_energy_j"] is None


def test_cli_on_simulated_gpus_measures_the_stand_in_load(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ECOLAUNCH_SIMULATE", SPEC)
    monkeypatch.setenv("ECOLAUNCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ECOLAUNCH_POLICY", "")
    out = tmp_path / "r.json"
    assert canned.main(["mm", "--steps", "40", "--warmup", "5", "--result", str(out), "--device", "cpu"]) == 0
    doc = json.loads(out.read_text())
    assert (doc["workload"], doc["device"], doc["energy_source"], doc["energy_error"]) == ("mm", "cpu", "simulated", None)
    assert doc["gpu_uuid"].startswith("GPU-") and doc["stand_in_load"] is True
    assert (doc["steps"], doc["warmup"], doc["timed_iters"]) == (40, 5, 35)
    # the stand-in plays a compute-bound job, ~380 W of the A100's 400 W, far above its 50 W idle; the window is
    # short (tens of ms), and the counter's clock is read a few ms away from the loop's, hence the wide margin
    assert 250 <= doc["power_w"] <= 500
    assert doc["j_per_iter"] == pytest.approx(doc["power_w"] * doc["iter_time_s"], rel=1e-6)


def test_cli_without_a_backend_says_why_and_still_times(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ECOLAUNCH_SIMULATE", "9xNoSuchGpu")
    monkeypatch.setenv("ECOLAUNCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ECOLAUNCH_POLICY", "")
    out = tmp_path / "r.json"
    assert canned.main(["bw", "--steps", "2", "--warmup", "1", "--result", str(out), "--device", "cpu"]) == 0
    doc = json.loads(out.read_text())
    assert doc["energy_source"] is None and doc["energy_j"] is None
    assert "NoSuchGpu" in doc["energy_error"]
    assert doc["iter_time_s"] > 0


def test_a_duty_cycle_idles_after_each_iterations_work(monkeypatch) -> None:
    slept = []
    monkeypatch.setattr(canned.time, "sleep", slept.append)
    w = build("mm", "cpu", busy_pct=25.0)
    assert w.busy_pct == 25.0 and w.what.endswith("then idle for 3x as long (busy 25 %)")
    t0 = canned.time.perf_counter()
    w.step()
    work_s = canned.time.perf_counter() - t0
    assert len(slept) == 1 and 0 < slept[0] <= 3.0 * work_s  # three times the work's own time, measured inside
    assert slept[0] >= 3.0 * work_s * 0.5
    slept.clear()
    full = build("mm", "cpu")
    full.step()
    assert full.busy_pct == 100.0 and slept == [] and "idle" not in full.what
    for bad in (0, -5, 150, True, "30"):
        with pytest.raises(ValueError, match="busy percentage must be a number in"):
            build("mm", "cpu", busy_pct=bad)


def test_the_stand_in_of_a_duty_cycle_shows_its_share_of_the_load(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ECOLAUNCH_SIMULATE", SPEC)
    monkeypatch.setenv("ECOLAUNCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ECOLAUNCH_POLICY", "")
    out = tmp_path / "r.json"
    assert canned.main(["mm", "--steps", "6", "--warmup", "1", "--result", str(out), "--device", "cpu",
                        "--busy-pct", "30"]) == 0
    doc = json.loads(out.read_text())
    assert doc["busy_pct"] == 30.0 and "busy 30 %" in doc["what"]
    meter = canned.open_meter("cpu", "mm", busy_pct=30.0)
    snap = meter.snapshot()
    sm, mem, frac = canned.STAND_IN_LOADS["mm"]
    assert snap.util_gpu_pct == pytest.approx(sm * 0.3, abs=1.0) and snap.util_mem_pct == pytest.approx(mem * 0.3, abs=1.0)
    # 30 % of the way from the catalogue's 50 W idle (an assumption there) to the stand-in's 380 W
    assert snap.power_w == pytest.approx(50.0 + 0.3 * (frac * 400.0 - 50.0), rel=0.05)


@pytest.mark.parametrize("argv", [["mm", "--steps", "0"], ["mm", "--steps", "3", "--warmup", "3"], ["gemm"],
                                  ["mm", "--busy-pct", "0"], ["mm", "--busy-pct", "101"]])
def test_bad_arguments_exit_2(argv) -> None:
    with pytest.raises(SystemExit) as info:
        canned.main(argv)
    assert info.value.code == 2


@pytest.mark.parametrize("visible, local_rank, expected", [
    (None, "0", "GPU-aaaa"),            # torchrun without CUDA_VISIBLE_DEVICES: device 0
    ("1", "0", "GPU-bbbb"),             # ecolaunch sets NVML indices
    ("0,1", "1", "GPU-bbbb"),
    ("GPU-bb", "0", "GPU-bbbb"),        # a (prefix of a) UUID, as CUDA accepts it
    ("7", "0", None),                   # an index this host does not have
    ("0", "1", None),                   # a local rank with no visible device
])
def test_the_gpu_of_a_cpu_stand_in(visible, local_rank, expected) -> None:
    gpus = [SimpleNamespace(uuid="GPU-aaaa", index=0), SimpleNamespace(uuid="GPU-bbbb", index=1)]
    env = {"LOCAL_RANK": local_rank, **({"CUDA_VISIBLE_DEVICES": visible} if visible is not None else {})}
    assert canned._device_uuid("cpu", env, gpus) == expected
