"""The cap guard: a small process that restores the caps a root launcher set, whatever kills the launcher.

A launcher that changes power caps itself (running as root, no cap agent) starts one guard before its first
change (:func:`start_guard`). The guard runs in its own session (Ctrl-C on the terminal and a kill of the
launcher's process group do not reach it) and holds the read end of a pipe whose write end only the launcher
holds. When the launcher ends cleanly it restores its caps itself and says ``done``; the guard exits. When the
launcher dies any other way — SIGKILL included — the kernel closes the pipe, the guard reads end-of-file, waits
until the launcher's pid is gone (so that reconciling releases its job), and makes one privileged cap pass
(:func:`restore_after`): the dead launcher's job no longer wants anything, so every GPU it changed gets its
recorded original back, unless another live job still wants a cap there, and a GPU someone else changed since
is left as found (:class:`~ecolaunch.admin.capkeeper.CapKeeper`). The pass is the same one the agent makes, within
the admin policy: the guard never sets a cap the policy forbids. A hostile holder of the state lock delays it
at most ``LOCK_TIMEOUT_S``; the pass then runs on a lock-free snapshot, as the agent's does.

The guard's entry point is ``ecolaunch.cli.guard_cmd``, started as root's helpers are
(:func:`~ecolaunch.admin.interpreter.helper_argv`: isolated, from ``/``, so that no module a member planted in the
launcher's working directory or environment is imported as root). It gets the launcher's settings on its command
line (state directory, simulated GPUs, policy file), so it opens the same GPUs, policy and state directory; it
inherits none of them. Nothing here prints.
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

from ecolaunch.admin.capkeeper import CapKeeper, CapReport
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
