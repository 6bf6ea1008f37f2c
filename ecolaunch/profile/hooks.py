"""In-process hooks for training scripts: ``step()``, ``track()``, ``@train_step``, ``@job(...)``, ``is_profiling()``.

Use one step marker per training loop (the README's example). Outside an ecolaunch launch everything is a no-op, and
importing this module loads nothing beyond ``os`` and ``ecolaunch.errors``. The environment is read once, at import
(it is this process's own, so module-level state is the honest place for it); :func:`reconfigure` reads it again.
What does not live here: the files the hooks write (:mod:`ecolaunch.profile.channel`). How they behave, and how a
profiling run ends itself: docs/python-api.md#the-iteration-hooks-and-the-jobs-hints.
"""

from __future__ import annotations

import os

from ecolaunch.errors import ConfigError
from ecolaunch.validate import is_integer, is_number

TYPE_CHECKING = False  # typing costs ~9 ms to import; annotations are strings (PEP 563) and need it only here
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from typing import Any, TypeVar

    from ecolaunch.profile.channel import StepWriter

    F = TypeVar("F", bound=Callable[..., Any])

# Same names as ecolaunch.profile.channel.ENV_*: repeated here so that importing the hooks loads nothing.
ENV_HOOK_DIR = "ECOLAUNCH_HOOK_DIR"
ENV_PROFILING = "ECOLAUNCH_PROFILING"
ENV_RANK = "RANK"
ENV_PROFILE_STEPS = "ECOLAUNCH_PROFILE_STEPS"
_TRUE = frozenset({"1", "true", "yes", "on"})
#: the most iterations a script may declare: ``ecolaunch.state.graph.MAX_EXPECTED_ITERATIONS``, repeated as above
MAX_STEPS = 10 ** 12


class JobHints:
    """What a script says about itself through ``@ecolaunch.job``. Immutable.

    Not a dataclass on purpose: ``dataclasses`` imports ``inspect`` (~10 ms), which ``import ecolaunch``
    must not pay in a script that is not launched by ecolaunch.
    """

    __slots__ = ("name", "max_slowdown_pct", "memory_mib", "profile_safe", "key", "steps")
    name: str | None
    max_slowdown_pct: float | None
    memory_mib: int | None
    profile_safe: bool
    key: str | None
    steps: int | None

    def __init__(self, name: str | None = None, max_slowdown_pct: float | None = None,
                 memory_mib: int | None = None, profile_safe: bool = False, key: str | None = None,
                 steps: int | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"job name must be a non-empty string, got {name!r}")
        if max_slowdown_pct is not None and (not is_number(max_slowdown_pct) or max_slowdown_pct < 0):
            raise ConfigError(f"max_slowdown_pct must be a percentage >= 0, got {max_slowdown_pct!r}",
                              hint="e.g. max_slowdown_pct=10 allows the job to run 10 % slower")
        if memory_mib is not None and (not is_integer(memory_mib) or memory_mib <= 0):
            raise ConfigError(f"memory_mib must be a positive integer (MiB), got {memory_mib!r}")
        if not isinstance(profile_safe, bool):
            raise ConfigError(f"profile_safe must be True or False, got {profile_safe!r}")
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 200):
            raise ConfigError(f"key must be a non-empty string of at most 200 characters, got {key!r}",
                              hint="e.g. key='bert-ft': launches with this key share one profile in the history")
        if steps is not None and (not is_integer(steps) or not 1 <= steps <= MAX_STEPS):
            raise ConfigError(f"steps must be a whole number from 1 to {MAX_STEPS}, got {steps!r}",
                              hint="e.g. steps=epochs * len(loader): the iterations the whole run marks")
        for slot, value in zip(self.__slots__, (name, max_slowdown_pct, memory_mib, profile_safe, key, steps)):
            object.__setattr__(self, slot, value)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"JobHints is immutable (tried to set {key})")

    def as_dict(self) -> dict[str, object]:
        return {slot: getattr(self, slot) for slot in self.__slots__}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHints) and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().values()))

    def __repr__(self) -> str:
        return "JobHints(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"


class _State:
    """This process's hook configuration, read from its environment."""

    __slots__ = ("hook_dir", "rank", "profiling", "hints", "stop_after", "steps", "tracked", "declaring")

    def __init__(self, env: Mapping[str, str]) -> None:
        self.hook_dir: str | None = env.get(ENV_HOOK_DIR) or None
        self.profiling: bool = env.get(ENV_PROFILING, "").strip().lower() in _TRUE
        self.hints: JobHints | None = None
        #: the steps this process marked; the total its tracked loops declared (None: none), while ``declaring``
        #: (a failed write of the hints turns it off)
        self.steps = 0
        self.tracked: int | None = None
        self.declaring = True
        self.stop_after: int | None = None
        raw_limit = env.get(ENV_PROFILE_STEPS, "").strip()
        if raw_limit and self.profiling and self.hook_dir:
            try:
                self.stop_after = int(raw_limit)
            except ValueError:
                self.stop_after = None
            if self.stop_after is None or self.stop_after < 1:
                self.stop_after = None
                _warn("%s=%r is not an integer >= 1; the profiling run is not stopped early", ENV_PROFILE_STEPS,
                      raw_limit)
        raw = env.get(ENV_RANK, "0")
        try:
            self.rank = int(raw)
        except ValueError:
            self.rank = -1
        if self.rank < 0:
            self.rank = 0
            if self.hook_dir:
                _warn("RANK=%r is not an integer >= 0; ecolaunch stamps steps as rank 0", raw)


_state: _State
_writer: StepWriter | _CountOnly | None = None  # set while active: the one thing step() looks at


class _CountOnly:
    """Stands in for a writer that failed in a step-limited profiling run: the limit must still stop the run."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def stamp(self) -> None:
        pass

    def close(self) -> None:
        pass


def _configure(env: Mapping[str, str]) -> None:
    global _state, _writer
    _state = _State(env)
    _writer = None
    if _state.hook_dir is not None:
        from ecolaunch.profile.channel import StepWriter  # only under ecolaunch

        _writer = StepWriter(_state.hook_dir, _state.rank)


def reconfigure(env: Mapping[str, str]) -> None:
    """Re-read the hook configuration from ``env`` (closing any open step file): a function worker once torch set
    its rank (``ecolaunch.launch.torchrun``); tests and benchmarks."""
    if _writer is not None:
        _writer.close()
    _configure(env)


def _warn(msg: str, *args: object) -> None:
    import logging  # imported on failure only: importing the hooks must load nothing (docs/python-api.md)

    logging.getLogger(__name__).warning(msg, *args)


def _stamp_or_disable(writer: StepWriter | _CountOnly) -> None:
    global _writer
    try:
        writer.stamp()
    except OSError as e:
        _writer = None if _state.stop_after is None else _CountOnly(writer.path)
        writer.close()
        _warn("ecolaunch step hooks turned off: cannot write %s (%s)", writer.path, e)
    _state.steps += 1
    if _state.stop_after is not None and _state.steps >= _state.stop_after:
        _end_profiling_run()


def _end_profiling_run() -> None:
    import sys

    if _writer is not None:
        _writer.close()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # a closed or replaced stream: nothing to flush
    os._exit(0)  # no clean-up code of the script runs in a profiling run (docs/python-api.md#profiling-runs-end-themselves)


def step() -> None:
    """Mark the end of one training iteration. A no-op outside an ecolaunch launch.

    In a step-limited profiling run (``ECOLAUNCH_PROFILE_STEPS``), the last allowed step ends the process (status 0).
    """
    w = _writer
    if w is not None:
        _stamp_or_disable(w)


class _Tracked:
    """``track()``'s wrapper while active: one stamp per item, as ``step()`` at the end of each loop body would
    give. An item's iteration ends when the loop asks for the next one (once that has arrived) or finds none
    left: N items, N stamps. No stamp precedes the first item: that would count N + 1."""

    __slots__ = ("_iterable",)

    def __init__(self, iterable: Iterable[Any]) -> None:
        self._iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        _declare_length(self._iterable)
        started = False
        for item in self._iterable:
            if started:
                step()
            started = True
            yield item
        if started:
            step()

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]


def _declare_length(iterable: Iterable[Any]) -> None:
    """A tracked loop starts over ``iterable``: when it has a length, the job's tracked total becomes the steps this
    process marked before the loop plus that length (a loop per epoch declares only through this epoch)."""
    if not _state.declaring:
        return
    try:
        total = _state.steps + len(iterable)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - no length (a generator, an iterable-style loader): nothing declared
        return
    if 1 <= total <= MAX_STEPS and total != _state.tracked:
        _state.tracked = total
        _state.declaring = _write_hints()


def _write_hints() -> bool:
    """Pass this process's hints to the launcher (nothing outside a launch): those of ``@job``, and the tracked
    total under its own key (``tracked_steps``); False, warned, when the channel refuses the write."""
    if _state.hook_dir is None:
        return True
    doc = _state.hints.as_dict() if _state.hints is not None else {}
    if _state.tracked is not None:
        doc["tracked_steps"] = _state.tracked
    try:
        # lazy: `import ecolaunch` loads only the hooks; the channel loads only under a launch
        from ecolaunch.profile.channel import write_hints

        write_hints(_state.hook_dir, _state.rank, doc)
    except OSError as e:
        _warn("ecolaunch could not pass job hints to the launcher (%s)", e)
        return False
    return True


def track(iterable: Iterable[Any]) -> Iterable[Any]:
    """``for batch in track(loader)``: marks each iteration. Outside ecolaunch, returns ``iterable`` itself.

    Each interval between stamps is one full iteration (its compute plus fetching the next batch). An iterable with
    a length also declares the job's length (when no ``@job(steps=...)`` does): the steps marked before the loop
    plus ``len(iterable)``.
    """
    if _writer is None:
        return iterable
    return _Tracked(iterable)


def train_step(fn: F | None = None) -> Any:
    """Decorator for a function that does one training step; marks one step per successful call.

    Works as ``@train_step`` and ``@train_step()``. Outside ecolaunch the function is returned unchanged
    (decided when decorating; the environment does not change during a run).
    """

    def decorate(f: F) -> F:
        if not callable(f):
            raise ConfigError(f"@ecolaunch.train_step decorates a function, got {f!r}")
        if _writer is None:
            return f
        import functools

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = f(*args, **kwargs)
            step()
            return result

        return wrapper  # type: ignore[return-value]

    return decorate if fn is None else decorate(fn)


def job(name: str | Callable[..., Any] | None = None, max_slowdown_pct: float | None = None,
        memory_mib: int | None = None, profile_safe: bool = False, key: str | None = None,
        steps: int | None = None) -> Any:
    """Decorator for a script's main function carrying hints for the launcher.

    ``name``: a readable job name; ``max_slowdown_pct``: the slowdown this job accepts (within the admin's
    bound); ``memory_mib``: expected peak GPU memory per worker; ``profile_safe``: True if running the
    first iterations twice (a pre-launch profiling run, then the real run) has no harmful side effects;
    ``key``: the job's history key, for a user who knows better than its arguments which launches are the same work
    (every launch of this script then shares the key's profile, from its next launch on: the launcher learns the key
    when the script runs; ``--job-key`` sets it on the command line, for this launch already); ``steps``: the
    iterations the whole run marks, from which the queue expects its end (it wins over what ``track()`` declares;
    ``--steps`` on the command line wins over it; the next launch of the job knows it before it starts).
    Works bare (``@job``) or with arguments. The hints are stored for this process (:func:`job_hints`)
    and, under ecolaunch, written once to the channel. The function is returned unchanged.
    """
    if callable(name):  # bare @job
        return job()(name)
    hints = JobHints(name, max_slowdown_pct, memory_mib, profile_safe, key, steps)

    def decorate(f: F) -> F:
        if not callable(f):
            raise ConfigError(f"@ecolaunch.job decorates a function, got {f!r}")
        _state.hints = hints
        _write_hints()
        try:
            f.__ecolaunch_job__ = hints  # type: ignore[attr-defined]
        except (AttributeError, TypeError):
            pass  # builtins and some callables take no attributes; the hints are stored anyway
        return f

    return decorate


def job_hints() -> JobHints | None:
    """The hints of the last ``@ecolaunch.job`` applied in this process, or None."""
    return _state.hints


def is_profiling() -> bool:
    """True during an ecolaunch profiling run (``ECOLAUNCH_PROFILING=1``): skip checkpoints, remote logging."""
    return _state.profiling


def is_active() -> bool:
    """True when launched by ecolaunch with hooks on (step stamps reach the launcher)."""
    return _writer is not None


_configure(os.environ)
