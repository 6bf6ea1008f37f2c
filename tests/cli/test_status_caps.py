"""``ecolaunch status`` and caps a dead launcher left lowered: a root status restores them (a privileged
transaction); without the privilege to restore, status says which GPU and the command that fixes it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ecolaunch.caps.keeper import CapKeeper
from ecolaunch.caps.ledger import load_ledger
from ecolaunch.statedir import LEDGER_FILE
from ecolaunch.runtime import open_gpus, resolve
from ecolaunch.cli.status_cmd import _render
from ecolaunch.caps.job import orphaned_caps
from ecolaunch.state.graph import Job, JobState, StateGraph
from ecolaunch.state.reconcile import PsutilProcessTable
from tests.conftest import REPO, ecolaunch_cmd


def _left_by_a_dead_launcher(env: dict[str, str]):
    """A cap of 250 W on GPU 1 with its original in the ledger, applied for a launcher (this test) that then died."""
    environment, rules = resolve(env)
    backend = open_gpus(environment)
    host = backend.hostname()
    uuid = backend.gpus()[1].uuid
    me = os.getpid()
    job = Job(id="gone", uid=0, user="u", host=host, launcher_pid=me, launcher_start_time=0.0, nproc=1, name="x",
              seq=0, submitted_at=0.0, state=JobState.RUNNING, gpus=[uuid], power_caps_w={uuid: 250.0})

    class Alive:
        def alive(self, pid, start):
            return True

        def ancestors(self, pid):
            return []

    CapKeeper(backend, environment.state_dir, rules, host=host, processes=Alive()).reconcile(
        StateGraph(jobs={"gone": job}))
    assert backend.gpus()[1].power_limit_w == 250.0
    return environment, rules, backend, uuid


def test_a_cap_left_by_a_gone_job_is_named_with_the_fix(sim_env) -> None:
    env = sim_env()
    environment, rules, backend, uuid = _left_by_a_dead_launcher(env)
    from ecolaunch.launch.session import Session
    from ecolaunch.policy.baselines import ExclusivePolicy
    from ecolaunch.state.store import StateStore

    graph = Session(StateStore(environment.state_dir), backend, ExclusivePolicy(), rules).snapshot()
    left = orphaned_caps(graph, backend.hostname(), rules, environment.state_dir, PsutilProcessTable())
    assert left == {uuid: (250.0, 400.0)}
    doc = {"host": "h", "simulate": None, "state_dir": "d", "jobs": [], "queue": [], "gpus": [],
           "caps_left": [{"uuid": uuid, "index": 1, "power_limit_w": 250.0, "original_w": 400.0}]}
    assert ("warning: GPU 1 is at 250 W, below its original 400 W, lowered for a job that is gone; restore it with "
            "`sudo ecolaunch agent --once`") in _render(doc)


@pytest.mark.skipif(os.geteuid() != 0, reason="a root status is a privileged transaction")
def test_a_root_status_restores_it(sim_env) -> None:
    env = sim_env()
    environment, _, backend, uuid = _left_by_a_dead_launcher(env)
    done = subprocess.run(ecolaunch_cmd("status", "--json"), env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["caps_left"] == []
    assert backend.gpus()[1].power_limit_w == 400.0
    assert load_ledger(environment.state_dir / LEDGER_FILE, backend.hostname()) == {}
