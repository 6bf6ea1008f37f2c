"""The one owner of every power cap a job sets: record, apply within the admin's rules, restore, guard.

What lives here: :class:`JobCaps` (made once per placed job; the pipeline's caps at placement and the restore at
release, and through :meth:`JobCaps.set_cap` every cap the run's :class:`~ecolaunch.profile.runcaps.RunCaps` sets;
under a power budget, the follower that holds each cap under its GPU's ceiling), :func:`orphan_keeper` and
:func:`orphaned_caps`. What does not: the clip (:func:`ecolaunch.admin.rules.clip_cap_w`), the keeper pass
(:class:`~ecolaunch.admin.capkeeper.CapKeeper`), the budget's arithmetic (:mod:`ecolaunch.admin.budget`), the guard
(:mod:`ecolaunch.launch.guard`). Nothing here prints: messages go to ``on_message``. How a cap is clipped, recorded,
applied and restored, and how a budget's ceiling is followed: docs/admin.md, "One writer of a job's caps" and
"A power budget for the whole machine".
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from ecolaunch.admin.agent import agent_alive
from ecolaunch.admin.capkeeper import CapKeeper, apply_caps_as_launcher, cap_recommendation, desired_caps
from ecolaunch.admin.rules import clip_cap_w
from ecolaunch.admin.ledger import load_ledger
from ecolaunch.errors import EcolaunchError, PermissionDenied, StateError
from ecolaunch.launch.guard import Guard, start_guard
from ecolaunch.launch.session import Placement, Session
from ecolaunch.admin.budget import (AT_CEILING_W, asked_caps, budget_ceilings, held_ceiling_w, job_floor_w,
                                    wish_under_ceiling)
from ecolaunch.statedir import StateLayout

logger = logging.getLogger(__name__)

#: seconds between two looks of a running launcher at its budget ceilings (a job arrived or left)
BUDGET_FOLLOW_S = 1.0
#: the most a newcomer waits for the GPUs its placement lowered to show their new limits (the running launchers'
#: follow period plus a cap agent's pass, with room to spare)
BUDGET_WAIT_S = 5.0


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

    def __init__(self, session: Session, placement: Placement, state_dir: Path, env: Mapping[str, str], *,
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
        #: the leader of a job over several nodes publishes them (``multinode.PublishedCaps.follow``)
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
        (:func:`~ecolaunch.admin.budget.wish_under_ceiling`, which the simulator follows too)."""
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
