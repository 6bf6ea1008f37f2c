"""NVIDIA MPS for the calibration's pairs: whether it can be measured here, and a private control daemon.

MPS (Multi-Process Service) runs the kernels of several processes on one GPU at once instead of time-slicing
them. ``ecolaunch calibrate`` measures its pairs under MPS only where that changes nothing for anyone else: real
GPUs, ``nvidia-cuda-mps-control`` on the PATH, and root (the daemon changes how the GPU schedules work). The daemon
it starts is private: its pipe and log directories are a fresh temporary directory, so only the calibration's own
workers (which get ``CUDA_MPS_PIPE_DIRECTORY``) connect to it; any other process on the machine keeps running
without MPS. It is told to quit when the pairs are done, also after a failure or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping

logger = logging.getLogger(__name__)

__all__ = ["CONTROL", "mps_env", "private_daemon", "why_not_mps"]

CONTROL = "nvidia-cuda-mps-control"
_TIMEOUT_S = 20.0


def why_not_mps(backend_kind: str, euid: int | None = None, control: str | None = None) -> str | None:
    """Why MPS pairs cannot be measured here (None: they can). ``control``: the control binary's path, found on
    the PATH when None."""
    if backend_kind != "nvml":
        return f"{backend_kind} GPUs: MPS needs a real NVIDIA driver"
    if (control or shutil.which(CONTROL)) is None:
        return f"{CONTROL} is not on the PATH (the driver's MPS tools are not installed)"
    if (os.geteuid() if euid is None else euid) != 0:
        return "starting an MPS daemon needs root"
    return None


def mps_env(env: Mapping[str, str], directory: str) -> dict[str, str]:
    """``env`` for a client (or the daemon) of the private daemon in ``directory``."""
    return {**env, "CUDA_MPS_PIPE_DIRECTORY": os.path.join(directory, "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": os.path.join(directory, "log")}


@contextlib.contextmanager
def private_daemon(env: Mapping[str, str], control: str | None = None) -> Iterator[dict[str, str]]:
    """Start an MPS control daemon for ``env``'s ``CUDA_VISIBLE_DEVICES``; yields the clients' environment.

    Raises OSError when the daemon does not start; it is told to ``quit`` on the way out in any case.
    """
    binary = control or _which(CONTROL, env) or CONTROL
    directory = tempfile.mkdtemp(prefix="ecolaunch-mps-")
    daemon_env = mps_env(env, directory)
    for sub in ("pipe", "log"):
        os.mkdir(os.path.join(directory, sub), 0o700)
    running = False  # whether a daemon may be running (then it is told to quit)
    try:
        try:
            running = True
            started = subprocess.run([binary, "-d"], env=daemon_env, capture_output=True, text=True,
                                     timeout=_TIMEOUT_S, cwd="/")
            if started.returncode != 0:
                running = False
                raise OSError(f"{CONTROL} -d exited {started.returncode}: "
                              f"{(started.stderr or started.stdout).strip()[-300:]}")
        except FileNotFoundError:
            running = False
            raise
        except subprocess.TimeoutExpired as e:
            raise OSError(f"{CONTROL} -d did not return within {_TIMEOUT_S:.0f} s") from e
        logger.info("MPS control daemon started (pipe %s)", daemon_env["CUDA_MPS_PIPE_DIRECTORY"])
        yield daemon_env
    finally:
        if running:
            _quit(binary, daemon_env)
        shutil.rmtree(directory, ignore_errors=True)


def _which(name: str, env: Mapping[str, str]) -> str | None:
    """``name`` on ``env``'s PATH, relative entries (``.``, empty) left out: root's calibrator, started in a
    member's directory, must not run a binary planted there."""
    path = os.pathsep.join(p for p in env.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(p))
    return shutil.which(name, path=path)


def _quit(binary: str, daemon_env: Mapping[str, str]) -> None:
    """Tell the daemon to quit (it stops its server once the clients are gone); a failure is a warning."""
    pipe = daemon_env["CUDA_MPS_PIPE_DIRECTORY"]
    try:
        done = subprocess.run([binary], input="quit\n", env=dict(daemon_env), capture_output=True, text=True,
                              timeout=_TIMEOUT_S, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        logger.warning("could not stop the MPS daemon (pipe %s): %s", pipe, e)
        return
    if done.returncode != 0:
        logger.warning("could not stop the MPS daemon (pipe %s): %s", pipe, (done.stderr or done.stdout).strip()[-300:])
