"""``--share-if-sooner`` through the launcher: the option (or the admin's ``[colocation] share_if_sooner``) reaches
the decision, and a job that waits says what the contract could not judge."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ecolaunch.admin.rules import Rules
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.runtime import open_gpus, resolve
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import BIN, REPO, clean_env, ecolaunch_cmd


def _busy_gpu(state_dir: Path, expected_s: float) -> dict[str, str]:
    """One simulated GPU held by a job of this process, its expected length booked."""
    env = {"ECOLAUNCH_SIMULATE": "1xA100-SXM4-80GB", "ECOLAUNCH_STATE_DIR": str(state_dir), "ECOLAUNCH_POLICY": ""}
    backend = open_gpus(resolve(env)[0])
    session = Session(StateStore(state_dir), backend, ExclusivePolicy(), Rules())
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")
    job = session.submit(JobRequest(id="long0001", user="u", host=backend.hostname(), nproc=1), me, name="long.py",
                         info={"allowed_slowdown_pct": 10.0, "memory_mib": 1000, "expected_s": expected_s})
    assert hasattr(session.try_place(job.id), "decision")  # placed
    return env


def _dry_run(env: dict[str, str], *args: str, policy_file: Path | None = None) -> str:
    extra = {"ECOLAUNCH_POLICY": str(policy_file)} if policy_file else {}
    out = subprocess.run(ecolaunch_cmd("--dry-run", "--explain", "--policy", "gnn", "--memory-mib", "1000", *args,
                                       "--nproc-per-node", "1", str(BIN / "stepper.py"), "3", "0.01"),
                         env=clean_env(**{**env, **extra}), cwd=REPO, capture_output=True, text=True, timeout=120)
    return out.stdout + out.stderr


def test_a_waiting_job_says_what_the_contract_could_not_judge(state_dir: Path, tmp_path: Path) -> None:
    env = _busy_gpu(state_dir, expected_s=3600.0)  # the running job: about an hour left
    said = _dry_run(env, "--share-if-sooner", "yes")
    assert "this job never completed here, so nothing says how long it runs" in said, said
    assert "sooner" not in _dry_run(env)  # no contract asked: nothing said of it
    policy = tmp_path / "policy.toml"
    policy.write_text("[colocation]\nshare_if_sooner = true\n")
    assert "never completed here" in _dry_run(env, policy_file=policy)  # the admin's default
    assert "never completed here" not in _dry_run(env, "--share-if-sooner", "no", policy_file=policy)
