"""The long-running commands' stop signals (``ecolaunch.cli.stopsignals``): a signal handled at any point of the
wait ends it. The agent hung on SIGTERM when the signal landed inside ``threading.Event.wait``, whose lock the
handler's ``Event.set()`` then waited for; the first test fires the handler at every line of the wait instead of
hoping a real signal lands there (with ``threading.Event`` in place of :class:`StopSignals` it hangs at the line
inside the event's lock)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from ecolaunch.cli.stopsignals import StopSignals

SIG = signal.SIGUSR1
TIMEOUT_S = 5.0


def _lines_of_wait() -> list[int]:
    code = StopSignals.wait.__code__
    return sorted({line for _, _, line in code.co_lines() if line is not None and line > code.co_firstlineno})


def test_a_signal_handled_at_any_line_of_the_wait_ends_it() -> None:
    """A Python handler runs in the main thread between two bytecodes of whatever it runs: here, at each line of
    ``wait`` in turn (the tracer calls the handler there, as Python would); the wait must return, at once where the
    signal came before its last line (which runs after the wait itself, so the wait times out first)."""
    lines = _lines_of_wait()
    assert len(lines) >= 3
    for line in lines:
        with StopSignals((SIG,)) as stop:
            handler = signal.getsignal(SIG)
            fired: list[int] = []

            def tracer(frame, event, _arg, line=line, handler=handler, fired=fired):
                if frame.f_code is StopSignals.wait.__code__:
                    if event == "line" and frame.f_lineno == line and not fired:
                        fired.append(line)
                        handler(SIG, frame)
                    return tracer
                return None

            returned: list[bool] = []

            def waiter(tracer=tracer, returned=returned, stop=stop) -> None:
                sys.settrace(tracer)
                try:
                    returned.append(stop.wait(TIMEOUT_S))
                finally:
                    sys.settrace(None)

            thread = threading.Thread(target=waiter, daemon=True)
            started = time.monotonic()
            thread.start()
            thread.join(3 * TIMEOUT_S)
            assert fired == [line] and returned == [True], f"a signal at line {line} of wait(): {returned}, {fired}"
            assert line == lines[-1] or time.monotonic() - started < TIMEOUT_S
            assert stop.received == [SIG]


def test_a_real_signal_ends_the_wait_and_the_handlers_before_come_back() -> None:
    before = signal.getsignal(SIG)
    with StopSignals((SIG, signal.SIGUSR2)) as stop:
        assert not stop.is_set() and stop.wait(0.05) is False  # nothing came: the timeout ends it
        threading.Timer(0.2, os.kill, (os.getpid(), SIG)).start()
        started = time.monotonic()
        assert stop.wait(30) is True
        assert time.monotonic() - started < 10
        assert stop.is_set() and stop.received == [SIG]
        os.kill(os.getpid(), SIG)  # a second one is recorded too, and a wait after it returns at once
        assert stop.wait() is True and stop.received == [SIG, SIG]
    assert signal.getsignal(SIG) is before
