"""``ecolaunch calibrate``: measure this machine's GPUs with canned workloads (see :mod:`ecolaunch.calibrate`).

What lives here: the command, its options and its progress lines (stderr) and summary (stdout). What does not: the
measuring (:mod:`ecolaunch.calibrate`). The command line, its output and its exit codes: docs/admin.md,
"Calibrating to this machine".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import traceback
from typing import Any

import click
from click.core import ParameterSource

from ecolaunch.cli.command import Command, Failed
from ecolaunch.config import ENV_JSON, ENV_SIMULATE, ENV_STATE_DIR
from ecolaunch.errors import ConfigError, EcolaunchError
from ecolaunch.launch import exitcodes

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@click.command("calibrate", cls=Command)
@click.option("--gpu", "gpus", multiple=True, metavar="INDEX|UUID",
              help="A GPU to calibrate (repeat for more). Default: one GPU of each model, the first nobody uses.")
@click.option("--seconds", type=click.FloatRange(min=0.01), default=8.0, show_default=True,
              help="Length of each measurement.")
@click.option("--settle-s", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Running time after each cap change or workload start before a measurement.")
@click.option("--budget-s", type=click.FloatRange(min=1.0), default=540.0, show_default=True,
              help="Time limit per GPU: measurements that would end later are skipped (and listed).")
@click.option("--workloads", default="mm,bw,mlp", show_default=True,
              help="Canned workloads to measure (ecolaunch.calibrate.canned): compute-, memory-, launch-bound; "
                   "NAME@P runs one busy P % of each iteration, idle the rest (e.g. mm@30: an underused GPU).")
@click.option("--no-caps", is_flag=True,
              help="Measure at the current cap only (alone and pairs): needs neither root nor the cap agent.")
@click.option("--no-mps", is_flag=True, help="Leave out the pairs under MPS.")
@click.option("--force", is_flag=True, help="Calibrate a GPU that runs someone's work (its figures are flagged).")
@click.option("--links", is_flag=True,
              help="Measure the links instead: a 2-worker data-parallel step on the best- and the worst-linked pair "
                   "of one GPU model (docs/admin.md#measuring-the-links-between-gpus).")
@click.option("--show", is_flag=True, help="List the calibration results of the state directory, then exit.")
@click.option("--json", "as_json", is_flag=True, envvar=ENV_JSON, help=f"Print JSON. [env var: {ENV_JSON}]")
@click.option("-v", "--verbose", is_flag=True, help="Log each step (INFO) and print tracebacks.")
def calibrate(gpus: tuple[str, ...], seconds: float, settle_s: float, budget_s: float, workloads: str, no_caps: bool,
              no_mps: bool, force: bool, links: bool, show: bool, as_json: bool, verbose: bool) -> None:
    """Measure this machine's GPUs: canned workloads alone at up to 3 power caps and in pairs sharing a GPU.

    Writes one file per GPU model under <state dir>/calibration/ (ECOLAUNCH_STATE_DIR); `ecolaunch policy train`
    trains on them, and launches, `predict` and `simulate` use what it writes. Setting caps needs root or a running
    `ecolaunch agent`; a GPU that runs someone's job is refused unless --force; a GPU the admin policy reserves for
    others is skipped (root may calibrate it). A pair that cannot be true is flagged (measured again on a busy
    host), and `policy train` leaves it out. On simulated GPUs
    (ECOLAUNCH_SIMULATE) the workloads run CPU stand-ins: the figures are not measurements. With the defaults one
    GPU model takes at most about 10 minutes.

    --links measures how much a worse link slows a data-parallel step instead (one file per model, links-*.json):
    it needs two GPUs of one model linked differently, nobody using them.
    """
    # lazy: registering the subcommands loads every cli module; the calibrator's load when `ecolaunch calibrate` runs
    from ecolaunch.admin.safety import warn_unsafe_interpreter
    from ecolaunch.calibrate.plan import Settings  # lazy: as above
    from ecolaunch.cli.logs import stderr_logging  # lazy: as above
    from ecolaunch.runtime import resolve  # lazy: as above

    environment, rules = resolve()
    if show:
        _show(environment.state_dir, as_json)
        return
    if links and gpus:
        raise click.BadParameter("--links chooses its own pairs (the best- and the worst-linked of one model)",
                                 param_hint="'--gpu'")
    if links:
        ctx = click.get_current_context()
        given = [f"--{n.replace('_', '-')}" for n in ("settle_s", "budget_s", "workloads", "no_caps", "no_mps")
                 if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None)]
        if given:
            raise click.UsageError(f"{', '.join(given)} cannot apply to --links, which runs its own step on two GPUs "
                                   "and sets no caps (it takes --seconds, --force and --json)")
    try:
        settings = Settings(workloads=tuple(w.strip() for w in workloads.split(",") if w.strip()), seconds=seconds,
                            settle_s=settle_s, budget_s=budget_s, caps=not no_caps, mps=not no_mps, force=force)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="'--workloads'") from None
    restore = stderr_logging("ecolaunch calibrate", verbose)
    warn_unsafe_interpreter()  # once: when root's imports are not root's alone, isolating its workers cannot help
    saved = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        written, skipped = (_run_links(environment, rules, seconds, force) if links else
                            _run(environment, rules, settings, gpus))
    except _Stopped as e:
        click.echo(f"ecolaunch calibrate: stopped by signal {e.signum}; the GPU's booking is released and its caps "
                   "restored; nothing written for it", err=True)
        raise click.exceptions.Exit(exitcodes.from_signal(e.signum)) from None
    except KeyboardInterrupt:
        click.echo("ecolaunch calibrate: interrupted; the GPU's booking is released and its caps restored; nothing "
                   "written for it", err=True)
        raise click.exceptions.Exit(exitcodes.from_signal(signal.SIGINT)) from None
    except EcolaunchError as e:
        # lazy: the booking (psutil) loads here only when the run failed, to tell a busy GPU from other errors
        from ecolaunch.calibrate.booking import GpuBusy

        if verbose:
            traceback.print_exc()
        raise Failed.from_error(e, exitcodes.NO_PLACEMENT if isinstance(e, GpuBusy) else exitcodes.ERROR) from e
    except (click.exceptions.ClickException, click.exceptions.Exit):
        raise
    except Exception as e:  # noqa: BLE001 - a surprise becomes one clear line (the caps were restored on the way)
        click.echo(f"ecolaunch bug: {type(e).__name__}: {e} (rerun with -v for the traceback)", err=True)
        if verbose:
            traceback.print_exc()
        raise click.exceptions.Exit(exitcodes.ERROR) from None
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        restore()
    if as_json:
        click.echo(json.dumps([{"path": str(path), **doc} for path, doc in written], indent=1, sort_keys=True))
    else:
        for path, doc in written:
            click.echo(_links_summary(doc) if links else _summary(doc))
            click.echo(f"wrote {path} ({doc['wall_s']:.1f} s)")
        if written and not links:
            click.echo("next: `ecolaunch policy train` trains the GNN on these results and the job history; launches, "
                       "`ecolaunch predict` and `ecolaunch simulate` then use its weights")
    if not links:
        _outcome(written, skipped, settings.caps)


def _outcome(written: list[tuple[Any, dict]], skipped: list, caps_asked: bool) -> None:
    """The warning for flagged pairs, and the failure (exit 1, else 77) for what was asked and not measured."""
    flagged = sum(1 for _, doc in written for p in doc["pairs"] if p.get("flagged"))
    if flagged:
        click.echo(f"Warning: {flagged} pair(s) flagged: their figures cannot be true (see 'flagged' above); "
                   "`ecolaunch policy train` leaves them out", err=True)
    uncapped = [doc for _, doc in written if caps_asked and not doc["caps"]["measured"]]
    if uncapped:
        raise Failed("; ".join(f"GPU {d['gpu']['index']} ({d['gpu']['name']}): caps were asked for and no capped "
                               f"point was measured ({d['caps']['why_not']})" for d in uncapped) +
                     "; its results file holds the figures at the current limit only",
                     hint="see why above; calibrate as root or with the cap agent (`sudo ecolaunch agent`) on a GPU "
                          "the admin policy lets ecolaunch cap ([agent] gpus), or add --no-caps to measure the "
                          "current limit only")
    if skipped:
        raise Failed(_skipped_line(skipped), exit_code=exitcodes.NOT_PERMITTED,
                     hint="calibrate a GPU you may use (--gpu), or ask the lab admin: root may calibrate a reserved "
                          f"GPU (sudo ecolaunch calibrate --gpu {skipped[0].gpu.index})")


def _skipped_line(skipped: list) -> str:
    from ecolaunch.runtime import current_user  # lazy: as in calibrate()

    them = "it" if len(skipped) == 1 else "them"
    return (f"skipped {'; '.join(r.describe() for r in skipped)}: the admin policy ([reserve]) keeps {them} from "
            f"user {current_user()}, and a calibration books its GPU")


def _run(environment, rules, settings, selectors: tuple[str, ...]) -> tuple[list[tuple[Any, dict]], list]:
    # lazy: as in calibrate(): the calibrator, its booking and the session load when `ecolaunch calibrate` runs
    from ecolaunch.calibrate.booking import GpuBusy
    from ecolaunch.calibrate.results import write_result  # lazy: as above
    from ecolaunch.calibrate.plan import cap_access, choose_gpus, closed_gpus  # lazy: as above
    from ecolaunch.calibrate.run import SIMULATED_NOTE, calibrate_gpu  # lazy: as above
    from ecolaunch.runtime import current_groups, current_user  # lazy: as above

    backend, session, host, busy = _open(environment, rules)
    host_gpus = list(host.gpus.values()) if host is not None else []
    closed = closed_gpus(rules, current_user(), current_groups(), host_gpus)
    try:
        choice = choose_gpus(host_gpus, busy, selectors, closed, root=os.geteuid() == 0)
    except ConfigError as e:
        raise click.BadParameter(f"{e}" + (f" ({e.hint})" if e.hint else ""), param_hint="'--gpu'") from None
    chosen = choice.gpus
    if not chosen and not choice.skipped:
        raise EcolaunchError(f"no GPUs on host {session.host}", hint=f"check the driver, or set {ENV_SIMULATE}")
    if not chosen:
        return [], choice.skipped  # the error says which GPUs were skipped, and why
    _say_reserved(choice)
    if not settings.force:
        for g in chosen:
            if busy[g.uuid]:
                raise GpuBusy(g, busy[g.uuid])
    if settings.caps and cap_access(backend, environment.state_dir) is None:
        raise EcolaunchError(
            f"setting power caps on {backend.kind} GPUs needs root or the cap agent (running as {current_user()}, "
            f"and no `ecolaunch agent` serves {environment.state_dir})",
            hint="run `sudo ecolaunch calibrate`, or start the cap agent (`sudo ecolaunch agent`), or add --no-caps "
                 "to measure pairs and the current cap only")
    say = _progress
    if backend.kind == "simulated":
        say(SIMULATED_NOTE)
    launcher = _launcher()
    say(f"{len(chosen)} GPU(s): " + ", ".join(f"{g.index} ({g.name})" for g in chosen) +
        f"; up to {settings.budget_s:g} s each; results in {environment.state_dir}/calibration/")
    written = []
    for gpu in chosen:
        doc = calibrate_gpu(session, gpu, environment.state_dir, dict(os.environ), settings, launcher=launcher,
                            progress=say, shielded=_signals_held)
        written.append((write_result(environment.state_dir, doc), doc))
    return written, choice.skipped


def _open(environment, rules):
    """The backend, the session, this host in the state graph (None: no GPUs) and who uses each of its GPUs."""
    # lazy: as in calibrate()
    from ecolaunch.calibrate.booking import occupants
    from ecolaunch.caps.job import orphan_keeper  # lazy: as above
    from ecolaunch.launch.session import Session  # lazy: as above
    from ecolaunch.policy.baselines import ExclusivePolicy  # lazy: as above
    from ecolaunch.runtime import open_gpus  # lazy: as above
    from ecolaunch.state.store import StateStore  # lazy: as above

    backend = open_gpus(environment)
    store = StateStore(environment.state_dir, group=rules.state_group)
    session = Session(store, backend, ExclusivePolicy(), rules,
                      cap_keeper=orphan_keeper(backend, rules, environment.state_dir))
    graph = session.snapshot()
    host = graph.hosts.get(session.host)
    busy = {g.uuid: occupants(graph, g) for g in (host.gpus.values() if host is not None else ())}
    return backend, session, host, busy


def _launcher():
    from ecolaunch.launch.session import Launcher  # lazy: as in calibrate()
    from ecolaunch.runtime import current_user  # lazy: as above
    from ecolaunch.state.reconcile import process_start_time  # lazy: as above

    return Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user=current_user())


def _run_links(environment, rules, seconds: float, force: bool) -> tuple[list[tuple[Any, dict]], list]:
    """``--links``: the best- and the worst-linked pair of one model, measured and written."""
    # lazy: as in calibrate()
    from ecolaunch.calibrate.links import calibrate_links, choose_pairs
    from ecolaunch.calibrate.plan import closed_gpus  # lazy: as above
    from ecolaunch.calibrate.results import write_result  # lazy: as above
    from ecolaunch.calibrate.run import SIMULATED_NOTE  # lazy: as above
    from ecolaunch.runtime import current_groups, current_user  # lazy: as above

    backend, session, host, busy = _open(environment, rules)
    if host is None or not host.gpus:
        raise EcolaunchError(f"no GPUs on host {session.host}", hint=f"check the driver, or set {ENV_SIMULATE}")
    closed = [] if os.geteuid() == 0 else list(closed_gpus(rules, current_user(), current_groups(),
                                                           host.gpus.values()))
    choice = choose_pairs(host, {} if force else busy, closed)
    if not choice.pairs:
        in_use = any(busy.values()) and not force
        raise Failed(f"nothing to compare: {choice.why}",
                     exit_code=exitcodes.NO_PLACEMENT if in_use else exitcodes.ERROR,
                     hint="try again when the GPUs are free (`ecolaunch status` shows who uses which)" if in_use else
                          "a link probe compares a best- and a worst-linked pair of one GPU model; this host's "
                          "links are what `nvidia-smi topo -m` shows")
    simulated = backend.kind == "simulated"
    if simulated:
        _progress(SIMULATED_NOTE)
    doc = calibrate_links(session, choice.pairs, dict(os.environ), simulated=simulated, launcher=_launcher(),
                          seconds=seconds, force=force, progress=_progress, shielded=_signals_held,
                          note=SIMULATED_NOTE if simulated else None)
    return [(write_result(environment.state_dir, doc), doc)], []


def _links_summary(doc: dict) -> str:
    lines = [f"links of {doc['gpu']['name']} on {doc['host']}" +
             (" (simulated: not measurements)" if doc["simulated"] else "")]
    lines.append(f"  {'GPUs':<8}{'link':<13}{'step ms':>9}{'all-reduce ms':>15}{'GB/s':>8}")
    for p in doc["pairs"]:
        lines.append(f"  {'+'.join(map(str, p['gpus'])):<8}{p['link']:<13}{p['step_ms']:>9.2f}"
                     f"{p['allreduce_ms']:>15.2f}{p['busbw_gb_s']:>8.1f}")
    pen = doc["penalty"]
    lines.append(f"  the worse link slows the step by {pen['step_slowdown_pct']:+.1f} % "
                 f"(± {pen['step_slowdown_se_pct']:.1f} points) and the all-reduce by "
                 f"{pen['allreduce_slowdown_pct']:+.1f} %")
    return "\n".join(lines)


def _say_reserved(choice) -> None:
    """One line for each way the reservations changed the choice of GPUs (none when they did not)."""
    if choice.skipped:
        _progress(_skipped_line(choice.skipped))
    if choice.instead:
        _progress("left out " + "; ".join(f"{r.describe()}: GPU {g.index} of its model instead"
                                          for r, g in choice.instead))
    if choice.as_root:
        them = "it" if len(choice.as_root) == 1 else "them"
        _progress(f"calibrating {'; '.join(r.describe() for r in choice.as_root)}, as root (root may, and may cap "
                  f"{them}): launches wait for {them} meanwhile")


def _progress(line: str) -> None:
    click.echo(f"ecolaunch calibrate: {line}", err=True)


def _summary(doc: dict) -> str:
    g = doc["gpu"]
    lines = [f"GPU {g['index']} {g['name']}" + (" (simulated: not measurements)" if doc["simulated"] else "")]
    lines.append(f"  {'alone':<10}{'cap W':>8}{'ms/iter':>10}{'W':>8}{'SM %':>7}{'mem %':>7}")
    for e in doc["alone"]:
        lines.append(f"  {e['workload']:<10}{_n(e['power_cap_w'], 0):>8}{_n(_ms(e['iter_time_s']), 2):>10}"
                     f"{_n(e['power_w'], 0):>8}{_n(e['sm_util_pct'], 0):>7}{_n(e['mem_util_pct'], 0):>7}")
    if doc["pairs"]:
        lines.append(f"  {'pair':<14}{'sharing':<14}{'cap W':>6}{'throughput':>16}{'W':>8}")
        for p in doc["pairs"]:
            thr = " / ".join(_n(j["normalized_throughput"], 2) for j in p["jobs"])
            lines.append(f"  {'+'.join(p['workloads']):<14}{p['sharing']:<14}{_n(p['power_cap_w'], 0):>6}{thr:>16}"
                         f"{_n(p['power_w'], 0):>8}")
    for p in doc["pairs"]:
        if p.get("flagged"):
            again = ", measured twice" if p.get("remeasured") else ""
            lines.append(f"  flagged {'+'.join(p['workloads'])} ({p['sharing']}{again}): {p['flagged']}")
    if not doc["caps"]["measured"]:
        lines.append(f"  caps: not measured ({doc['caps']['why_not']})")
    if not doc["mps"]["measured"]:
        lines.append(f"  MPS: not measured ({doc['mps']['why_not']})")
    for s in doc["skipped"]:
        lines.append(f"  skipped {s['what']}: {s['why']}")
    return "\n".join(lines)


def _show(state_dir, as_json: bool) -> None:
    # lazy: registering the subcommands loads every cli module; the results load only when `calibrate --show` runs
    from ecolaunch.calibrate.results import is_links, read_results

    stored = read_results(state_dir)
    for r in stored:
        if r.doc is None:
            click.echo(f"Warning: {r.path}: {r.problem} (not used)", err=True)
    usable = [r for r in stored if r.doc is not None]
    if as_json:
        click.echo(json.dumps([{"path": str(r.path), **r.doc} for r in usable], indent=1, sort_keys=True))
        return
    if not usable:
        click.echo(f"no calibration results in {state_dir}/calibration/ (run `ecolaunch calibrate`; "
                   f"{ENV_STATE_DIR} selects the state directory)")
        return
    rows = [("MODEL", "WHEN", "ALONE", "PAIRS", "MPS", "FILE")]
    for r in usable:
        d = r.doc
        links = is_links(d)
        name = d["gpu"]["name"] + (" links" if links else "") + (" (simulated)" if d["simulated"] else "")
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(d.get("started_at") or 0))
        mps = "-" if links else "yes" if d.get("mps", {}).get("measured") else "no"
        rows.append((name, when, "-" if links else str(len(d["alone"])), str(len(d["pairs"])), mps, str(r.path)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(f"{c:<{w}}" for c, w in zip(row, widths)) + "  " + row[-1])


def _n(value: float | None, digits: int) -> str:
    return "N/A" if value is None else f"{value:.{digits}f}"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped(signum)


@contextlib.contextmanager
def _signals_held():
    """Stop signals wait while the booking is released and caps restored; one that arrived is delivered after."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
