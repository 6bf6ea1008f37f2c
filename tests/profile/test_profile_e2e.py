"""End to end without the launcher: the instrumented DDP example under a RunObserver on simulated GPUs.

The test process plays the launcher: it attaches itself to the simulated GPUs (so they draw power), opens a
RunObserver on the real clock with background threads, and runs the example as real worker processes with
the observer's worker environment. The launcher's own end-to-end test (``ecolaunch ... instrumented_ddp.py``)
lives with the launch tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import SystemClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.run.observer import ObserveConfig, RunObserver
from ecolaunch.profile.history import History, fingerprint
from ecolaunch.profile.modes import ProfilerSettings
from tests.conftest import REPO, clean_env

EXAMPLE = REPO / "examples" / "instrumented_ddp.py"
# a warm-up long enough for the job to reach its speed: a top cap measured while it still speeds up reads slower
# than the lower caps after it, and such a profile is not kept; windows of 250 iterations (a quarter second and
# more): windows of 60 (60 ms) on a loaded 2-core machine read 2x apart from the scheduler alone, which no cap does
SETTINGS = ProfilerSettings(warmup_iters=100, settle_iters=5, measured_iters=250)


@pytest.fixture
def sim(tmp_path: Path):
    spec = parse_spec("2xA100-SXM4-80GB", hostname="simhost").hosts[0]
    backend = SimulatedBackend(spec, tmp_path / "state" / "simulated-gpus.json")
    for uuid in spec.uuids:
        backend.attach(uuid, os.getpid(), 8_000, util_gpu_pct=60.0, util_mem_pct=30.0, power_w=250.0)
    yield backend, list(spec.uuids)
    backend.detach(os.getpid())


def make_observer(backend, uuids, state_dir: Path, mode: str, fp: str, **kw) -> RunObserver:
    config = ObserveConfig("e2e1", tuple(uuids), state_dir, mode=mode, fingerprint=fp, rules=Rules(),
                           allowed_slowdown_pct=10.0, user="tester", name="instrumented_ddp.py", settings=SETTINGS,
                           interval_s=0.05, poll_s=0.05)
    return RunObserver(config, backend, clock=SystemClock(), history=History(state_dir),
                       set_cap=backend.set_power_limit, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two DDP workers; the inline run below covers profiling into history by default
def test_pre_run_of_two_ddp_workers_stops_together_and_stores_a_profile(sim, tmp_path: Path) -> None:
    backend, uuids = sim
    state = tmp_path / "state"
    fp = fingerprint(EXAMPLE, ["--steps", "3000"], 2, "tester", "NVIDIA A100-SXM4-80GB")
    obs = make_observer(backend, uuids, state, "pre", fp)
    with obs:
        env = clean_env(**obs.worker_env(), OMP_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                               str(EXAMPLE), "--steps", "3000"], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=180, check=False)
        obs.set_exit_code(proc.returncode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "profiling True" in proc.stdout and "done:" not in proc.stdout  # stopped early, cleanly
    assert obs.monitor.reader.count() == int(env["ECOLAUNCH_PROFILE_STEPS"])  # both ranks, same step
    entry = History(state).lookup(fp)
    assert entry is not None and entry.profile_safe  # the example's @ecolaunch.job(profile_safe=True)
    assert entry.profile is not None, obs.result.reason if obs.result else "no profile result"
    assert entry.profile.iter_time_s > 0 and entry.profile.power_w == pytest.approx(250.0, rel=0.05)
    assert History(state).list() == []
    assert all(g.power_limit_w == 400.0 for g in backend.gpus())


def test_inline_run_ends_with_energy_and_a_profile_in_history(sim, tmp_path: Path) -> None:
    backend, uuids = sim
    state = tmp_path / "state"
    fp = fingerprint(EXAMPLE, ["--steps", "1500", "--batch-size", "1024"], 1, "tester", "NVIDIA A100-SXM4-80GB")
    obs = make_observer(backend, uuids[:1], state, "inline", fp)
    with obs:
        env = clean_env(**obs.worker_env(), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "1500", "--batch-size", "1024"], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=180, check=False)
        obs.set_exit_code(proc.returncode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done: 1500 steps" in proc.stdout and "profiling False" in proc.stdout
    rec = History(state).get("e2e1")
    assert rec is not None and rec.exit_code == 0 and rec.name == "instrumented-ddp"
    assert rec.iterations == 1500  # track() marks each of the 1500 batches once
    assert rec.energy_j > 0 and rec.energy_j == pytest.approx(rec.gpu_energy_j)
    assert rec.profile is not None and rec.profile.iter_time_s > 0, rec.recommendation
    assert History(state).lookup_profile(fp) == rec.profile
    assert backend.gpus()[0].power_limit_w == 400.0
