"""The cap ledger's keeper: which power cap each GPU should run at, applied within the policy and always restored.

What lives here: :class:`CapKeeper`, which turns the caps launchers record in their jobs (``Job.power_caps_w``) into
hardware settings, inside the root cap agent or a root launcher; callers hold the state lock around
:meth:`CapKeeper.reconcile`, which serializes ledger updates between them. Without the agent:
:func:`apply_caps_as_launcher` (a root launcher, same guarantees) and :func:`cap_recommendation` (the one line an
unprivileged launcher prints). What does not: the ledger's file (:mod:`ecolaunch.caps.ledger`), the budget's
arithmetic (:mod:`ecolaunch.caps.limits`). Which wishes count and what is refused: docs/admin.md#the-cap-agent and
docs/threat-model.md ("What a lab member can and cannot do", round two).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecolaunch.caps.ledger import (LEDGER_SCHEMA, LEDGER_VERSION, LedgerEntry, LedgerWriteError,
                                    load_ledger_entries)
from ecolaunch.admin.rules import Rules, may_manage_gpu, may_use_gpu
from ecolaunch.caps.limits import clip_cap_w
from ecolaunch.admin.safety import identity_of_uid, require_launcher_privilege
from ecolaunch.devices.backend import GpuBackend, GpuSnapshot
from ecolaunch.errors import DeviceError, PermissionDenied, StateError
from ecolaunch.caps.limits import budget_ceilings, job_floor_w, wish_under_ceiling
from ecolaunch.state.graph import Job, JobState, StateGraph
from ecolaunch.state.reconcile import ProcessTable, PsutilProcessTable, launcher_alive, reconcile
from ecolaunch.safefs import RECORD_MODE, write_file
from ecolaunch.state.store import StateStore
from ecolaunch.statedir import StateLayout
from ecolaunch.validate import is_number, is_real

__all__ = [
    "CapKeeper",
    "CapReport",
    "apply_caps_as_launcher",
    "cap_recommendation",
    "desired_caps",
    "has_cap_range",
    "hold_to_budget",
    "restore_caps_as_launcher",
]

logger = logging.getLogger(__name__)

#: a cap within this many watts of the target is left alone (drivers round to whole watts or milliwatts)
TOLERANCE_W = 0.5


@dataclass(slots=True)
class CapReport:
    """What one pass changed: caps set (uuid → W), GPUs restored (uuid → W), and what it refused or failed."""

    applied: dict[str, float] = field(default_factory=dict)
    restored: dict[str, float] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    #: the desired cap of every managed GPU after this pass (None: its original)
    desired: dict[str, float | None] = field(default_factory=dict)
    #: GPUs someone else changed since ecolaunch set them: left as found (uuid → W) and forgotten
    left: dict[str, float] = field(default_factory=dict)


def desired_caps(
    graph: StateGraph,
    host: str,
    gpus: Sequence[GpuSnapshot],
    rules: Rules,
    processes: ProcessTable,
    ignored: list[str] | None = None,
    only_uids: Collection[int] | None = None,
) -> dict[str, float]:
    """The cap each managed GPU of ``host`` should run at now (GPUs absent: no job wants a change), before any
    budget (:func:`hold_to_budget`).

    Pure: reads the graph, never the hardware. Every wish is validated here, whatever the loader already checked.
    A job counts only while its launcher lives as the uid the job names (:func:`launcher_alive`), and its cap on a
    GPU counts only where it cannot slow a colleague down (:func:`_refusal`). ``only_uids``: the uids whose wishes
    count (None: everyone's, the agent's pass); every live job still counts as a co-runner.
    """
    ignored = [] if ignored is None else ignored
    by_uuid = {g.uuid: g for g in gpus}
    holders: dict[str, list[Job]] = {}
    live = []
    for job in graph.jobs.values():
        if job.host != host or job.state is not JobState.RUNNING or not isinstance(job.gpus, list):
            continue
        if not launcher_alive(processes, job):
            continue  # a dead launcher's lease has ended; a launcher of another uid never held one
        live.append(job)
        for uuid in set(job.gpus):
            holders.setdefault(uuid, []).append(job)
    wanted: dict[str, float] = {}
    for job in live:
        if not isinstance(job.power_caps_w, dict) or (only_uids is not None and job.uid not in only_uids):
            continue
        for uuid, watts in dict(job.power_caps_w).items():
            gpu = by_uuid.get(uuid) if isinstance(uuid, str) else None
            why = _refusal(job, uuid, watts, gpu, rules, holders.get(uuid, []) if isinstance(uuid, str) else [],
                           graph)
            if why is not None:
                ignored.append(why)
                logger.warning("ignoring a cap request of job %s (%s): %s", job.id, job.user, why)
                continue
            assert gpu is not None  # _refusal returned None
            clipped, (lo, hi) = clip_cap_w(rules, gpu, float(watts))
            if clipped != watts:
                logger.info("job %s asks %.0f W on GPU %d; the policy allows %.0f-%.0f W: using %.0f W", job.id, watts, gpu.index, lo, hi, clipped)
            wanted[uuid] = max(wanted.get(uuid, 0.0), clipped)
    return wanted


def _refusal(job: Job, uuid: Any, watts: Any, gpu: GpuSnapshot | None, rules: Rules,
             holders: Sequence[Job] = (), graph: StateGraph | None = None) -> str | None:
    """Why a job's cap wish on one GPU must not be applied, or None.

    Besides the range checks: the job must be allowed on the GPU by the reservations (under the name of the uid it
    runs as, never the name its file claims; root's jobs are: a reservation binds the members), and every other
    live job on the GPU that wants no cap there must have been placed *after* this one, knowing it was there (its
    decision lists this job among those it shares the GPU with). A newcomer takes a GPU as it finds it; a job
    already running is never capped by one that came later, or by a job file that merely claims its GPU.
    """
    if gpu is None:
        return f"{uuid!r} is not a GPU of this host"
    if not isinstance(job.gpus, list) or uuid not in job.gpus:
        return f"GPU {gpu.index} is not one of the job's GPUs"
    if not may_manage_gpu(rules, gpu.uuid, gpu.index):
        return f"the policy does not let ecolaunch change GPU {gpu.index} ([agent] gpus)"
    if not is_number(watts) or watts <= 0:
        return f"{watts!r} is not a power in watts"
    if not has_cap_range(gpu):
        return f"GPU {gpu.index} reports no power-limit range"
    user, groups = identity_of_uid(job.uid)
    # root's jobs pass: a reservation binds the members, and only root's calibration (`sudo ecolaunch calibrate`,
    # which says so) books a reserved GPU as root; a job file of uid 0 is root's own (the store's trust rule)
    if job.uid != 0 and not may_use_gpu(rules, user, groups, gpu.uuid, gpu.index):
        return f"GPU {gpu.index} is reserved and user {user} (uid {job.uid}) may not use it"
    for other in holders:
        if other.id == job.id or (isinstance(other.power_caps_w, dict) and uuid in other.power_caps_w):
            continue
        if job.id not in _placed_after(other, uuid):
            return (f"GPU {gpu.index} also runs job {other.id} ({other.user}), which wants no cap there and was "
                    f"not placed after this job")
    return _slows_a_co_runner(job, uuid, float(watts), gpu, rules, holders, graph)


def _slows_a_co_runner(job: Job, uuid: str, watts: float, gpu: GpuSnapshot, rules: Rules, holders: Sequence[Job],
                       graph: StateGraph | None) -> str | None:
    """Why ``watts`` on a shared GPU would slow another job there past its bound, or None.

    A co-runner's floor is the lowest cap its own curve keeps within its bound, else the floor of a job without a
    curve (:func:`~ecolaunch.caps.limits.job_floor_w`), on all of its GPUs (one cap per job). A co-runner that
    itself wants a cap at or below ``watts`` there is not slowed by it (the highest wish wins).
    """
    clipped, _ = clip_cap_w(rules, gpu, watts)
    for other in holders:
        if other.id == job.id:
            continue
        own = other.power_caps_w.get(uuid) if isinstance(other.power_caps_w, dict) else None
        if is_real(own) and own <= clipped + TOLERANCE_W:
            continue
        floor = job_floor_w(other, _nodes_of(other, gpu, graph), rules)
        if floor is not None and clipped < floor - TOLERANCE_W:
            return (f"{clipped:.0f} W on GPU {gpu.index} would slow job {other.id} ({other.user}), which shares it, "
                    f"past its bound: it needs at least {floor:.0f} W there")
    return None


def _nodes_of(job: Job, gpu: GpuSnapshot, graph: StateGraph | None) -> list[Any]:
    """The GPUs of ``job`` as the graph knows them (``gpu`` itself at least): its floor is one cap for all."""
    host = graph.hosts.get(job.host) if graph is not None else None
    nodes = [host.gpus[u] for u in job.gpus if host is not None and u in host.gpus and u != gpu.uuid]
    return [gpu, *nodes]


def hold_to_budget(graph: StateGraph, host: str, gpus: Sequence[GpuSnapshot], rules: Rules,
                   wanted: Mapping[str, float], found_w: Mapping[str, float], *, enforce: bool = True,
                   ignored: list[str] | None = None) -> dict[str, float]:
    """``wanted`` held within the power budget (``[power] max_total_w``; unchanged without one).

    Every wish is held under its GPU's ceiling, computed from the validated job files (never ``state.json``'s
    copy). With ``enforce`` (the agent, which is there to restore what it sets): a budgeted GPU without a wish whose
    limit as found (``found_w``: its original, or its limit now) is above its ceiling is brought down to it, and if
    the sum, counted as :mod:`ecolaunch.caps.limits` counts it, is still over the budget (floors that no longer
    fit: a job file changed under the budget), the GPUs of the most recently started launchers go down toward the
    admin's minimum until it fits.
    """
    budget = rules.power_max_total_w
    if budget is None:
        return dict(wanted)
    ignored = [] if ignored is None else ignored
    ceilings = budget_ceilings(graph, rules)
    out = dict(wanted)
    managed = [g for g in gpus if has_cap_range(g) and may_manage_gpu(rules, g.uuid, g.index)]
    for gpu in managed:
        ceiling = ceilings.get(gpu.uuid)
        if ceiling is None:
            continue
        wish = out.get(gpu.uuid)
        # the budget's one rule for a wish under its ceiling (a job's floor is its launcher's to hold, not ours)
        held = wish_under_ceiling(wish, ceiling, floor_w=None, found_w=found_w.get(gpu.uuid), rules=rules, gpu=gpu)
        if wish is not None and held is not None and wish > held + TOLERANCE_W:
            ignored.append(f"GPU {gpu.index}: {wish:.0f} W is above its {held:.0f} W power-budget ceiling")
            logger.warning("GPU %d: a wish of %.0f W is above its %.0f W power-budget ceiling; holding it there",
                           gpu.index, wish, held)
            out[gpu.uuid] = held
        elif wish is None and enforce and held is not None:
            out[gpu.uuid] = held
    if enforce:
        _fit_last_resort(graph, host, gpus, managed, rules, out, found_w, budget)
    return out


def _fit_last_resort(graph: StateGraph, host: str, gpus: Sequence[GpuSnapshot], managed: Sequence[GpuSnapshot],
                     rules: Rules, out: dict[str, float], found_w: Mapping[str, float], budget: float) -> None:
    node = graph.hosts.get(host)
    holders: dict[str, list[Job]] = {}
    for job in graph.running_jobs():
        if job.host == host:
            for u in job.gpus:
                holders.setdefault(u, []).append(job)

    def count(g: GpuSnapshot) -> float:
        if g.uuid in out:
            return out[g.uuid]
        foreign = node is not None and g.uuid in node.gpus and node.gpus[g.uuid].foreign_pids
        if g.uuid in holders or foreign:
            limit = found_w.get(g.uuid, g.power_limit_w)
            return float(limit if limit is not None else g.power_limit_max_w or 0.0)
        return float(g.power_limit_min_w or 0.0)

    excess = sum(count(g) for g in gpus) - budget
    if excess <= TOLERANCE_W:
        return

    def latest(g: GpuSnapshot) -> float:
        return max((j.launcher_start_time for j in holders.get(g.uuid, [])), default=-math.inf)

    for gpu in sorted((g for g in managed if g.uuid in holders), key=latest, reverse=True):
        lo = clip_cap_w(rules, gpu, 0.0)[0]
        now = count(gpu)
        cut = min(excess, max(0.0, now - lo))
        if cut <= 0:
            continue
        out[gpu.uuid] = now - cut
        excess -= cut
        logger.warning("the running jobs' caps add up to more than the %g W power budget (a job file changed under "
                       "it); GPU %d of the most recently started launcher is held at %.0f W", budget, gpu.index,
                       out[gpu.uuid])
        if excess <= TOLERANCE_W:
            return


def _placed_after(job: Job, uuid: str) -> list[str]:
    """The jobs ``job``'s own decision says it found on GPU ``uuid`` when it was placed (its owner's word)."""
    decision = job.decision if isinstance(job.decision, dict) else {}
    coloc = decision.get("colocated_with")
    found = coloc.get(uuid) if isinstance(coloc, dict) else None
    return [j for j in found if isinstance(j, str)] if isinstance(found, list) else []


def has_cap_range(gpu: Any) -> bool:
    """Whether ``gpu`` (a snapshot or a GpuNode) reports a usable power-limit range: finite, 0 <= min <= max."""
    lo, hi = gpu.power_limit_min_w, gpu.power_limit_max_w
    return all(is_number(v) for v in (lo, hi)) and 0 <= lo <= hi  # type: ignore[operator]


class CapKeeper:
    """Keeps every managed GPU at the cap its jobs want, and restores each one's original cap afterwards.

    Args:
        backend: the GPU backend of this host (it must allow setting power limits).
        state_dir: the state directory; the ledger is ``<state_dir>/caps.json`` unless ``ledger_path`` is given.
        rules: the effective admin policy.
        host: this host's name (jobs of other hosts are ignored).
        processes: the process table deciding whether a launcher still holds its lease.
        ledger_path: where the ledger lives (an admin may keep it in a root-only directory).
        only_uids: the uids whose wishes this keeper applies: by default root's and this process's own (a root
            launcher, its guard, any root command); the cap agent passes None, everyone's (docs/threat-model.md, round two, item 11).
    """

    def __init__(
        self,
        backend: GpuBackend,
        state_dir: Path,
        rules: Rules,
        *,
        host: str,
        processes: ProcessTable | None = None,
        ledger_path: Path | None = None,
        only_uids: Collection[int] | None = (),
    ) -> None:
        self.backend = backend
        self.rules = rules
        self.host = host
        self.processes = processes or PsutilProcessTable()
        self.only_uids = None if only_uids is None else frozenset({0, os.geteuid(), *only_uids})
        self.ledger_path = Path(ledger_path) if ledger_path is not None else StateLayout(state_dir).ledger
        #: the ledger as this keeper last wrote it: survives another user deleting the file while we run
        self._memory: dict[str, LedgerEntry] = {}
        self._on_disk: dict[str, LedgerEntry] | None = None
        self._warned: set[str] = set()

    # --- the one pass ----------------------------------------------------------------------------
    def reconcile(self, graph: StateGraph, gpus: Sequence[GpuSnapshot] | None = None) -> CapReport:
        """Bring every managed GPU to its desired cap (call it under the state lock); ``gpus``: fresh snapshots
        when the caller has them."""
        report = CapReport()
        gpus = self.backend.gpus() if gpus is None else gpus
        wanted = desired_caps(graph, self.host, gpus, self.rules, self.processes, report.ignored, self.only_uids)
        if self.rules.power_max_total_w is not None:
            originals = {u: e.original_w for u, e in self._load().items()}
            found = {g.uuid: originals.get(g.uuid, g.power_limit_w) for g in gpus if g.power_limit_w is not None
                     or g.uuid in originals}
            wanted = hold_to_budget(graph, self.host, gpus, self.rules, wanted, found,
                                    enforce=self.only_uids is None, ignored=report.ignored)
        self._sync(gpus, wanted, report)
        return report

    def pass_over(self, store: StateStore, topology: dict | None = None) -> CapReport:
        """One privileged pass over the state (the agent's, and a guard's after its launcher died): under the lock,
        reconcile (dead launchers' jobs released, GPUs refreshed), then :meth:`reconcile`. A hostile holder of the
        lock delays it at most the store's lock timeout: the pass then runs on a lock-free snapshot (each job file
        is replaced atomically), so caps are still applied and restored."""
        try:
            with store.transaction() as graph:
                reconcile(graph, self.host, self.processes, self.backend.gpus(), topology)
                return self.reconcile(graph)
        except PermissionDenied:
            raise
        except StateError as e:
            logger.warning("state transaction failed (%s); applying caps from a lock-free snapshot", e)
            graph = store.read_unlocked()
            # the host's GPUs from the driver, never from state.json (which the lock's holder may have rewritten)
            reconcile(graph, self.host, self.processes, self.backend.gpus(), topology)
            return self.reconcile(graph)

    def restore_orphans(self, graph: StateGraph, gpus: Sequence[GpuSnapshot] | None = None) -> CapReport:
        """Restore the GPUs in the ledger that no live job wants capped (a launcher died); apply nothing new.

        Cheap when the ledger is empty (one failed open). Every privileged transaction of a root process without
        a cap agent makes this pass, so a cap left by a dead launcher is restored by the next root command that
        touches the state (``ecolaunch status`` included), whether or not a guard did it first.
        """
        report = CapReport()
        if not self._load():
            return report
        gpus = self.backend.gpus() if gpus is None else gpus
        wanted = desired_caps(graph, self.host, gpus, self.rules, self.processes, report.ignored, self.only_uids)
        self._sync(gpus, wanted, report, apply=False)
        return report

    def restore_all(self) -> CapReport:
        """Give every GPU in the ledger its original cap back (agent shutdown)."""
        report = CapReport()
        self._sync(self.backend.gpus(), {}, report)
        return report

    def ledger(self) -> dict[str, float]:
        """The originals currently recorded (uuid → W)."""
        return {u: e.original_w for u, e in self._load().items()}

    # --- internals -------------------------------------------------------------------------------
    def _sync(self, gpus: Sequence[GpuSnapshot], wanted: Mapping[str, float], report: CapReport, *,
              apply: bool = True) -> None:
        ledger = self._load()
        by_uuid = {g.uuid: g for g in gpus}
        for uuid in [u for u in ledger if u not in by_uuid]:
            logger.warning("ledger %s names GPU %s, which this host no longer has; forgetting it", self.ledger_path, uuid)
            del ledger[uuid]
        for gpu in gpus:
            if not has_cap_range(gpu) or not may_manage_gpu(self.rules, gpu.uuid, gpu.index):
                continue
            target = wanted.get(gpu.uuid)
            report.desired[gpu.uuid] = target
            if target is not None:
                if apply:
                    self._apply(gpu, target, ledger, report)
            elif gpu.uuid in ledger:
                self._restore(gpu, ledger, report)
        self._save(ledger)

    def _apply(self, gpu: GpuSnapshot, target: float, ledger: dict[str, LedgerEntry], report: CapReport) -> None:
        if gpu.uuid not in ledger:
            current = gpu.power_limit_w
            if current is None or not math.isfinite(current):
                report.failed.append(gpu.uuid)
                logger.warning("GPU %d reports no current power limit; not capping it (its original could not be restored)", gpu.index)
                return
            ledger[gpu.uuid] = LedgerEntry(float(current))
            self._save(ledger)  # the original is durable BEFORE the hardware changes
        entry = ledger[gpu.uuid]
        if gpu.power_limit_w is not None and abs(gpu.power_limit_w - target) <= TOLERANCE_W:
            if entry.set_w is None or abs(entry.set_w - target) > TOLERANCE_W:
                ledger[gpu.uuid] = LedgerEntry(entry.original_w, float(target))
            return
        # what ecolaunch is about to set is durable before the hardware changes too: a restore after a crash
        # can then tell "still ours" from "changed since by someone else"
        ledger[gpu.uuid] = LedgerEntry(entry.original_w, float(target))
        self._save(ledger)
        if self._set(gpu, target, report):
            report.applied[gpu.uuid] = target
            logger.info("GPU %d capped at %.0f W (original %.0f W)", gpu.index, target, entry.original_w)

    def _restore(self, gpu: GpuSnapshot, ledger: dict[str, LedgerEntry], report: CapReport) -> None:
        entry = ledger[gpu.uuid]
        original = entry.original_w
        current = gpu.power_limit_w
        if entry.set_w is not None and current is not None and abs(current - entry.set_w) > TOLERANCE_W \
                and abs(current - original) > TOLERANCE_W:
            # neither what ecolaunch set nor the original: someone (an admin's nvidia-smi) changed it since
            logger.warning("GPU %d is at %.0f W, not the %.0f W ecolaunch set: someone changed it since; leaving it "
                           "(original %.0f W; restore it with `nvidia-smi -i %d -pl %.0f` if that was not meant)",
                           gpu.index, current, entry.set_w, original, gpu.index, original)
            report.left[gpu.uuid] = current
            del ledger[gpu.uuid]
            return
        lo, hi = gpu.power_limit_min_w, gpu.power_limit_max_w
        if not lo <= original <= hi:  # type: ignore[operator]
            fallback = gpu.power_limit_default_w if gpu.power_limit_default_w is not None else hi
            logger.warning("ledger original %.1f W of GPU %d is outside its range %.0f-%.0f W; restoring %.0f W", original, gpu.index, lo, hi, fallback)
            original = float(fallback)  # type: ignore[arg-type]
        if current is None or abs(current - original) > TOLERANCE_W:
            if not self._set(gpu, original, report):
                return  # keep it in the ledger: the next pass tries again
        report.restored[gpu.uuid] = original
        del ledger[gpu.uuid]
        logger.info("GPU %d restored to its original %.0f W", gpu.index, original)

    def _set(self, gpu: GpuSnapshot, watts: float, report: CapReport) -> bool:
        try:
            self.backend.set_power_limit(gpu.uuid, watts)
            return True
        except PermissionDenied:
            raise
        except DeviceError as e:
            report.failed.append(gpu.uuid)
            logger.warning("cannot set GPU %d to %.0f W: %s", gpu.index, watts, e)
            return False

    def _load(self) -> dict[str, LedgerEntry]:
        self._on_disk = load_ledger_entries(self.ledger_path, self.host, self._warn_once)
        if self._on_disk is None and self._memory:
            self._warn_once("ledger %s vanished or was replaced; using this process's copy", self.ledger_path)
            return dict(self._memory)
        if self._on_disk is not None:
            self._warned.clear()  # readable again: say it anew if it breaks again
        return dict(self._on_disk or {})

    def _warn_once(self, fmt: str, *args: Any) -> None:
        """A warning about the ledger, said once while it lasts (a keeper passes every second)."""
        line = fmt % args
        if line not in self._warned:
            self._warned.add(line)
            logger.warning("%s", line)

    def _save(self, ledger: dict[str, LedgerEntry]) -> None:
        """Write the ledger; raises OSError when it cannot be written (then nothing new is applied: a caller writes
        an original before the hardware changes). The copy in memory is this keeper's truth either way: a restore
        that happened is not redone, an original not yet durable is not lost."""
        self._memory = dict(ledger)
        if ledger == (self._on_disk or {}) and (self._on_disk is not None or not ledger):
            return
        doc = {"schema": LEDGER_SCHEMA, "version": LEDGER_VERSION, "host": self.host,
               "gpus": {u: e.to_dict() for u, e in sorted(ledger.items())}}
        try:
            # RECORD_MODE (0640): readable by the group for `ecolaunch status`, writable only by its owner (root)
            write_file(self.ledger_path, json.dumps(doc, indent=1, sort_keys=True).encode(), mode=RECORD_MODE)
        except OSError as e:
            raise LedgerWriteError(e.errno, e.strerror or str(e), str(self.ledger_path)) from e
        self._on_disk = dict(ledger)


# --- without the agent -----------------------------------------------------------------------------
def apply_caps_as_launcher(
    store: StateStore,
    backend: GpuBackend,
    rules: Rules,
    *,
    host: str,
    processes: ProcessTable | None = None,
    ledger_path: Path | None = None,
) -> CapReport:
    """One cap pass by a launcher running as root (no agent): release dead jobs, then apply or restore caps.

    Call it after the job is placed and again after it is released (:func:`restore_caps_as_launcher`). Holding
    the state lock, it gives the same guarantees as the agent: the original goes to the ledger before any change,
    and any root ecolaunch process (the next launcher, ``ecolaunch agent --once``) restores caps left by a
    launcher that was SIGKILLed. Raises PermissionDenied when the backend refuses (not root).
    """
    require_launcher_privilege(backend)  # before the ledger: an unprivileged launcher must not write one
    processes = processes or PsutilProcessTable()
    keeper = CapKeeper(backend, store.directory, rules, host=host, processes=processes, ledger_path=ledger_path)
    with store.transaction() as graph:
        # the host's GPUs from the driver, never from state.json, which any member may write
        reconcile(graph, host, processes, backend.gpus(), backend.topology())
        return keeper.reconcile(graph)


restore_caps_as_launcher = apply_caps_as_launcher


def cap_recommendation(gpus: Mapping[str, Any], rules: Rules, caps_w: Mapping[str, float | None]) -> str | None:
    """The one line an unprivileged launcher prints instead of setting caps, or None when no cap is wanted.

    ``gpus`` maps UUID → a GPU record with ``index``, ``name``, ``power_limit_min_w``/``power_limit_max_w``
    (a :class:`~ecolaunch.state.graph.GpuNode` or a snapshot). Example::

        would set GPU 1 to 210 W (policy allows 150-300 W); run `ecolaunch agent` as root to apply caps
    """
    parts = []
    for uuid, watts in caps_w.items():
        gpu = gpus.get(uuid)
        if gpu is None or watts is None or not has_cap_range(gpu):
            continue
        clipped, (lo, hi) = clip_cap_w(rules, gpu, watts)
        parts.append(f"GPU {gpu.index} to {clipped:.0f} W (policy allows {lo:.0f}-{hi:.0f} W)")
    if not parts:
        return None
    return f"would set {', '.join(parts)}; run `ecolaunch agent` as root to apply caps"
