"""The launch command: ``ecolaunch [torchrun options] [ecolaunch options] script [args]``.

The CLI's side of a launch: parse (:func:`ecolaunch.launch.argv.parse` builds the
:class:`~ecolaunch.launch.options.LaunchConfig`), install the signal handlers, run the pipeline with the terminal's
callbacks (:mod:`ecolaunch.launch.console`), and map outcomes and errors to exit codes.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import traceback
from collections.abc import Collection, Mapping

from ecolaunch.admin.interpreter import interpreter_warning
from ecolaunch.errors import EcolaunchError, NoPlacement, WaitTimeout, with_hint
from ecolaunch.launch import argv as launch_argv
from ecolaunch.launch import console, exitcodes
from ecolaunch.launch.console import STOP_SIGNALS, Interrupted
from ecolaunch.launch.pipeline import run_launch
from ecolaunch.launch.procname import set_name
from ecolaunch.runtime import launch_context

logger = logging.getLogger("ecolaunch")


def launch(argv: list[str], env: Mapping[str, str], subcommands: Collection[str] = ()) -> int:
    """Run one launch; returns the exit code (see ``ecolaunch.launch.exitcodes``). ``subcommands``: the names the
    help lists."""
    config = launch_argv.parse(argv, env, subcommands=subcommands)  # argparse exits 2 on bad arguments, as torchrun
    # torch's import leaves about a million objects to the garbage collector; without this, the first full
    # collection during ecolaunch's own work costs tens of milliseconds on every launch
    gc.freeze()
    set_name()  # `ps -o comm` says ecolaunch while it waits in the queue too, not python (issue 41)
    _setup_logging(config.options.verbose)
    _warn_unsafe_interpreter()
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _raise_interrupted)
    try:
        return run_launch(config, env, launch_context(env), console.callbacks(config))
    except Interrupted as e:
        return exitcodes.from_signal(e.signum)
    except EcolaunchError as e:
        # nothing fits (now, or within --wait-timeout): "try again later" (75), no traceback even with -v
        later = isinstance(e, (NoPlacement, WaitTimeout))
        console.echo(e.render(), err=True)
        if config.options.verbose and not later:
            traceback.print_exc()
        return exitcodes.NO_PLACEMENT if later else exitcodes.ERROR
    except Exception as e:  # noqa: BLE001 - the one place that turns surprises into a clear line
        console.echo(f"ecolaunch bug: {type(e).__name__}: {e} (rerun with -v for the traceback)", err=True)
        if config.options.verbose:
            traceback.print_exc()
        return exitcodes.ERROR
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def _warn_unsafe_interpreter() -> None:
    """Once per launch, as root only: the interpreter or package runs from files another uid can write."""
    warning = interpreter_warning()
    if warning is not None:
        console.echo(with_hint(f"ecolaunch: WARNING: {warning[0]}", warning[1]), err=True)


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ecolaunch: %(message)s"))
    root = logging.getLogger("ecolaunch")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False
