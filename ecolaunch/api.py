"""The Python API: :func:`launch` runs a function or a script on ``nproc`` workers, and :func:`measure` times a
block of user code and reads the energy its GPUs used meanwhile.

What lives here: :func:`launch` (it builds the launch's :class:`~ecolaunch.launch.options.LaunchConfig`, its keywords
declared once in :class:`~ecolaunch.launch.options.LaunchOptions`, and runs the launch pipeline with the terminal's
callbacks), :class:`LaunchResult`, :func:`measure` and its :class:`Measurement`. Its own layer, the top one beside
``__main__``: importing it loads the standard library, the option declarations and the parser module (not torch); ``launch`` and ``measure`` load
the launcher and the GPU backend when first called. How both behave: docs/python-api.md.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ecolaunch import config
from ecolaunch.errors import ConfigError, DriverNotFound, EcolaunchError, WorkerFailed, with_hint
from ecolaunch.launch.argv import CPU_NPROC, ELASTIC_NPROC
from ecolaunch.launch.options import LaunchOptions, api_keywords, spec_of, yes_or_no
from ecolaunch.validate import is_integer

__all__ = ["LaunchResult", "Measurement", "launch", "measure"]

#: ``--nproc-per-node`` values other than a count, as the command line takes them
NPROC_WORDS = (*ELASTIC_NPROC, CPU_NPROC)


@dataclass(frozen=True, eq=False)
class LaunchResult(Mapping):
    """What :func:`launch` returns: a mapping global rank -> the function's return value on that rank (as torch's
    ``elastic_launch``; empty for a script), with the job's figures.

    ``time_s``: how long the workers ran (the whole call when the job ran without GPU placement); ``energy_j``: the
    job's energy on its GPUs (its share on shared GPUs), ``gpu_energy_j``: what those GPUs used in all, both None
    without GPUs; ``job_id``: the job's id in ``ecolaunch status``/``history``; ``summary``: the end-of-job record
    (:class:`ecolaunch.run.observer.RunSummary`; None without GPU placement)."""

    return_values: dict[int, Any]
    time_s: float
    energy_j: float | None = None
    gpu_energy_j: float | None = None
    job_id: str | None = None
    summary: Any = None

    def __getitem__(self, rank: int) -> Any:
        return self.return_values[rank]

    def __iter__(self) -> Iterator[int]:
        return iter(self.return_values)

    def __len__(self) -> int:
        return len(self.return_values)


def launch(entrypoint: Callable[..., Any] | str | os.PathLike[str], *args: Any, nproc: int | str = 1,
           module: bool = False, torchrun_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
           **options: Any) -> LaunchResult:
    """Run ``entrypoint`` on ``nproc`` workers, placed, queued, capped and accounted as ``ecolaunch`` would.

    Args:
        entrypoint: a function (picklable: defined at a module's top level; the workers are spawned processes and
            call ``entrypoint(*args)``), or the path of a script (``module=True``: a module's name) run with
            ``args`` as its command-line arguments.
        nproc: workers, one GPU each (``--nproc-per-node``: a count, or ``"gpu"``/``"auto"``/``"cpu"``).
        torchrun_args: further torchrun options, as typed (``["--max-restarts", "1"]``).
        env: the environment the launch reads its ``ECOLAUNCH_*`` settings from (default ``os.environ``); the
            workers inherit this process's own environment, as torchrun's do.
        options: the command line's ecolaunch options by their names in
            :class:`~ecolaunch.launch.options.LaunchOptions` ({keywords}); unset (None, or False for a flag),
            their ``ECOLAUNCH_*`` variables apply, as on the command line. What ``-v`` logs goes to the
            ``ecolaunch`` logger: the application's logging configuration shows it.

    Returns:
        a :class:`LaunchResult`: ``result[rank]`` (a function's return values), ``result.energy_j``,
        ``result.time_s``.

    Raises:
        TypeError: an option ``launch()`` does not take.
        ValueError: a bad argument (what, its value, what to do), before anything is queued or booked.
        WorkerFailed: a worker failed (``rank``, ``exit_code``, ``failure``); the GPUs are released.
        EcolaunchError: what makes the command line exit 1 or 75 (``NeverFits``, ``NoPlacement``,
            ``WaitTimeout``, a bad policy file, ...), with ``hint``.
        KeyboardInterrupt: the launch was stopped by SIGINT (Ctrl-C); ``SystemExit(128+S)`` by another signal S.
    """
    # lazy: the launcher (torch's parser, the policies) loads when a launch is asked for, not at import
    from ecolaunch.launch import console  # lazy: as above
    from ecolaunch.launch.pipeline import run_launch  # lazy: as above
    from ecolaunch.launch.torchrun import FunctionCall  # lazy: as above
    from ecolaunch.runtime import launch_context  # lazy: as above

    function = None
    if callable(entrypoint):
        if module:
            raise ValueError(with_hint(f"module=True names a module to run, but the entrypoint is the function "
                                       f"{entrypoint!r}", "pass module=True with a module's name, or drop it"))
        function = FunctionCall(entrypoint, tuple(args))
        _check_picklable(function)
    elif not isinstance(entrypoint, (str, os.PathLike)):
        raise ValueError(with_hint(f"entrypoint must be a function, a script's path or (module=True) a module's "
                                   f"name, got {entrypoint!r}", "pass a function defined at a module's top level, "
                                   "or a script's path"))
    if not (is_integer(nproc) and nproc >= 1 or isinstance(nproc, str) and nproc in NPROC_WORDS):
        raise ValueError(with_hint(f"nproc must be a worker count >= 1 or one of {', '.join(map(repr, NPROC_WORDS))}"
                                   f", got {nproc!r}", "e.g. nproc=2 for two workers on two GPUs"))
    env = os.environ if env is None else env
    argv = ["--nproc-per-node", str(nproc), *[str(a) for a in torchrun_args]]
    if function is not None:
        argv += ["--module", function.name]
    else:
        argv += [*(["--module"] if module else []), os.fspath(entrypoint), *[str(a) for a in args]]
    config = _configure(argv, env, _given(options), function)
    ended: dict[str, Any] = {}
    start = time.monotonic()
    ui = console.callbacks(config, on_summary=lambda s: ended.update(summary=s),
                           on_finished=lambda o: ended.update(outcome=o))
    run_launch(config, env, launch_context(env), ui)
    wall_s = time.monotonic() - start
    outcome, summary = ended["outcome"], ended.get("summary")  # a launch that returns ran its workers
    if outcome.signal is not None:
        if outcome.signal == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(outcome.exit_code)
    if outcome.exit_code != 0:
        raise WorkerFailed(outcome.failed_rank, outcome.exit_code, outcome.failure, outcome.report)
    if summary is None:
        return LaunchResult(dict(outcome.return_values), wall_s)
    return LaunchResult(dict(outcome.return_values), summary.duration_s, summary.energy_j, summary.gpu_energy_j,
                        summary.job_id, summary)


launch.__doc__ = launch.__doc__.format(keywords=", ".join(f"``{k}``" for k in api_keywords()))


def _given(options: Mapping[str, Any]) -> dict[str, str | None]:
    """The options' text as the command line would give it (a flag: ``"1"`` when True); TypeError for an option
    ``launch()`` does not take, ValueError for a flag that is not a bool."""
    keywords = api_keywords()
    given: dict[str, str | None] = {}
    for key, value in options.items():
        if key not in keywords:
            raise TypeError(f"launch() got an unexpected keyword argument {key!r} (its options: "
                            f"{', '.join(keywords)})")
        spec = spec_of(key)
        if not spec.takes_value:  # a flag: True gives it, False leaves it to its variable
            if not isinstance(value, bool):
                raise ValueError(with_hint(f"{key} must be True or False, got {value!r}",
                                           f"pass {key}=True or leave it out"))
            given[key] = "1" if value else None
        elif spec.check is yes_or_no:  # True, False, or None (its variable, else its default)
            if value is not None and not isinstance(value, bool):
                raise ValueError(with_hint(f"{key} must be True, False or None, got {value!r}",
                                           f"None leaves it to {spec.env}, else to the default"))
            given[key] = None if value is None else "yes" if value else "no"
        else:
            given[key] = None if value is None else str(value)
    return given


def _configure(argv: list[str], env: Mapping[str, str], given: Mapping[str, str | None], function):
    """The launch's :class:`~ecolaunch.launch.options.LaunchConfig`: torch's parse of ``argv`` and the checks the
    command line makes (:func:`ecolaunch.launch.argv.configure`); their usage errors (exit 2 there) as ValueError
    with the message."""
    # lazy: torch's parser, as in launch()
    from torch.distributed.run import get_args_parser

    from ecolaunch.launch.argv import configure  # lazy: as the line above

    err = io.StringIO()
    try:
        options = LaunchOptions.from_env(env, given, api=True)
    except ConfigError as e:
        raise ValueError(with_hint(str(e), e.hint)) from None
    try:
        with contextlib.redirect_stderr(err):
            parser = get_args_parser()
            parser.prog = "ecolaunch"
            return configure(parser, argv, parser.parse_args(argv), env, options, function=function)
    except SystemExit:
        # the parser's last "error: ..." line, and the HINT line after it when there is one
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        at = max((i for i, line in enumerate(lines) if "error: " in line), default=None)
        if at is None:
            raise ValueError(f"bad launch arguments {argv!r}") from None
        raise ValueError("\n".join([lines[at].split("error: ", 1)[1], *lines[at + 1:at + 2]])) from None


def _check_picklable(function) -> None:
    main = sys.modules.get("__main__")
    if function.fn.__module__ == "__main__" and not getattr(main, "__file__", None):
        raise ValueError(with_hint(f"the function {function.fn.__qualname__} belongs to an interactive session (or "
                                   "python -c), which the workers (spawned processes) cannot import",
                                   "define it in a module or a script file and launch it from there"))
    try:
        pickle.dumps(function.fn)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise ValueError(with_hint(f"the function {function.fn!r} cannot be sent to the workers (spawned "
                                   f"processes): {e}", "define it at the top level of a module (not a lambda, not "
                                   "nested in a function)")) from None
    try:
        pickle.dumps(function.args)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise ValueError(with_hint(f"the arguments of {function.fn.__qualname__} cannot be sent to the workers: "
                                   f"{e}", "pass picklable values (numbers, strings, tensors, module-level "
                                   "classes)")) from None


@dataclass
class Measurement:
    """One measurement window (:func:`measure`): filled in when the ``with`` block ends.

    ``time_s``: the block's wall time; ``energy_j``: what the measured GPUs used during it (None when it cannot be
    read: ``why_no_energy`` says why); ``gpu_energy_j``: per GPU, keyed by its index as ``ecolaunch status`` and
    ``nvidia-smi`` show it; ``gpus``: those indices. The energy is the whole GPU's, other jobs' on a shared GPU
    included (as Zeus and NVML count it). With ``sync_cuda`` (the default, as Zeus's ``sync_execution``) the window
    waits for this process's queued CUDA work on its current device when it begins and ends, where the process
    already uses CUDA (a window never imports torch or creates a CUDA context).
    """

    name: str | None = None
    time_s: float | None = None
    energy_j: float | None = None
    gpu_energy_j: dict[int, float | None] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()
    why_no_energy: str | None = None
    sync_cuda: bool = field(default=True, repr=False)
    _backend: Any = field(default=None, repr=False)
    _uuids: dict[str, int] = field(default_factory=dict, repr=False)
    _start: tuple[float, dict[str, float | None]] | None = field(default=None, repr=False)

    def __enter__(self) -> Measurement:
        self._backend, self._uuids, self.why_no_energy = _measured_gpus()
        self.gpus = tuple(self._uuids.values())
        self._synchronize()
        self._start = (time.monotonic(), self._counters())
        return self

    def __exit__(self, *exc: object) -> None:
        t0, before = self._start
        self._synchronize()
        after = self._counters()
        self.time_s = time.monotonic() - t0
        self.gpu_energy_j = {i: None if before[u] is None or after[u] is None else after[u] - before[u]
                             for u, i in self._uuids.items()}
        unread = [i for i, j in self.gpu_energy_j.items() if j is None]
        if unread and self.why_no_energy is None:
            self.why_no_energy = f"GPU {', '.join(map(str, unread))} has no energy counter"
        self.energy_j = None if unread or not self._uuids else sum(self.gpu_energy_j.values())

    def _synchronize(self) -> None:
        torch = sys.modules.get("torch")
        if self.sync_cuda and torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def _counters(self) -> dict[str, float | None]:
        readings = {}
        for uuid in self._uuids:
            try:
                readings[uuid] = self._backend.energy_j(uuid)
            except EcolaunchError as e:  # a GPU that cannot be read counts as one without a counter
                readings[uuid] = None
                self.why_no_energy = self.why_no_energy or f"cannot read the energy of GPU {self._uuids[uuid]}: {e}"
        return readings


def measure(name: str | None = None, *, sync_cuda: bool = True) -> Measurement:
    """A measurement window: ``with ecolaunch.measure("eval") as m: ...``, then ``m.time_s``, ``m.energy_j`` and
    ``m.gpu_energy_j`` (see :class:`Measurement`; ``sync_cuda=False``: do not wait for queued CUDA work). Each rank of a job reads all the job's GPUs: take one rank's
    figures (rank 0) for the job. Without GPUs (no NVIDIA driver and no ``ECOLAUNCH_SIMULATE``, or
    ``CUDA_VISIBLE_DEVICES`` empty) the time is measured and the energy is None, with ``why_no_energy``."""
    if name is not None and not isinstance(name, str):
        raise ValueError(with_hint(f"the measurement's name must be a string, got {name!r}", 'e.g. measure("eval")'))
    if not isinstance(sync_cuda, bool):
        raise ValueError(with_hint(f"sync_cuda must be True or False, got {sync_cuda!r}",
                                   "leave it out to wait for queued CUDA work, or pass sync_cuda=False"))
    return Measurement(name, sync_cuda=sync_cuda)


def _measured_gpus() -> tuple[Any, dict[str, int], str | None]:
    """The GPU backend, the GPUs this process may use (uuid -> index) and, when there are none, why."""
    key = tuple(os.environ.get(k) for k in (config.ENV_SIMULATE, config.ENV_STATE_DIR, config.ENV_POLICY_FILE,
                                            "CUDA_VISIBLE_DEVICES"))
    if key not in _OPENED:
        _OPENED[key] = _open_measured_gpus()
    return _OPENED[key]


#: per process, for each environment that decides it: what :func:`_open_measured_gpus` found (windows in a loop
#: open the backend once)
_OPENED: dict[tuple[str | None, ...], tuple[Any, dict[str, int], str | None]] = {}


def _open_measured_gpus() -> tuple[Any, dict[str, int], str | None]:
    # lazy: the GPU backend (pynvml, or the simulator's models) loads with the first window, not at import
    from ecolaunch.launch.workerenv import allowed_by_visible_devices
    from ecolaunch.runtime import open_gpus, resolve  # lazy: as the line above

    environment, _ = resolve(os.environ)
    try:
        backend = open_gpus(environment)
    except DriverNotFound as e:
        return None, {}, f"no GPUs to measure: {e}" + (f" ({e.hint})" if e.hint else "")
    snapshots = backend.gpus()
    allowed = allowed_by_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), snapshots)
    gpus = {g.uuid: g.index for g in snapshots if allowed is None or g.uuid in allowed}
    return backend, gpus, None if gpus else "no GPUs to measure: CUDA_VISIBLE_DEVICES lists none"
