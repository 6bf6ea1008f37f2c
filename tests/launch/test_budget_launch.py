"""The power budget on the launcher's side: bookings record the re-caps, releases give the watts back, a running
launcher follows its lowered or raised ceiling, the newcomer waits for the watts it needs, the closed loop never
moves past the ceiling. Simulated GPUs (privileged: caps are really set), a real state store, and real processes
standing in for the launchers (two jobs need two launcher lives)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import NeverFits
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.caps.job import JobCaps
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.caps.control import CapMove, ClosedLoop, Feeds
from ecolaunch.profile.sampler import GpuSample
from ecolaunch.state.graph import WaitReason
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore

#: 6 % slower at 300 W, 18 % at 250 W; its floor under a 10 % bound is 285 W (tests/policy/test_budget.py)
STEEP = Profile(iter_time_s=0.1, power_w=330.0, memory_mib=1000,
                cap_points=(CapPoint(400.0, 0.1, 330.0), CapPoint(300.0, 0.106, 285.0), CapPoint(250.0, 0.118, 242.0)))
#: two A100s (100-400 W): a job alone counts 400 + 100 W (the idle GPU); two jobs must come down to 300 W each
BUDGET = Rules(power_max_total_w=600.0)


@pytest.fixture
def processes():
    """Two live processes to stand for two launchers (a job's booking lives as long as its launcher)."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.fixture
def launchers(processes):
    return [Launcher(p.pid, process_start_time(p.pid), os.getuid(), "u") for p in processes]


@pytest.fixture
def session(state_dir: Path) -> Session:
    spec = parse_spec("2xA100-SXM4-80GB", hostname="h").hosts[0]
    backend = SimulatedBackend(spec, state_dir / "gpus.json", privileged=True)
    return Session(StateStore(state_dir), backend, get_policy("exclusive"), BUDGET, clock=VirtualClock())


def place(session: Session, jid: str, launcher: Launcher) -> Placement:
    request = JobRequest(id=jid, user="u", host="h", nproc=1, memory_mib=1000, allowed_slowdown_pct=10.0,
                         profile=STEEP)
    session.submit(request, launcher, name=jid, info={"allowed_slowdown_pct": 10.0, "memory_mib": 1000})
    placement = session.try_place(jid)
    assert isinstance(placement, Placement), placement
    return placement


class NoGuard:
    def wait_ready(self, timeout_s: float = 10.0) -> bool:
        return True

    def done(self, timeout_s: float = 2.0) -> None:
        pass


def owner(session: Session, placement: Placement, state_dir: Path, **kw) -> JobCaps:
    return JobCaps(session, placement, state_dir, {}, guard_factory=lambda env: NoGuard(), **kw)


def gpu_ids(session: Session) -> tuple[str, str]:
    g0, g1 = sorted(session.backend.gpus(), key=lambda g: g.index)
    return g0.uuid, g1.uuid


def limits(session: Session) -> dict[str, float]:
    return {g.uuid: g.power_limit_w for g in session.backend.gpus()}


def test_a_booking_records_the_recaps_and_a_release_gives_the_watts_back(session: Session, launchers) -> None:
    G0, G1 = gpu_ids(session)
    a = place(session, "a", launchers[0])
    assert a.decision.recaps_w == {} and a.decision.power_caps_w == {G0: None}
    assert session.snapshot().budget_caps_w == {G0: 400.0}
    b = place(session, "b", launchers[1])
    assert b.decision.recaps_w == {G0: 300.0} and b.decision.power_caps_w == {G1: 300.0}
    assert any("job a on GPU 0 to 300 W" in r for r in b.decision.reasons)
    assert session.snapshot().budget_caps_w == {G0: 300.0, G1: 300.0}  # booked with b
    session.release("b")
    assert session.snapshot().budget_caps_w == {G0: 400.0}  # a's cap comes back up in b's release
    session.release("a")
    assert session.snapshot().budget_caps_w == {}


def test_a_dead_launchers_job_gives_its_watts_back_at_the_next_transaction(session: Session, launchers,
                                                                           processes) -> None:
    G0, G1 = gpu_ids(session)
    place(session, "a", launchers[0])
    place(session, "b", launchers[1])
    processes[1].kill()  # b's launcher is SIGKILLed: no release runs
    processes[1].wait()
    assert session.snapshot().budget_caps_w == {G0: 400.0}


def test_a_running_launcher_follows_a_lowered_then_raised_ceiling(session: Session, launchers, state_dir: Path) -> None:
    G0, G1 = gpu_ids(session)
    a = place(session, "a", launchers[0])
    said: list[str] = []
    caps_a = owner(session, a, state_dir, follow_s=0, on_message=said.append)
    followed: list[dict] = []  # what a multi-node job's leader would publish to its other nodes
    caps_a.on_follow = lambda changes: followed.append(dict(changes))
    caps_a.begin()
    assert limits(session) == {G0: 400.0, G1: 400.0} and caps_a.ceiling_w() == 400.0
    b = place(session, "b", launchers[1])
    caps_b = owner(session, b, state_dir, follow_s=0, budget_wait_s=0.3)
    caps_b.begin()  # sets its own 300 W; a's launcher has not looked yet: b waits 0.3 s, then starts anyway
    assert limits(session) == {G0: 400.0, G1: 300.0}
    assert caps_a.wishes() == {G0: None}  # nothing asked yet: the GPU's default limit
    assert caps_a.follow_budget() == {G0: 300.0}  # a's next look: its GPU comes down
    assert caps_a.wishes() == {G0: 300.0}  # what a multi-node job's leader publishes at the start
    assert said == ["power budget: GPU 0 at 300 W now (the host's budget was shared again as jobs came or went)"]
    assert limits(session) == {G0: 300.0, G1: 300.0} and caps_a.ceiling_w() == 300.0
    assert session.snapshot().jobs["a"].power_caps_w == {G0: 300.0}  # the wish the agent would apply
    caps_a.set_cap(G0, 400.0)  # the closed loop asks for more: never past the ceiling
    assert limits(session)[G0] == 300.0 and caps_a.follow_budget() == {}
    session.release("b")
    caps_b.release()
    assert limits(session)[G1] == 400.0
    assert caps_a.follow_budget() == {G0: 400.0}  # back to what the loop asked, now that there is room
    assert len(said) == 2 and said[-1].startswith("power budget: GPU 0 at 400 W now")
    assert limits(session) == {G0: 400.0, G1: 400.0}
    assert followed == [{G0: 300.0}, {G0: 400.0}]  # each change the budget made, once; no look that changed nothing
    session.release("a")
    caps_a.release()


def test_the_newcomer_starts_once_the_running_launcher_lowered_its_gpu(session: Session, launchers,
                                                                       state_dir: Path) -> None:
    G0, G1 = gpu_ids(session)
    a = place(session, "a", launchers[0])
    caps_a = owner(session, a, state_dir, follow_s=0.05)  # a's follower thread, as in a real launcher
    caps_a.begin()
    b = place(session, "b", launchers[1])
    caps_b = owner(session, b, state_dir, follow_s=0.05, budget_wait_s=20.0)
    session.clock = __import__("ecolaunch.clock", fromlist=["SystemClock"]).SystemClock()  # real waiting
    started = time.monotonic()
    caps_b.begin()
    assert time.monotonic() - started < 10.0
    assert limits(session) == {G0: 300.0, G1: 300.0}  # when b's workers start, a is already down
    session.release("b")
    caps_b.release()
    deadline = time.monotonic() + 10.0
    while limits(session)[G0] != 400.0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert limits(session)[G0] == 400.0  # a's follower raised it back within its period
    session.release("a")
    caps_a.release()
    assert limits(session) == {G0: 400.0, G1: 400.0}


def test_a_forged_ceiling_never_takes_a_job_below_its_own_floor(session: Session, launchers, state_dir: Path) -> None:
    G0, G1 = gpu_ids(session)
    a = place(session, "a", launchers[0])
    caps_a = owner(session, a, state_dir, follow_s=0)
    caps_a.begin()
    place(session, "b", launchers[1])
    with session.store.transaction() as graph:  # state.json is the whole lab's to write: 120 W for a, 480 for b
        graph.budget_caps_w = {G0: 120.0, G1: 480.0}
    # the forged copy is not read: a follows the budget's share computed from the job files (300 W with b), which
    # is never below its floor under its 10 % bound by its own curve (285 W)
    assert caps_a.follow_budget() == {G0: 300.0}
    assert limits(session)[G0] == 300.0
    session.release("a")
    caps_a.release()


def test_a_job_whose_floor_does_not_fit_waits_until_a_job_leaves(session: Session, launchers) -> None:
    G0, G1 = gpu_ids(session)
    session.rules = Rules(power_max_total_w=560.0)  # a alone: 400 + 100 W; both: their floors 2 x 285 W > 560 W
    place(session, "a", launchers[0])
    request = JobRequest(id="b", user="u", host="h", nproc=1, memory_mib=1000, allowed_slowdown_pct=10.0,
                         profile=STEEP)
    session.submit(request, launchers[1], name="b", info={"allowed_slowdown_pct": 10.0, "memory_mib": 1000})
    waiting = session.try_place("b")  # GPU 1 is free, but the budget is not: b waits at the head of the queue
    assert waiting.position == 1 and waiting.reason is WaitReason.POWER_BUDGET, waiting
    assert session.snapshot().budget_caps_w == {G0: 400.0}  # nothing was lowered for a job that did not start
    session.release("a")
    placed = session.try_place("b")
    assert isinstance(placed, Placement) and session.snapshot().budget_caps_w == {placed.decision.gpus[0]: 400.0}


def test_a_budget_below_the_boards_minimum_limits_can_never_fit(session: Session, launchers) -> None:
    G0, G1 = gpu_ids(session)
    session.rules = Rules(power_max_total_w=150.0)
    with pytest.raises(NeverFits, match="power budget of 150 W is below the 200 W"):
        place(session, "a", launchers[0])


# --- the closed loop under a ceiling ---------------------------------------------------------------------------
class Controller:
    """Stands for the CapController: its cap, and the moves a test scripts."""

    top_w = 400.0  # where a window to measure the reference would go (ClosedLoop says whether it may)

    def __init__(self, cap_w: float) -> None:
        self.cap_w = cap_w
        self.moves: list[CapMove] = []
        self.fed = 0
        self.reference_allowed = True

    def observe(self, times, power):
        self.fed += len(times)
        if not self.moves:
            return None
        move = self.moves.pop(0)
        self.cap_w = move.cap_w
        return move


class Reader:
    def __init__(self) -> None:
        self.stamps: list[float] = []

    def count(self) -> int:
        return len(self.stamps)

    def since(self, index: int):
        return index, self.stamps[index:]


class Window:
    power_w = 250.0


class Sampler:
    def __init__(self, limit_w: float) -> None:
        self.limit_w, self.t = limit_w, 0.0

    def window(self, uuid, start, end):
        return Window()

    def latest(self, uuid):
        return GpuSample(self.t, 250.0, None, 0.0, 90.0, 30.0, 1000, self.limit_w)


def loop_with(ceiling: list[float | None], cap_w: float = 300.0, limit_w: float = 300.0):
    clock, reader, sampler, controller = VirtualClock(), Reader(), Sampler(limit_w), Controller(cap_w)
    applied: list[float] = []

    def apply(cap, why):
        applied.append(cap)
        return True

    feeds = Feeds(reader, sampler, ("GPU-0",), clock, apply, (lambda: ceiling[0]) if ceiling else None)
    loop = ClosedLoop(controller, feeds, 0)
    return loop, clock, reader, sampler, controller, applied


def run(loop, clock, reader, sampler, n: int) -> None:
    for _ in range(n):
        clock.advance(0.1)
        sampler.t = clock.now()
        reader.stamps.append(clock.now())
        loop.step()


def test_the_closed_loop_pauses_while_the_budget_holds_its_cap_lower() -> None:
    ceiling = [None]
    loop, clock, reader, sampler, controller, applied = loop_with(ceiling)
    run(loop, clock, reader, sampler, 5)
    fed = controller.fed
    assert fed > 0 and loop.held_w is None
    ceiling[0], sampler.limit_w = 250.0, 250.0  # a job arrived: the budget lowered this one to 250 W
    run(loop, clock, reader, sampler, 10)
    assert loop.held_w == 250.0 and controller.fed == fed  # nothing measured at 250 W counts for 300 W
    ceiling[0] = 400.0  # the job left: room again; the follower sets 300 W back
    run(loop, clock, reader, sampler, 3)
    assert loop.held_w is None and controller.fed == fed  # not until the readings show 300 W again
    sampler.limit_w = 300.0
    run(loop, clock, reader, sampler, 5)
    assert controller.fed > fed and applied == []


def test_a_closed_loop_move_up_stops_at_the_ceiling() -> None:
    ceiling = [350.0]
    loop, clock, reader, sampler, controller, applied = loop_with(ceiling)
    controller.moves.append(CapMove(300.0, 400.0, 12.0, "too slow"))
    run(loop, clock, reader, sampler, 3)
    assert applied == [350.0]  # asked 400 W, made 350 W: the budget's ceiling
    sampler.limit_w = 350.0
    run(loop, clock, reader, sampler, 3)
    assert loop.held_w == 350.0  # and the loop waits there until the ceiling rises to its cap


def test_without_a_ceiling_the_readings_show_a_held_cap() -> None:
    loop, clock, reader, sampler, controller, applied = loop_with([], cap_w=300.0, limit_w=300.0)
    run(loop, clock, reader, sampler, 5)
    fed = controller.fed
    sampler.limit_w = 260.0  # someone else (the launcher's budget follower, an admin) holds it at 260 W
    run(loop, clock, reader, sampler, 5)
    assert loop.held_w == 260.0 and controller.fed == fed


def test_no_window_at_the_top_while_a_ceiling_holds_the_cap_below_it() -> None:
    # the reference is measured uncapped (issue 39): the loop tells its controller whether the budget lets it go there
    ceiling = [350.0]
    loop, clock, reader, sampler, controller, applied = loop_with(ceiling)
    run(loop, clock, reader, sampler, 5)
    assert controller.fed > 0 and controller.reference_allowed is False
    ceiling[0] = 400.0  # room up to the top again
    run(loop, clock, reader, sampler, 5)
    assert controller.reference_allowed is True
    unbounded = loop_with([])
    run(unbounded[0], *unbounded[1:4], 5)
    assert unbounded[4].reference_allowed is True
