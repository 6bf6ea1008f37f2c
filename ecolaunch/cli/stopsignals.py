"""Stop signals as a flag a loop waits on, for the long-running commands (``ecolaunch agent``, ``exporter``).

What lives here: :class:`StopSignals`. Why not a ``threading.Event`` set from the handler: a Python signal handler
runs in the main thread between two bytecodes, and ``Event.set()`` takes the event's lock, which the main thread
itself holds for a moment inside every ``Event.wait()``; a signal landing then leaves the handler waiting for its
own thread forever. The agent, which waits ten times a second at ``--interval 0.1``, hung on SIGTERM that way (a
loop around ``Event.wait(0.0001)`` hung in 1 of 200 signals). Here the handler takes no lock: it records the signal
and writes one byte to a pipe that :meth:`StopSignals.wait` selects on.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal

__all__ = ["StopSignals"]


class StopSignals:
    """Within the ``with`` block, each of ``signals`` is recorded instead of acting; the handlers before are put back
    at its end.

    :meth:`is_set` and :meth:`wait` are the part of ``threading.Event`` the loops use; :attr:`received` lists the
    signals in the order they came.
    """

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self.signals = signals
        self.received: list[int] = []
        self._read = self._write = -1
        self._saved: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._saved = {s: signal.signal(s, self._on_signal) for s in self.signals}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._saved.items():
            signal.signal(s, handler)
        os.close(self._read)
        os.close(self._write)

    def _on_signal(self, signum: int, _frame) -> None:
        self.received.append(signum)  # a list's append takes no lock the interrupted code could hold
        with contextlib.suppress(OSError):  # a full pipe (thousands of signals) already wakes the waiter
            os.write(self._write, b"\0")

    def is_set(self) -> bool:
        """Whether a stop signal came."""
        return bool(self.received)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a stop signal comes or ``timeout`` seconds pass (None: no limit); whether one came.

        A signal that lands between the check and the wait has written its byte already, so the wait returns at
        once; one that lands during it interrupts the wait, and Python resumes it on the byte (PEP 475)."""
        if not self.received:
            select.select([self._read], [], [], timeout)
        return self.is_set()
