"""benchmarks/gpu_check.py: its helpers, and (slow) one whole quick run on simulated GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO, clean_env

BENCHMARKS = REPO / "benchmarks"
STATUSES = {"pass", "fail", "skip"}


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gpu_check

    return gpu_check


def test_sweep_caps_run_from_max_to_min_on_a_5_w_grid(gpu_check) -> None:
    h200 = SimpleNamespace(power_limit_min_w=200.0, power_limit_max_w=700.0)
    assert gpu_check.sweep_caps(h200, 5) == [700, 575, 450, 325, 200]
    a100 = SimpleNamespace(power_limit_min_w=100.0, power_limit_max_w=400.0)
    assert gpu_check.sweep_caps(a100, 4) == [400, 300, 200, 100]


def test_result_file_names(gpu_check) -> None:
    assert gpu_check.slug("NVIDIA H200") == "nvidia-h200"
    doc = {"backend": "nvml", "gpu": {"name": "NVIDIA H200"}}
    assert gpu_check.default_out(doc) == BENCHMARKS / "results" / "gpu-nvidia-h200.json"
    doc = {"backend": "simulated", "gpu": {"name": "NVIDIA A100-SXM4-80GB"}}
    assert gpu_check.default_out(doc).name == "gpu-nvidia-a100-sxm4-80gb-simulated.json"


def test_percentages(gpu_check) -> None:
    assert gpu_check.pct(110.0, 100.0) == 10.0 and gpu_check.saving(91.0, 100.0) == 9.0
    assert gpu_check.pct(None, 1.0) is None and gpu_check.saving(1.0, 0.0) is None


def test_the_spin_worker_says_it_needs_a_gpu_and_its_figures_print(gpu_check) -> None:
    """The ``waitpower`` section runs on a real GPU only: its worker, run on this CPU machine, says why it cannot, and
    the summary line of a section like the one it returns on a GPU (figures made up here, read by nothing) prints."""
    ran = subprocess.run([sys.executable, str(BENCHMARKS / "_spin_worker.py"), "0.1", "1,8"], env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    if ran.returncode == 0:
        pytest.skip("this machine has a CUDA device: the worker measured it")
    assert ran.returncode == 1 and json.loads(ran.stdout) == {
        "error": "no CUDA device: a spinning kernel needs a real GPU"}, ran.stderr
    section = {"status": "pass", "power_w": {"idle": 80.0, "spin-1": 95.0, "spin-8": None, "compute": 680.0},
               "spin_share": {"spin-1": 0.025, "spin-8": None}}
    assert gpu_check.summary("waitpower", section) == [
        "  idle 80 W, spin-1 95 W, spin-8 N/A, compute 680 W; spin share spin-1 0.03, spin-8 N/A (0 idle, 1 computing)"]


@pytest.mark.slow
def test_a_quick_run_on_simulated_gpus(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    env = clean_env(ECOLAUNCH_SIMULATE="4xA100-SXM4-80GB", ECOLAUNCH_POLICY="", TMPDIR=str(tmp_path))
    ran = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--quick", "--json", "--out", str(out)],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert ran.returncode in (0, 1), ran.stderr  # 1: a section failed (the SIGKILL one may, until the cap guard)
    doc = json.loads(ran.stdout)
    assert json.loads(out.read_text()) == doc
    assert (doc["schema"], doc["version"], doc["backend"], doc["quick"]) == ("ecolaunch.gpu_check", 1, "simulated", True)
    assert doc["gpu"]["uuid"].startswith("GPU-") and doc["gpu"]["power_limit_enforced_w"] == doc["gpu"]["power_limit_w"]
    sections = doc["sections"]
    assert set(sections) == {"contract", "sweep", "waitpower", "launches", "sigkill", "overhead", "waits"}
    for name, s in sections.items():
        assert s["status"] in STATUSES, name
        assert s["status"] == "pass" or s["reason"], f"{name} {s['status']} without a reason"
    assert ran.returncode == (1 if any(s["status"] == "fail" for s in sections.values()) else 0)

    assert sections["contract"]["status"] == "skip" and "simulated" in sections["contract"]["reason"]
    assert sections["waitpower"]["status"] == "skip" and "simulated" in sections["waitpower"]["reason"]

    sweep = sections["sweep"]
    assert sweep["status"] == "pass", sweep["reason"]
    assert sweep["restored"] is True and sweep["caps_w"] == [400, 250, 100]
    for name in ("mm", "bw"):
        points = sweep["workloads"][name]["points"]
        assert [p["power_cap_w"] for p in points] == sweep["caps_w"]
        assert all(p["iters"] >= 1 and p["iter_time_s"] > 0 and p["power_w"] <= p["power_cap_w"] + 25 for p in points)
        assert all(p["enforced_w"] == p["power_cap_w"] for p in points)
        # the maximum measured once more, last: how far a second window at the same cap is from the first
        repeat = sweep["workloads"][name]["repeat"]
        assert repeat["power_cap_w"] == points[0]["power_cap_w"] and repeat["iter_time_s"] > 0
        assert sweep["workloads"][name]["window_error_pct"] == pytest.approx(
            100 * abs(repeat["iter_time_s"] / points[0]["iter_time_s"] - 1), abs=0.01)

    launches = sections["launches"]
    assert launches["status"] == "pass", launches["reason"]
    for name in ("mm", "bw"):
        runs = launches["workloads"][name]
        assert all(runs[label]["ok"] for label in ("torchrun", "first", "repeat")), runs
        assert runs["torchrun"]["j_per_iter"] > 0 and runs["torchrun"]["stand_in_load"] is True
        assert runs["first"]["profile_action"] == "inline" and runs["first"]["cap_line"].startswith("power cap:")
        for label in ("first", "repeat"):
            assert isinstance(runs[label]["energy_saving_pct"], float)
            assert isinstance(runs[label]["slowdown_pct"], float)

    sigkill = sections["sigkill"]
    if sigkill["status"] != "skip":  # pass once the cap guard restores within 10 s; fail until then
        assert sigkill["lowered_w"] < sigkill["original_w"] == 400
        assert sigkill["restored_after_s"] is not None or sigkill["restored_by_check"] is True

    overhead = sections["overhead"]
    # a timing goal is not judged on simulated GPUs: the section passes and says whether the goal was met
    assert (overhead["status"], overhead["judged"]) == ("pass", False) and overhead["ratio_median"] > 0
    assert overhead["goal_met"] is (overhead["ratio_median"] <= overhead["goal_ratio"])
    assert len(overhead["runs_s"]["torchrun"]) == len(overhead["runs_s"]["ecolaunch"]) == 2

    waits = sections["waits"]  # on simulated GPUs the hook's clock path, CPU tensors (a loaded machine may fail it)
    assert waits["status"] in ("pass", "fail") and waits["device"] == "cpu", waits
    assert waits["slowest_rank"] == 1 and waits["rank0_waste_s"] > 0.0 and set(waits["waits_recorded"]) == {"0", "1"}
