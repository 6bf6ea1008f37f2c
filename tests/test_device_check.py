"""benchmarks/device_check.sh, the one script a task lent a real GPU runs: it parses, and (slow) it runs end to end
on simulated GPUs, each step recorded in summary.json with what comes back under $OUT."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env

SCRIPT = REPO / "benchmarks" / "device_check.sh"


def test_the_script_parses() -> None:
    ran = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.slow
def test_it_runs_end_to_end_on_simulated_gpus(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = clean_env(OUT=str(out), ECOLAUNCH_SIMULATE="1xA100-SXM4-80GB", DEVICE_CHECK_SKIP_INSTALL="1",
                    DEVICE_CHECK_SECTIONS="overhead", TMPDIR=str(tmp_path))
    ran = subprocess.run(["bash", str(SCRIPT)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=500)
    assert ran.returncode == 0, ran.stdout + (out / "device_check.log").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["schema"], summary["simulated"], summary["ok"]) == ("ecolaunch.device_check", True, True)
    steps = {s["step"]: s for s in summary["steps"]}
    assert list(steps) == ["install", "pytest", "gpu_check", "calibrate"]
    assert steps["install"]["status"] == "skip"
    assert all(steps[name]["status"] == "pass" and steps[name]["seconds"] > 0
               for name in ("pytest", "gpu_check", "calibrate")), steps
    names = {p.name for p in out.iterdir()}
    assert len(names) <= 8 and {"device_check.log", "environment.txt", "calibrate.json"} <= names, names
    gpu = json.loads((out / "gpu-nvidia-a100-sxm4-80gb-simulated.json").read_text())
    assert gpu["backend"] == "simulated" and gpu["sections"]["overhead"]["status"] == "pass"
    calibration = [n for n in names if n.startswith("calibration-")]
    assert calibration, names
    assert json.loads((out / calibration[0]).read_text())
    # the duty-cycled workload is measured too, in pairs: the truth of an underused GPU (issue "a busy machine")
    cal = json.loads((out / "calibrate.json").read_text())
    pairs = {tuple(p["workloads"]) for p in cal["pairs"]}
    assert ("mm@30", "mm@30") in pairs and ("mm", "mm@30") in pairs, pairs
