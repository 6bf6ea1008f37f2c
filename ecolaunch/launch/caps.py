"""The one owner of every power cap a job sets: record, apply within the admin's rules, restore, guard.

:class:`JobCaps` is made once per placed job and used by everything that changes that job's caps: the launch
pipeline (the decision's caps at placement, the restore at release), and through :meth:`JobCaps.set_cap` the
profiler (the caps it measures at) and the run observer's closed loop (the caps it moves to). Every cap is:

1. **clipped** to what the admin policy allows on that GPU (:func:`ecolaunch.admin.caps.clip_cap_w`, the one
   place a cap is clipped);
2. **recorded** as the job's wish in its job file, under the state lock: that is what the cap agent applies, and
   what any root process restores when the job is gone;
3. **applied**: by the cap agent when one serves the state directory (the caller waits to see it in the GPUs'
   readings); else by this launcher when it may (root), through the same
   :class:`~ecolaunch.admin.caps.CapKeeper` pass as the agent (originals to the ledger first) — with a **guard**
   (:mod:`ecolaunch.launch.guard`) started before the first change, which restores within a second if the
   launcher dies by any signal; else it is refused: said once (``on_message``), the wish taken back, and the job
   runs at the caps it found;
4. **restored** at release (:meth:`JobCaps.release`): the job's file is gone, so one more keeper pass gives every
   GPU no live job wants capped its original back; then the guard is told it is done.

Nothing here prints: messages go to ``on_message``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from ecolaunch.admin.agent import agent_alive
from ecolaunch.admin.caps import (LEDGER_FILE, CapKeeper, apply_caps_as_launcher, cap_recommendation, clip_cap_w,
                                  load_ledger)
from ecolaunch.errors import EcolaunchError, PermissionDenied, StateError
from ecolaunch.launch.guard import Guard, start_guard
from ecolaunch.launch.session import Placement, Session

logger = logging.getLogger(__name__)


class JobCaps:
    """The caps of one placed job (see the module docstring).

    Args:
        session: the launcher's session (state store, backend, rules, process table).
        placement: the job's placement (its GPUs and the decided caps, already recorded by the booking).
        state_dir: the state directory (the agent's heartbeat file, the ledger).
        env: the launcher's environment, handed to the guard so that it opens the same GPUs and policy.
        on_message: receives the lines a user should see (a refused cap, a failed restore).
        guard_factory: starts a guard (tests replace it).
    """

    def __init__(self, session: Session, placement: Placement, state_dir: Path, env: Mapping[str, str], *,
                 on_message: Callable[[str], None] = lambda line: None,
                 guard_factory: Callable[[Mapping[str, str]], Guard] = start_guard) -> None:
        self._session, self._placement, self._state_dir = session, placement, Path(state_dir)
        self._env, self._say, self._guard_factory = dict(env), on_message, guard_factory
        self._job_id = placement.job.id
        self._gpus = dict(placement.gpus)
        self._agent = agent_alive(self._state_dir, session.processes)
        self._guard: Guard | None = None
        self._refused = False
        #: whether this launcher applied a cap itself (it must restore at release)
        self.applied = False

    @property
    def by_agent(self) -> bool:
        return self._agent

    @property
    def refused(self) -> bool:
        """Caps may not be changed here (said once): profiling measures at the current caps, no closed loop."""
        return self._refused

    # --- placement ---------------------------------------------------------------------------------
    def begin(self) -> None:
        """Apply the decision's caps (recorded by the booking); without privilege, say what would be set."""
        if self._agent:
            return
        wanted = dict(self._placement.job.power_caps_w)
        if wanted and not self._pass():
            self._refuse(cap_recommendation(self._gpus, self._session.rules, wanted))

    # --- the setter the profiler and the closed loop use ----------------------------------------------
    def set_cap(self, uuid: str, watts: float) -> None:
        """Make ``watts`` (clipped to the policy) this job's cap on GPU ``uuid``. Raises PermissionDenied when caps
        may not be changed here (said once; the wish is taken back and the GPU keeps its cap)."""
        if self._refused:
            raise PermissionDenied("power caps may not be changed here (said above)")
        gpu = self._gpus.get(uuid)
        if gpu is None:
            raise StateError(f"GPU {uuid} is not one of job {self._job_id}'s GPUs", hint="this is an ecolaunch bug")
        clipped, _ = clip_cap_w(self._session.rules, gpu, watts)
        before = self._wish(uuid, clipped)
        if self._agent:
            return
        if not self._pass():
            self._wish(uuid, before)
            self._refuse(None)
            raise PermissionDenied(f"cannot set GPU {gpu.index} to {clipped:.0f} W here")

    # --- release -----------------------------------------------------------------------------------
    def release(self) -> None:
        """After the job left the graph: restore what this launcher applied; then release the guard. A restore
        that fails leaves the guard watching (it restores when this process exits) and says which GPU to fix."""
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
            originals = load_ledger(self._state_dir / LEDGER_FILE, self._session.host) or {}
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
        with self._session.store.transaction() as graph:
            job = graph.jobs.get(self._job_id)
            if job is None:
                raise StateError(f"job {self._job_id} is not in the state graph",
                                 hint="it was released; nothing to cap")
            before = job.power_caps_w.get(uuid)
            caps = {**job.power_caps_w, uuid: watts}
            job.power_caps_w = {u: w for u, w in caps.items() if w is not None}
            return before

    def _pass(self) -> bool:
        """One keeper pass as this launcher (its guard started first); False when caps may not be set here."""
        if self._refused or not may_set_caps(self._session.backend):
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


def may_set_caps(backend) -> bool:
    """Whether this process may set power limits on ``backend`` at all: root on real GPUs (NVML refuses anyone
    else), the simulated backend's own privilege. Asked before a guard is started, or a keeper made, for nothing."""
    privileged = getattr(backend, "privileged", None)
    return os.geteuid() == 0 if privileged is None else bool(privileged)


def orphan_keeper(backend, rules, state_dir: Path) -> CapKeeper | None:
    """A keeper that makes this process's transactions privileged (``Session(cap_keeper=...)``): each one restores
    the caps a dead launcher left lowered. Only for a root process that may set caps where no cap agent serves
    the state directory (the agent restores them itself); None otherwise."""
    if os.geteuid() != 0 or not may_set_caps(backend) or agent_alive(Path(state_dir)):
        return None
    return CapKeeper(backend, Path(state_dir), rules, host=backend.hostname())


def orphaned_caps(graph, host: str, rules, state_dir: Path, processes) -> dict[str, tuple[float, float]]:
    """GPUs ecolaunch lowered for a job that is gone and nobody restored yet: uuid -> (limit now, original).

    What ``ecolaunch status`` warns about: the ledger names the GPU, no live job wants a cap on it, and it is still
    below its original (a SIGKILLed launcher whose guard was killed too, with no agent and no root command since).
    """
    from ecolaunch.admin.caps import desired_caps

    ledger = load_ledger(Path(state_dir) / LEDGER_FILE, host) or {}
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
