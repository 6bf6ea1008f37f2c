"""Run the workers through torch's own elastic launcher: ``torch.distributed.run.run()`` for a script, and for a
Python function (``ecolaunch.launch(fn)``) torch's ``elastic_launch`` with the configuration ``run()`` would build
(:class:`FunctionCall`; ``run()`` itself discards the workers' return values).

This is the only importer of ``torch.distributed``. ``run()`` has side effects that this module undoes
(see the project notes on torchrun's ``run()``): it mutates its Namespace (we pass a deep copy), writes
``OMP_NUM_THREADS`` and ``TORCHELASTIC_SIGNALS_TO_HANDLE`` into our environment, and replaces the SIGINT,
SIGTERM, SIGHUP and SIGQUIT handlers (restored afterwards). It must run on the main thread, or torch cannot
forward signals to the workers.
"""

from __future__ import annotations

import argparse
import copy
import functools
import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
    #: a function's return value on each global rank (a script's workers return nothing: empty)
    return_values: dict[int, Any] = field(default_factory=dict)
    #: the failure that set ``exit_code``: its global rank and torch's message for it (a function worker's exception)
    failed_rank: int | None = None
    failure: str | None = None


@dataclass(frozen=True)
class FunctionCall:
    """A Python function to run on every worker, with its positional arguments (both picklable: the workers are
    spawned processes). The launch's Namespace names it as a module, ``training_script`` = ``name``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()

    @property
    def name(self) -> str:
        """``module:qualname``; a function of the main script is named by the script's path."""
        module = self.fn.__module__
        if module == "__main__":
            module = os.path.abspath(getattr(sys.modules["__main__"], "__file__", None) or "__main__")
        return f"{module}:{self.fn.__qualname__}"


class _FunctionWorker:
    """What each spawned worker calls: the hooks re-read the environment first (the worker imported ecolaunch
    while unpickling the function, before torch set its ``RANK``), then the function runs."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # torch names the worker group by the entrypoint's __name__

    def __call__(self, *args: Any) -> Any:
        from ecolaunch.profile import hooks  # in the worker: the hooks the function's module already loaded

        hooks.reconfigure(os.environ)
        return self.fn(*args)


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


def run_workers(args: argparse.Namespace, env_updates: Mapping[str, str],
                function: FunctionCall | None = None) -> WorkerOutcome:
    """Launch the worker group with ``env_updates`` added to the workers' environment; wait for it. With
    ``function``, the workers call it instead of running ``args.training_script``."""
    import torch.distributed.run as torchrun
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    saved_handlers = {s: signal.getsignal(s) for s in _HANDLED_SIGNALS}
    saved_env = {k: os.environ.get(k) for k in (*env_updates, *_ENV_TOUCHED_BY_TORCH)}
    os.environ.update(env_updates)
    try:
        if function is None:
            torchrun.run(copy.deepcopy(args))
            return WorkerOutcome(exitcodes.OK)
        config, _, _ = torchrun.config_from_args(_single_node(args, torchrun.parse_min_max_nnodes))
        values = elastic_launch(config, _FunctionWorker(function.fn))(*function.args)
        return WorkerOutcome(exitcodes.OK, return_values=dict(values or {}))
    except ChildFailedError as e:
        _dump_error_file(e)
        rank, root = e.get_first_failure()
        peers = [(r, f.exitcode) for r, f in sorted(e.failures.items(), key=lambda kv: kv[1].timestamp) if r != rank]
        code = exitcodes.from_worker_codes(root.exitcode, [c for _, c in peers])
        # whose code that is (from_worker_codes' order): the root cause's, or a peer's positive one over its signal
        failed = rank if root.exitcode > 0 else next((r for r, c in peers if c > 0), rank)
        return WorkerOutcome(code, report=str(e), failed_rank=failed, failure=_failure_text(e.failures[failed]))
    except SignalException as e:
        return WorkerOutcome(exitcodes.from_signal(e.sigval), signal=int(e.sigval))
    except ValueError as e:  # torch's own argument checks, raised before any worker starts
        raise ConfigError(str(e), hint="fix the torchrun arguments (see 'ecolaunch --help')") from e
    finally:
        _restore_env(saved_env)
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)


def _failure_text(failure) -> str | None:
    """One line for a failed worker from torch's ``ProcessFailure``: a function worker's exception (its error file's
    message), or the signal that killed it; None for a script's exit code (torch's text only points at its docs)."""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message or message.startswith("To enable traceback"):
        return None
    return message


def _single_node(args: argparse.Namespace, nnodes: Callable[[str], tuple[int, int]]) -> argparse.Namespace:
    """A copy of ``args`` with the rendezvous ``run()`` sets up before it launches (torch 2.13,
    ``torch/distributed/run.py``): ``--standalone``, or the static backend on one node (``nnodes`` parses
    ``--nnodes``) with no endpoint and no master port, rendezvous on a free local port."""
    args = copy.deepcopy(args)
    if args.standalone or (args.rdzv_backend == "static" and not args.rdzv_endpoint and args.master_port is None
                           and nnodes(args.nnodes)[1] == 1):
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    if args.master_port is None:
        args.master_port = 29500
    return args


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
