"""Exit codes of the ``ecolaunch`` launch command: one constant each, and the mapping of the workers' codes and signals.

What lives here: the codes (:data:`OK`, :data:`USAGE`, :data:`NO_PLACEMENT`, ...), :func:`from_signal` and
:func:`from_worker_codes`. What each code means: the README, "Exit codes"; why they differ from torchrun's (which
exits 1 for worker failures and signals alike): docs/torchrun.md#what-differs-from-torchrun-and-why.
"""

from __future__ import annotations

from collections.abc import Iterable

OK = 0
ERROR = 1
USAGE = 2
NO_PLACEMENT = 75
#: not the launch's: subcommands that refuse another user's job or GPU (``cancel``, ``calibrate``; sysexits' EX_NOPERM)
NOT_PERMITTED = 77
NOT_EXECUTABLE = 126
NOT_FOUND = 127
SIGNAL_BASE = 128


def from_signal(signum: int) -> int:
    return SIGNAL_BASE + int(signum)


def from_worker_codes(root_cause: int, others: Iterable[int]) -> int:
    """The exit code for a failed worker group.

    Worker exit codes follow ``subprocess`` (negative = killed by that signal). The root cause wins when it is
    a real exit code; otherwise the first positive code among the peers (a worker that exits while a gloo
    group is alive can make a *peer* abort with SIGABRT first); otherwise the root cause's signal as 128+S.
    """
    if root_cause > 0:
        return root_cause
    positive = [c for c in others if c > 0]
    if positive:
        return positive[0]
    if root_cause < 0:
        return from_signal(-root_cause)
    return ERROR
