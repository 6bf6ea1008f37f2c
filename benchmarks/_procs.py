"""Child processes for benchmarks/gpu_check.py: run with a timeout, kill a whole tree by pid, poll a reading."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Ran:
    """How a child process ended: its exit code, its output, and how long it ran."""

    code: int | None  # None: timed out (killed)
    out: str
    err: str
    wall_s: float


def run(cmd: list[str], env: dict[str, str], timeout_s: float, cwd: Path) -> Ran:
    """Run ``cmd`` in its own session; on timeout kill it and every process under it."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout_s))
        return Ran(proc.returncode, out, err, time.perf_counter() - start)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        return Ran(None, out, err, time.perf_counter() - start)


def descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_pids(pids: list[int]) -> None:
    """SIGKILL these processes and their process groups (never this script's own group)."""
    own = os.getpgrp()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own:
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_tree(pid: int) -> None:
    kill_pids([pid, *descendants(pid)])


def poll(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float,
         stop: Callable[[], bool] = lambda: False, every_s: float = 0.05) -> Any:
    """Read until ``done(value)``; the value, or None after ``timeout_s`` or once ``stop()``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = read()
        if done(value):
            return value
        if stop():
            return None
        time.sleep(every_s)
    return None
