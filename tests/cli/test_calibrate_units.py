"""The parts of ``ecolaunch calibrate`` that need no workload: MPS availability and its private daemon (a stand-in
``nvidia-cuda-mps-control`` that records its calls), and the result files' names and safety."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ecolaunch.calibrate.mps import private_daemon, why_not_mps
from ecolaunch.calibrate.results import file_name, read_results, write_result
from ecolaunch.errors import StateError
from tests.learn.test_calibration_data import document

FAKE_CONTROL = """#!/bin/sh
# records its arguments, its stdin and the MPS directories, like nvidia-cuda-mps-control would use them
printf '%s|%s|%s\\n' "$*" "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_VISIBLE_DEVICES" >> "{log}"
if [ "$1" = "-d" ]; then exit {start_code}; fi
cat >> "{log}"
"""


def fake_control(tmp_path: Path, start_code: int = 0) -> tuple[str, Path]:
    log = tmp_path / "calls.log"
    binary = tmp_path / "nvidia-cuda-mps-control"
    binary.write_text(FAKE_CONTROL.format(log=log, start_code=start_code))
    binary.chmod(0o755)
    return str(binary), log


def test_mps_is_measured_only_on_real_gpus_with_the_tools_and_root(tmp_path: Path) -> None:
    binary, _ = fake_control(tmp_path)
    assert why_not_mps("simulated", 0, binary) == "simulated GPUs: MPS needs a real NVIDIA driver"
    assert why_not_mps("nvml", 1000, binary) == "starting an MPS daemon needs root"
    assert why_not_mps("nvml", 0, binary) is None
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = str(tmp_path / "empty")
    try:
        assert why_not_mps("nvml", 0) == ("nvidia-cuda-mps-control is not on the PATH (the driver's MPS tools are "
                                          "not installed)")
    finally:
        os.environ["PATH"] = old


def test_the_private_daemon_is_told_to_quit_whatever_happens(tmp_path: Path) -> None:
    binary, log = fake_control(tmp_path)
    with pytest.raises(RuntimeError, match="a worker failed"):
        with private_daemon({"CUDA_VISIBLE_DEVICES": "GPU-abc"}, binary) as env:
            pipe = env["CUDA_MPS_PIPE_DIRECTORY"]
            assert Path(pipe).is_dir() and oct(Path(pipe).stat().st_mode & 0o777) == "0o700"
            raise RuntimeError("a worker failed")
    assert log.read_text().splitlines() == [f"-d|{pipe}|GPU-abc", f"|{pipe}|GPU-abc", "quit"]
    assert not Path(pipe).exists()  # the private directory is gone


def test_a_daemon_that_does_not_start_is_an_os_error_and_nothing_is_told_to_quit(tmp_path: Path) -> None:
    binary, log = fake_control(tmp_path, start_code=3)
    with pytest.raises(OSError, match="nvidia-cuda-mps-control -d exited 3"):
        with private_daemon({}, binary):
            pass
    assert [line.split("|")[0] for line in log.read_text().splitlines()] == ["-d"]


def test_result_files_are_named_after_the_model() -> None:
    assert file_name("NVIDIA H200", False) == "nvidia-h200.json"
    assert file_name("Tesla V100-SXM2-32GB", True) == "tesla-v100-sxm2-32gb.simulated.json"


def test_results_are_never_written_through_a_planted_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (state / "calibration").symlink_to(elsewhere)
    with pytest.raises(StateError, match="a symbolic link or not a directory") as e:
        write_result(state, document())
    assert "move" in e.value.hint and list(elsewhere.iterdir()) == []
    (state / "calibration").unlink()
    path = write_result(state, document())
    assert json.loads(path.read_text())["gpu"]["name"] == "NVIDIA H200"
    assert [r.path for r in read_results(state)] == [path]
