"""The launcher and the simulator take the same decision on the same state and book it alike: both place through
``policy.place``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.sim.engine import Simulation, TraceJob
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.oracle import oracle_policy
from ecolaunch.state.graph import JobState, StateGraph
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore

PROFILE = Profile(iter_time_s=0.2, sm_util_pct=35.0, mem_bw_util_pct=20.0, memory_mib=6000, power_w=180.0)


@pytest.mark.parametrize("policy_name", ["exclusive", "first-fit", "lucid", "eaco", "zeus", "oracle"])
def test_same_state_same_decision(policy_name: str, state_dir: Path) -> None:
    machine = parse_spec("4xA100-SXM4-80GB", hostname="ws")
    make = oracle_policy if policy_name == "oracle" else (lambda: get_policy(policy_name))
    backend = SimulatedBackend(machine.hosts[0], state_dir / "gpus.json")
    session = Session(StateStore(state_dir), backend, make(), Rules())
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")
    for i in range(2):  # two running jobs booked through the launcher's own path
        req = JobRequest(id=f"r{i}", user="u", host="ws", nproc=1, memory_mib=6000, profile=PROFILE)
        session.submit(req, me, name="x", info={"allowed_slowdown_pct": 10.0, "memory_mib": 6000})
        assert isinstance(session.try_place(req.id), Placement)
    with session.store.transaction() as graph:  # the launcher's booking put each job's profile in the graph
        assert [j.profile for j in graph.jobs.values()] == [PROFILE, PROFILE]
    new = JobRequest(id="new", user="u", host="ws", nproc=1, memory_mib=6000, profile=PROFILE,
                     allowed_slowdown_pct=10.0)
    launcher_decision, _, graph = session.preview(new)

    sim = Simulation(machine, make(), Rules(), profile_caps=False)
    sim.graph = StateGraph.from_dict(json.loads(json.dumps(graph.to_dict())))  # the launcher's state, verbatim
    sim._gpu_jobs = {u: [j.id for j in sim.graph.jobs_on(u)] for u in sim._host_of}
    trace_job = TraceJob("new", 0.0, 1, 100.0, PROFILE)
    host, sim_decision = sim._place(trace_job, 5.0)
    assert host == "ws"
    assert sim_decision.to_dict() == launcher_decision.to_dict()
    booked = sim.graph.jobs["new"]  # booked as the launcher books (policy.place)
    assert (booked.state, booked.gpus, booked.decision, booked.started_at) == (
        JobState.RUNNING, list(launcher_decision.gpus), launcher_decision.to_dict(), 5.0)
