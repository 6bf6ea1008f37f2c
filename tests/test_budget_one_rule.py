"""The launcher and the simulator follow one rule for running jobs under a power budget
(:func:`ecolaunch.caps.limits.wish_under_ceiling`): the same arrivals and departures, played once by the simulator
and once by real launcher objects (a real state store, simulated GPUs whose caps are really set, real processes
standing in for the launchers), leave every job with the same cap on every GPU after every event.

The trace mixes what makes the rule matter: a job with a steep curve (its floor binds), a 2-GPU job with a flat one
(the budget lowers it first), a first launch without a curve (it asks no cap: the ceiling alone holds it, never below
its no-curve floor), and departures that hand watts back (a job comes back up to what it asked, never above)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ecolaunch.caps.limits import wish_under_ceiling
from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.caps.job import JobCaps
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.state.graph import GpuNode
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore

SPEC = "4xA100-SXM4-80GB"  # 100-400 W each
#: the floors of the jobs that run together fit, their uncapped wishes (4 x 400 W) do not
BUDGET = Rules(power_max_total_w=1150.0)
STEEP = Profile(iter_time_s=0.1, power_w=330.0, memory_mib=1000,
                cap_points=(CapPoint(400.0, 0.1, 330.0), CapPoint(300.0, 0.106, 285.0), CapPoint(250.0, 0.118, 242.0)))
FLAT = Profile(iter_time_s=0.2, power_w=250.0, memory_mib=2000,
               cap_points=(CapPoint(400.0, 0.2, 250.0), CapPoint(300.0, 0.201, 240.0), CapPoint(200.0, 0.209, 190.0)))
NO_CURVE = Profile(iter_time_s=0.1, power_w=300.0, memory_mib=1000)
JOBS = (
    TraceJob("a", 0.0, 1, 5000.0, STEEP, allowed_slowdown_pct=2.0),
    TraceJob("b", 10.0, 2, 3000.0, FLAT),
    TraceJob("c", 20.0, 1, 1000.0, NO_CURVE),
    TraceJob("d", 4000.0, 1, 2000.0, STEEP),
    TraceJob("e", 4100.0, 1, 500.0, NO_CURVE),
)


def simulated(policy: str) -> list[tuple[frozenset[str], dict[str, dict[str, float]]]]:
    """The simulator's running jobs and their caps after each of its events."""
    sim = Simulation(parse_spec(SPEC, hostname="h"), get_policy(policy), BUDGET, profile_caps=False)
    seen: list[tuple[frozenset[str], dict[str, dict[str, float]]]] = []

    def snapshot(done: int, total: int) -> None:
        running = {j: dict(job.power_caps_w) for j, job in sim.graph.jobs.items() if job.gpus}
        if not seen or seen[-1] != (frozenset(running), running):
            seen.append((frozenset(running), running))

    result = sim.run(Trace("one-rule", JOBS), progress=snapshot)
    assert all(o.end_s is not None for o in result.jobs)
    return seen


@pytest.fixture
def launchers() -> Iterator[dict[str, Launcher]]:
    """One live process per job, standing for its launcher (a booking lives as long as its launcher)."""
    procs = {j.id: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) for j in JOBS}
    try:
        yield {j: Launcher(p.pid, process_start_time(p.pid), os.getuid(), "sim") for j, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


class NoGuard:
    def wait_ready(self, timeout_s: float = 10.0) -> bool:
        return True

    def done(self, timeout_s: float = 2.0) -> None:
        pass


@pytest.mark.parametrize("policy", ["curve", "exclusive"])
def test_the_launcher_and_the_simulator_leave_every_job_the_same_caps(policy: str, state_dir: Path,
                                                                      launchers: dict[str, Launcher]) -> None:
    events = simulated(policy)
    assert len(events) >= 7 and max(len(running) for running, _ in events) == 3 and events[-1] == (frozenset(), {})
    spec = parse_spec(SPEC, hostname="h").hosts[0]
    backend = SimulatedBackend(spec, state_dir / "gpus.json", privileged=True)
    session = Session(StateStore(state_dir), backend, get_policy(policy), BUDGET, clock=VirtualClock())
    owners: dict[str, JobCaps] = {}
    jobs = {j.id: j for j in JOBS}
    moved = 0  # caps of a running job that another job's arrival or departure changed
    before: dict[str, dict[str, float]] = {}
    for running, sim_caps in events:
        for jid in sorted(set(owners) - running):  # departures first, as the simulator plays them
            session.release(jid)
            owners.pop(jid).release()
        for jid in sorted(running - set(owners)):
            job = jobs[jid]
            request = JobRequest(id=jid, user="sim", host="h", nproc=job.nproc, memory_mib=job.profile.memory_mib,
                                 allowed_slowdown_pct=job.allowed_slowdown_pct, profile=job.profile)
            session.submit(request, launchers[jid], name=jid,
                           info={"allowed_slowdown_pct": job.allowed_slowdown_pct, "memory_mib": job.profile.memory_mib})
            placement = session.try_place(jid)
            assert isinstance(placement, Placement), placement
            owners[jid] = JobCaps(session, placement, state_dir, {}, guard_factory=lambda env: NoGuard(),
                                  follow_s=0, budget_wait_s=0)
            owners[jid].begin()
        for caps in owners.values():  # every running launcher's next look
            caps.follow_budget()
        graph = session.snapshot()
        launched = {j: dict(graph.jobs[j].power_caps_w) for j in owners}
        assert launched == sim_caps, f"after the event that left {sorted(running)} running"
        moved += sum(1 for jid, now in launched.items() if jid in before and before[jid] != now)
        before = launched
    assert owners == {}
    if policy == "exclusive":  # its jobs ask the board's top: the budget lowers running jobs, and raises them back
        assert moved >= 2


def test_a_raised_ceiling_gives_a_job_back_what_it_asked_never_more() -> None:
    gpu = GpuNode.from_model(parse_spec("1xA100-SXM4-80GB").hosts[0].gpus[0], "g", 0)
    rules = Rules(power_max_total_w=1000.0)
    wish = lambda ask, ceiling, floor=None, found=400.0: wish_under_ceiling(  # noqa: E731
        ask, ceiling, floor_w=floor, found_w=found, rules=rules, gpu=gpu)
    assert wish(250.0, 300.0) == 250.0  # room above its own cap is not taken
    assert wish(350.0, 300.0) == 300.0  # held at the ceiling
    assert wish(350.0, 200.0, floor=285.0) == 285.0  # never below the job's own floor
    assert wish(None, 300.0) == 300.0  # no ask: the ceiling holds a GPU found above it
    assert wish(None, 300.0, found=250.0) is None  # ...and leaves one found below it alone
    assert wish(250.0, None) == 250.0  # no budget ceiling: the ask as it is
    assert wish(350.0, 50.0) == 100.0  # within the policy's bounds (the board's minimum)
