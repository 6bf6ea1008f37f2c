"""The launch command: ``ecolaunch [torchrun options] [ecolaunch options] script [args]``.

The CLI's side of a launch: parse with torch's own parser, install the signal handlers, resolve the environment
and the admin policy once, run the pipeline (:func:`ecolaunch.launch.pipeline.run_launch`: placement, caps, the
workers under torch's ``run()``, release however it ends), render what it reports, and map outcomes and errors
to exit codes.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import signal
import sys
import traceback
from collections.abc import Callable, Collection, Mapping

from ecolaunch.admin.interpreter import interpreter_warning
from ecolaunch.cli.text import printable
from ecolaunch.runtime import current_groups, current_user, open_gpus, resolve
from ecolaunch.errors import EcolaunchError, NoPlacement, WaitTimeout, with_hint
from ecolaunch.launch import argv as launch_argv
from ecolaunch.launch import exitcodes
from ecolaunch.launch.argv import ParsedLaunch
from ecolaunch.launch.observe import RunSummary, format_summary
from ecolaunch.launch.pipeline import LaunchCallbacks, LaunchContext, run_launch
from ecolaunch.launch.procname import set_name
from ecolaunch.launch.torchrun import WorkerOutcome
from ecolaunch.policy.base import Decision
from ecolaunch.policy.waiting import Waiting
from ecolaunch.state.graph import Job

logger = logging.getLogger("ecolaunch")

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """Raised by our signal handlers outside torch's run(), so that ``finally`` blocks release the job."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def launch(argv: list[str], env: Mapping[str, str], subcommands: Collection[str] = ()) -> int:
    """Run one launch; returns the exit code (see ``ecolaunch.launch.exitcodes``). ``subcommands``: the names the
    help lists."""
    parsed = launch_argv.parse(argv, env, subcommands=subcommands)  # argparse exits 2 on bad arguments, as torchrun
    # torch's import leaves about a million objects to the garbage collector; without this, the first full
    # collection during ecolaunch's own work costs tens of milliseconds on every launch
    gc.freeze()
    set_name()  # `ps -o comm` says ecolaunch while it waits in the queue too, not python (issue 41)
    _setup_logging(parsed.options.verbose)
    _warn_unsafe_interpreter()
    saved = {s: signal.getsignal(s) for s in _STOP_SIGNALS}
    for s in _STOP_SIGNALS:
        signal.signal(s, _raise_interrupted)
    try:
        return launch_parsed(parsed, env)
    except Interrupted as e:
        return exitcodes.from_signal(e.signum)
    except EcolaunchError as e:
        # nothing fits (now, or within --wait-timeout): "try again later" (75), no traceback even with -v
        later = isinstance(e, (NoPlacement, WaitTimeout))
        _echo(e.render(), err=True)
        if parsed.options.verbose and not later:
            traceback.print_exc()
        return exitcodes.NO_PLACEMENT if later else exitcodes.ERROR
    except Exception as e:  # noqa: BLE001 - the one place that turns surprises into a clear line
        _echo(f"ecolaunch bug: {type(e).__name__}: {e} (rerun with -v for the traceback)", err=True)
        if parsed.options.verbose:
            traceback.print_exc()
        return exitcodes.ERROR
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def launch_parsed(parsed: ParsedLaunch, env: Mapping[str, str], *,
                  on_summary: Callable[[RunSummary], None] = lambda summary: None,
                  on_finished: Callable[[WorkerOutcome], None] = lambda outcome: None) -> int:
    """Run the pipeline on a parsed launch, printing as the command line does; returns the exit code and raises what
    :func:`~ecolaunch.launch.pipeline.run_launch` raises. ``on_summary`` gets the job's summary (a job placed on
    GPUs), ``on_finished`` how its workers ended: the Python API (``ecolaunch.api.launch``) keeps both."""
    environment, rules = resolve(env)
    ctx = LaunchContext(environment, rules, current_user(), current_groups(), functools.partial(open_gpus, environment))

    def summary(observer) -> None:
        done = observer.summary()
        _echo(format_summary(done), err=True)
        on_summary(done)

    ui = LaunchCallbacks(
        decision=functools.partial(_print_decision, parsed),
        no_gpus=functools.partial(_print_no_gpus, parsed),
        message=lambda line: _echo(f"ecolaunch: {line}", err=True),
        waiting=_wait_reporter(),
        left_queue=_print_left_queue,
        summary=summary,
        shielded=_signals_held,
        finished=on_finished,
    )
    return run_launch(parsed, env, ctx, ui)


@contextlib.contextmanager
def _signals_held():
    """Stop signals wait while the booking is released and caps restored (a second Ctrl-C cannot interrupt the
    write); a signal that arrived meanwhile is delivered right after."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _print_no_gpus(parsed: ParsedLaunch, why: str, dry_run: bool) -> None:
    """Launching without placement (no GPUs asked for, or no driver): one line; a dry run's decision document."""
    if parsed.options.json and dry_run:
        _emit_json({"placed": False, "policy": None, "gpus": [], "cuda_visible_devices": None, "power_caps_w": {},
                    "colocated_with": {}, "reasons": [why]})
        return
    _echo(f"ecolaunch: {why}" + ("; would launch like torchrun" if dry_run else ""), err=not dry_run)


#: seconds between two queue lines of a waiting launcher whose position and reason did not change
WAIT_REPORT_S = 10.0


def _wait_reporter():
    """The waiting launcher's queue lines: one at once, then one each WAIT_REPORT_S, and one whenever the position
    or the reason changes."""
    last: dict = {"t": -1e9, "why": None}

    def report(job: Job, waiting: Waiting, waited_s: float) -> None:
        why = (waiting.position, waiting.reason, waiting.detail)
        if waited_s - last["t"] >= WAIT_REPORT_S or why != last["why"]:
            last["t"], last["why"] = waited_s, why
            _echo(printable(f"ecolaunch: job {job.id} ({job.name}) waiting: position {waiting.position} in the "
                             f"queue, {waited_s:.0f} s so far: {waiting.text()}"), err=True)

    return report


def _print_left_queue(job: Job, stop: BaseException) -> None:
    """A stop signal ended the wait (``ecolaunch cancel`` sends SIGTERM): the job leaves the queue, nothing ran."""
    if isinstance(stop, Interrupted):
        how = f"stopped by {signal.Signals(stop.signum).name}" + (
            " (ecolaunch cancel sends it)" if stop.signum == signal.SIGTERM else "")
        _echo(printable(f"ecolaunch: job {job.id} ({job.name}) left the queue without running: {how}; exit "
                         f"{exitcodes.from_signal(stop.signum)}"), err=True)


def _print_decision(
    parsed: ParsedLaunch,
    decision: Decision | None,
    gpus: Mapping,
    job_id: str = "-",
    waited_s: float = 0.0,
    dry_run: bool = False,
    waiting: Waiting | None = None,
) -> None:
    """``--json``: the decision document on stdout; else one line (stdout for a dry run, stderr otherwise).
    ``waiting``: why a dry run's job would wait first (the document's ``waiting``, and ``--explain``'s lines)."""
    if decision is None:
        doc = {"placed": False, "policy": parsed.options.placement_policy, "gpus": [], "cuda_visible_devices": None,
               "power_caps_w": {}, "colocated_with": {}, "reasons": ["no GPUs fit now: the job would wait in the queue"]}
    else:
        doc = {"placed": True, **decision.to_dict(",".join(str(gpus[u].index) for u in decision.gpus))}
    if dry_run:
        doc["waiting"] = None if waiting is None else {"position": waiting.position, "reason": waiting.reason.value,
                                                       "detail": waiting.detail}
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
    if not parsed.options.explain:
        return
    lines = [] if decision is None else explain(decision, gpus)
    if waiting is not None:
        first = "" if decision is None else ", before it runs as above"
        lines.insert(0, f"would wait at position {waiting.position} in the queue{first}: {waiting.text()}")
    for text in lines:
        _echo(printable(f"ecolaunch:   {text}"), err=not dry_run)


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
    chosen_models = {gpus[u].name for u in decision.gpus if u in gpus}
    for alt in decision.alternatives:
        where = ",".join(str(gpus[u].index) for u in alt["gpus"] if u in gpus)
        models = sorted({gpus[u].name for u in alt["gpus"] if u in gpus})
        model_txt = f" ({', '.join(models)})" if set(models) != chosen_models else ""
        caps = sorted({w for w in alt["power_caps_w"].values() if w is not None})
        cap_txt = f"at {caps[0]:.0f} W" if caps else "at default power"
        slow = alt.get("predicted_slowdown_pct")
        predicted = "no prediction" if slow is None else f"predicted {slow:.1f} % slower"
        lines.append(f"not GPU {where}{model_txt} {cap_txt}: {predicted}, {alt['why_not']}")
    if not lines:
        lines.append(f"policy {decision.policy} makes no predictions; it decided by rule")
    return lines


def _emit_json(doc: dict) -> None:
    _echo(json.dumps(doc, indent=2, sort_keys=True))


def _echo(message: str, err: bool = False) -> None:
    """Print one message (stderr with ``err``). Not click's echo: importing click costs ~80 ms after torch, which
    the launch path (the drop-in for torchrun) must not pay."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{message}\n")
    stream.flush()


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def _warn_unsafe_interpreter() -> None:
    """Once per launch, as root only: the interpreter or package runs from files another uid can write."""
    warning = interpreter_warning()
    if warning is not None:
        _echo(with_hint(f"ecolaunch: WARNING: {warning[0]}", warning[1]), err=True)


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ecolaunch: %(message)s"))
    root = logging.getLogger("ecolaunch")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False
