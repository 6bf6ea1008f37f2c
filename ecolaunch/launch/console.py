"""A launch's lines on the terminal: the :class:`~ecolaunch.launch.pipeline.LaunchCallbacks` that the command line
(``ecolaunch.cli.launch_cmd``) and the Python API (``ecolaunch.launch()``) both run a launch with, so that both
print the same lines: the decision (or its JSON), queue lines, the end-of-job summary, and how stop signals are held
while a job's GPUs are released.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
import time
from collections.abc import Callable, Mapping

from ecolaunch.launch import exitcodes
from ecolaunch.run.observer import RunObserver, RunSummary, format_summary
from ecolaunch.launch.options import LaunchConfig
from ecolaunch.launch.pipeline import LaunchCallbacks
from ecolaunch.launch.torchrun import WorkerOutcome
from ecolaunch.policy.base import Decision
from ecolaunch.policy.waiting import Waiting
from ecolaunch.state.graph import GpuNode, Job
from ecolaunch.text import gist, printable

#: the signals that stop a launch (the CLI raises :class:`Interrupted` for them)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """Raised by our signal handlers outside torch's run(), so that ``finally`` blocks release the job."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def callbacks(config: LaunchConfig, *, on_summary: Callable[[RunSummary], None] = lambda summary: None,
              on_finished: Callable[[WorkerOutcome], None] = lambda outcome: None) -> LaunchCallbacks:
    """How a launch of ``config`` reports on the terminal. ``on_summary`` also gets the job's summary (a job placed
    on GPUs), ``on_finished`` how its workers ended: the Python API keeps both."""

    def summary(observer: RunObserver) -> None:
        done = observer.summary()
        echo(format_summary(done), err=True)
        on_summary(done)

    return LaunchCallbacks(
        decision=functools.partial(_print_decision, config),
        no_gpus=functools.partial(_print_no_gpus, config),
        message=lambda line: echo(f"ecolaunch: {line}", err=True),
        waiting=_wait_reporter(),
        left_queue=_print_left_queue,
        summary=summary,
        shielded=_signals_held,
        finished=on_finished,
    )


@contextlib.contextmanager
def _signals_held():
    """Stop signals wait while the booking is released and caps restored (a second Ctrl-C cannot interrupt the
    write); a signal that arrived meanwhile is delivered right after."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _print_no_gpus(config: LaunchConfig, why: str, dry_run: bool) -> None:
    """Launching without placement (no GPUs asked for, or no driver): one line; a dry run's decision document."""
    if config.options.json and dry_run:
        _emit_json({"placed": False, "policy": None, "gpus": [], "cuda_visible_devices": None, "power_caps_w": {},
                    "colocated_with": {}, "reasons": [why]})
        return
    echo(f"ecolaunch: {why}" + ("; would launch like torchrun" if dry_run else ""), err=not dry_run)


#: seconds between two queue lines of a waiting launcher whose position and reason did not change
WAIT_REPORT_S = 10.0


def _wait_reporter():
    """The waiting launcher's queue lines: one at once, then one each WAIT_REPORT_S, and one whenever the position
    or the reason changes (not its figures: the seconds to a reservation change at every try)."""
    last: dict = {"t": -1e9, "why": None}

    def report(job: Job, waiting: Waiting, waited_s: float) -> None:
        why = (waiting.position, waiting.reason, gist(waiting.detail))
        if waited_s - last["t"] >= WAIT_REPORT_S or why != last["why"]:
            last["t"], last["why"] = waited_s, why
            starts_in = waiting.starts_in(time.time())
            starts = "" if starts_in is None else f", expected to start in about {starts_in:.0f} s"
            echo(printable(f"ecolaunch: job {job.id} ({job.name}) waiting: position {waiting.position} in the "
                             f"queue, {waited_s:.0f} s so far{starts}: {waiting.text()}"), err=True)

    return report


def _print_left_queue(job: Job, stop: BaseException) -> None:
    """A stop signal ended the wait (``ecolaunch cancel`` sends SIGTERM): the job leaves the queue, nothing ran."""
    if isinstance(stop, Interrupted):
        how = f"stopped by {signal.Signals(stop.signum).name}" + (
            " (ecolaunch cancel sends it)" if stop.signum == signal.SIGTERM else "")
        echo(printable(f"ecolaunch: job {job.id} ({job.name}) left the queue without running: {how}; exit "
                         f"{exitcodes.from_signal(stop.signum)}"), err=True)


def _print_decision(
    config: LaunchConfig,
    decision: Decision | None,
    gpus: Mapping[str, GpuNode],
    job_id: str = "-",
    waited_s: float = 0.0,
    dry_run: bool = False,
    waiting: Waiting | None = None,
) -> None:
    """``--json``: the decision document on stdout; else one line (stdout for a dry run, stderr otherwise).
    ``waiting``: why a dry run's job would wait first (the document's ``waiting``, and ``--explain``'s lines)."""
    if decision is None:
        doc = {"placed": False, "policy": config.options.policy, "gpus": [], "cuda_visible_devices": None,
               "power_caps_w": {}, "colocated_with": {}, "reasons": ["no GPUs fit now: the job would wait in the queue"]}
    else:
        doc = {"placed": True, **decision.to_dict(",".join(str(gpus[u].index) for u in decision.gpus))}
    if dry_run:
        starts_in = None if waiting is None else waiting.starts_in(time.time())
        doc["waiting"] = None if waiting is None else {"position": waiting.position, "reason": waiting.reason.value,
                                                       "detail": waiting.detail,
                                                       "starts_in_s": None if starts_in is None else round(starts_in, 1)}
    if config.options.json:
        _emit_json(doc)
        return
    if decision is None:
        line = f"ecolaunch: {doc['reasons'][0]}"
    else:
        names = ", ".join(sorted({gpus[u].name for u in decision.gpus}))
        waited = f" after waiting {waited_s:.0f} s" if waited_s >= 1 else ""
        verb = "would run" if dry_run else f"job {job_id} runs"
        line = f"ecolaunch: {verb} on GPU {doc['cuda_visible_devices']} ({names}), policy {decision.policy}{waited}: {'; '.join(decision.reasons)}"
    if dry_run and waiting is not None:
        starts = "start unknown" if starts_in is None else f"expected to start in about {starts_in:.0f} s"
        line += f" ({starts}, at position {waiting.position} in the queue)"
    echo(line, err=not dry_run)
    if not config.options.explain:
        return
    lines = [] if decision is None else explain(decision, gpus)
    if waiting is not None:
        first = "" if decision is None else ", before it runs as above"
        lines.insert(0, f"would wait at position {waiting.position} in the queue{first}: {waiting.text()}")
    for text in lines:
        echo(printable(f"ecolaunch:   {text}"), err=not dry_run)


def explain(decision: Decision, gpus: Mapping[str, GpuNode]) -> list[str]:
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
    echo(json.dumps(doc, indent=2, sort_keys=True))


def echo(message: str, err: bool = False) -> None:
    """Print one message (stderr with ``err``). Not click's echo: importing click costs ~80 ms after torch, which
    the launch path (the drop-in for torchrun) must not pay."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{message}\n")
    stream.flush()


