"""Run the workers through torch's own elastic launcher: ``torch.distributed.run.run()`` for a script, and for a
Python function (``ecolaunch.launch(fn)``) torch's ``elastic_launch`` with the configuration ``run()`` would build.

What lives here: :func:`run_workers` (on the main thread; ``run()``'s side effects undone), :class:`TorchrunArgs`,
:class:`FunctionCall`, :class:`WorkerOutcome`, :func:`check_args`, :class:`Rendezvous` and :func:`rendezvous_of`,
and the c10d handler that agrees each round (``ecolaunch-c10d``). What does not: the parser
(:mod:`ecolaunch.launch.argv`), the process name (:mod:`ecolaunch.launch.procname`), the meeting
(:mod:`ecolaunch.launch.nodes`). Which side effects, and why: docs/torchrun.md, "torch's run(), as the launcher
calls it".
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ecolaunch.errors import ConfigError
from ecolaunch.launch import exitcodes
from ecolaunch.launch.procname import keeping_name

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


@dataclass(frozen=True)
class TorchrunArgs:
    """torchrun's side of a launch: torch's own parse of its options (``torch.distributed.run``'s parser), read
    through these properties and handed back to torch only here, always as a copy (torch mutates what it gets)."""

    parsed: argparse.Namespace = field(repr=False)

    @property
    def script(self) -> str:
        """The training script (a module's name with ``-m``, a program with ``--no-python``)."""
        return self.parsed.training_script

    @property
    def script_args(self) -> tuple[str, ...]:
        return tuple(self.parsed.training_script_args)

    @property
    def nproc_per_node(self) -> str:
        """As given: a count, or a word ecolaunch resolves (``gpu``, ``auto``, ``cpu``)."""
        return str(self.parsed.nproc_per_node)

    @property
    def module(self) -> bool:
        return bool(self.parsed.module)

    @property
    def no_python(self) -> bool:
        return bool(self.parsed.no_python)

    @property
    def nnodes(self) -> str:
        return str(self.parsed.nnodes)

    @property
    def standalone(self) -> bool:
        return bool(getattr(self.parsed, "standalone", False))

    def replace(self, **changes: Any) -> TorchrunArgs:
        """A copy with torch's options ``changes`` (by their Namespace names: ``nproc_per_node="2"``)."""
        ns = self.namespace()
        for name, value in changes.items():
            if not hasattr(ns, name):
                raise AttributeError(f"torchrun has no option {name!r}")
            setattr(ns, name, value)
        return TorchrunArgs(ns)

    def namespace(self) -> argparse.Namespace:
        """A copy of torch's Namespace, for torch."""
        return copy.deepcopy(self.parsed)


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


def check_args(args: TorchrunArgs, nproc_override: str | None = None) -> None:
    """Run torch's own validation of a launch (``config_from_args``) without launching anything.

    Raises ConfigError with torch's message (e.g. ``--no-python`` with ``-m``, an unknown ``--logs-specs``),
    so that a bad command line never waits in the queue or books GPUs. ``nproc_override`` replaces
    ``--nproc-per-node`` values that only ecolaunch resolves (``gpu``/``auto`` become the granted GPU count).
    """
    import torch.distributed.run as torchrun

    probe = args.namespace()
    if nproc_override is not None:
        probe.nproc_per_node = nproc_override
    saved_env = {k: os.environ.get(k) for k in _ENV_TOUCHED_BY_TORCH}
    # config_from_args logs torch's OMP_NUM_THREADS banner; the real launch prints it, the probe must not
    torch_logger = logging.getLogger(torchrun.__name__)
    saved_level = torch_logger.level
    torch_logger.setLevel(logging.ERROR)
    try:
        torchrun.config_from_args(probe)
    except (ValueError, AssertionError) as e:  # torch checks some options with assert (``--nnodes 3:1``)
        raise ConfigError(str(e) or f"torch refused the arguments ({type(e).__name__})",
                          hint="fix the torchrun arguments (see 'ecolaunch --help')") from e
    finally:
        torch_logger.setLevel(saved_level)
        _restore_env(saved_env)


@dataclass(frozen=True, slots=True)
class Rendezvous:
    """Where the nodes of a job meet, as torch's ``config_from_args`` resolves it: the backend, the endpoint
    (``host:port``; the static backend's is ``--master-addr:--master-port``), the run id, the node counts and, for the
    static backend, this node's rank (None: torch assigns it at the rendezvous)."""

    backend: str
    endpoint: str
    run_id: str
    min_nodes: int
    max_nodes: int
    node_rank: int | None
    #: seconds torch itself waits for the other nodes (the static backend's ``timeout``, c10d's ``join_timeout``)
    join_timeout_s: float

    @property
    def multi_node(self) -> bool:
        return self.max_nodes > 1


def rendezvous_of(args: TorchrunArgs) -> Rendezvous:
    """The rendezvous torch will run for ``args`` (a checked launch: :func:`check_args` passed), read from torch's
    own ``config_from_args`` (and its defaults: 900 s for the static backend, 600 s for c10d's join)."""
    import torch.distributed.run as torchrun

    saved_env = {k: os.environ.get(k) for k in _ENV_TOUCHED_BY_TORCH}
    torch_logger = logging.getLogger(torchrun.__name__)
    saved_level = torch_logger.level
    torch_logger.setLevel(logging.ERROR)
    try:
        config, _, _ = torchrun.config_from_args(args.namespace())
    finally:
        torch_logger.setLevel(saved_level)
        _restore_env(saved_env)
    conf = config.rdzv_configs
    static = config.rdzv_backend == "static"
    timeout = conf.get("timeout", 900) if static else conf.get("join_timeout", 600)
    return Rendezvous(config.rdzv_backend, config.rdzv_endpoint, str(config.run_id), config.min_nodes,
                      config.max_nodes, int(conf["rank"]) if static and "rank" in conf else None, float(timeout))


#: torch's opt-out of sharing the rendezvous store with the workers, which ecolaunch sets for an elastic c10d job
#: (``--nnodes MIN:MAX``) unless the user set it: with the sharing, torch 2.13 loses a round's master address when a
#: node joins a running job (the node already there keeps the bootstrap of its first round and writes none to the
#: new round's store; the joining node waits for it and fails, and plain torchrun fails the same way)
NO_SHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def _grows(args: argparse.Namespace, nnodes: Callable[[str], tuple[int, int]]) -> bool:
    """An elastic job over torch's c10d rendezvous: its nodes can join while it runs."""
    if args.standalone or args.rdzv_backend != "c10d":
        return False
    low, high = nnodes(args.nnodes)
    return low != high


#: the c10d backend as ecolaunch registers it with torch when a launch watches its rendezvous rounds
ROUND_BACKEND = "ecolaunch-c10d"
#: the launch's callback for each completed round (one launch runs torch's agent at a time in a process)
_on_round: Callable[[Any, int, int], None] | None = None


class _RoundWatch:
    """Torch's c10d rendezvous handler, which calls the launch back after every round it completes (the round's
    store, this node's group rank, the round's node count) before torch starts that round's workers. Registered
    with torch's public handler registry as :data:`ROUND_BACKEND`; every other call is the c10d handler's own."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)

    def get_backend(self) -> str:
        return ROUND_BACKEND

    def next_rendezvous(self) -> Any:
        info = self._inner.next_rendezvous()
        callback = _on_round
        if callback is not None:
            try:
                callback(info.store, int(info.rank), int(info.world_size))
            except Exception:  # noqa: BLE001 - the plan is ecolaunch's; torch's round must go on without it
                logger.warning("the nodes' plan for this rendezvous round failed; torch's round goes on",
                               exc_info=True)
        return info


def _create_round_watch(params: Any) -> _RoundWatch:
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    inner = RendezvousParameters("c10d", params.endpoint, params.run_id, params.min_nodes, params.max_nodes,
                                 params.local_addr, **params.config)
    return _RoundWatch(get_rendezvous_handler(inner))


def _watch_rounds(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` run through :class:`_RoundWatch` (a c10d rendezvous: the one whose rounds can change the nodes)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    rendezvous_handler_registry.register(ROUND_BACKEND, _create_round_watch)  # the same creator each time: a no-op
    args.rdzv_backend = ROUND_BACKEND
    return args


def run_workers(args: TorchrunArgs, env_updates: Mapping[str, str],
                function: FunctionCall | None = None, *, on_stuck: Callable[[int], None] | None = None,
                on_round: Callable[[Any, int, int], None] | None = None) -> WorkerOutcome:
    """Launch the worker group with ``env_updates`` added to the workers' environment; wait for it. With
    ``function``, the workers call it instead of running ``args.training_script``. ``on_stuck(signum)``: what to do
    when a stop signal arrives while torch's rendezvous waits for other nodes (:class:`_StopWatch`); it must end
    the process. ``on_round(store, group_rank, nodes)``: called after every round of a c10d rendezvous, before
    torch starts that round's workers (:class:`_RoundWatch`; not for other backends, whose nodes never change)."""
    global _on_round
    import torch.distributed.run as torchrun
    import torch.multiprocessing
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    saved_handlers = {s: signal.getsignal(s) for s in _HANDLED_SIGNALS}
    saved_env = {k: os.environ.get(k) for k in (*env_updates, *_ENV_TOUCHED_BY_TORCH, NO_SHARED_STORE)}
    os.environ.update(env_updates)
    if os.environ.get(NO_SHARED_STORE) is None and _grows(args.parsed, torchrun.parse_min_max_nnodes):
        os.environ[NO_SHARED_STORE] = "1"  # see NO_SHARED_STORE
    # the wakeup fd is the main thread's (as torch's run() itself must be)
    main = threading.current_thread() is threading.main_thread()
    watch = _StopWatch(on_stuck) if on_stuck is not None and main else contextlib.nullcontext()
    try:
        if function is None:
            run_args = args.namespace()
            if on_round is not None and run_args.rdzv_backend == "c10d" and not run_args.standalone:
                _on_round, run_args = on_round, _watch_rounds(run_args)
            with watch, keeping_name(torch.multiprocessing):
                torchrun.run(run_args)
            return WorkerOutcome(exitcodes.OK)
        config, _, _ = torchrun.config_from_args(_single_node(args.namespace(), torchrun.parse_min_max_nnodes))
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
        _on_round = None
        _restore_env(saved_env)
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)


#: seconds a stop signal may wait for the main thread before :class:`_StopWatch` acts
STUCK_GRACE_S = 2.0


class _StopWatch:
    """Torch's rendezvous waits for the other nodes inside C++ (``TCPStore``'s connect and wait), where no Python
    signal handler runs, so a launcher waiting there ignored SIGTERM for as long as torch waits (torchrun has no
    handler then, and dies of the signal). Inside this context a stop signal is also written to a pipe
    (``signal.set_wakeup_fd``) that a thread reads; if after :data:`STUCK_GRACE_S` the main thread has neither
    left the context nor let torch install its own handler (torch does when it starts the workers, and then stops
    them itself), the thread calls ``on_stuck(signum)``, which releases the job and ends the process."""

    def __init__(self, on_stuck: Callable[[int], None]) -> None:
        self.on_stuck = on_stuck
        self._left = threading.Event()

    def __enter__(self) -> _StopWatch:
        self._handlers = {s: signal.getsignal(s) for s in _HANDLED_SIGNALS}
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        self._write = write
        self._saved_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, name="ecolaunch-stopwatch", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._left.set()
        signal.set_wakeup_fd(self._saved_fd)
        os.close(self._write)  # the thread reads end-of-file and ends

    def _watch(self) -> None:
        try:
            while True:
                data = os.read(self._read, 64)
                if not data:
                    return
                for signum in data:
                    if signum not in self._handlers or self._left.wait(STUCK_GRACE_S):
                        continue
                    if signal.getsignal(signum) is self._handlers[signum]:  # torch's handler is not in yet
                        self.on_stuck(signum)
        finally:
            os.close(self._read)


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
