"""The GPU's readings during a calibration's measurement window, sampled on a thread."""

from __future__ import annotations

import logging
import statistics
import threading
from collections.abc import Sequence
from typing import Any

from ecolaunch.errors import DeviceError

__all__ = ["GpuSampler", "mean"]

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
