"""PyTorch's own black-box torchrun tests, re-expressed: the same argv through ``torchrun`` and ``ecolaunch``.

The cases follow ``test/distributed/launcher/test_run.py`` (class ``ElasticLaunchTest``) of PyTorch: every test
runs ``python -m torch.distributed.run ARGV`` and ``python -m ecolaunch ARGV`` (on a simulated 4-GPU
workstation with a private state directory) and compares what the workers saw (the files they touch, the
environment they record) and how each launcher exited.

Differences that are on purpose (README, "what differs from torchrun"), asserted as such:

* ecolaunch adds ``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER`` and ``ECOLAUNCH_JOB_ID`` to the workers;
* ``--nproc-per-node auto`` means "as many GPUs as the policy grants" (4 free simulated GPUs), where torchrun
  on this GPU-less machine counts CPUs;
* on a worker failure ecolaunch exits with the worker's own code, torchrun with 1.

Run ids and ports are fresh per launch, so they are compared by shape only.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BIN, clean_env, ecolaunch_cmd

ENV_WORKER = str(BIN / "compat_env.py")
IS_TE_WORKER = str(BIN / "compat_is_te.py")
FAIL_WORKER = str(BIN / "compat_fail.py")
SIM_SPEC = "4xA100-SXM4-80GB"
TOOLS = ("torchrun", "ecolaunch")

#: worker variables whose values are fresh per launch (compared by presence/shape, not value)
VOLATILE = frozenset({"TORCHELASTIC_RUN_ID", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE"})
#: what ecolaunch adds to the workers' environment (the last two are our own test settings, inherited)
ECOLAUNCH_ADDS = frozenset(
    {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ECOLAUNCH_JOB_ID", "ECOLAUNCH_HOOK_DIR", "ECOLAUNCH_SIMULATE",
     "ECOLAUNCH_STATE_DIR"}
)
#: the worker variables PyTorch's test_script.py requires, plus the other keys torchrun documents
TORCHRUN_KEYS = (
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
    "TORCHELASTIC_ERROR_FILE", "TEST_SENTINEL_PARENT",
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One launcher run: its exit code, output, and the directories its workers and logs wrote to."""

    tool: str
    returncode: int
    stdout: str
    stderr: str
    out_dir: Path
    log_dir: Path
    port: int

    def files(self) -> set[str]:
        return {p.name for p in self.out_dir.iterdir() if not p.name.startswith(".")}

    def envs(self) -> dict[str, dict[str, str]]:
        """The environment each worker recorded (compat_env.py), by global rank."""
        return {p.name: json.loads(p.read_text()) for p in self.out_dir.iterdir() if not p.name.startswith(".")}

    def why(self) -> str:
        return f"{self.tool} exited {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_cmd(tool: str, argv: list[str]) -> list[str]:
    if tool == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv]
    if tool == "ecolaunch-torchrun":
        return ecolaunch_cmd("torchrun", *argv)
    return ecolaunch_cmd(*argv)


def launch(
    tool: str,
    argv: list[str],
    tmp_path: Path,
    state_dir: Path,
    env: dict[str, str] | None = None,
    *,
    simulate: bool = True,
    timeout: float = 120,
) -> Outcome:
    """Run one launcher; ``{out}``, ``{logs}`` and ``{port}`` in ``argv`` become this run's own values."""
    base = tmp_path / tool
    out_dir, log_dir = base / "out", base / "logs"
    out_dir.mkdir(parents=True)
    scratch = tmp_path / "tmp"  # torch's temporary log dirs land here instead of the system's /tmp
    scratch.mkdir(exist_ok=True)
    port = free_port()
    args = [a.format(out=out_dir, logs=log_dir, port=port) for a in argv]
    extra = {"TEST_SENTINEL_PARENT": "FOOBAR", "TMPDIR": str(scratch), **(env or {})}
    if tool.startswith("ecolaunch") and simulate:
        extra.update(ECOLAUNCH_SIMULATE=SIM_SPEC, ECOLAUNCH_STATE_DIR=str(state_dir))
    elif tool.startswith("ecolaunch"):
        extra.update(ECOLAUNCH_STATE_DIR=str(state_dir))
    proc = subprocess.run(launcher_cmd(tool, args), env=clean_env(**extra), cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout)
    return Outcome(tool, proc.returncode, proc.stdout, proc.stderr, out_dir, log_dir, port)


def launch_both(argv: list[str], tmp_path: Path, state_dir: Path, env: dict[str, str] | None = None,
                tools: tuple[str, ...] = TOOLS) -> dict[str, Outcome]:
    return {tool: launch(tool, argv, tmp_path, state_dir, env) for tool in tools}


def comparable(env: dict[str, str]) -> dict[str, str]:
    """A worker's environment without ecolaunch's additions and without the per-launch values."""
    return {k: v for k, v in env.items() if k not in VOLATILE and k not in ECOLAUNCH_ADDS}


def assert_same_worker_env(reference: Outcome, other: Outcome, *, extra: frozenset[str] = ECOLAUNCH_ADDS) -> None:
    """Every rank saw the same keys (``other`` may add exactly ``extra``) and the same values modulo VOLATILE."""
    ref_envs, other_envs = reference.envs(), other.envs()
    assert set(ref_envs) == set(other_envs)
    for rank, ref in ref_envs.items():
        seen = other_envs[rank]
        assert set(seen) - set(ref) == set(extra), f"rank {rank}: unexpected extra keys"
        assert set(ref) - set(seen) == set(), f"rank {rank}: keys torchrun sets are missing"
        assert comparable(seen) == comparable(ref), f"rank {rank}: values differ"
        for env in (ref, seen):
            assert env["TORCHELASTIC_RUN_ID"] and int(env["MASTER_PORT"]) > 0
            assert env["TORCHELASTIC_ERROR_FILE"].endswith(os.path.join("attempt_0", env["LOCAL_RANK"], "error.json"))


def world(n: int) -> set[str]:
    return {str(r) for r in range(n)}


@pytest.fixture
def shell_worker(tmp_path: Path) -> str:
    """compat_touch.sh copied with its exec bit set (a checkout may not keep the mode)."""
    path = tmp_path / "compat_touch.sh"
    shutil.copyfile(BIN / "compat_touch.sh", path)
    path.chmod(0o755)
    return str(path)


# --- the 4-worker environment check (test_launch_user_script_python) ---------------------------------------


def test_four_workers_see_torchruns_environment(tmp_path: Path, state_dir: Path) -> None:
    argv = ["--nnodes=1", "--nproc-per-node=4", f"--rdzv-id={uuid.uuid4().int}", "--monitor-interval=0.1",
            "--start-method=spawn", ENV_WORKER, "{out}"]
    runs = launch_both(argv, tmp_path, state_dir)
    for run in runs.values():
        assert run.returncode == 0, run.why()
        assert run.files() == world(4)
    for rank, env in runs["torchrun"].envs().items():
        assert all(k in env for k in TORCHRUN_KEYS), sorted(set(TORCHRUN_KEYS) - set(env))
        assert env["RANK"] == env["LOCAL_RANK"] == rank and env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "4"
        assert env["GROUP_RANK"] == "0" and env["ROLE_NAME"] == "default" and env["TEST_SENTINEL_PARENT"] == "FOOBAR"
    assert_same_worker_env(runs["torchrun"], runs["ecolaunch"])
    eco = runs["ecolaunch"].envs()
    assert {e["CUDA_VISIBLE_DEVICES"] for e in eco.values()} == {"0,1,2,3"}
    assert {e["CUDA_DEVICE_ORDER"] for e in eco.values()} == {"PCI_BUS_ID"}
    assert len({e["ECOLAUNCH_JOB_ID"] for e in eco.values()}) == 1


# --- cases whose workers touch one file per rank -------------------------------------------------------------

#: the long variants run with -m slow (CI runs them; the default run keeps one case of each kind)
SLOW = pytest.mark.slow

TOUCH_CASES = [
    # argv ({shell}: the --no-python shell worker), extra env, ranks expected; id
    pytest.param(["--nproc-per-node=2", "--no-python", "{shell}", "{out}"], {}, 2, id="no-python-shell-script"),
    pytest.param(["--nnodes=1", "--no-python", "{shell}", "{out}"], {}, 1, id="default-nproc-is-1"),
    pytest.param(["{shell}", "{out}"],
                 {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_RDZV_ID": "pet-run", "PET_MONITOR_INTERVAL": "0.1",
                  "PET_START_METHOD": "spawn", "PET_NO_PYTHON": "1", "PET_MODULE": "0", "PET_STANDALONE": "1"},
                 2, id="pet-env-only", marks=SLOW),
    pytest.param(["--standalone", "--nnodes=1", "--nproc-per-node=2", ENV_WORKER, "{out}"], {}, 2, id="standalone"),
    pytest.param(["--run-path", "--nnodes=1", "--nproc-per-node=2", "--start-method=spawn", ENV_WORKER, "{out}"],
                 {}, 2, id="run-path", marks=SLOW),
    pytest.param(["--nnodes=1", "--nproc-per-node=2", "--master-addr=127.0.0.1", "--master-port={port}",
                  "--node-rank=0", ENV_WORKER, "{out}"], {}, 2, id="static-rendezvous", marks=SLOW),
    pytest.param(["--nproc_per_node", "2", "--max_restarts=0", "--rdzv_backend=static", "--master_port={port}",
                  ENV_WORKER, "{out}"], {}, 2, id="underscore-spellings", marks=SLOW),
]


@pytest.mark.parametrize(("argv", "env", "nproc"), TOUCH_CASES)
def test_workers_touch_the_same_files(argv, env, nproc, tmp_path: Path, state_dir: Path, shell_worker: str) -> None:
    argv = [a.replace("{shell}", shell_worker) for a in argv]
    runs = launch_both(argv, tmp_path, state_dir, env)
    for run in runs.values():
        assert run.returncode == 0, run.why()
        assert run.files() == world(nproc), run.why()
    if ENV_WORKER in argv:
        assert_same_worker_env(runs["torchrun"], runs["ecolaunch"])
    if "--master-port={port}" in argv or "--master_port={port}" in argv:  # static: the given address and port
        for run in runs.values():
            for env_seen in run.envs().values():
                assert env_seen["MASTER_ADDR"] == "127.0.0.1" and env_seen["MASTER_PORT"] == str(run.port)
                assert env_seen["TORCHELASTIC_RUN_ID"] == "none"  # static keeps torchrun's default run id


def test_prefix_torchrun_form_equals_plain_ecolaunch(tmp_path: Path, state_dir: Path) -> None:
    argv = ["--nproc-per-node=2", "--max-restarts=0", ENV_WORKER, "{out}", "--not-for-the-launcher"]
    runs = launch_both(argv, tmp_path, state_dir, tools=("ecolaunch", "ecolaunch-torchrun"))
    for run in runs.values():
        assert run.returncode == 0, run.why()
        assert run.files() == world(2)
    assert_same_worker_env(runs["ecolaunch"], runs["ecolaunch-torchrun"], extra=frozenset())
    for run in runs.values():
        assert {e["CUDA_VISIBLE_DEVICES"] for e in run.envs().values()} == {"0,1"}


# --- --nproc-per-node values (test_nproc_launch_*_configurations) ---------------------------------------------


def _auto_on_this_machine() -> int:
    from torch.distributed.run import determine_local_world_size

    return determine_local_world_size("auto")


@pytest.mark.parametrize(
    ("value", "torchrun_n", "ecolaunch_n"),
    [
        pytest.param("2", lambda: 2, lambda: 2, id="int"),
        # ecolaunch: auto = as many GPUs as the policy grants (all 4 simulated GPUs are free); torchrun counts CPUs
        pytest.param("auto", _auto_on_this_machine, lambda: 4, id="auto", marks=SLOW),
    ],
)
def test_nproc_values(value, torchrun_n, ecolaunch_n, tmp_path: Path, state_dir: Path, shell_worker: str) -> None:
    runs = launch_both([f"--nproc-per-node={value}", "--no-python", shell_worker, "{out}"], tmp_path, state_dir)
    for run, n in ((runs["torchrun"], torchrun_n()), (runs["ecolaunch"], ecolaunch_n())):
        assert run.returncode == 0, run.why()
        assert run.files() == world(n)


def test_auto_without_gpus_counts_like_torchrun(tmp_path: Path, state_dir: Path, shell_worker: str) -> None:
    argv = ["--nproc-per-node=auto", "--no-python", shell_worker, "{out}"]
    plain = launch("ecolaunch", argv, tmp_path, state_dir, simulate=False)
    assert plain.returncode == 0, plain.why()
    assert plain.files() == world(_auto_on_this_machine())


# --- argument errors torch raises as ValueError: torchrun exits 1 with a traceback; ecolaunch refuses the command line
# (exit 2, the README's bad command line) with torch's message (its own for --nproc-per-node) and a hint; no worker runs

NO_PYTHON_WITH_MODULE = "Don't use both the '--no-python' flag and the '--module' flag"
ERROR_CASES = [
    pytest.param(["--nproc-per-node=unknown", "--no-python", "{shell}", "{out}"], {},
                 "Unsupported nproc_per_node value: unknown",
                 "--nproc-per-node must be a whole number >= 1, gpu, auto or cpu, got 'unknown'", id="nproc-unknown"),
    pytest.param(["--nproc-per-node=2", "--no-python", "--module", "{shell}", "{out}"], {},
                 NO_PYTHON_WITH_MODULE, NO_PYTHON_WITH_MODULE, id="no-python-with-module"),
    pytest.param(["{shell}", "{out}"], {"PET_NPROC_PER_NODE": "2", "PET_NO_PYTHON": "1", "PET_MODULE": "1"},
                 NO_PYTHON_WITH_MODULE, NO_PYTHON_WITH_MODULE, id="pet-no-python-with-module", marks=SLOW),
    pytest.param(["--nproc-per-node=1", "--logs-specs=DOESNOT_EXIST", ENV_WORKER, "{out}"], {},
                 "Could not find entrypoint under 'torchrun.logs_specs[DOESNOT_EXIST]' key",
                 "Could not find entrypoint under 'torchrun.logs_specs[DOESNOT_EXIST]' key", id="unknown-logs-specs",
                 marks=SLOW),
]


@pytest.mark.parametrize(("argv", "env", "theirs", "ours"), ERROR_CASES)
def test_torch_value_errors_fail_in_both(
    argv, env, theirs, ours, tmp_path: Path, state_dir: Path, shell_worker: str
) -> None:
    argv = [a.replace("{shell}", shell_worker) for a in argv]
    runs = launch_both(argv, tmp_path, state_dir, env)
    assert runs["torchrun"].returncode == 1 and theirs in runs["torchrun"].stderr, runs["torchrun"].why()
    assert "ValueError" in runs["torchrun"].stderr  # torchrun: the uncaught exception's traceback
    assert runs["ecolaunch"].returncode == 2, runs["ecolaunch"].why()
    assert f"ecolaunch: error: {ours}" in runs["ecolaunch"].stderr, runs["ecolaunch"].why()
    assert "\nHINT: " in runs["ecolaunch"].stderr, runs["ecolaunch"].why()
    for run in runs.values():
        assert run.files() == set()


def test_torch_value_errors_are_clean_errors_before_any_booking(tmp_path: Path, state_dir: Path, shell_worker: str) -> None:
    run = launch("ecolaunch", ["--nproc-per-node=2", "--no-python", "-m", shell_worker, "{out}"], tmp_path, state_dir)
    assert run.returncode == 2 and "ecolaunch: error: Don't use both" in run.stderr, run.why()
    assert "ecolaunch bug" not in run.stderr, run.why()
    assert " runs on GPU " not in run.stderr, run.why()  # torch's checks run before placement
    assert list(state_dir.iterdir()) == [], run.why()  # nothing booked, no history record


# --- torch.distributed.is_torchelastic_launched() (test_is_torchelastic_launched) ------------------------------


@pytest.mark.slow
def test_is_torchelastic_launched_under_both(tmp_path: Path, state_dir: Path) -> None:
    argv = ["--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=0.1", IS_TE_WORKER, "{out}"]
    runs = launch_both(argv, tmp_path, state_dir)
    for run in runs.values():
        assert run.returncode == 0, run.why()
        assert (run.out_dir / "0").read_text() == "True"
    # and the probe can fail: without a launcher it reports False (test_is_not_torchelastic_launched)
    bare = tmp_path / "bare"
    bare.mkdir()
    subprocess.run([sys.executable, IS_TE_WORKER, str(bare)], env=clean_env(), check=True, timeout=120)
    assert (bare / "none").read_text() == "False"


# --- logs: redirects/tee with a line prefix, --log-dir, --local-ranks-filter ----------------------------------


def test_redirects_and_tee_prefix_every_line(tmp_path: Path, state_dir: Path, shell_worker: str) -> None:
    argv = ["--nproc-per-node=2", "--redirects=3", "--tee=3", "--no-python", shell_worker, "{out}"]
    runs = launch_both(argv, tmp_path, state_dir, {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"})
    for run in runs.values():
        assert run.returncode == 0, run.why()
        assert run.files() == world(2)
        for rank in (0, 1):
            assert f"[rank{rank}]:creating {run.out_dir / str(rank)}" in run.stdout, run.why()


def _log_tree(log_dir: Path) -> set[str]:
    """The files under ``log_dir``, with the per-run directory (``<run id>_<random>``) replaced by RUN."""
    runs = list(log_dir.iterdir())
    assert len(runs) == 1, runs
    return {str(Path("RUN") / p.relative_to(runs[0])) for p in runs[0].rglob("*") if p.is_file()}


def test_log_dir_holds_per_attempt_logs(tmp_path: Path, state_dir: Path) -> None:
    argv = ["--nproc-per-node=2", "--log-dir={logs}", "--redirects=3", ENV_WORKER, "{out}"]
    runs = launch_both(argv, tmp_path, state_dir)
    expected = {f"RUN/attempt_0/{r}/{name}" for r in (0, 1) for name in ("stdout.log", "stderr.log")}
    for run in runs.values():
        assert run.returncode == 0, run.why()
        assert _log_tree(run.log_dir) == expected
        for rank in (0, 1):
            stdout_log = next(run.log_dir.glob(f"*/attempt_0/{rank}/stdout.log"))
            assert f"creating {run.out_dir / str(rank)}" in stdout_log.read_text()
            assert f"creating {run.out_dir / str(rank)}" not in run.stdout  # redirected, not on the console
            assert run.envs()[str(rank)]["TORCHELASTIC_ERROR_FILE"].startswith(str(run.log_dir))
    assert_same_worker_env(runs["torchrun"], runs["ecolaunch"])


def test_local_ranks_filter_shows_only_rank_0(tmp_path: Path, state_dir: Path) -> None:
    runs = launch_both(["--nproc-per-node=2", "--local-ranks-filter=0", ENV_WORKER, "{out}"], tmp_path, state_dir)
    for run in runs.values():
        assert run.returncode == 0, run.why()
        assert run.files() == world(2)  # both ran ...
        assert f"creating {run.out_dir / '0'}" in run.stdout, run.why()  # ... only rank 0 is shown
        assert f"creating {run.out_dir / '1'}" not in run.stdout + run.stderr, run.why()


# --- --max-restarts with a failing worker ---------------------------------------------------------------------


def test_max_restarts_restarts_once_then_fails(tmp_path: Path, state_dir: Path) -> None:
    argv = ["--nproc-per-node=2", "--max-restarts=1", "--monitor-interval=0.1", "--log-dir={logs}", FAIL_WORKER,
            "{out}", "1", "3"]
    runs = launch_both(argv, tmp_path, state_dir)
    assert runs["torchrun"].returncode == 1, runs["torchrun"].why()  # torchrun: always 1
    assert runs["ecolaunch"].returncode == 3, runs["ecolaunch"].why()  # ecolaunch: the failing worker's own code
    for run in runs.values():
        files = run.files()
        assert {"attempt0-rank1", "attempt1-rank1"} <= files, run.why()  # the failing rank ran twice ...
        assert not any(f.startswith("attempt2") for f in files)  # ... and not a third time
        assert files <= {f"attempt{a}-rank{r}" for a in (0, 1) for r in (0, 1)}
        attempts = sorted(p.name for p in next(run.log_dir.iterdir()).iterdir())
        assert attempts == ["attempt_0", "attempt_1"]
        assert "Root Cause (first observed failure)" in run.stderr and "exitcode  : 3" in run.stderr, run.why()
