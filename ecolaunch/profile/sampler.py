"""The launcher-side sampler: power, energy, utilization and memory of a job's GPUs at a steady rate.

What lives here: :class:`GpuSample` (one GPU at one instant), :class:`WindowStats` (one GPU over a time
window), :class:`Sampler` (the sampling loop: a background thread, or stepped by hand with
:meth:`Sampler.sample_once` on a :class:`~ecolaunch.clock.VirtualClock`), and :func:`downsample` (a short
series for the history record and ``ecolaunch report``'s plot). What does not: deciding anything (``profiler``),
attributing energy to jobs (``attribution``), storing (``history``). Its time line and how it
counts energy: docs/profiling.md, "Energy".
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ecolaunch.clock import Clock
from ecolaunch.devices.backend import GpuBackend, GpuSnapshot
from ecolaunch.errors import ConfigError, EcolaunchError
from ecolaunch.validate import integer, is_number

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.5
#: per GPU; beyond it every other sample is dropped (0.5 s x 20,000 = 2.8 h at full rate, then coarser)
DEFAULT_MAX_SAMPLES = 20_000


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant. ``energy_j`` is cumulative since the sampler's first sample (see module doc)."""

    t_s: float
    power_w: float | None
    energy_counter_j: float | None
    energy_j: float
    util_gpu_pct: float | None
    util_mem_pct: float | None
    memory_used_mib: int
    power_limit_w: float | None


@dataclass(frozen=True, slots=True)
class WindowStats:
    """One GPU between ``start_s`` and ``end_s``: energy, mean power, mean utilization, peak memory.

    Utilization means and the memory peak are over the samples inside the window (or the nearest sample
    when the window is shorter than the sampling interval); ``None`` when the device gives no reading.
    """

    start_s: float
    end_s: float
    energy_j: float
    power_w: float | None
    util_gpu_pct: float | None
    util_mem_pct: float | None
    memory_mib: int | None

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class Sampler:
    """Samples the GPUs ``gpu_uuids`` through ``backend`` every ``interval_s`` seconds of ``clock``.

    Args:
        backend: the GPU backend (one batched ``gpus()`` read per sample).
        gpu_uuids: the job's GPUs.
        clock: time source; samples are stamped with ``clock.now()``.
        interval_s: seconds between samples in the background thread.
        max_samples: per-GPU cap on the kept series (thinned by half when exceeded; energy stays exact).

    A failed read (a ``DeviceError``, a GPU that vanished) is logged once as a warning and skipped: the
    sampler never raises into the launch.
    """

    def __init__(self, backend: GpuBackend, gpu_uuids: Sequence[str], *, clock: Clock,
                 interval_s: float = DEFAULT_INTERVAL_S, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        if not (is_number(interval_s) and interval_s > 0):
            raise ConfigError(f"sampling interval must be a positive number of seconds, got {interval_s!r}")
        integer(max_samples, what="max_samples", lo=4)
        if not gpu_uuids:
            raise ConfigError("the sampler needs at least one GPU", hint="pass the job's GPU UUIDs")
        self._backend = backend
        self._uuids = tuple(gpu_uuids)
        self._clock = clock
        self._interval_s = float(interval_s)
        self._max = max_samples
        self._series: dict[str, list[GpuSample]] = {u: [] for u in self._uuids}
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        return self._uuids

    # --- sampling ----------------------------------------------------------------------------------
    def sample_once(self) -> list[GpuSample]:
        """Read every GPU once now; returns the new samples (empty when the read failed)."""
        try:
            snapshots = {s.uuid: s for s in self._backend.gpus()}
        except EcolaunchError as e:
            self._warn_once("GPU read failed (%s); energy and profile may be incomplete", e)
            return []
        t = self._clock.now()
        out = []
        with self._lock:
            for uuid in self._uuids:
                snap = snapshots.get(uuid)
                if snap is None:
                    self._warn_once("GPU %s is no longer listed by the backend; its samples stop", uuid)
                    continue
                self._names.setdefault(uuid, snap.name)
                sample = self._make(uuid, snap, t)
                series = self._series[uuid]
                if series and t <= series[-1].t_s:
                    series[-1] = sample  # a clock that did not move: keep the newest reading
                else:
                    series.append(sample)
                if len(series) > self._max:
                    self._series[uuid] = series = series[:-1:2] + [series[-1]]
                out.append(sample)
        return out

    def start(self) -> None:
        """Take a first sample now and keep sampling in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self.sample_once()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ecolaunch-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (if any) and take a final sample, so the series covers the whole run."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=10 * self._interval_s + 5.0)
        self.sample_once()

    def _run(self) -> None:
        next_due = self._clock.now() + self._interval_s
        # Event.wait, not clock.sleep: stop() must not wait for a whole interval. The delay is measured on
        # the injected clock, so a clock that runs fast or slow still sets the cadence.
        while not self._stop.wait(max(0.0, next_due - self._clock.now())):
            self.sample_once()
            next_due = max(next_due + self._interval_s, self._clock.now())

    # --- queries -----------------------------------------------------------------------------------
    def series(self, uuid: str) -> list[GpuSample]:
        """A copy of the kept samples of one GPU, oldest first."""
        with self._lock:
            return list(self._series[uuid])

    def latest(self, uuid: str) -> GpuSample | None:
        """The newest sample of one GPU, or None before the first."""
        with self._lock:
            series = self._series.get(uuid)
            return series[-1] if series else None

    def gpu_name(self, uuid: str) -> str | None:
        return self._names.get(uuid)

    def last_sample_s(self) -> float | None:
        """Time of the newest sample of every GPU (the oldest of those), or None before one sample of each."""
        with self._lock:
            if any(not s for s in self._series.values()):
                return None
            return min(s[-1].t_s for s in self._series.values())

    def energy_j(self, uuid: str) -> float:
        """Energy of one GPU from the first sample to the last (0.0 with fewer than two samples)."""
        with self._lock:
            series = self._series[uuid]
            return series[-1].energy_j if series else 0.0

    def duration_s(self) -> float:
        """Seconds from the first sample to the last (of the GPU sampled longest)."""
        with self._lock:
            spans = [s[-1].t_s - s[0].t_s for s in self._series.values() if s]
        return max(spans, default=0.0)

    def window(self, uuid: str, start_s: float, end_s: float) -> WindowStats | None:
        """Statistics of one GPU over ``[start_s, end_s]``; None unless samples cover both ends."""
        if not end_s > start_s:
            return None
        with self._lock:
            series = list(self._series[uuid])
        if len(series) < 2 or series[0].t_s > start_s or series[-1].t_s < end_s:
            return None
        energy = _cumulative_at(series, end_s) - _cumulative_at(series, start_s)
        inside = [s for s in series if start_s <= s.t_s <= end_s]
        if not inside:
            inside = [min(series, key=lambda s: abs(s.t_s - (start_s + end_s) / 2))]
        return WindowStats(
            start_s, end_s, energy, energy / (end_s - start_s),
            _mean(s.util_gpu_pct for s in inside), _mean(s.util_mem_pct for s in inside),
            max(s.memory_used_mib for s in inside),
        )

    # --- internals ---------------------------------------------------------------------------------
    def _make(self, uuid: str, snap: GpuSnapshot, t: float) -> GpuSample:
        series = self._series[uuid]
        energy = 0.0
        if series:
            prev = series[-1]
            energy = prev.energy_j + _increment(prev, snap, t)
        return GpuSample(t, snap.power_w, snap.energy_j, energy, snap.util_gpu_pct, snap.util_mem_pct,
                         snap.memory_used_mib, snap.power_limit_w)

    def _warn_once(self, msg: str, *args: object) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(msg, *args)
        else:
            logger.debug(msg, *args)


def cap_seen_s(latest: Callable[[str], GpuSample | None], gpu_uuids: Sequence[str], cap_w: float,
               asked_s: float, tolerance_w: float = 0.5) -> float | None:
    """When every GPU's latest reading shows the set limit ``cap_w`` asked for at ``asked_s`` (a cap agent may apply
    it seconds later): the latest of those readings' times, or None while one does not. A GPU that does not report
    its limit is trusted to have applied it when asked."""
    seen = []
    for uuid in gpu_uuids:
        x = latest(uuid)
        if x is None or x.t_s < asked_s:
            return None
        if x.power_limit_w is None:
            seen.append(asked_s)
        elif abs(x.power_limit_w - cap_w) <= tolerance_w:
            seen.append(x.t_s)
        else:
            return None
    return max(seen, default=asked_s)


def _increment(prev: GpuSample, snap: GpuSnapshot, t: float) -> float:
    """Energy between a previous sample and a new reading: counter delta, else trapezoid of power."""
    if prev.energy_counter_j is not None and snap.energy_j is not None and snap.energy_j >= prev.energy_counter_j:
        return snap.energy_j - prev.energy_counter_j
    a, b = prev.power_w, snap.power_w
    if a is None and b is None:
        return 0.0
    a = b if a is None else a
    b = a if b is None else b
    return 0.5 * (a + b) * max(0.0, t - prev.t_s)  # type: ignore[operator]


def _cumulative_at(series: Sequence[GpuSample], t: float) -> float:
    """Cumulative energy at time ``t``, linear between the samples around it (ends held outside)."""
    if t <= series[0].t_s:
        return series[0].energy_j
    for a, b in zip(series, series[1:]):
        if b.t_s >= t:
            return a.energy_j + (b.energy_j - a.energy_j) * (t - a.t_s) / (b.t_s - a.t_s)
    return series[-1].energy_j


def _mean(values) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def downsample(series: Sequence[GpuSample], max_points: int = 240, *, origin_s: float | None = None) -> list[dict]:
    """At most ``max_points`` points of a series, each the mean of one equal-count bucket of samples.

    Each point: ``t_s`` (seconds since ``origin_s``, default the first sample), ``power_w`` (mean power of
    the bucket from its energy where possible), ``util_gpu_pct``, ``util_mem_pct``, ``memory_used_mib`` (peak),
    ``power_limit_w`` (last). JSON-ready, for the history record and the report's plot.
    """
    if max_points < 1:
        raise ConfigError(f"max_points must be >= 1, got {max_points!r}")
    if not series:
        return []
    origin = series[0].t_s if origin_s is None else origin_s
    n = len(series)
    size = max(1, math.ceil(n / max_points))
    out = []
    for i in range(0, n, size):
        bucket = series[i:i + size]
        before = series[i - 1] if i > 0 else None
        span = bucket[-1].t_s - (before.t_s if before else bucket[0].t_s)
        if before is not None and span > 0:
            power = (bucket[-1].energy_j - before.energy_j) / span
        else:
            power = _mean(s.power_w for s in bucket)
        out.append({
            "t_s": round(bucket[-1].t_s - origin, 3),
            "power_w": None if power is None else round(power, 2),
            "util_gpu_pct": _round(_mean(s.util_gpu_pct for s in bucket)),
            "util_mem_pct": _round(_mean(s.util_mem_pct for s in bucket)),
            "memory_used_mib": max(s.memory_used_mib for s in bucket),
            "power_limit_w": bucket[-1].power_limit_w,
        })
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
