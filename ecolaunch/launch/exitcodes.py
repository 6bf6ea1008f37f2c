"""Exit codes of the ``ecolaunch`` launch command (documented in the README, "Exit codes").

========  =========================================================================================
code      meaning
========  =========================================================================================
0         every worker succeeded (or ``--dry-run`` printed its decision)
1         ecolaunch itself failed (``Error: ...`` says why): state directory, GPU backend, policy file
2         bad command line (argparse's message, as torchrun): also a bad ``--nproc-per-node``, a missing
          training script
N         a worker failed: N is the failing worker's own exit code (a positive code is preferred over
          peers killed by signals; a worker killed by signal S gives 128+S)
75        no GPUs now and ``--wait-timeout`` ran out (0 = do not wait) (EX_TEMPFAIL)
126       the ``--no-python`` program is not executable (the shell's code)
127       the ``--no-python`` program is not on PATH, or no such file (the shell's code)
128+N     ecolaunch was stopped by signal N (130 for Ctrl-C, 143 for SIGTERM); workers were stopped too
========  =========================================================================================

torchrun exits 1 for both worker failures and signals; ecolaunch reports the real cause instead.
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
