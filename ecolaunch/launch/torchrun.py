"""Run the workers through torch's own elastic launcher, ``torch.distributed.run.run()``.

This is the only importer of ``torch.distributed``. ``run()`` has side effects that this module undoes
(see the project notes on torchrun's ``run()``): it mutates its Namespace (we pass a deep copy), writes
``OMP_NUM_THREADS`` and ``TORCHELASTIC_SIGNALS_TO_HANDLE`` into our environment, and replaces the SIGINT,
SIGTERM, SIGHUP and SIGQUIT handlers (restored afterwards). It must run on the main thread, or torch cannot
forward signals to the workers.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from ecolaunch.errors import ConfigError
from ecolaunch.launch import exitcodes

logger = logging.getLogger(__name__)

_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_ENV_TOUCHED_BY_TORCH = ("OMP_NUM_THREADS", "TORCHELASTIC_SIGNALS_TO_HANDLE")


@dataclass(frozen=True, slots=True)
class WorkerOutcome:
    """How the worker group ended: the exit code to use, and torchrun's failure report when it failed."""

    exit_code: int
    report: str | None = None
    signal: int | None = None


def check_args(args: argparse.Namespace, nproc_override: str | None = None) -> None:
    """Run torch's own validation of a launch (``config_from_args``) without launching anything.

    Raises ConfigError with torch's message (e.g. ``--no-python`` with ``-m``, an unknown ``--logs-specs``),
    so that a bad command line never waits in the queue or books GPUs. ``nproc_override`` replaces
    ``--nproc-per-node`` values that only ecolaunch resolves (``gpu``/``auto`` become the granted GPU count).
    """
    import torch.distributed.run as torchrun

    probe = copy.deepcopy(args)
    if nproc_override is not None:
        probe.nproc_per_node = nproc_override
    saved_env = {k: os.environ.get(k) for k in _ENV_TOUCHED_BY_TORCH}
    # config_from_args logs torch's OMP_NUM_THREADS banner; the real launch prints it, the probe must not
    torch_logger = logging.getLogger(torchrun.__name__)
    saved_level = torch_logger.level
    torch_logger.setLevel(logging.ERROR)
    try:
        torchrun.config_from_args(probe)
    except ValueError as e:
        raise ConfigError(str(e), hint="fix the torchrun arguments (see 'ecolaunch --help')") from e
    finally:
        torch_logger.setLevel(saved_level)
        _restore_env(saved_env)


def run_workers(args: argparse.Namespace, env_updates: Mapping[str, str]) -> WorkerOutcome:
    """Launch the worker group with ``env_updates`` added to the workers' environment; wait for it."""
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    saved_handlers = {s: signal.getsignal(s) for s in _HANDLED_SIGNALS}
    saved_env = {k: os.environ.get(k) for k in (*env_updates, *_ENV_TOUCHED_BY_TORCH)}
    os.environ.update(env_updates)
    try:
        torchrun.run(copy.deepcopy(args))
        return WorkerOutcome(exitcodes.OK)
    except ChildFailedError as e:
        _dump_error_file(e)
        rank, root = e.get_first_failure()
        others = [f.exitcode for r, f in sorted(e.failures.items(), key=lambda kv: kv[1].timestamp) if r != rank]
        return WorkerOutcome(exitcodes.from_worker_codes(root.exitcode, others), report=str(e))
    except SignalException as e:
        return WorkerOutcome(exitcodes.from_signal(e.sigval), signal=int(e.sigval))
    except ValueError as e:  # torch's own argument checks, raised before any worker starts
        raise ConfigError(str(e), hint="fix the torchrun arguments (see 'ecolaunch --help')") from e
    finally:
        _restore_env(saved_env)
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)


def _restore_env(saved: Mapping[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value



def _dump_error_file(e) -> None:
    """Do what torchrun's ``@record`` does: copy the root cause's error file to our own, if we have one."""
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    _, failure = e.get_first_failure()
    if failure.error_file and failure.error_file != "<N/A>" and os.path.exists(failure.error_file):
        try:
            get_error_handler().dump_error_file(failure.error_file, failure.exitcode)
        except Exception:  # best effort, as in torch's own decorator
            logger.debug("could not copy the worker's error file %s", failure.error_file, exc_info=True)
