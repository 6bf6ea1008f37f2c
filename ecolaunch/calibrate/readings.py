"""The readings during a calibration's measurement window: the GPU's, sampled on a thread (:class:`GpuSampler`),
and the CPU the host's other processes used meanwhile (:class:`HostLoad`, :func:`host_busy`)."""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import psutil

from ecolaunch.errors import DeviceError

__all__ = ["GpuSampler", "HostLoad", "host_busy", "mean"]

logger = logging.getLogger(__name__)


class GpuSampler:
    """GPU snapshots every ``interval_s`` on a thread, from ``start()`` to ``stop()`` (one at each end at least)."""

    def __init__(self, backend: Any, uuid: str, interval_s: float) -> None:
        self._backend, self._uuid, self._interval_s = backend, uuid, interval_s
        self._stop = threading.Event()
        self._samples: list[Any] = []
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Any]:
        self._stop.set()
        self._thread.join()
        self._take()
        return self._samples

    def _loop(self) -> None:
        while True:
            self._take()
            if self._stop.wait(self._interval_s):
                return

    def _take(self) -> None:
        try:
            snap = next((g for g in self._backend.gpus() if g.uuid == self._uuid), None)
        except DeviceError as e:
            logger.debug("sampling GPU %s failed: %s", self._uuid, e)
            return
        if snap is not None:
            self._samples.append(snap)


def mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


class HostLoad:
    """The CPU time the host's other processes used over a window, in cores on average: every CPU's busy time
    (``psutil.cpu_times``, steal included: a hypervisor's other guests) less that of ``own_pids`` (the calibrator and
    its workers), from ``start()`` to ``stop()``."""

    def __init__(self, own_pids: Sequence[int]) -> None:
        self._pids = list(dict.fromkeys([os.getpid(), *own_pids]))
        self._start: tuple[float, float, float] | None = None

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> float | None:
        """Others' mean CPU use in cores over the window (None where the process table does not say)."""
        end = self._read()
        if self._start is None or end is None:
            return None
        (t0, host0, own0), (t1, host1, own1) = self._start, end
        if t1 <= t0:
            return None
        return max(0.0, (host1 - host0) - (own1 - own0)) / (t1 - t0)

    def _read(self) -> tuple[float, float, float] | None:
        try:
            t = psutil.cpu_times()
            host = sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal"))
            own = 0.0
            for pid in self._pids:
                # a worker that ended during the window adds nothing more (its time so far is lost to the sum)
                with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                    c = psutil.Process(pid).cpu_times()
                    own += c.user + c.system
        except (psutil.Error, OSError) as e:
            logger.debug("no CPU times: %s", e)
            return None
        return time.monotonic(), host, own


def host_busy(others_cpu_cores: float | None, workers: int, cpus: int | None = None) -> bool:
    """Whether the host's other processes left a window's ``workers`` short of CPU: they used as many cores as were
    left beyond one per worker, and at least half a core."""
    cpus = cpus or os.cpu_count() or 1
    return others_cpu_cores is not None and others_cpu_cores >= max(0.5, cpus - workers)
