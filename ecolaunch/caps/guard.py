"""The cap guard: a small process that restores the caps a root launcher set, whatever kills the launcher.

What lives here: :func:`start_guard` (the launcher's side: one guard before its first cap change, :class:`Guard`),
and the guard's own steps, :func:`wait_for_launcher`, :func:`wait_gone` and :func:`restore_after` (one privileged
cap pass, the agent's). What does not: the guard's entry point (``ecolaunch.cli.guard_cmd``, started as root's
helpers are: :func:`~ecolaunch.admin.interpreter.helper_argv`), the pass itself
(:class:`~ecolaunch.caps.keeper.CapKeeper`). Nothing here prints. How the guard works, and why:
docs/admin.md#the-cap-agent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from typing import IO

import select

import psutil

from ecolaunch.caps.keeper import CapKeeper, CapReport
from ecolaunch.admin.interpreter import HELPER_CWD, helper_argv, helper_env, settings_argv
from ecolaunch.admin.rules import Rules
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.state.reconcile import ProcessTable, PsutilProcessTable
from ecolaunch.state.store import StateStore

logger = logging.getLogger(__name__)

DONE = b"done\n"
READY = b"ready\n"
#: how long a launcher waits for its guard to be ready (watching, GPUs open) before its first cap change
READY_TIMEOUT_S = 10.0
#: how long the guard waits for the state lock before restoring from a lock-free snapshot
LOCK_TIMEOUT_S = 0.5
#: how long it waits for the dead launcher's pid to disappear from the process table
EXIT_WAIT_S = 0.5


class Guard:
    """The launcher's end of a running guard."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def done(self, timeout_s: float = 2.0) -> None:
        """Tell the guard the caps are restored; it exits without touching anything."""
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.write(DONE)  # type: ignore[union-attr]
            self._proc.stdin.close()  # type: ignore[union-attr]
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    def alive(self) -> bool:
        return self._proc.poll() is None

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Block until the guard has opened the GPUs and watches (True), or it failed or took too long (False)."""
        stream = self._proc.stdout
        if stream is None:
            return False
        ready, _, _ = select.select([stream], [], [], timeout_s)
        return bool(ready) and stream.readline() == READY


def start_guard(env: Mapping[str, str], launcher_pid: int | None = None) -> Guard:
    """Start a guard for this process (``launcher_pid``, default: the caller) with the settings of the launcher's
    environment ``env``; call :meth:`Guard.wait_ready` before the first cap change."""
    pid = os.getpid() if launcher_pid is None else launcher_pid
    proc = subprocess.Popen(
        helper_argv("ecolaunch.cli.guard_cmd", "--launcher-pid", str(pid), *settings_argv(env)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=helper_env(env), cwd=HELPER_CWD,
        start_new_session=True, close_fds=True)
    return Guard(proc)


def wait_for_launcher(stream: IO[bytes]) -> bool:
    """Block until the launcher says ``done`` (False) or its end of the pipe closes without it (True: it died)."""
    data = b""
    while True:
        chunk = stream.read(64)
        if not chunk:
            return not data.endswith(DONE)
        data = (data + chunk)[-len(DONE):]


def wait_gone(pid: int, timeout_s: float = EXIT_WAIT_S) -> None:
    """Until ``pid`` is gone or a zombie (its pipe closes a moment before the kernel marks it dead)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.Error:
            return
        time.sleep(0.005)


def restore_after(store: StateStore, backend: GpuBackend, rules: Rules, *, host: str,
                  processes: ProcessTable | None = None) -> CapReport:
    """One privileged cap pass after a launcher died: its job is released, caps no live job wants restored.

    Give ``store`` a short lock timeout (:data:`LOCK_TIMEOUT_S`): past it the pass runs on a lock-free snapshot.
    """
    processes = processes or PsutilProcessTable()
    return CapKeeper(backend, store.directory, rules, host=host, processes=processes).pass_over(store)
