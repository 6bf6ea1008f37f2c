"""Bad command lines as a user meets them: the README's exit codes (2 for a bad command line, 127/126 for a
``--no-python`` program the shell could not run either), an ``Error``/``HINT`` pair that names the value, and
nothing booked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, ecolaunch_cmd

EXAMPLE = "examples/ddp_train.py"
NPROC_HINT = ("HINT: e.g. --nproc-per-node 2 (one worker per GPU), gpu (every GPU the policy grants you) or cpu "
              "(no GPU)")


def run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_nproc_per_node_is_a_usage_error_with_a_hint(value: str, sim_env, state_dir: Path) -> None:
    out = run(["--nproc-per-node", value, EXAMPLE], sim_env())
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("usage: ecolaunch "), out.stderr
    assert out.stderr.splitlines()[-2:] == [
        f"ecolaunch: error: --nproc-per-node must be a whole number >= 1, gpu, auto or cpu, got {value!r}",
        NPROC_HINT]
    assert list(state_dir.iterdir()) == []  # refused before anything was booked


@pytest.mark.parametrize("args, lines", [
    (["--allowed-slowdown", "-5"],
     ["ecolaunch: error: --allowed-slowdown (or ECOLAUNCH_ALLOWED_SLOWDOWN) must be a finite number >= 0, got '-5'",
      "HINT: e.g. --allowed-slowdown 10 (percent: at most 10 % slower than the job alone and uncapped)"]),
    (["--wait-timeout", "abc"],
     ["ecolaunch: error: --wait-timeout (or ECOLAUNCH_WAIT_TIMEOUT) must be a number, got 'abc'",
      "HINT: e.g. --wait-timeout 600 (seconds in the queue; 0: fail at once, exit 75; leave it out to wait until "
      "GPUs fit)"]),
    (["--memory-mib", "-1"],
     ["ecolaunch: error: --memory-mib (or ECOLAUNCH_MEMORY_MIB) must be a finite number >= 0, got '-1'",
      "HINT: e.g. --memory-mib 20000 (one worker's peak GPU memory in MiB); leave it out when unknown"]),
    (["--steps", "1.5"],
     ["ecolaunch: error: --steps (or ECOLAUNCH_STEPS) must be a whole number from 1 to 1000000000000, got '1.5'",
      "HINT: e.g. --steps 20000 (the iterations the whole run marks, as ecolaunch.step() counts them)"]),
])
def test_a_bad_number_is_a_usage_error_with_a_hint(args: list[str], lines: list[str], sim_env,
                                                   state_dir: Path) -> None:
    out = run([*args, EXAMPLE], sim_env())
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("usage: ecolaunch "), out.stderr
    assert out.stderr.splitlines()[-2:] == lines
    assert list(state_dir.iterdir()) == []


def test_what_torch_refuses_is_a_usage_error_too(sim_env, state_dir: Path) -> None:
    out = run(["--no-python", "-m", "pkg.mod"], sim_env())
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-2:] == [
        "ecolaunch: error: Don't use both the '--no-python' flag and the '--module' flag at the same time.",
        "HINT: fix the torchrun arguments (see 'ecolaunch --help')"]
    assert list(state_dir.iterdir()) == []


def test_node_counts_torch_refuses_with_an_assertion_are_a_usage_error(sim_env, state_dir: Path) -> None:
    out = run(["--nnodes", "3:1", EXAMPLE], sim_env())  # torch checks this one with assert, not ValueError
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-2:] == [
        "ecolaunch: error: min_nodes must be > 0 and <= max_nodes, got min_nodes=3, max_nodes=1",
        "HINT: fix the torchrun arguments (see 'ecolaunch --help')"]
    assert "Traceback" not in out.stderr and list(state_dir.iterdir()) == []


def test_a_missing_no_python_program_exits_127_as_the_shell_would(sim_env, state_dir: Path) -> None:
    for args in (["--no-python", "no-such-binary", "--flag"], ["--dry-run", "--no-python", "./no-such-binary"]):
        out = run(args, sim_env())
        assert out.returncode == 127, out.stderr
        where = "is not on PATH" if args[1] == "no-such-binary" else "does not exist"
        assert out.stderr.splitlines() == [
            f"ecolaunch: error: --no-python program {args[-2] if args[0] == '--no-python' else args[-1]!r} {where}",
            "HINT: check the name (`command -v NAME`) or give its path; a Python script runs without --no-python"]
        assert "bug" not in out.stderr
    assert list(state_dir.iterdir()) == []


def test_a_no_python_program_that_is_not_executable_exits_126(sim_env, state_dir: Path, tmp_path: Path) -> None:
    program = tmp_path / "run.sh"
    program.write_text("#!/bin/sh\necho never\n")
    program.chmod(0o644)
    out = run(["--no-python", str(program)], sim_env())
    assert out.returncode == 126, out.stderr
    assert out.stderr.splitlines() == [f"ecolaunch: error: --no-python program {str(program)!r} is not executable",
                                       f"HINT: chmod +x {program}, or run a Python script without --no-python"]
    assert list(state_dir.iterdir()) == []
    program.chmod(0o755)  # the same program, executable: it runs
    ran = run(["--no-python", str(program)], sim_env())
    assert ran.returncode == 0 and "never" in ran.stdout, ran.stderr


def test_an_allocation_too_small_for_the_job_blames_cuda_visible_devices(sim_env) -> None:
    out = run(["--dry-run", "--nproc-per-node", "4", EXAMPLE], sim_env(CUDA_VISIBLE_DEVICES="2,3"))
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines()[-2:] == [
        "Error: job asks for 4 GPU(s) and can never fit: CUDA_VISIBLE_DEVICES allows 2 of this host's 4 GPU(s) "
        "(GPU 2,3)",
        "HINT: lower --nproc-per-node, list more GPUs in CUDA_VISIBLE_DEVICES, or unset it to place on any GPU"]
    assert "reserved" not in out.stderr


SIM_USAGE = "Usage: ecolaunch simulate [OPTIONS]\nTry 'ecolaunch simulate --help' for help.\n\n"
SIM_POLICIES = "curve, curve-link, eaco, exclusive, first-fit, gnn, lucid, oracle, zeus, no-gnn, analytic-share, util-share"
MODEL_TRACES = "workstation-light, workstation-heavy, cluster-light, cluster-heavy, alibaba-share"


@pytest.mark.parametrize(("args", "error"), [
    (["--policy", "magic"], f"Invalid value for '--policy': no policy 'magic'\nHINT: choose from: {SIM_POLICIES}"),
    (["--policy", "exclusiv"], "Invalid value for '--policy': no policy 'exclusiv'; did you mean 'exclusive'?\n"
                               f"HINT: choose from: {SIM_POLICIES}"),
    (["--trace", "workstation-mixd"], "Invalid value for '--trace': unknown trace 'workstation-mixd'; did you mean "
                                      "'workstation-mixed'?\nHINT: use one "
                                      f"of {MODEL_TRACES}, workstation-mixed, power-budget, workstation-measured, "
                                      "workstation-topology, workstation-mixed-models, or the path of a .json or "
                                      ".csv file"),
    (["--gpus", "2xA40", "--trace", "workstation-mixed"],
     "--gpus cannot apply to the measured trace 'workstation-mixed': it runs on its own machine (4xV100-PCIE-16GB), "
     f"the boards its measurements are of\nHINT: leave out --gpus, or pick a trace of the model world for another "
     f"machine: {MODEL_TRACES}"),
    (["--hosts", "2", "--gpus", "2xA40", "--trace", "power-budget"],
     "--gpus and --hosts cannot apply to the measured trace 'power-budget': it runs on its own machine "
     "(4xV100-PCIE-16GB), the boards its measurements are of\nHINT: leave out --gpus and --hosts, or pick a trace "
     f"of the model world for another machine: {MODEL_TRACES}"),
], ids=["unknown-policy", "close-policy", "close-trace", "gpus-on-measured", "hosts-on-measured"])
def test_simulate_refuses_a_bad_command_line_with_exit_2(args: list[str], error: str, tmp_path: Path) -> None:
    from tests.conftest import clean_env

    out = run(["simulate", *args, "--jobs", "3"], clean_env(ECOLAUNCH_STATE_DIR=str(tmp_path / "state")))
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    assert out.stderr == f"{SIM_USAGE}Error: {error}\n"
