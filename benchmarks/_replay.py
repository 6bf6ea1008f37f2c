"""A replayed GPU host and the jobs on it: a :class:`~ecolaunch.devices.backend.GpuBackend` that plays measured truths.

What lives here: :class:`ReplayBackend` (the protocol on an injected :class:`~ecolaunch.clock.VirtualClock`, one
:class:`ReplayGpu` per catalogue board, every ``set_power_limit`` recorded as a :class:`CapCall`) and
:class:`ReplayJob` (a job's iterations on that clock, one job per GPU, with the run's true totals and its uncapped
counterfactual). The truths they play, and the hindsight oracle, are in :mod:`ecolaunch.sim.truth`.

**Rules of evidence** (a model is never scored against itself). The code under test sees what a GPU shows: iteration stamps with
per-iteration noise, and readings whose ``power_w`` and utilization carry Gaussian noise. Only scoring code may read
a job's ``true_*`` / ``uncapped_*`` totals or a GPU's ``true_energy_j`` and ``time_at_cap_s``. One simplification:
the energy counter in ``GpuSnapshot.energy_j`` is the true energy, without noise; the sampler prefers counter
deltas, so its window power is then noise-free. ``energy_counter=False`` hides the counter and leaves it only the
noisy power readings.

**Not modelled**: settling after a cap change (a limit is in force at once: ``power_limit_enforced_w`` equals the
set limit), co-location, host power. The controller, profiler and observer under test, and the benchmark's loop,
scoring and JSON live in ``cap_control.py`` beside this module, the only code that runs it.
"""

from __future__ import annotations

import math
import random
import uuid as uuidlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ecolaunch.clock import VirtualClock
from ecolaunch.devices.backend import GpuProcess, GpuSnapshot, LinkKind, pair_key
from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError, DeviceError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.sim.truth import TruthCurve
from ecolaunch.validate import is_real

__all__ = ["MIN_TIME_FACTOR", "CapCall", "ReplayBackend", "ReplayGpu", "ReplayJob"]

#: a noise factor (1 + N(0, sigma)) is clipped here so that an iteration never takes zero or negative time
MIN_TIME_FACTOR = 0.05


# --- the replayed GPU ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CapCall:
    """One ``set_power_limit`` call: when, on which GPU, the new and the previous limit."""

    t_s: float
    uuid: str
    power_w: float
    previous_w: float


class ReplayGpu:
    """One replayed board: catalogue model, limit, attached job, true energy, and time spent at each limit.

    Owned and mutated by :class:`ReplayBackend`; scoring code reads ``true_energy_j`` and ``time_at_cap_s``
    (seconds at each limit, whatever ran) after calling :meth:`ReplayBackend.energy_j` or ``gpus()`` to bring
    them up to the clock.
    """

    def __init__(self, uuid: str, index: int, model: GpuModel, idle_power_w: float, t_s: float) -> None:
        self.uuid, self.index, self.model, self.idle_power_w = uuid, index, model, idle_power_w
        self.limit_w = model.power_limit_default_w
        self.job: ReplayJob | None = None
        self.true_energy_j = 0.0
        self.time_at_cap_s: dict[float, float] = defaultdict(float)
        self._updated_s = t_s

    def true_power_w(self) -> float:
        """The board's true power now: the job's truth at the limit while it computes, else idle power."""
        job = self.job
        if job is None or job.stalled:
            return self.idle_power_w
        return job.truth.power_w(self.limit_w)

    def sync(self, now_s: float) -> None:
        """Integrate true power and time at the limit up to ``now_s`` (called before every change of state)."""
        dt = max(0.0, now_s - self._updated_s)
        self.true_energy_j += self.true_power_w() * dt
        self.time_at_cap_s[self.limit_w] += dt
        self._updated_s = max(now_s, self._updated_s)


class ReplayBackend:
    """A :class:`~ecolaunch.devices.backend.GpuBackend` whose boards play :class:`ReplayJob` truths on a virtual clock.

    Args:
        clock: the virtual clock every job and reading uses.
        gpu_models: one catalogue name (or model) per board; range, default limit and name come from it.
        power_noise: relative sigma of the Gaussian noise on each ``power_w`` and utilization reading.
        seed: seeds the readings' ``random.Random`` (jobs have their own, so how often a controller reads the
            GPUs does not change a job's iteration times).
        idle_power_w: power of a board without a job, and of a job's data-loader stall; default the catalogue's.
        energy_counter: report the exact energy counter (True) or ``energy_j=None`` (see the module docstring).
    """

    kind = "replay"

    def __init__(self, clock: VirtualClock, gpu_models: Sequence[str | GpuModel], *, power_noise: float = 0.0,
                 seed: int = 0, idle_power_w: float | None = None, energy_counter: bool = True,
                 host: str = "replay") -> None:
        bad_idle = idle_power_w is not None and not idle_power_w >= 0
        if not (math.isfinite(power_noise) and power_noise >= 0) or bad_idle:
            raise ConfigError(f"power_noise and idle_power_w must be >= 0, got {power_noise!r} and {idle_power_w!r}",
                              hint="power_noise is a relative sigma, e.g. 0.02; idle_power_w in W or None")
        self.clock, self.power_noise, self._host, self._counter = clock, power_noise, host, energy_counter
        self._rng = random.Random(seed)
        self.calls: list[CapCall] = []
        self._gpus: list[ReplayGpu] = []
        for i, m in enumerate(gpu_models):
            model = lookup(m) if isinstance(m, str) else m
            uuid = f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, f'ecolaunch-replay/{host}/{i}')}"
            idle = model.idle_power_w if idle_power_w is None else idle_power_w
            self._gpus.append(ReplayGpu(uuid, i, model, idle, clock.now()))

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self._gpus]

    def gpu(self, uuid: str) -> ReplayGpu:
        """The board with this UUID (DeviceError when there is none)."""
        for g in self._gpus:
            if g.uuid == uuid:
                return g
        raise DeviceError(f"no replayed GPU {uuid!r}", hint=f"use one of {', '.join(self.uuids)}")

    def cap_changes(self, uuid: str) -> int:
        """How many ``set_power_limit`` calls on this GPU changed its limit."""
        return sum(1 for c in self.calls if c.uuid == uuid and c.power_w != c.previous_w)

    # --- GpuBackend ------------------------------------------------------------------------------------

    @property
    def privileged(self) -> bool:
        return True  # virtual boards: whoever drives the replay sets their limits

    def attach(self, uuid: str, pid: int, memory_mib: int, *, util_gpu_pct: float | None = None,
               util_mem_pct: float | None = None, power_w: float | None = None) -> bool:
        return False  # a board plays its ReplayJob, not a process's declared load

    def detach(self, pid: int) -> int:
        return 0

    def hostname(self) -> str:
        return self._host

    def gpus(self) -> list[GpuSnapshot]:
        now = self.clock.now()
        for g in self._gpus:
            g.sync(now)
        return [self._snapshot(g) for g in self._gpus]

    def topology(self) -> dict[tuple[str, str], LinkKind]:
        return {pair_key(a.uuid, b.uuid): LinkKind.NVLINK if a.model.nvlink and b.model.nvlink else LinkKind.PCIE_HOST
                for i, a in enumerate(self._gpus) for b in self._gpus[i + 1:]}

    def set_power_limit(self, uuid: str, power_w: float) -> None:
        g = self.gpu(uuid)
        lo, hi = g.model.power_limit_min_w, g.model.power_limit_max_w
        if not is_real(power_w) or not lo <= power_w <= hi:
            raise DeviceError(f"power limit {power_w!r} W for GPU {uuid} ({g.model.name}) is outside its range "
                              f"[{lo:g}, {hi:g}] W", hint=f"choose a power limit between {lo:g} and {hi:g} W")
        now = self.clock.now()
        g.sync(now)
        self.calls.append(CapCall(now, uuid, float(power_w), g.limit_w))
        g.limit_w = float(power_w)

    def energy_j(self, uuid: str) -> float | None:
        g = self.gpu(uuid)
        g.sync(self.clock.now())
        return g.true_energy_j if self._counter else None

    def close(self) -> None:
        """Nothing to release."""

    def _noisy(self, value: float | None, upper: float = math.inf) -> float | None:
        draw = self._rng.gauss(0.0, self.power_noise)  # drawn even for None: one draw per reading, always
        return None if value is None else min(upper, max(0.0, value * (1.0 + draw)))

    def _snapshot(self, g: ReplayGpu) -> GpuSnapshot:
        job = g.job
        busy = job is not None and not job.stalled
        util = (job.truth.sm_util_pct, job.truth.mem_util_pct) if busy else (0.0, 0.0)  # type: ignore[union-attr]
        return GpuSnapshot(
            uuid=g.uuid, index=g.index, name=g.model.full_name, memory_total_mib=g.model.memory_mib,
            memory_used_mib=0 if job is None else job.memory_mib,
            util_gpu_pct=self._noisy(util[0], 100.0), util_mem_pct=self._noisy(util[1], 100.0),
            power_w=self._noisy(g.true_power_w()),
            power_limit_min_w=g.model.power_limit_min_w, power_limit_default_w=g.model.power_limit_default_w,
            power_limit_max_w=g.model.power_limit_max_w, power_limit_w=g.limit_w,
            energy_j=g.true_energy_j if self._counter else None,
            processes=() if job is None or job.pid is None else (GpuProcess(job.pid, job.memory_mib),),
            power_limit_enforced_w=g.limit_w,
        )


# --- the replayed job ------------------------------------------------------------------------------------

class ReplayJob:
    """A job on one replayed GPU, iterating on the virtual clock under the GPU's current limit.

    Iteration ``i`` computes for ``truth.iter_time_s(limit) * f_i``, ``f_i = max(1 + N(0, time_noise),
    MIN_TIME_FACTOR)``, at the truth's power. With probability ``stall_prob`` it first waits for data for
    ``stall_factor`` uncapped iteration times at the board's idle power (a host-side wait does not depend on the
    cap; default off). Both draws are made for every iteration whatever the limit, from the job's own seeded
    ``random.Random``, so the same seed gives the same noise under any controller.

    ``true_*`` accumulate the run's true time (s) and energy (J); ``uncapped_*`` the same iterations, same draws,
    at the uncapped cap: the counterfactual plain-torchrun run, without a second replay. The job counts as
    computing between :meth:`run` calls; :meth:`finish` detaches it.
    """

    def __init__(self, backend: ReplayBackend, uuid: str, truth: TruthCurve, *, time_noise: float = 0.0,
                 stall_prob: float = 0.0, stall_factor: float = 10.0, seed: int = 0, memory_mib: int = 8192,
                 pid: int | None = None) -> None:
        if not (math.isfinite(time_noise) and time_noise >= 0 and 0 <= stall_prob <= 1 and stall_factor >= 0):
            raise ConfigError(f"job noise out of range: time_noise={time_noise!r}, stall_prob={stall_prob!r}, "
                              f"stall_factor={stall_factor!r}", hint="time_noise >= 0, 0 <= stall_prob <= 1")
        gpu = backend.gpu(uuid)
        if gpu.job is not None:
            raise DeviceError(f"replayed GPU {uuid} already runs {gpu.job.truth.name!r}",
                              hint="replay one job per GPU; finish() the other first")
        self.backend, self.gpu, self.truth = backend, gpu, truth
        self.time_noise, self.stall_prob, self.stall_factor = time_noise, stall_prob, stall_factor
        self.memory_mib, self.pid = min(memory_mib, gpu.model.memory_mib), pid
        self.stalled = False
        self.iterations = self.stalls = 0
        self.true_time_s = self.true_energy_j = self.uncapped_time_s = self.uncapped_energy_j = 0.0
        self._rng = random.Random(seed)
        gpu.sync(backend.clock.now())
        gpu.job = self

    def run(self, n: int, on_iteration: Callable[[float], None] | None = None) -> None:
        """Advance ``n`` iterations; after each, call ``on_iteration(stamp time)`` (it may set caps, poll, ...)."""
        clock, gpu, truth = self.backend.clock, self.gpu, self.truth
        ref = truth.uncapped_cap_w
        ref_time_s, ref_power_w = truth.iter_time_s(ref), truth.power_w(ref)
        for _ in range(n):
            if gpu.job is not self:
                raise DeviceError(f"replay job {truth.name!r} was finished", hint="start a new ReplayJob")
            factor = max(1.0 + self._rng.gauss(0.0, self.time_noise), MIN_TIME_FACTOR)
            stall_s = self.stall_factor * ref_time_s if self._rng.random() < self.stall_prob else 0.0
            if stall_s > 0:
                gpu.sync(clock.now())
                self.stalled, self.stalls = True, self.stalls + 1
                clock.advance(stall_s)
                gpu.sync(clock.now())
                self.stalled = False
            compute_s = truth.iter_time_s(gpu.limit_w) * factor
            clock.advance(compute_s)
            self.iterations += 1
            self.true_time_s += stall_s + compute_s
            self.true_energy_j += gpu.idle_power_w * stall_s + truth.power_w(gpu.limit_w) * compute_s
            self.uncapped_time_s += stall_s + ref_time_s * factor
            self.uncapped_energy_j += gpu.idle_power_w * stall_s + ref_power_w * ref_time_s * factor
            if on_iteration is not None:
                on_iteration(clock.now())

    @property
    def true_slowdown_pct(self) -> float:
        """Whole-run slowdown against the uncapped counterfactual (%); 0 before the first iteration."""
        return 100.0 * (self.true_time_s / self.uncapped_time_s - 1.0) if self.uncapped_time_s else 0.0

    @property
    def true_saving_pct(self) -> float:
        """Whole-run energy saved against the uncapped counterfactual (%), same iterations; 0 before the first."""
        return 100.0 * (1.0 - self.true_energy_j / self.uncapped_energy_j) if self.uncapped_energy_j else 0.0

    def finish(self) -> None:
        """Detach from the GPU (it goes idle); the totals stay readable."""
        if self.gpu.job is self:
            self.gpu.sync(self.backend.clock.now())
            self.gpu.job = None
