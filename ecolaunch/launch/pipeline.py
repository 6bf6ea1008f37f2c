"""The launch pipeline: request → profile plan → queue → decision → caps → run under an observer → release.

What lives here: :func:`run_launch` (one launch of a conf command line, returning its exit code) and
:class:`LaunchCallbacks` (how the pipeline reports progress: the CLI renders and prints, nothing here does).
What does not: parsing, signal handlers, exit-code mapping of exceptions, rendering (``ecolaunch.cli.launch_cmd``).
Its steps, and how every placed job is released, a SIGKILL included: docs/architecture.md#the-flow-of-one-launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager

from ecolaunch.admin.rules import Rules, job_bound_pct
from ecolaunch.clock import SystemClock
from ecolaunch.config import Environment, plan_timeout_s
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.errors import DriverNotFound, EcolaunchError, StateError
from ecolaunch.launch import exitcodes
from ecolaunch.launch.argv import CPU_NPROC, ELASTIC_NPROC
from ecolaunch.launch.options import LaunchConfig
from ecolaunch.caps.job import JobCaps, orphan_keeper
from ecolaunch.launch.multinode import MultiNode, SingleNode, at_default, exit_stuck, multi_node
from ecolaunch.run.observer import ObserveConfig, RunObserver
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.launch.torchrun import Rendezvous, TorchrunArgs, WorkerOutcome, run_workers
from ecolaunch.launch.workerenv import allowed_by_slurm, allowed_by_visible_devices, worker_env
from ecolaunch.policy.backfill import backfill_default, overrun_margin
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.policy.waiting import Waiting
from ecolaunch.profile.history import History, JobIdentity, JobMatch, ProfileEntry
from ecolaunch.profile.modes import ProfileAction, ProfilePlan, resolve_mode
from ecolaunch.state.graph import MAX_EXPECTED_ITERATIONS, MAX_EXPECTED_S, GpuNode, Job
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore

logger = logging.getLogger(__name__)

HEARTBEAT_S = 10.0


@dataclass(frozen=True)
class LaunchContext:
    """What the CLI resolved once: the environment, the admin policy, who launches, and how to open the GPUs
    (``open_gpus()`` raises DriverNotFound when there are none)."""

    environment: Environment
    rules: Rules
    user: str
    groups: tuple[str, ...]
    open_gpus: Callable[[], GpuBackend]


@dataclass
class LaunchCallbacks:
    """How a launch reports. ``decision(decision, gpus, job_id, waited_s, dry_run, waiting)`` (decision None: nothing
    fits now, for a dry run; ``waiting``: why a dry run's job would wait first, or None); ``no_gpus(why, dry_run)``:
    launching without placement; ``message(line)``: one line for the user (the CLI prefixes ``ecolaunch:``);
    ``waiting(job, waiting, waited_s)`` while queued (:class:`~ecolaunch.policy.waiting.Waiting`: position and
    reason); ``left_queue(job, signum)``: a stop signal (``ecolaunch cancel`` sends SIGTERM) ended the wait;
    ``summary(observer)`` when the job ended; ``shielded()``: a context in which stop signals wait (the release)."""

    decision: Callable[[Decision | None, Mapping[str, GpuNode], str, float, bool, Waiting | None], None]
    no_gpus: Callable[[str, bool], None]
    message: Callable[[str], None] = lambda line: None
    waiting: Callable[[Job, Waiting, float], None] = lambda job, waiting, waited_s: None
    left_queue: Callable[[Job, BaseException], None] = lambda job, stop: None
    summary: Callable[[RunObserver], None] = lambda observer: None
    shielded: Callable[[], ContextManager[object]] = contextlib.nullcontext
    finished: Callable[[WorkerOutcome], None] = lambda outcome: None


def run_launch(conf: LaunchConfig, env: Mapping[str, str], ctx: LaunchContext, ui: LaunchCallbacks) -> int:
    """One launch; returns the exit code (``ecolaunch.launch.exitcodes``). Raises EcolaunchError (ecolaunch failed:
    a full or read-only file system under the state directory included, :func:`disk_error`), NoPlacement/WaitTimeout
    (nothing fits in time); a signal handler's exception passes through after release."""
    try:
        return _run_launch(conf, env, ctx, ui)
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        raise disk_error(e, ctx.environment.state_dir) from e


#: the errors of a file system that takes no more writes: full, over quota, read-only
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def disk_error(e: OSError, state_dir: Path) -> StateError:
    """The launch's error for ``e``, a write refused by a full, over-quota or read-only file system."""
    where = f" ({e.filename})" if e.filename else ""
    what = f"cannot write the state directory {state_dir}: {e.strerror or e}{where}"
    if e.errno == errno.EROFS:
        hint = (f"the file system that holds {state_dir} is mounted read-only: ask the admin to remount it "
                f"read-write, or set ECOLAUNCH_STATE_DIR to a writable directory")
    else:
        hint = (f"free space (or quota) on the file system that holds {state_dir} (`df -h {state_dir}`), then "
                "launch again; until then no launch can book GPUs there")
    return StateError(what, hint=hint)


def _run_launch(conf: LaunchConfig, env: Mapping[str, str], ctx: LaunchContext, ui: LaunchCallbacks) -> int:
    args, opts = conf.workers, conf.options
    extra_env = {"PYTHON_EXEC": conf.python_exec} if conf.python_exec else {}
    environment, rules = ctx.environment, ctx.rules
    # the command line was checked when conf (launch.argv.parse, torch's own checks included): nothing bad queues
    if args.nproc_per_node == CPU_NPROC:
        return _plain(conf, extra_env, "--nproc-per-node cpu asks for no GPUs", ui)
    try:
        backend = ctx.open_gpus()
    except DriverNotFound as e:
        hint = f" (HINT: {e.hint})" if e.hint else ""
        return _plain(conf, extra_env, f"{e}{hint}; launching like torchrun without GPU placement", ui)
    weights = environment.gnn_weights
    if weights is not None and opts.policy == "gnn":
        # lazy: infer and its features load only for a gnn placement given weights
        from ecolaunch.policy.infer import chosen_weights

        weights = chosen_weights(environment)  # a bad weight file fails here, before anything is booked
    store = StateStore(environment.state_dir, group=rules.state_group)
    session = Session(store, backend, get_policy(opts.policy, gnn_weights=weights), rules,
                      cap_keeper=orphan_keeper(backend, rules, environment.state_dir))
    host_gpus = _host_gpus(session)
    allowed = _allowed_gpus(conf, env, host_gpus, ui)
    history = History(environment.state_dir)
    if opts.backfill and not rules.backfill:
        ui.message("the admin's policy turns backfill off ([queue] backfill = false): the job waits its turn")
    if rules.backfill and (backfill_default(opts.policy) if opts.backfill is None else opts.backfill):
        # the margin a predicted length gets, from how this user's predictions ran over
        session.backfill_margin = overrun_margin(history.length_predictions())
    rdzv = multi_node(args)
    plan_wait_s = None if rdzv is None else plan_timeout_s(env) or rdzv.join_timeout_s  # checked before booking
    match, plan = _profile_plan(conf, ctx.user, allowed, history, host_gpus, rdzv)
    entry = match.entry if match is not None else None
    logger.info("profiling: %s", plan.reason)
    request = _request(conf, session, ctx, allowed, entry, ui)
    request = _with_profile(request, plan.profile)
    if plan.action in (ProfileAction.INLINE, ProfileAction.PRE) and not opts.fresh_profile and rdzv is None \
            and rules.profiling_colleagues and match is not None:
        adopted = _from_colleague(request, match, history)
        if adopted is not None:
            request, match, plan = adopted
            ui.message(plan.reason)
    if opts.dry_run:
        decision, waiting, graph = session.preview(request)
        ui.decision(decision, graph.hosts[session.host].gpus, "-", 0.0, True, waiting)
        return exitcodes.OK
    launcher = Launcher(pid=os.getpid(), start_time=_own_start_time(), uid=os.getuid(), user=request.user)
    nodes = SingleNode() if rdzv is None else MultiNode(rdzv, plan_wait_s, session.host, ui.message)
    run = _Run(session, launcher, conf, extra_env, rules, environment.state_dir, history, match, env, ui, nodes)
    action, profiling_energy_j, source = plan.action, None, None
    if action is ProfileAction.PRE:
        ui.message(plan.reason)
        _, pre = run(request, ProfileAction.PRE)
        if pre.result is not None and pre.result.profile is not None:
            request, action = _with_profile(request, pre.result.profile), ProfileAction.HISTORY
            ui.message(f"profiling run: {pre.result.reason}")
        else:
            action = ProfileAction.INLINE
            ui.message("the profiling run gave no profile; profiling the real run instead")
        profiling_energy_j, source = pre.summary().gpu_energy_j, "pre"
    outcome, observer = run(request, action, profiling_energy_j=profiling_energy_j, profile_source=source)
    if outcome.report:
        ui.message(outcome.report)
    ui.summary(observer)
    run.finish(observer, outcome)
    ui.finished(outcome)
    return outcome.exit_code


@dataclass
class _Run:
    """Queue, place, apply caps, run the workers under a RunObserver, release: one run of the job. What a job over
    several nodes does besides, its ``nodes`` role does (:class:`~ecolaunch.launch.multinode.MultiNode`)."""

    session: Session
    launcher: Launcher
    conf: LaunchConfig
    extra_env: dict[str, str]
    rules: Rules
    state_dir: Path
    history: History
    match: JobMatch | None
    env: Mapping[str, str]
    ui: LaunchCallbacks
    #: the node's role: alone, or one of a job's several nodes
    nodes: SingleNode = dataclasses.field(default_factory=SingleNode)

    def __call__(self, request: JobRequest, action, *, profiling_energy_j: float | None = None,
                 profile_source: str | None = None):
        session, conf, ui, nodes, pre = self.session, self.conf, self.ui, self.nodes, action is ProfileAction.PRE
        name = conf.options.name or _script_name(conf.workers)
        job = session.submit(request, self.launcher, name=name, info={**_request_info(conf, request), **nodes.info()})
        stop_heartbeat = threading.Event()
        caps: JobCaps | None = None
        try:
            try:
                placement = nodes.place(session, job, conf.options.wait_timeout_s,
                                        on_wait=lambda waiting, waited: ui.waiting(job, waiting, waited))
            except BaseException as stop:
                if not isinstance(stop, Exception):  # a stop signal's exception (the CLI's), not an error
                    ui.left_queue(job, stop)
                raise
            ui.decision(placement.decision, placement.gpus, job.id, placement.waited_s, False, None)
            nodes.meet(job, placement)
            match = self.match
            if not nodes.sets_caps:  # the leader's caps, or each node's default
                placement, action, match = at_default(placement), ProfileAction.OFF, None
            caps = JobCaps(session, placement, self.state_dir, self.env, on_message=ui.message)
            caps.begin()
            set_cap = None if caps.refused else nodes.set_cap(caps, placement)
            # a profiling run that is stopped must not be restarted
            worker_args = _worker_args(conf.workers, placement, request, **({"max_restarts": 0} if pre else {}))
            config = ObserveConfig(
                job.id, placement.decision.gpus, self.state_dir, mode=action, rules=self.rules,
                fingerprint=match.fingerprint if match is not None else None, match=match,
                allowed_slowdown_pct=request.allowed_slowdown_pct, user=request.user, name=name,
                name_given=conf.options.name is not None, profile=request.profile,
                colocated_with=placement.decision.colocated_with, profiling_energy_j=profiling_energy_j,
                profile_source=profile_source, pace=nodes.paces, peer_waits=nodes.peer_waits(),
                steps=conf.options.steps, predicted_s=request.expected_s)
            observer = RunObserver(config, session.backend, clock=SystemClock(), history=self.history,
                                   set_cap=set_cap,
                                   ceiling_w=None if caps.refused else caps.ceiling_w,
                                   on_profile_done=_stop_workers if pre else None)
            threading.Thread(target=_heartbeat, args=(session, placement, observer, stop_heartbeat),
                             daemon=True).start()
            with observer, nodes.following(caps, placement):
                env = {**worker_env(job.id, placement.decision.gpus, placement.gpus), **self.extra_env,
                       **observer.worker_env()}
                outcome = run_workers(worker_args, env, conf.function, on_stuck=nodes.on_stuck(session, job, caps),
                                      on_round=nodes.on_round(observer))
                observer.set_exit_code(outcome.exit_code)
        finally:
            stop_heartbeat.set()
            _release(session, job.id, caps, ui)
        return outcome, observer

    def finish(self, observer: RunObserver, outcome: WorkerOutcome) -> None:
        """What the node tells the job's other nodes at the end (a job over several nodes: its energy to the leader;
        the leader says the whole job's)."""
        self.nodes.finish(observer, outcome)


def _allowed_gpus(conf: LaunchConfig, env: Mapping[str, str], host_gpus: list, ui: LaunchCallbacks):
    """The GPUs this launch may be placed on: a Slurm allocation's (:mod:`~ecolaunch.launch.slurm`), else what an
    inherited ``CUDA_VISIBLE_DEVICES`` allows, else any (None)."""
    alloc = conf.slurm
    if alloc is None:
        return allowed_by_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), host_gpus)
    node = "" if alloc.node_id is None else f", node {alloc.node_id} of {alloc.num_nodes}"
    filled = f"; from the allocation: {' '.join(conf.slurm_filled)}" if conf.slurm_filled else ""
    if alloc.gpu_indices is None:
        ui.message(f"Slurm job {alloc.job_id}{node}{filled}; Slurm gave no GPU list, so CUDA_VISIBLE_DEVICES (if set) "
                   "says which GPUs the job may use")
        return allowed_by_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), host_gpus)
    gpus = ",".join(map(str, alloc.gpu_indices)) or "none"
    ui.message(f"Slurm job {alloc.job_id}{node}{filled}; placed only on the allocation's GPU {gpus}")
    return allowed_by_slurm(alloc.gpu_indices, host_gpus)


def _profile_plan(conf: LaunchConfig, user: str, allowed_gpus, history: History, host_gpus: list,
                  rdzv: Rendezvous | None = None):
    """How the job matched its history (:meth:`~ecolaunch.profile.history.History.match`) and what ``--profile``
    resolves to against it (the match None: the GPU model the job will get on ``allowed_gpus`` is not known before
    placement, on a host with mixed or no GPUs; or an elastic job over several nodes, which the plan of
    :mod:`~ecolaunch.launch.nodes` leaves unprofiled). A job over a fixed number of nodes is matched as the whole
    job (its node count in the fingerprint), as its leader would profile it; its plan decides who does
    (:mod:`~ecolaunch.launch.multinode`). It is profiled inline, never by a profiling run of its own (every node would need one)."""
    args, opts = conf.workers, conf.options
    if rdzv is not None and rdzv.min_nodes != rdzv.max_nodes:
        return None, ProfilePlan(ProfileAction.OFF, None, f"an elastic job over {rdzv.min_nodes} to {rdzv.max_nodes} "
                                 "nodes is not profiled: its nodes may change (docs/multinode.md)")
    gpus = [g for g in host_gpus if allowed_gpus is None or g.uuid in allowed_gpus]
    models = sorted({g.name for g in gpus})
    if len(models) != 1:
        return None, resolve_mode(opts.profile if models else "off", None)
    identity = JobIdentity(args.script, args.script_args, args.nproc_per_node, user, models[0], module=args.module,
                           nnodes=1 if rdzv is None else rdzv.max_nodes)
    match = history.match(identity, key=opts.job_key, fresh=opts.fresh_profile)
    logger.info("history: %s", match.how)
    plan = resolve_mode(opts.profile, match.entry)
    if rdzv is not None and plan.action is ProfileAction.PRE:
        plan = ProfilePlan(ProfileAction.INLINE, None, f"{plan.reason}; a job over {rdzv.max_nodes} nodes profiles "
                           "its real run instead (every node would need a profiling run)")
    return match, plan


def _from_colleague(request: JobRequest, match: JobMatch, history: History
                    ) -> tuple[JobRequest, JobMatch, ProfilePlan] | None:
    """A first launch (nothing of its own in the history: no profile, no run) of a job another user of this machine
    has run starts from their profile of it, as a repeat starts from its own
    (docs/profiling.md#a-colleagues-profile-of-the-same-job): the request carries it, nothing is profiled, the run's
    closed loop corrects it with the run's own iterations, and the result is stored as this user's. A run whose
    iterations contradict it stores an entry without a profile, so the user's next launch profiles its own.
    Returns the request, the match (its entry's profile the colleague's, its ``how`` saying so) and the plan, or None
    when no other user's profile of the job is usable (:meth:`~ecolaunch.profile.history.History.colleague_profile`).
    The caller asks only where ``--fresh-profile``, ``--profile off``, ``[profiling] colleagues = false`` and a job over
    several nodes do not rule it out."""
    if match.entry is not None:  # this user ran it here before (or refused a colleague's): they measure their own
        return None
    told = history.colleague_profile(match.identity, key=match.key)
    if told is None:
        return None
    who, theirs = told
    # its curve only: what memory the job needs is its own to say (a colleague's figure would decide who shares)
    profile = dataclasses.replace(theirs.profile, memory_mib=request.memory_mib)
    why = (f"no profile of your own: starting from {who}'s profile of the same job"
           + (f" (job {theirs.job_id})" if theirs.job_id else "")
           + "; this run's closed loop corrects it and keeps it as yours (--fresh-profile: measure your own)")
    # the user has no entry of the job (above): nothing of theirs to keep beside the colleague's profile
    entry = ProfileEntry(match.fingerprint, profile, job_id=theirs.job_id, updated_at=theirs.updated_at)
    match = dataclasses.replace(match, how=f"{match.how}; {who}'s profile of the same job", entry=entry,
                                colleague=who)
    return _with_profile(request, profile), match, ProfilePlan(ProfileAction.HISTORY, profile, why)


def _with_profile(request: JobRequest, profile) -> JobRequest:
    """The request with a known profile (history or a profiling run): the policy places with full knowledge, and a
    request that knows its steps but not yet their seconds (a declared length, :func:`expected_length`) expects them
    at the profile's iteration time."""
    if profile is None:
        return request
    seconds = request.expected_s
    if seconds is None and request.expected_iterations and profile.iter_time_s:
        seconds = min(request.expected_iterations * profile.iter_time_s, MAX_EXPECTED_S)
    return dataclasses.replace(request, profile=profile, memory_mib=request.memory_mib or profile.memory_mib,
                               expected_s=seconds)


def _stop_workers() -> None:
    """End a profiling run that no step limit stops (an uninstrumented script): terminate this launcher's
    child processes (torch's agent and its workers); the run returns as failed, which a profiling run ignores."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.terminate()


def _plain(conf: LaunchConfig, extra_env: dict[str, str], why: str, ui: LaunchCallbacks) -> int:
    ui.no_gpus(why, conf.options.dry_run)
    if conf.options.dry_run:
        return exitcodes.OK
    stuck = None if multi_node(conf.workers) is None else exit_stuck
    outcome = run_workers(conf.workers, extra_env, conf.function, on_stuck=stuck)
    if outcome.report:
        ui.message(outcome.report)
    ui.finished(outcome)
    return outcome.exit_code


def _host_gpus(session: Session) -> list:
    """This host's GPUs as the state graph sees them now (one reconciling transaction)."""
    host = session.snapshot().hosts.get(session.host)
    return list(host.gpus.values()) if host else []


def _request(conf: LaunchConfig, session: Session, ctx: LaunchContext, allowed_gpus,
             entry: ProfileEntry | None, ui: LaunchCallbacks) -> JobRequest:
    """The job's request, its slowdown bound resolved here once (:func:`~ecolaunch.admin.rules.job_bound_pct`:
    the command line, else what the script declared on an earlier run, kept in the history ``entry``'s hints, else
    the policy's default, never above the admin's maximum); the memory per GPU the script declared where the
    command line says nothing; the run's expected length (:func:`expected_length`)."""
    args, opts, rules = conf.workers, conf.options, ctx.rules
    hints = entry.hints if entry is not None else {}
    expected_s, expected_iterations = expected_length(opts.steps, entry)
    elastic = args.nproc_per_node in ELASTIC_NPROC
    nproc = 1 if elastic else int(args.nproc_per_node)  # a whole number >= 1: launch.argv.check_nproc
    allowed_slowdown_pct = job_bound_pct(rules, opts.allowed_slowdown_pct, hints.get("max_slowdown_pct"))
    if opts.allowed_slowdown_pct is None and allowed_slowdown_pct != rules.default_slowdown_pct:
        ui.message(f"the script declares a {allowed_slowdown_pct:g} % slowdown bound (@ecolaunch.job); using it")
    memory_mib = opts.memory_mib
    if hints.get("memory_mib") and memory_mib is None:
        memory_mib = int(hints["memory_mib"])
    return JobRequest(
        id=uuid.uuid4().hex[:8],
        user=ctx.user,
        groups=ctx.groups,
        host=session.host,
        nproc=nproc,
        elastic=elastic,
        memory_mib=memory_mib,
        allowed_slowdown_pct=allowed_slowdown_pct,
        allowed_gpus=allowed_gpus,
        allowed_by="CUDA_VISIBLE_DEVICES" if conf.slurm is None or conf.slurm.gpu_indices is None else
        f"Slurm job {conf.slurm.job_id}'s allocation",
        expected_s=expected_s,
        expected_iterations=expected_iterations,
        share_if_sooner=rules.share_if_sooner if opts.share_if_sooner is None else opts.share_if_sooner,
    )


def expected_length(steps: int | None, entry: ProfileEntry | None) -> tuple[float | None, int | None]:
    """``(expected_s, expected_iterations)`` of a run before it starts, each None when not known, said in one log
    line. A declared length (``steps``: ``--steps``; else the ``steps`` the script declared on an earlier run, kept
    in the history ``entry``'s hints) is the iterations; its seconds are those steps at the entry profile's iteration
    time, else the history's median run scaled by the steps over its median steps, else unknown until the run
    measures its pace. Without one: the medians of the entry's completed runs (:meth:`ProfileEntry.expected_run`).
    Both within what a job file may claim (a clock that jumped must not make the job's own file invalid)."""
    declared, source = (steps, "--steps") if steps is not None else (
        (entry.hints.get("steps"), "the script's @ecolaunch.job") if entry is not None else (None, ""))
    expected = entry.expected_run() if entry is not None else None
    if declared is None:
        if expected is None:
            return None, None
        logger.info("history: %d completed run(s) of this job: expecting about %.0f s%s", expected.runs,
                    expected.duration_s, f", {expected.iterations} steps" if expected.iterations else "")
        return (min(expected.duration_s, MAX_EXPECTED_S),
                min(expected.iterations, MAX_EXPECTED_ITERATIONS) if expected.iterations else None)
    profile = entry.profile if entry is not None else None
    if profile is not None and profile.iter_time_s:
        seconds, how = declared * profile.iter_time_s, f"at its profile's {profile.iter_time_s:.3g} s per step"
    elif expected is not None and expected.iterations:
        seconds = expected.duration_s * declared / expected.iterations
        how = (f"scaling the median of {expected.runs} completed run(s) ({expected.duration_s:.0f} s for "
               f"{expected.iterations} steps)")
    else:
        seconds, how = None, ""
    logger.info("length: %d steps declared (%s): %s", declared, source,
                "seconds unknown until the run measures its pace" if seconds is None else
                f"expecting about {seconds:.0f} s, {how}")
    return (None if seconds is None else min(seconds, MAX_EXPECTED_S)), min(declared, MAX_EXPECTED_ITERATIONS)


def _worker_args(args: TorchrunArgs, placement: Placement, request: JobRequest, **changes) -> TorchrunArgs:
    """The workers' torchrun options: an elastic job's worker count is its GPU count; ``changes`` besides."""
    if request.elastic:
        changes["nproc_per_node"] = str(len(placement.decision.gpus))
    return args.replace(**changes) if changes else args


def _heartbeat(session: Session, placement: Placement, observer, stop: threading.Event) -> None:
    """Every HEARTBEAT_S: refresh the job's lease with the run's progress so far (for ``ecolaunch status`` and
    ``top``) and, once this run profiled a job booked without a profile, its measured profile; and tell the observer
    who shares its GPUs now (energy shares, and the closed loop, which stops on a GPU that became shared) and how
    many jobs its slowdown delays (the closed loop weighs them under ``[energy] wait_weight``)."""
    failing: str | None = None  # the kind of failure already reported: each kind is one warning, not one a beat
    while not stop.wait(HEARTBEAT_S):
        try:
            beat = session.heartbeat(placement.job, observer.progress(), observer.measured_profile())
            for gpu, jobs in beat.residents.items():
                observer.set_co_residents(gpu, jobs)
            observer.set_waiting(beat.waiting_share)
        except Exception as e:  # noqa: BLE001 - a missed heartbeat must never kill the run
            kind = f"{type(e).__name__}:{getattr(e, 'errno', None)}"
            if kind == failing:
                logger.debug("heartbeat failed again: %s", e, exc_info=True)
                continue
            failing = kind
            expected = isinstance(e, (OSError, EcolaunchError))  # a full disk, the lock: no traceback, no bug
            logger.warning("job %s: heartbeat failed (%s); the job keeps running and its heartbeat is retried every "
                           "%g s%s", placement.job.id, e, HEARTBEAT_S,
                           "" if expected else " (an ecolaunch bug: rerun with -v for the traceback)",
                           exc_info=not expected and logger.isEnabledFor(logging.INFO))
        else:
            if failing is not None:
                logger.warning("job %s: heartbeat works again", placement.job.id)
                failing = None


def _release(session: Session, job_id: str, caps, ui: LaunchCallbacks) -> None:
    """Free the job's GPUs and restore the caps it applied, with the stop signals held back meanwhile (a second
    Ctrl-C must not interrupt the write; a signal that arrives is delivered right after)."""
    with ui.shielded():
        session.release(job_id)
        if caps is not None:
            caps.release()


def _request_info(conf: LaunchConfig, request: JobRequest) -> dict:
    args = conf.workers
    return {
        "nproc_per_node": args.nproc_per_node,
        "memory_mib": request.memory_mib,
        "allowed_slowdown_pct": request.allowed_slowdown_pct,
        "expected_s": request.expected_s,
        "expected_iterations": request.expected_iterations,
        "share_if_sooner": request.share_if_sooner,
        "policy": conf.options.policy,
        "script": args.script,
        "args": list(args.script_args),
    }


def _script_name(args: TorchrunArgs) -> str:
    """A job's name without ``--name``: its training script's file name (or module)."""
    return os.path.basename(args.script)


def _own_start_time() -> float:
    return process_start_time(os.getpid())
