"""The cap guard: whatever kills a root launcher that changed caps, its GPUs get their caps back within a second.

Real processes throughout: the launcher (``python -m ecolaunch``) on simulated GPUs with no cap agent, its guard
(``python -m ecolaunch.cli.guard_cmd``), and the test reading the simulated GPUs as any other process would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ecolaunch.caps.ledger import load_ledger
from ecolaunch.statedir import LEDGER_FILE
from ecolaunch.runtime import open_gpus, resolve
from tests.conftest import BIN, REPO, ecolaunch_cmd

STEPPER = str(BIN / "stepper.py")
SPEC = "1xA100-SXM4-80GB"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a launcher applies caps itself only as root")


def _policy(tmp_path: Path) -> Path:
    # the admin's maximum below the board's 400 W: profiling measures its first cap (the top of the admin's bounds)
    # at 300 W, so the launcher lowers the cap as soon as the job runs, although a CPU job draws only idle power
    path = tmp_path / "policy.toml"
    path.write_text('[caps."A100-SXM4-80GB"]\nmax_w = 300.0\n')
    return path


def _limit(backend) -> float:
    return backend.gpus()[0].power_limit_w


def _wait_for(predicate, timeout_s: float, step_s: float = 0.01) -> float | None:
    """Seconds until ``predicate()`` holds, or None after ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(step_s)
    return None


def _launch(env: dict[str, str], steps: int) -> subprocess.Popen:
    return subprocess.Popen(ecolaunch_cmd("--profile", "inline", "--nproc-per-node", "1", STEPPER, str(steps), "0.02"),
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_a_sigkilled_root_launcher_gets_its_cap_restored_within_a_second(sim_env, state_dir, tmp_path) -> None:
    env = sim_env(SPEC, ECOLAUNCH_POLICY=str(_policy(tmp_path)))
    environment, _ = resolve(env)
    backend = open_gpus(environment)
    assert _limit(backend) == 400.0
    proc = _launch(env, 100_000)
    try:
        assert _wait_for(lambda: _limit(backend) == 300.0, 120.0) is not None, "profiling never lowered the cap"
        os.kill(proc.pid, signal.SIGKILL)  # the launcher only: its workers run on, as after a real SIGKILL
        restored_after_s = _wait_for(lambda: _limit(backend) == 400.0, 10.0)
    finally:
        with_workers = proc.pid
        try:
            os.killpg(with_workers, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, err = proc.communicate(timeout=60)
    assert restored_after_s is not None, err
    print(f"cap restored {restored_after_s:.3f} s after the SIGKILL")
    assert restored_after_s <= 1.0, f"restored only after {restored_after_s:.2f} s"
    assert f"launcher {proc.pid} died; GPU 0 restored to 400 W" in err
    assert load_ledger(environment.state_dir / LEDGER_FILE, backend.hostname()) == {}  # nothing left to restore


def test_a_launcher_that_ends_cleanly_restores_itself_and_releases_its_guard(sim_env, tmp_path) -> None:
    env = sim_env(SPEC, ECOLAUNCH_POLICY=str(_policy(tmp_path)))
    backend = open_gpus(resolve(env)[0])
    proc = _launch(env, 60)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert _limit(backend) == 400.0
    assert "guard" not in err  # the guard was told it is done: it restored nothing and said nothing
