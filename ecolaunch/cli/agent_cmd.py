"""``ecolaunch agent``: the privileged cap agent (run it as root, e.g. from examples/ecolaunch-agent.service)."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from ecolaunch.cli.command import Command, Failed
from ecolaunch.cli.stopsignals import StopSignals
from ecolaunch.errors import with_hint

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: a pass never waits longer than this for the state lock (then it works from a lock-free snapshot)
AGENT_LOCK_TIMEOUT_S = 5.0


def _textfile(ctx: click.Context, param: click.Parameter, path: Path | None) -> Path | None:
    """``--textfile``: a ``*.prom`` file (node_exporter reads no other) in a directory that exists."""
    if path is None:
        return None
    if path.suffix != ".prom":
        raise click.BadParameter(with_hint(f"{str(path)!r} does not end in .prom, and node_exporter's textfile "
                                           "collector reads only *.prom files", f"name it {path.with_suffix('.prom')}"),
                                 ctx, param)
    if not path.parent.is_dir():
        raise click.BadParameter(with_hint(f"the directory of {str(path)!r} does not exist", "give a file in "
                                           "node_exporter's --collector.textfile.directory"), ctx, param)
    return path


@click.command(cls=Command)
@click.option("--once", is_flag=True, help="one pass (apply wanted caps, restore the rest from the ledger), then exit")
@click.option("--restore", is_flag=True, help="restore every GPU recorded in the ledger to its original cap, then exit")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="seconds between two passes")
@click.option("--ledger", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the ledger of original caps (default: <state dir>/caps.json)")
@click.option("--textfile", type=click.Path(dir_okay=False, path_type=Path), default=None, callback=_textfile,
              help="write this host's metrics there after every pass, for node_exporter's textfile collector (a "
              "*.prom file in its --collector.textfile.directory; see docs/accounting.md)")
@click.option("-v", "--verbose", is_flag=True, help="log every change (INFO)")
@click.pass_context
def agent(ctx: click.Context, once: bool, restore: bool, interval_s: float, ledger: Path | None,
          textfile: Path | None, verbose: bool) -> None:
    """Apply the power caps that running jobs want, within the admin policy; restore each GPU's original cap.

    Runs as root on real GPUs (anyone may run it on simulated ones, ECOLAUNCH_SIMULATE). Reads the policy
    (ECOLAUNCH_POLICY) and the state directory (ECOLAUNCH_STATE_DIR) like every other command. SIGTERM, Ctrl-C or
    SIGHUP restores every GPU it changed, then exits 128 + the signal's number (143, 130, 129), as the launcher and
    the exporter do.
    """
    # lazy: registering the subcommands loads every cli module; the agent's load only when `ecolaunch agent` runs
    from ecolaunch.caps.agent import CapAgent
    from ecolaunch.admin.safety import require_cap_privilege, warn_unsafe_interpreter  # lazy: as above
    from ecolaunch.runtime import open_gpus, resolve  # lazy: as above
    from ecolaunch.cli.logs import stderr_logging  # lazy: as above
    from ecolaunch.launch.exitcodes import from_signal  # lazy: as above
    from ecolaunch.state.store import StateStore  # lazy: as above

    restore_logging = stderr_logging("ecolaunch agent", verbose)
    warn_unsafe_interpreter()  # root runs from files another uid can write: say so once, with the fix
    try:
        environment, rules = resolve()
        backend = open_gpus(environment)
        require_cap_privilege(backend)
        store = StateStore(environment.state_dir, group=rules.state_group, lock_timeout_s=AGENT_LOCK_TIMEOUT_S)
        cap_agent = CapAgent(store, backend, rules, ledger_path=ledger, textfile=textfile)
        if restore:
            report = cap_agent.restore_all()
            click.echo(f"ecolaunch agent: restored {_describe(report.restored)}")
            return
        if once:
            report = cap_agent.step()
            click.echo(f"ecolaunch agent: set {_describe(report.applied)}; restored {_describe(report.restored)}"
                       + (f"; ignored {len(report.ignored)} request(s)" if report.ignored else ""))
            return
        with StopSignals(_STOP_SIGNALS) as stop:
            click.echo(f"ecolaunch agent: serving {environment.state_dir} on {backend.kind} GPUs every "
                       f"{interval_s:g} s", err=True)
            report = cap_agent.run(interval_s, stop)
        got = stop.received
        why = f" ({signal.Signals(got[0]).name})" if got else ""
        click.echo(f"ecolaunch agent: stopped{why}; restored {_describe(report.restored)}", err=True)
        if got:  # stopped by a signal: 128 + its number, as the launcher and the exporter (issue 41: it exited 0)
            ctx.exit(from_signal(got[0]))
    except OSError as e:  # --once/--restore: the ledger could not be written (the loop logs and retries instead)
        raise Failed(f"cannot write the cap ledger: {e}", hint="free space there, or run `ecolaunch init-state` to "
                     "repair the state directory (or pass --ledger a file in a root-only directory)") from e
    finally:
        restore_logging()


def _describe(caps: dict[str, float]) -> str:
    return ", ".join(f"{u} {w:.0f} W" for u, w in caps.items()) if caps else "nothing"


if __name__ == "__main__":  # ``python -m ecolaunch.cli.agent_cmd`` until ``ecolaunch agent`` is registered
    agent()
