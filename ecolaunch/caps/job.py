"""The one owner of every power cap a job sets: record, clip and hold under the budget, apply, restore, guard.

What lives here: :class:`JobCaps` (made once per placed job; the pipeline's caps at placement and the restore at
release, and through :meth:`JobCaps.set_cap` every cap the run sets; under a power budget, the follower that holds each
cap under its GPU's ceiling), :class:`RunCaps` (the caps one run changes, the profiler's, the closed loop's and
pace-matching's, and their one way back to the caps the run found), a job over several nodes' caps
(:class:`PublishedCaps`, the leader's setter that publishes each cap; :class:`CapFollower`, a follower node's thread
that applies them), :func:`orphan_keeper` and :func:`orphaned_caps`. What does not: the decisions (the closed loop,
:mod:`ecolaunch.caps.control`), the clip and the budget's arithmetic (:mod:`ecolaunch.caps.limits`), the keeper pass
that writes caps (:class:`~ecolaunch.caps.keeper.CapKeeper`), the guard (:mod:`ecolaunch.caps.guard`). Nothing here
prints: messages go to ``on_message``. How a cap is clipped, recorded, applied and restored, and how a budget's ceiling
is followed: docs/admin.md, "One writer of a job's caps" and "A power budget for the whole machine".
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ecolaunch.admin.rules import Rules
from ecolaunch.caps.agent import agent_alive
from ecolaunch.caps.guard import Guard, start_guard
from ecolaunch.caps.keeper import CapKeeper, apply_caps_as_launcher, cap_recommendation, desired_caps
from ecolaunch.caps.ledger import load_ledger
from ecolaunch.caps.limits import (AT_CEILING_W, asked_caps, budget_ceilings, clip_cap_w, held_ceiling_w, job_floor_w,
                                   wish_under_ceiling)
from ecolaunch.clock import Clock
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.errors import EcolaunchError, PermissionDenied, StateError
from ecolaunch.state.graph import GpuNode, Job, StateGraph
from ecolaunch.state.reconcile import ProcessTable
from ecolaunch.state.store import StateStore
from ecolaunch.statedir import StateLayout
from ecolaunch.validate import is_number

logger = logging.getLogger(__name__)

#: seconds between two looks of a running launcher at its budget ceilings (a job arrived or left)
BUDGET_FOLLOW_S = 1.0
#: the most a newcomer waits for the GPUs its placement lowered to show their new limits (the running launchers'
#: follow period plus a cap agent's pass, with room to spare)
BUDGET_WAIT_S = 5.0


class Booking(Protocol):
    """What a job's caps need of the launcher that booked it (:class:`~ecolaunch.launch.session.Session`)."""

    store: StateStore
    backend: GpuBackend
    rules: Rules
    processes: ProcessTable
    clock: Clock
    host: str

    def look(self) -> StateGraph: ...


class Decided(Protocol):
    """What a placement's decision tells the caps: the GPUs of other jobs it lowered (uuid -> W)."""

    recaps_w: Mapping[str, float]


class Placed(Protocol):
    """A placed job (:class:`~ecolaunch.launch.session.Placement`): the job, its decision, its GPUs (uuid ->
    :class:`~ecolaunch.state.graph.GpuNode` at placement time)."""

    job: Job
    decision: Decided
    gpus: dict[str, GpuNode]


class JobCaps:
    """The caps of one placed job (docs/admin.md, "One writer of a job's caps").

    Args:
        session: the launcher's session (state store, backend, rules, process table).
        placement: the job's placement (its GPUs and the decided caps, already recorded by the booking).
        state_dir: the state directory (the agent's heartbeat file, the ledger).
        env: the launcher's environment, handed to the guard so that it opens the same GPUs and policy.
        on_message: receives the lines a user should see (a refused cap, a failed restore).
        guard_factory: starts a guard (tests replace it).
        follow_s: seconds between two looks at the power budget (a follower thread; 0: no thread, tests call
            :meth:`follow_budget`).
        budget_wait_s: the most :meth:`begin` waits for the GPUs the placement lowered.
    """

    def __init__(self, session: Booking, placement: Placed, state_dir: Path, env: Mapping[str, str], *,
                 on_message: Callable[[str], None] = lambda line: None,
                 guard_factory: Callable[[Mapping[str, str]], Guard] = start_guard,
                 follow_s: float = BUDGET_FOLLOW_S, budget_wait_s: float = BUDGET_WAIT_S) -> None:
        self._session, self._placement, self._state_dir = session, placement, Path(state_dir)
        self._env, self._say, self._guard_factory = dict(env), on_message, guard_factory
        self._job_id = placement.job.id
        self._gpus = dict(placement.gpus)
        self._agent = agent_alive(self._state_dir, session.processes)
        self._guard: Guard | None = None
        self._refused = False
        #: whether this launcher applied a cap itself (it must restore at release)
        self.applied = False
        # the power budget: what the job asks per GPU (before the budget), and its ceilings as last seen
        self._budgeted = session.rules.power_max_total_w is not None
        self._targets: dict[str, float | None] = asked_caps(placement.job)
        self._ceilings: dict[str, float] = {}
        self._floor_w = job_floor_w(placement.job, list(self._gpus.values()), session.rules) if self._budgeted else None
        self._follow_s, self._budget_wait_s = follow_s, budget_wait_s
        self._lock = threading.RLock()  # the follower thread and the run observer's thread both change wishes
        self._stop = threading.Event()
        self._follower: threading.Thread | None = None
        #: called with the wishes a look at the budget changed (uuid -> W, None: no wish), after they were applied:
        #: the leader of a job over several nodes publishes them (:meth:`PublishedCaps.follow`)
        self.on_follow: Callable[[Mapping[str, float | None]], None] | None = None

    @property
    def by_agent(self) -> bool:
        return self._agent

    @property
    def refused(self) -> bool:
        """Caps may not be changed here (said once): profiling measures at the current caps, no closed loop."""
        return self._refused

    # --- placement ---------------------------------------------------------------------------------
    def begin(self) -> None:
        """Apply the decision's caps (recorded by the booking); without privilege, say what would be set. Under a
        power budget: hold the wishes under the ceilings, wait for the GPUs the placement lowered (up to
        ``budget_wait_s``), and start following the budget."""
        if self._budgeted:
            self._look(apply=False)
        if not self._agent:
            wanted = self._current_wishes() if self._budgeted else dict(self._placement.job.power_caps_w)
            if wanted and not self._pass():
                self._refuse(cap_recommendation(self._gpus, self._session.rules, wanted))
        if self._budgeted and not self._refused:
            self._await_budget()
            if self._follow_s > 0:
                self._follower = threading.Thread(target=self._follow, name=f"ecolaunch-budget-{self._job_id}",
                                                  daemon=True)
                self._follower.start()

    # --- the power budget --------------------------------------------------------------------------------
    def ceiling_w(self) -> float | None:
        """The lowest of this job's budget ceilings as last seen (one cap for the job), None without a budget: what
        the closed loop may raise the job's cap to (``ClosedLoop(ceiling_w=...)``)."""
        with self._lock:
            ceilings = [self._held(u, c) for u, c in self._ceilings.items()]
        return min(ceilings) if ceilings else None

    def follow_budget(self) -> dict[str, float | None]:
        """One look at the budget (the follower thread's poll): record, and apply unless a cap agent does, the wish
        each GPU's new ceiling asks for. Returns the wishes it changed (uuid -> W, None: no wish)."""
        if not self._budgeted or self._refused:
            return {}
        changes = self._look(apply=True)
        if changes and not self._refused and self.on_follow is not None:
            self.on_follow(changes)
        return changes

    def _look(self, *, apply: bool) -> dict[str, float | None]:
        graph = self._session.look()  # no lock for a look; the host's GPUs from the driver, not state.json
        job = graph.jobs.get(self._job_id)
        if job is None:
            return {}  # released
        ceilings = budget_ceilings(graph, self._session.rules)
        with self._lock:
            self._ceilings = {u: ceilings[u] for u in self._gpus if u in ceilings}
            changes = {}
            for uuid in self._gpus:
                want, have = self._under_ceiling(uuid, self._targets.get(uuid)), job.power_caps_w.get(uuid)
                if (want is None) != (have is None) or (want is not None and abs(want - have) > AT_CEILING_W):
                    changes[uuid] = want
            if not changes:
                return {}
            self._record(changes)
            what = ", ".join(f"GPU {self._gpus[u].index} {'at its own limit' if w is None else f'at {w:.0f} W'}"
                             for u, w in changes.items())
            logger.info("job %s follows the power budget: %s", self._job_id, what)
            if apply:
                # a running job's user sees why it slows down or speeds up: a job arrived on the host, or left
                self._say(f"power budget: {what} now (the host's budget was shared again as jobs came or went)")
                if not self._agent and not self._pass():
                    self._refuse(None)
        return changes

    def _under_ceiling(self, uuid: str, target: float | None) -> float | None:
        """The wish for ``target`` (None: no wish) under the GPU's ceiling: the budget's one rule
        (:func:`~ecolaunch.caps.limits.wish_under_ceiling`, which the simulator follows too)."""
        gpu = self._gpus[uuid]
        return wish_under_ceiling(target, self._ceilings.get(uuid), floor_w=self._floor_w, found_w=gpu.power_limit_w,
                                  rules=self._session.rules, gpu=gpu)

    def _held(self, uuid: str, ceiling: float) -> float:
        """A ceiling as this job follows it: within the policy's bounds, and not below its own floor."""
        return held_ceiling_w(ceiling, self._floor_w, self._session.rules, self._gpus[uuid])

    def _await_budget(self) -> bool:
        """Wait (up to ``budget_wait_s``) until this job's GPUs and those its placement lowered show limits within
        their ceilings; False (logged) when they did not in time."""
        if not (self._agent or self._session.backend.privileged):
            return True  # no cap is applied here, nor by an agent: nothing to wait for
        watch = set(self._gpus) | set(self._placement.decision.recaps_w)
        ceilings = {u: c for u, c in budget_ceilings(self._session.look(), self._session.rules).items()
                    if u in watch}
        clock = self._session.clock
        deadline = clock.now() + self._budget_wait_s
        while True:
            over = {g.index: g.power_limit_w for g in self._session.backend.gpus() if g.uuid in ceilings
                    and g.power_limit_w is not None and g.power_limit_w > ceilings[g.uuid] + AT_CEILING_W}
            if not over:
                return True
            if clock.now() >= deadline:
                logger.warning("job %s starts while GPU %s still run above their power-budget ceilings (%s); their "
                               "launchers may not be able to set caps", self._job_id, ",".join(map(str, over)),
                               ", ".join(f"{w:.0f} W" for w in over.values()))
                return False
            clock.sleep(0.1)

    def _follow(self) -> None:
        while not self._stop.wait(self._follow_s):
            try:
                self.follow_budget()
            except StateError as e:
                logger.debug("budget look of job %s: %s", self._job_id, e)  # released meanwhile
            except Exception as e:  # noqa: BLE001 - following the budget must never break a run
                logger.warning("job %s could not follow the power budget: %s: %s", self._job_id, type(e).__name__, e)
            if self._refused:
                return

    def wishes(self) -> dict[str, float | None]:
        """This job's cap wish on each of its GPUs now, as the state graph records it (None: no wish, the GPU's
        default limit): the decision's caps, held under the budget's ceilings where there is one."""
        have = self._current_wishes()
        return {u: have.get(u) for u in self._gpus}

    def _current_wishes(self) -> dict[str, float]:
        with self._session.store.transaction() as graph:
            job = graph.jobs.get(self._job_id)
            return dict(job.power_caps_w) if job is not None else {}

    # --- the setter the profiler and the closed loop use ----------------------------------------------
    def set_cap(self, uuid: str, watts: float) -> float:
        """Make ``watts`` (clipped to the policy) this job's cap on GPU ``uuid``; returns the cap applied: the clipped
        cap, held under the job's power-budget ceiling where there is one (the clipped cap stays its wish). Raises
        PermissionDenied when caps may not be changed here (said once; the wish is taken back and the GPU keeps its
        cap)."""
        if self._refused:
            raise PermissionDenied("power caps may not be changed here (said above)")
        gpu = self._gpus.get(uuid)
        if gpu is None:
            raise StateError(f"GPU {uuid} is not one of job {self._job_id}'s GPUs", hint="this is an ecolaunch bug")
        clipped, _ = clip_cap_w(self._session.rules, gpu, watts)
        with self._lock:
            target = self._targets.get(uuid)
            self._targets[uuid] = clipped
            applied = self._under_ceiling(uuid, clipped)  # at most the budget's ceiling
            before = self._wish(uuid, applied)
            if not self._agent and not self._pass():
                self._targets[uuid] = target
                self._wish(uuid, before)
                self._refuse(None)
                raise PermissionDenied(f"cannot set GPU {gpu.index} to {clipped:.0f} W here")
        return applied  # a wish of a number stays a number under a ceiling (_under_ceiling)

    # --- release -----------------------------------------------------------------------------------
    def release(self) -> None:
        """After the job left the graph: restore what this launcher applied; then release the guard. A restore
        that fails leaves the guard watching (it restores when this process exits) and says which GPU to fix."""
        self._stop.set()
        if self._follower is not None:
            self._follower.join(timeout=max(5.0, 3 * self._follow_s))
        if not self.applied:
            if self._guard is not None:
                self._guard.done()
            return
        try:
            report = apply_caps_as_launcher(self._session.store, self._session.backend, self._session.rules,
                                            host=self._session.host, processes=self._session.processes)
        except EcolaunchError as e:
            self._say(f"warning: could not restore the power caps of job {self._job_id}: {e} (the guard retries when "
                      "this launcher exits; else run `sudo ecolaunch agent --once`)")
            return
        if report.failed:
            originals = load_ledger(StateLayout(self._state_dir).ledger, self._session.host) or {}
            for uuid in report.failed:
                index = self._gpus[uuid].index if uuid in self._gpus else uuid
                value = f" to {originals[uuid]:.0f} W" if uuid in originals else ""
                self._say(f"warning: could not restore the power cap of GPU {index}{value} (the guard retries when "
                          "this launcher exits; else run `sudo ecolaunch agent --once`)")
            return
        if self._guard is not None:
            self._guard.done()

    # --- internals ---------------------------------------------------------------------------------
    def _wish(self, uuid: str, watts: float | None) -> float | None:
        """Record the job's cap on ``uuid`` (None: no wish); returns the previous wish."""
        return self._record({uuid: watts})[uuid]

    def _record(self, wishes: Mapping[str, float | None]) -> dict[str, float | None]:
        """Record the job's caps (uuid -> W, None: no wish) in one transaction; returns the previous wishes."""
        with self._session.store.transaction() as graph:
            job = graph.jobs.get(self._job_id)
            if job is None:
                raise StateError(f"job {self._job_id} is not in the state graph",
                                 hint="it was released; nothing to cap")
            before = {u: job.power_caps_w.get(u) for u in wishes}
            caps = {**job.power_caps_w, **wishes}
            job.power_caps_w = {u: w for u, w in caps.items() if w is not None}
            return before

    def _pass(self) -> bool:
        """One keeper pass as this launcher (its guard started first); False when caps may not be set here."""
        if self._refused or not self._session.backend.privileged:
            return False
        if self._guard is None:
            try:
                self._guard = self._guard_factory(self._env)
                if not self._guard.wait_ready():
                    raise OSError("it did not get ready")
            except OSError as e:
                logger.warning("could not start the cap guard (%s): a SIGKILL of this launcher would leave caps "
                               "lowered until the next root command", e)
        try:
            apply_caps_as_launcher(self._session.store, self._session.backend, self._session.rules,
                                   host=self._session.host, processes=self._session.processes)
        except PermissionDenied:
            return False
        self.applied = True
        return True

    def _refuse(self, line: str | None) -> None:
        """Caps may not be set here: say so once (``line``: the caps that would have been set)."""
        self._refused = True
        if self._guard is not None:
            self._guard.done()
            self._guard = None
        self._say(line or "power caps cannot be set here (not root, and no cap agent serves this state directory): "
                  "the job runs at its GPUs' current caps; run `ecolaunch agent` as root to apply them")


class RunCaps:
    """The caps one run of job ``job_id`` sets on ``gpu_uuids`` through ``set_cap(uuid, watts)`` (None: caps may
    not be changed), and their restore to :attr:`found`."""

    def __init__(self, job_id: str, gpu_uuids: Sequence[str], set_cap: Callable[[str, float], Any] | None,
                 found: dict[str, float | None] | None = None) -> None:
        self._job_id, self._uuids, self._setter = job_id, tuple(gpu_uuids), set_cap
        #: each GPU's cap when the run began (None: not known)
        self.found: dict[str, float | None] = dict(found or {})
        self._set: dict[str, float] = {}  # what this run set since the last restore
        self._refused = False  # the setter said caps may not be changed here

    @property
    def can_set(self) -> bool:
        """Whether caps may be changed: a setter, which has not refused with PermissionDenied."""
        return self._setter is not None and not self._refused

    def set(self, uuid: str, watts: float) -> float:
        """Set ``watts`` on GPU ``uuid``; returns the cap applied (the setter's, which may clip it to the admin
        policy, when it says). The setter's exception passes (the cap stays as it was). After a PermissionDenied
        (caps may not be changed here, which the job's cap owner has told the user once) the run asks no more:
        :attr:`can_set` is False."""
        try:
            applied = self._setter(uuid, watts)  # type: ignore[misc]
        except PermissionDenied:
            self._refused = True
            raise
        value = float(applied) if is_number(applied) else watts
        self._set[uuid] = value
        return value

    def apply(self, cap_w: float, why: str) -> bool:
        """Set ``cap_w`` on every GPU of the job (``why``: logged); False (logged) at the first that fails, whose cap
        stays as it was. A refusal the cap owner already said (PermissionDenied) is logged for ``-v`` only."""
        for uuid in self._uuids:
            try:
                self.set(uuid, cap_w)
            except Exception as e:  # noqa: BLE001 - a failed live change leaves the cap as it was
                log = logger.info if isinstance(e, PermissionDenied) else logger.warning
                log("could not set GPU %s to %.0f W (%s): %s", uuid, cap_w, why, e)
                return False
        logger.info("job %s: %s", self._job_id, why)
        return True

    def current(self, uuid: str) -> float | None:
        """The cap GPU ``uuid`` runs at as far as this run knows: what it set, else what it found."""
        return self._set.get(uuid, self.found.get(uuid))

    def restore(self) -> None:
        """Give every GPU this run changed the cap it found. A failure is logged and tried again at the next restore
        (the launcher's release restores the job's caps in any case)."""
        for uuid, watts in list(self._set.items()):
            found = self.found.get(uuid)
            if found is None:
                continue
            if found != watts:
                try:
                    self._setter(uuid, found)  # type: ignore[misc]
                except Exception as e:  # noqa: BLE001 - an injected setter may fail in any way; caps stay safe
                    logger.warning("could not restore the power cap of GPU %s to %.0f W: %s", uuid, found, e)
                    continue
            del self._set[uuid]


class Publisher(Protocol):
    """Where the leader of a job over several nodes publishes its caps (:class:`~ecolaunch.launch.nodes.Meeting`)."""

    def publish_caps(self, caps_w: Sequence[float | None]) -> None: ...


class LeaderCaps(Protocol):
    """Where a follower node reads the leader's caps (:class:`~ecolaunch.launch.nodes.Meeting`): the last caps
    vector published and its sequence number, None before any."""

    def leader_caps(self) -> tuple[int, list[float | None]] | None: ...


class PublishedCaps:
    """The leader's ``set_cap(uuid, watts)``: sets the cap through ``set_cap`` (the node's own ``JobCaps``: clipped to
    its admin policy) and publishes the job's caps by GPU position; ``gpus``: the leader's GPUs in order,
    ``initial``: their caps at the start (None: the default limit), published at once. :meth:`follow` publishes
    what the leader's power budget changed (``JobCaps.on_follow``): a node the budget slows paces the whole job, so
    the other nodes follow it down, and back up."""

    def __init__(self, meeting: Publisher, set_cap: Callable[[str, float], float], gpus: Sequence[str],
                 initial: Mapping[str, float | None]) -> None:
        self.meeting, self.set_cap, self.gpus = meeting, set_cap, tuple(gpus)
        self.caps_w = [initial.get(u) for u in self.gpus]
        self._lock = threading.Lock()  # the run observer's thread sets caps, the budget's follower changes them
        self._publish()

    def __call__(self, uuid: str, watts: float) -> float:
        applied = self.set_cap(uuid, watts)
        self.follow({uuid: applied})
        return applied

    def follow(self, changes: Mapping[str, float | None]) -> None:
        """Publish the caps ``changes`` says this node's GPUs now run at (uuid -> W, None: the default limit), when
        that changes the job's caps (the other nodes have nothing to do otherwise)."""
        with self._lock:
            before = list(self.caps_w)
            for uuid, watts in changes.items():
                if uuid in self.gpus:
                    self.caps_w[self.gpus.index(uuid)] = watts
            if self.caps_w != before:
                self._publish()

    def _publish(self) -> None:
        try:
            self.meeting.publish_caps(self.caps_w)
        except Exception as e:  # noqa: BLE001 - the store is gone (a peer hosted it): the leader's own run goes on
            logger.warning("the job's caps could not be sent to its other nodes: %s", e)


class CapFollower:
    """A follower node's thread (a context manager around the run): each caps vector the leader publishes is
    applied through ``apply(position, watts)`` (watts None: the GPU's default limit), which returns the cap applied
    (the node's own admin policy may clip it); ``on_line`` gets a line when a cap is clipped or refused. Stops at
    the first refusal, or when the store is gone (the leader ended)."""

    def __init__(self, meeting: LeaderCaps, apply: Callable[[int, float | None], float | None],
                 on_line: Callable[[str], None], *, poll_s: float) -> None:
        self.meeting, self.apply, self.on_line, self.poll_s = meeting, apply, on_line, poll_s
        self._stop = None
        self._thread = None
        #: every vector applied, in order (what the node followed)
        self.applied: list[list[float | None]] = []

    def __enter__(self) -> CapFollower:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ecolaunch-capfollower", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5 * self.poll_s + 5)

    def _run(self) -> None:
        seen = 0
        clipped_said: set[tuple[float | None, float | None]] = set()
        while not self._stop.is_set():
            try:
                got = self.meeting.leader_caps()
            except Exception as e:  # noqa: BLE001 - the store went away: the leader ended, the run ends too
                logger.debug("the leader's caps can no longer be read: %s", e)
                return
            if got is not None and got[0] != seen:
                seen, caps_w = got
                applied = []
                for position, watts in enumerate(caps_w):
                    try:
                        done = self.apply(position, watts)
                    except EcolaunchError as e:
                        self.on_line(f"the leader's caps cannot be applied on this node ({e}); it runs at the caps it "
                                     "has")
                        return
                    applied.append(done)
                    if watts is not None and done is not None and abs(done - watts) > 0.5 \
                            and (watts, done) not in clipped_said:
                        clipped_said.add((watts, done))
                        self.on_line(f"the leader's {watts:g} W cap is {done:g} W here: this node's admin policy "
                                     "clips it")
                logger.info("caps %s W, as the job's leader set them", ", ".join(
                    "default" if w is None else f"{w:g}" for w in applied))
                self.applied.append(applied)
            self._stop.wait(self.poll_s)


def orphan_keeper(backend, rules, state_dir: Path) -> CapKeeper | None:
    """A keeper that makes this process's transactions privileged (``Session(cap_keeper=...)``): each one restores
    the caps a dead launcher left lowered. Only for a root process that may set caps where no cap agent serves
    the state directory (the agent restores them itself); None otherwise."""
    if os.geteuid() != 0 or not backend.privileged or agent_alive(Path(state_dir)):
        return None
    return CapKeeper(backend, Path(state_dir), rules, host=backend.hostname())


def orphaned_caps(graph, host: str, rules, state_dir: Path, processes) -> dict[str, tuple[float, float]]:
    """GPUs ecolaunch lowered for a job that is gone and nobody restored yet: uuid -> (limit now, original).

    What ``ecolaunch status`` warns about: the ledger names the GPU, no live job wants a cap on it, and it is still
    below its original (a SIGKILLed launcher whose guard was killed too, with no agent and no root command since).
    """
    ledger = load_ledger(StateLayout(state_dir).ledger, host) or {}
    if not ledger:
        return {}
    gpus = list(graph.hosts[host].gpus.values()) if host in graph.hosts else []
    wanted = desired_caps(graph, host, gpus, rules, processes, [])
    out = {}
    for gpu in gpus:
        original = ledger.get(gpu.uuid)
        if original is None or gpu.uuid in wanted or gpu.power_limit_w is None:
            continue
        if gpu.power_limit_w < original - 0.5:
            out[gpu.uuid] = (gpu.power_limit_w, original)
    return out
