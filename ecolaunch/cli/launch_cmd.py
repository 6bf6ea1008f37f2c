"""The launch command: ``ecolaunch [torchrun options] [ecolaunch options] script [args]``.

Parses with torch's own parser, places the job through the state graph, runs torchrun's ``run()`` with the
decided GPUs, and always releases the booking — on success, worker failure, exception or signal.
"""

from __future__ import annotations

import contextlib
import gc
import dataclasses
import functools
import json
import logging
import os
import signal
import sys
import threading
import traceback
import uuid
from collections.abc import Mapping


from ecolaunch.cli.context import current_groups, current_user, resolve
from ecolaunch.errors import DriverNotFound, EcolaunchError, NoPlacement, PermissionDenied, StateError, WaitTimeout
from ecolaunch.launch import argv as launch_argv
from ecolaunch.launch import exitcodes
from ecolaunch.launch.argv import ParsedLaunch
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.launch.workerenv import allowed_by_visible_devices, worker_env
from ecolaunch.policy.base import Decision, JobRequest

logger = logging.getLogger("ecolaunch")

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
HEARTBEAT_S = 10.0


class Interrupted(BaseException):
    """Raised by our signal handlers outside torch's run(), so that ``finally`` blocks release the job."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def launch(argv: list[str], env: Mapping[str, str]) -> int:
    """Run one launch; returns the exit code (see ``ecolaunch.launch.exitcodes``)."""
    parsed = launch_argv.parse(argv, env)  # argparse exits 2 on bad arguments, as torchrun
    # torch's import leaves about a million objects to the garbage collector; without this, the first full
    # collection during ecolaunch's own work costs tens of milliseconds on every launch
    gc.freeze()
    _setup_logging(parsed.options.verbose)
    saved = {s: signal.getsignal(s) for s in _STOP_SIGNALS}
    for s in _STOP_SIGNALS:
        signal.signal(s, _raise_interrupted)
    try:
        return _launch(parsed, env)
    except Interrupted as e:
        return exitcodes.from_signal(e.signum)
    except (NoPlacement, WaitTimeout) as e:
        _error(e)
        return exitcodes.NO_PLACEMENT
    except EcolaunchError as e:
        _error(e, parsed.options.verbose)
        return exitcodes.ERROR
    except Exception as e:  # noqa: BLE001 - the one place that turns surprises into a clear line
        _echo(f"ecolaunch bug: {type(e).__name__}: {e} (rerun with -v for the traceback)", err=True)
        if parsed.options.verbose:
            traceback.print_exc()
        return exitcodes.ERROR
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _launch(parsed: ParsedLaunch, env: Mapping[str, str]) -> int:
    from ecolaunch.cli.context import open_gpus
    from ecolaunch.launch.observe import format_summary
    from ecolaunch.launch.torchrun import check_args
    from ecolaunch.profile.history import History
    from ecolaunch.profile.modes import ProfileAction
    from ecolaunch.policy.baselines import get_policy
    from ecolaunch.state.store import StateStore

    args, opts = parsed.torch_args, parsed.options
    extra_env = {"PYTHON_EXEC": parsed.python_exec} if parsed.python_exec else {}
    environment, rules = resolve(env)
    # torch's own checks first: a bad command line must never wait in the queue or book GPUs
    check_args(args, nproc_override="1" if args.nproc_per_node in ("gpu", "auto") else None)
    if args.nproc_per_node == "cpu":
        return _plain(parsed, extra_env, "--nproc-per-node cpu asks for no GPUs")
    try:
        backend = open_gpus(environment)
    except DriverNotFound as e:
        hint = f" (HINT: {e.hint})" if e.hint else ""
        return _plain(parsed, extra_env, f"{e}{hint}; launching like torchrun without GPU placement")
    if environment.gnn_weights is not None and opts.placement_policy == "gnn":
        from ecolaunch.policy.infer import load_model_cached

        load_model_cached(environment.gnn_weights)  # a bad weight file fails here, before anything is booked
    store = StateStore(environment.state_dir, group=rules.state_group)
    session = Session(store, backend, get_policy(opts.placement_policy, gnn_weights=environment.gnn_weights), rules)
    host_gpus = _host_gpus(session)
    request = _request(parsed, session, rules, env, host_gpus)
    history = History(environment.state_dir)
    fp, plan = _profile_plan(parsed, request, history, host_gpus)
    logger.info("profiling: %s", plan.reason)
    request = _with_profile(request, plan.profile)
    if opts.dry_run:
        decision, graph = session.preview(request)
        _print_decision(parsed, decision, graph.hosts[session.host].gpus, dry_run=True)
        return exitcodes.OK
    launcher = Launcher(pid=os.getpid(), start_time=_own_start_time(), uid=os.getuid(), user=request.user)
    run = functools.partial(_place_and_run, session, launcher, parsed, extra_env, rules, environment.state_dir,
                            history, fp)
    action, profiling_energy_j, source = plan.action, None, None
    if action is ProfileAction.PRE:
        _echo(f"ecolaunch: {plan.reason}", err=True)
        _, pre = run(request, ProfileAction.PRE)
        if pre.result is not None and pre.result.profile is not None:
            request, action = _with_profile(request, pre.result.profile), ProfileAction.HISTORY
            _echo(f"ecolaunch: profiling run: {pre.result.reason}", err=True)
        else:
            action = ProfileAction.INLINE
            _echo("ecolaunch: the profiling run gave no profile; profiling the real run instead", err=True)
        profiling_energy_j, source = pre.summary().gpu_energy_j, "pre"
    outcome, observer = run(request, action, profiling_energy_j=profiling_energy_j, profile_source=source)
    if outcome.report:
        _echo(outcome.report, err=True)
    _echo(format_summary(observer.summary()), err=True)
    return outcome.exit_code


def _place_and_run(session: Session, launcher: Launcher, parsed: ParsedLaunch, extra_env: dict[str, str], rules,
                   state_dir, history, fp: str | None, request: JobRequest, action, *,
                   profiling_energy_j: float | None = None, profile_source: str | None = None):
    """Queue, place, apply caps, run the workers under a RunObserver, release. Returns (outcome, observer)."""
    from ecolaunch.clock import SystemClock
    from ecolaunch.launch.observe import RunObserver
    from ecolaunch.launch.torchrun import run_workers
    from ecolaunch.profile.history import Profile
    from ecolaunch.profile.modes import ProfileAction

    opts, pre = parsed.options, action is ProfileAction.PRE
    job = session.submit(request, launcher, name=_job_name(parsed.torch_args), info=_request_info(parsed, request))
    stop_heartbeat = threading.Event()
    own_caps, observer = False, None
    try:
        placement = session.wait_for_placement(job.id, opts.wait_timeout_s, on_wait=_wait_reporter(job.id))
        _print_decision(parsed, placement.decision, placement.gpus, job_id=job.id, waited_s=placement.waited_s)
        own_caps = _apply_caps(session, placement, rules, state_dir)
        worker_args = _worker_args(parsed.torch_args, placement, request)
        if pre:
            worker_args.max_restarts = 0  # a profiling run that is stopped must not be restarted
        observer = RunObserver(
            session.backend, job.id, placement.decision.gpus, state_dir, clock=SystemClock(), mode=action,
            history=history, fingerprint=fp, rules=rules, slowdown_pct=request.allowed_slowdown_pct,
            set_cap=_cap_setter(session, job.id, rules, state_dir), user=request.user,
            name=_job_name(parsed.torch_args), profile=Profile.from_dict(request.profile) if request.profile else None,
            colocated_with=placement.decision.colocated_with, profiling_energy_j=profiling_energy_j,
            profile_source=profile_source, on_profile_done=_stop_workers if pre else None)
        threading.Thread(target=_heartbeat, args=(session, placement, stop_heartbeat), daemon=True).start()
        with observer:
            env = {**worker_env(job.id, placement.decision.gpus, placement.gpus), **extra_env, **observer.worker_env()}
            outcome = run_workers(worker_args, env)
            observer.set_exit_code(outcome.exit_code)
    finally:
        stop_heartbeat.set()
        changed = observer is not None and observer.caps_changed
        _release(session, job.id, rules if own_caps or changed else None)
    return outcome, observer


def _profile_plan(parsed: ParsedLaunch, request: JobRequest, history, host_gpus: list):
    """The job's fingerprint and what ``--profile`` resolves to against its history (fingerprint None: the
    GPU model the job will get is not known before placement, on a host with mixed or no GPUs)."""
    from ecolaunch.profile.history import fingerprint
    from ecolaunch.profile.modes import resolve_mode

    args = parsed.torch_args
    gpus = [g for g in host_gpus if request.allowed_gpus is None or g.uuid in request.allowed_gpus]
    models = sorted({g.name for g in gpus})
    if len(models) != 1:
        return None, resolve_mode(parsed.options.profile if models else "off", None)
    fp = fingerprint(args.training_script, list(args.training_script_args), args.nproc_per_node, request.user,
                     models[0], module=bool(args.module))
    return fp, resolve_mode(parsed.options.profile, history.lookup(fp))


def _with_profile(request: JobRequest, profile) -> JobRequest:
    """The request with a known profile (history or a profiling run): the policy places with full knowledge."""
    if profile is None:
        return request
    return dataclasses.replace(request, profile=profile.to_dict(), memory_mib=request.memory_mib or profile.memory_mib)


def _cap_setter(session: Session, job_id: str, rules, state_dir):
    """The observer's ``set_cap``: record the job's wish in the state graph, then let the cap agent apply it (the
    profiler waits until the readings show it), or apply it now as this launcher. When that is refused (not
    root), the wish is taken back and PermissionDenied raised: profiling then measures at the current caps."""
    from ecolaunch.admin.agent import agent_alive
    from ecolaunch.admin.caps import apply_caps_as_launcher

    agent = agent_alive(state_dir, session.processes)

    def wish(uuid: str, watts: float | None) -> float | None:
        with session.store.transaction() as graph:
            job = graph.jobs.get(job_id)
            if job is None:
                raise StateError(f"job {job_id} is not in the state graph", hint="it was released; nothing to cap")
            before = job.power_caps_w.get(uuid)
            caps = {**job.power_caps_w, uuid: watts}
            job.power_caps_w = {u: w for u, w in caps.items() if w is not None}
            return before

    def set_cap(uuid: str, watts: float) -> None:
        before = wish(uuid, float(watts))
        if agent:
            return
        try:
            apply_caps_as_launcher(session.store, session.backend, rules, host=session.host, processes=session.processes)
        except PermissionDenied:
            wish(uuid, before)
            raise

    return set_cap


def _stop_workers() -> None:
    """End a profiling run that no step limit stops (an uninstrumented script): terminate this launcher's
    child processes (torch's agent and its workers); the run returns as failed, which a profiling run ignores."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.terminate()


def _plain(parsed: ParsedLaunch, extra_env: dict[str, str], why: str) -> int:
    from ecolaunch.launch.torchrun import run_workers

    _echo(f"ecolaunch: {why}", err=True)
    if parsed.options.dry_run:
        _emit_json({"gpus": [], "cuda_visible_devices": None, "power_caps_w": {}, "colocated_with": {}, "reasons": [why]})
        return exitcodes.OK
    outcome = run_workers(parsed.torch_args, extra_env)
    if outcome.report:
        _echo(outcome.report, err=True)
    return outcome.exit_code


def _host_gpus(session: Session) -> list:
    """This host's GPUs as the state graph sees them now (one reconciling transaction)."""
    host = session.snapshot().hosts.get(session.host)
    return list(host.gpus.values()) if host else []


def _request(parsed: ParsedLaunch, session: Session, rules, env: Mapping[str, str], host_gpus: list) -> JobRequest:
    from ecolaunch.admin.rules import effective_slowdown_pct

    args, opts = parsed.torch_args, parsed.options
    allowed = allowed_by_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), host_gpus)
    elastic = args.nproc_per_node in ("gpu", "auto")
    nproc = 1 if elastic else _int_nproc(args.nproc_per_node)
    slowdown = effective_slowdown_pct(rules, opts.allowed_slowdown_pct)
    return JobRequest(
        id=uuid.uuid4().hex[:8],
        user=current_user(),
        groups=current_groups(),
        host=session.host,
        nproc=nproc,
        elastic=elastic,
        memory_mib=parsed.memory_mib,
        allowed_slowdown_pct=slowdown,
        allowed_gpus=allowed,
    )


def _int_nproc(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        # torchrun's own message for the same value
        raise EcolaunchError(f"Unsupported nproc_per_node value: {value}", hint="use an integer, gpu, auto or cpu") from None
    if n < 1:
        raise EcolaunchError(f"--nproc-per-node must be at least 1, got {n}", hint="use an integer >= 1, gpu or auto")
    return n


def _worker_args(args, placement: Placement, request: JobRequest):
    import copy

    worker_args = copy.copy(args)
    if request.elastic:
        worker_args.nproc_per_node = str(len(placement.decision.gpus))
    return worker_args


def _heartbeat(session: Session, placement: Placement, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        try:
            session.heartbeat(placement.job)
        except Exception:  # noqa: BLE001 - a missed heartbeat must never kill the run
            logger.warning("heartbeat failed", exc_info=True)


def _apply_caps(session: Session, placement: Placement, rules, state_dir) -> bool:
    """Apply the decided caps when no cap agent runs; True when this launcher must restore them on exit.

    Without the privilege, print what would be set as a recommendation instead (one line).
    """
    from ecolaunch.admin.agent import agent_alive
    from ecolaunch.admin.caps import LEDGER_FILE, apply_caps_as_launcher, cap_recommendation, load_ledger

    wanted = placement.job.power_caps_w
    if agent_alive(state_dir, session.processes):
        return False
    if not wanted:
        # caps left changed by a launcher that was killed: restore them now, if this process may
        if load_ledger(state_dir / LEDGER_FILE, session.host):
            with contextlib.suppress(PermissionDenied):
                apply_caps_as_launcher(session.store, session.backend, rules, host=session.host,
                                       processes=session.processes)
        return False
    try:
        apply_caps_as_launcher(session.store, session.backend, rules, host=session.host, processes=session.processes)
        return True
    except PermissionDenied:
        line = cap_recommendation(placement.gpus, rules, wanted)
        if line:
            _echo(f"ecolaunch: {line}", err=True)
        return False


def _release(session: Session, job_id: str, restore_rules=None) -> None:
    """Free the job's GPUs and, when this launcher applied caps itself, restore them.

    The stop signals are blocked meanwhile, so a second Ctrl-C cannot interrupt the write; a signal that arrives
    is delivered right after.
    """
    from ecolaunch.admin.caps import restore_caps_as_launcher

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        session.release(job_id)
        if restore_rules is not None:
            try:
                restore_caps_as_launcher(session.store, session.backend, restore_rules, host=session.host,
                                         processes=session.processes)
            except EcolaunchError as e:
                logger.warning("could not restore power caps: %s (the next launcher or the agent will)", e)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _wait_reporter(job_id: str):
    last = {"t": -1e9}

    def report(position: int, waited_s: float) -> None:
        if waited_s - last["t"] >= 10.0:
            last["t"] = waited_s
            _echo(f"ecolaunch: job {job_id} waiting for GPUs: position {position} in the queue, {waited_s:.0f} s so far", err=True)

    return report


def _print_decision(
    parsed: ParsedLaunch,
    decision: Decision | None,
    gpus: Mapping,
    *,
    job_id: str = "-",
    waited_s: float = 0.0,
    dry_run: bool = False,
) -> None:
    """``--json``: the decision document on stdout; else one line (stdout for a dry run, stderr otherwise)."""
    if decision is None:
        doc = {"placed": False, "gpus": [], "cuda_visible_devices": None, "power_caps_w": {}, "colocated_with": {}, "reasons": ["no GPUs fit now: the job would wait in the queue"]}
    else:
        doc = {"placed": True, **decision.to_dict(",".join(str(gpus[u].index) for u in decision.gpus))}
    if parsed.options.json:
        _emit_json(doc)
        return
    if decision is None:
        line = f"ecolaunch: {doc['reasons'][0]}"
    else:
        names = ", ".join(sorted({gpus[u].name for u in decision.gpus}))
        waited = f" after waiting {waited_s:.0f} s" if waited_s >= 1 else ""
        verb = "would run" if dry_run else f"job {job_id} runs"
        line = f"ecolaunch: {verb} on GPU {doc['cuda_visible_devices']} ({names}), policy {decision.policy}{waited}: {'; '.join(decision.reasons)}"
    _echo(line, err=not dry_run)
    if parsed.options.explain and decision is not None:
        for text in explain(decision, gpus):
            _echo(f"ecolaunch:   {text}", err=not dry_run)


def explain(decision: Decision, gpus: Mapping) -> list[str]:
    """The decision in words: what is predicted for each affected job, and why not the best alternatives."""
    lines = []
    slowdown = decision.predicted.get("slowdown_pct", {})
    for job_id, pct in slowdown.items():
        lines.append(f"predicted: job {job_id} runs {pct:.1f} % slower than alone and uncapped")
    for uuid, watts in decision.predicted.get("gpu_power_w", {}).items():
        if uuid in decision.gpus:
            cap = decision.power_caps_w.get(uuid)
            cap_txt = f"capped at {cap:.0f} W" if cap else "at its current power limit"
            lines.append(f"predicted: GPU {gpus[uuid].index} draws {watts:.0f} W, {cap_txt}")
    for alt in decision.alternatives:
        where = ",".join(str(gpus[u].index) for u in alt["gpus"] if u in gpus)
        caps = sorted({w for w in alt["power_caps_w"].values() if w is not None})
        cap_txt = f"at {caps[0]:.0f} W" if caps else "at default power"
        lines.append(f"not GPU {where} {cap_txt}: predicted {alt['predicted_slowdown_pct']:.1f} % slower, "
                     f"{alt['why_not']}")
    if not lines:
        lines.append(f"policy {decision.policy} makes no predictions; it decided by rule")
    return lines


def _emit_json(doc: dict) -> None:
    _echo(json.dumps(doc, indent=2, sort_keys=True))


def _request_info(parsed: ParsedLaunch, request: JobRequest) -> dict:
    args = parsed.torch_args
    return {
        "nproc_per_node": args.nproc_per_node,
        "memory_mib": request.memory_mib,
        "allowed_slowdown_pct": request.allowed_slowdown_pct,
        "policy": parsed.options.placement_policy,
        "script": args.training_script,
        "args": list(args.training_script_args),
    }


def _job_name(args) -> str:
    return os.path.basename(str(args.training_script))


def _own_start_time() -> float:
    from ecolaunch.state.reconcile import process_start_time

    return process_start_time(os.getpid())


def _echo(message: str, err: bool = False) -> None:
    """Print one message (stderr with ``err``). Not click's echo: importing click costs ~80 ms after torch, which
    the launch path (the drop-in for torchrun) must not pay."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{message}\n")
    stream.flush()


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def _error(e: EcolaunchError, verbose: bool = False) -> None:
    _echo(f"Error: {e}", err=True)
    if e.hint:
        _echo(f"HINT: {e.hint}", err=True)
    if verbose:
        traceback.print_exc()


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ecolaunch: %(message)s"))
    root = logging.getLogger("ecolaunch")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False
