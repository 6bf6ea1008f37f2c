"""The process that runs the canned workloads for ``ecolaunch calibrate``, and the calibrator's handle on it.

What lives here: :func:`serve` (the worker's loop and its JSON-lines protocol), :func:`main` (its command line:
``python -I -m ecolaunch.calibrate.worker --device cpu|cuda --state-dir D [--simulate S] [--policy F]``), and
:class:`Worker` (the calibrator's end, raising :class:`WorkerError` with the tail of the worker's stderr when it
fails or hangs). What a worker is and why it keeps its workload running: docs/admin.md#how-a-calibration-runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from ecolaunch.admin.interpreter import (HELPER_CWD, add_settings_options, helper_argv, helper_env, settings_argv,
                                         settings_env)
from ecolaunch.config import ENV_STATE_DIR
from ecolaunch.errors import EcolaunchError
from ecolaunch.jobmodel.capchoice import iteration_stats

__all__ = ["Worker", "WorkerError", "main"]

#: how long a worker may take to import torch, open the GPU and build a workload (a cold CUDA start is slow)
START_TIMEOUT_S = 180.0
#: beyond a command's own duration, how long its answer may take
ANSWER_SLACK_S = 60.0


class WorkerError(EcolaunchError):
    """A workload process failed, exited or did not answer; ``str(e)`` carries the tail of its stderr."""


class Worker:
    """One workload process, spoken to by the protocol of :func:`serve`.

    Args:
        label: a name for messages ("worker A").
        device: ``cpu`` (simulated GPUs) or ``cuda``.
        env: the calibrator's environment for it (``CUDA_VISIBLE_DEVICES``, the state directory): its ecolaunch
            settings become the worker's options, the rest (less ``PYTHON*``) its environment.
    """

    def __init__(self, label: str, device: str, env: Mapping[str, str]) -> None:
        self.label = label
        self._err: IO[bytes] = tempfile.TemporaryFile()
        argv = helper_argv("ecolaunch.calibrate.worker", "--device", device,
                           *settings_argv(env, state_dir=env.get(ENV_STATE_DIR) or None))
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                      env=helper_env(env), cwd=HELPER_CWD, close_fds=True)
        self._buffer = b""
        self.loaded: str | None = None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, cmd: Mapping[str, Any]) -> None:
        try:
            self._proc.stdin.write(json.dumps(dict(cmd)).encode() + b"\n")  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError) as e:
            raise WorkerError(self._failure("stopped before it was asked to " + str(cmd.get("cmd")))) from e

    def receive(self, timeout_s: float) -> dict[str, Any]:
        """The next answer; raises WorkerError when it reports a failure, exits or stays silent ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        stream = self._proc.stdout
        assert stream is not None  # opened with stdout=PIPE
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(self._failure(f"did not answer within {timeout_s:.0f} s"))
            ready, _, _ = select.select([stream], [], [], left)
            if not ready:
                continue
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                self._proc.wait(5)
                raise WorkerError(self._failure(f"exited with code {self._proc.returncode}"))
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkerError(self._failure(f"answered {line[:200]!r}, not JSON")) from None
        if not isinstance(answer, dict) or not answer.get("ok"):
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise WorkerError(self._failure(f"failed: {error}"))
        return answer

    def request(self, cmd: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        self.send(cmd)
        return self.receive(timeout_s)

    def load(self, workload: str, warmup_s: float) -> dict[str, Any]:
        answer = self.request({"cmd": "load", "workload": workload, "warmup_s": warmup_s},
                              START_TIMEOUT_S + warmup_s)
        self.loaded = workload
        return answer

    def idle(self) -> None:
        self.request({"cmd": "idle"}, ANSWER_SLACK_S)
        self.loaded = None

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask the process to stop; kill it when it does not within ``timeout_s``."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self._proc.stdin.write(b'{"cmd": "stop"}\n')  # type: ignore[union-attr]
                self._proc.stdin.close()  # type: ignore[union-attr]
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        for stream in (self._proc.stdin, self._proc.stdout, self._err):
            with contextlib.suppress(OSError, ValueError):
                stream.close()  # type: ignore[union-attr]

    def _failure(self, what: str) -> str:
        tail = ""
        with contextlib.suppress(OSError, ValueError):
            self._err.seek(0)
            lines = [ln for ln in self._err.read().decode(errors="replace").splitlines() if ln.strip()]
            tail = "; ".join(lines[-3:])[-600:]
        return f"{self.label} (pid {self._proc.pid}) {what}" + (f": {tail}" if tail else "")


# --- the worker process ------------------------------------------------------------------------------------


def _reader(commands: queue.Queue) -> None:
    for raw in sys.stdin.buffer:
        try:
            cmd = json.loads(raw)
        except ValueError:
            cmd = {"cmd": "bad", "raw": raw[:200].decode(errors="replace")}
        commands.put(cmd if isinstance(cmd, dict) else {"cmd": "bad", "raw": str(cmd)[:200]})
    commands.put({"cmd": "stop"})


def _timed(step, seconds: float) -> dict[str, Any]:
    times: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        step()
        end = time.perf_counter()
        times.append(end - t0)
        if end - start >= seconds:
            break
    wall_s = end - start
    stats = iteration_stats(times)  # the profiler's robust spread (MAD over the median), as cap points carry it
    return {"iters": len(times), "wall_s": wall_s, "iter_time_s": wall_s / len(times),
            "iter_time_median_s": statistics.median(times), "iter_time_cv_pct": None if stats is None else stats.cv_pct}


def serve(device: str, out: IO[str], settings: Mapping[str, str] | None = None) -> int:
    """The worker's loop; returns the exit status. ``settings``: the ecolaunch settings it was given
    (``ECOLAUNCH_STATE_DIR``, ...), which its GPU is opened with beside this process's environment.

    Commands are JSON lines on stdin; each is answered by one JSON line on ``out``::

        {"cmd": "load", "workload": "mm", "warmup_s": 1.0}   build it (the previous one is dropped), open its GPU,
            run it for warmup_s (at least 2 iterations) -> {"ok": true, "what", "device", "gpu_uuid",
            "energy_source", "energy_error", "stand_in_load"}; then keep running it
        {"cmd": "measure", "seconds": 8.0}   time whole iterations for that long -> {"ok": true, "iters", "wall_s",
            "iter_time_s" (wall_s / iters), "iter_time_median_s", "iter_time_cv_pct" (the profiler's robust
            spread)}; then keep running
        {"cmd": "idle"}   stop running (a simulated GPU's stand-in load is taken off) -> {"ok": true}
        {"cmd": "stop"}, or the end of stdin (the calibrator died): exit 0

    A failure answers ``{"ok": false, "error": "..."}`` and exits 1. Anything else the process prints goes to
    stderr.
    """
    # lazy: only the worker process runs the workloads; the calibrator imports this module for Worker alone
    from ecolaunch.calibrate import canned

    def answer(doc: dict[str, Any]) -> None:
        out.write(json.dumps(doc) + "\n")
        out.flush()

    commands: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(commands,), daemon=True).start()
    workload = meter = None
    running = False
    while True:
        try:
            cmd = commands.get_nowait() if running else commands.get()
        except queue.Empty:
            workload.step()  # type: ignore[union-attr]
            continue
        kind = cmd.get("cmd")
        try:
            if kind == "stop":
                return 0
            if kind == "load":
                workload = meter = None
                _free_cuda()
                name, busy_pct = canned.parse_spec(str(cmd["workload"]))
                workload = canned.build(name, device, busy_pct)
                meter = canned.open_meter(workload.device, workload.name, {**os.environ, **(settings or {})},
                                             stand_in=True, busy_pct=workload.busy_pct)
                iters, _ = canned.run_for(workload, float(cmd.get("warmup_s", 0.0)))
                if iters < 2:
                    workload.step()
                running = True
                answer({"ok": True, "what": workload.what, "device": workload.device, "gpu_uuid": meter.uuid,
                        "energy_source": meter.kind, "energy_error": meter.error, "stand_in_load": meter.stand_in})
            elif kind == "measure":
                if workload is None:
                    raise ValueError("measure before load")
                answer({"ok": True, **_timed(workload.step, float(cmd["seconds"]))})
            elif kind == "idle":
                running = False
                if meter is not None and meter.stand_in:
                    meter.backend.detach(os.getpid())
                answer({"ok": True})
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except Exception as e:  # noqa: BLE001 - every failure is answered, then the worker exits
            answer({"ok": False, "error": f"{type(e).__name__}: {e}"})
            return 1


def _free_cuda() -> None:
    if "torch" in sys.modules:
        import gc

        gc.collect()
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ecolaunch.calibrate.worker",
                                     description="Run canned workloads on command (ecolaunch calibrate).")
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    add_settings_options(parser)
    args = parser.parse_args(argv)
    # Ctrl-C on the terminal reaches the whole process group: the calibrator handles it and stops its workers
    # (end of stdin); a worker that died of it first would turn an interruption into a failure
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the answers own stdout; anything else written there (a library's print) goes to stderr
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    if args.device == "cpu":
        import torch

        torch.set_num_threads(1)  # two workers share the CPU of a simulated GPU: one thread each
    return serve(args.device, out, settings_env(args))


if __name__ == "__main__":
    sys.exit(main())
