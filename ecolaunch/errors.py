"""The exception tree of ecolaunch.

Every error ecolaunch raises on purpose derives from :class:`EcolaunchError`; the CLI turns them into
``Error: ...`` lines and documented exit codes (see README, "Exit codes")::

    EcolaunchError
    ├── ConfigError            bad environment variable or file value (exit 1; bad flags are usage errors, exit 2)
    │   └── ProgramNotFound    the ``--no-python`` program cannot be run (exit 127 or 126, the shell's codes)
    ├── DeviceError            a GPU backend failed (vendor errors are translated into this, ``from e``)
    │   ├── DriverNotFound     no NVIDIA driver / NVML library: ecolaunch falls back to plain torchrun
    │   └── PermissionDenied   the caller may not change this setting (e.g. power limits without root)
    ├── StateError             the state directory is unusable (permissions, not a directory, ...)
    ├── NeverFits              the request can never fit this host, however long it waits (exit 1)
    ├── NoPlacement            nothing fits now and the caller asked not to wait (exit 75)
    ├── WaitTimeout            waited ``--wait-timeout`` seconds in the queue without a placement (exit 75)
    ├── GpuBusy                ``ecolaunch calibrate``: the GPU runs someone's work (exit 75; in
    │                          :mod:`ecolaunch.calibrate.booking`, beside the code that finds who)
    └── WorkerFailed           a worker of ``ecolaunch.launch()`` (the Python API) failed: its rank and exit code

Each error carries ``hint`` (what to do) and renders itself (:meth:`EcolaunchError.render`); :func:`with_hint` is
that one rendering for anything else that has a fix to print.
"""

from __future__ import annotations


class EcolaunchError(Exception):
    """Base class; ``str(e)`` says what failed and with which value, ``e.hint`` what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def render(self, prefix: str = "Error: ") -> str:
        """The lines the CLI prints for this error: ``prefix`` and the message, then ``HINT: ...`` when there is a
        hint (no trailing newline). click's failure adds its own ``Error: ``, so it renders with ``prefix=""``."""
        return with_hint(f"{prefix}{self}", self.hint)


def did_you_mean(word: str, known) -> str:
    """``"; did you mean 'x'?"`` naming the closest of ``known`` to a mistyped ``word``, or ``""`` when none is close:
    the suffix of an "unknown NAME" message (a simulator policy, a trace)."""
    import difflib  # lazy: only a mistyped name needs it

    close = difflib.get_close_matches(word, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def with_hint(text: str, hint: str | None) -> str:
    """``text``, then ``HINT: hint`` on a line of its own when there is a hint: how ecolaunch prints every error
    and warning that comes with a fix (the one place that writes ``HINT:``)."""
    return f"{text}\nHINT: {hint}" if hint else text


class ConfigError(EcolaunchError):
    """A flag, environment variable or file holds a value ecolaunch cannot use."""


class ProgramNotFound(ConfigError):
    """The ``--no-python`` program is not on ``PATH``, no such file, or not executable; ``exit_code`` is the
    shell's for it (127 not found, 126 not executable)."""

    def __init__(self, message: str, exit_code: int, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


class DeviceError(EcolaunchError):
    """A GPU backend call failed."""


class DriverNotFound(DeviceError):
    """No GPU driver is available (NVML cannot be loaded or finds no device)."""


class PermissionDenied(DeviceError):
    """The operation needs a privilege the caller does not have."""


class StateError(EcolaunchError):
    """The state directory or one of its files cannot be used."""


class NeverFits(EcolaunchError):
    """The request asks for more than this host has (GPUs the user may use, or memory per GPU): waiting cannot
    help, so it is an error (exit 1), not "try again later" (75), which a scheduler would retry forever."""


class NoPlacement(EcolaunchError):
    """No GPU set satisfies the request now, and the caller asked not to wait."""


class WaitTimeout(EcolaunchError):
    """The job waited in the queue for the allowed time without getting GPUs."""


class WorkerFailed(EcolaunchError):
    """A worker of ``ecolaunch.launch()`` failed, like torch's ``ChildFailedError``: ``rank`` (global) and
    ``exit_code`` (the code the command line would exit with: the worker's own, 128+S for a signal S),
    ``failure`` (torch's message for it: a function worker's exception), ``report`` (torch's failure report)."""

    def __init__(self, rank: int | None, exit_code: int, failure: str | None = None, report: str | None = None) -> None:
        who = "a worker" if rank is None else f"worker rank {rank}"
        detail = f": {failure}" if failure else ""
        super().__init__(f"{who} failed with exit code {exit_code}{detail}",
                         hint="see the worker's traceback above (its stderr); fix the error and launch again")
        self.rank = rank
        self.exit_code = exit_code
        self.failure = failure
        self.report = report
