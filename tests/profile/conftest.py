"""Fixtures for the launcher-side profiling tests: a scripted GPU backend and a synthetic job on virtual time."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from ecolaunch.clock import VirtualClock
from ecolaunch.devices.backend import GpuSnapshot, LinkKind
from ecolaunch.errors import DeviceError


@dataclass
class FakeGpu:
    uuid: str
    index: int
    name: str = "NVIDIA A100-SXM4-80GB"
    min_w: float = 100.0
    max_w: float = 400.0
    limit_w: float = 400.0
    demand_w: float = 300.0  # what the job would draw uncapped
    util_gpu_pct: float | None = 80.0
    util_mem_pct: float | None = 40.0
    memory_used_mib: int = 10_000
    energy_j: float = 0.0
    updated_s: float = 0.0

    @property
    def power_w(self) -> float:
        return min(self.demand_w, self.limit_w)


@dataclass
class ScriptedBackend:
    """A GPU backend whose GPUs draw ``min(demand, cap)``; the energy counter integrates it on the clock.

    ``counter=False`` makes it report no energy counter (``energy_j=None``); ``fail`` makes ``gpus()`` raise.
    Every ``set_power_limit`` call is recorded in ``calls``.
    """

    clock: VirtualClock
    gpus_: list[FakeGpu] = field(default_factory=list)
    counter: bool = True
    fail: bool = False
    calls: list[tuple[str, float]] = field(default_factory=list)
    kind: str = "scripted"

    def _advance(self) -> None:
        now = self.clock.now()
        for g in self.gpus_:
            g.energy_j += g.power_w * max(0.0, now - g.updated_s)
            g.updated_s = now

    def hostname(self) -> str:
        return "scripted"

    def gpus(self) -> list[GpuSnapshot]:
        if self.fail:
            raise DeviceError("scripted failure", hint="none")
        self._advance()
        return [GpuSnapshot(g.uuid, g.index, g.name, 81_920, g.memory_used_mib, g.util_gpu_pct, g.util_mem_pct,
                            g.power_w, g.min_w, g.max_w, g.max_w, g.limit_w,
                            g.energy_j if self.counter else None) for g in self.gpus_]

    def topology(self) -> dict[tuple[str, str], LinkKind]:
        return {}

    def set_power_limit(self, uuid: str, power_w: float) -> None:
        g = next(g for g in self.gpus_ if g.uuid == uuid)
        if not g.min_w <= power_w <= g.max_w:
            raise DeviceError(f"limit {power_w} outside [{g.min_w}, {g.max_w}]")
        self._advance()
        self.calls.append((uuid, power_w))
        g.limit_w = power_w

    def energy_j(self, uuid: str) -> float | None:
        self._advance()
        return next(g.energy_j for g in self.gpus_ if g.uuid == uuid) if self.counter else None

    def close(self) -> None:
        pass

    def gpu(self, uuid: str) -> FakeGpu:
        return next(g for g in self.gpus_ if g.uuid == uuid)


def iter_time_at(cap_w: float, demand_w: float, base_s: float = 0.1) -> float:
    """The synthetic job's iteration time: slower as the cap bites below its demand (a made-up shape)."""
    return base_s * max(1.0, demand_w / cap_w) ** 0.7


class SyntheticJob:
    """Runs iterations on virtual time: each advances the clock by the iteration time under the current cap."""

    def __init__(self, clock: VirtualClock, backend: ScriptedBackend, uuid: str, base_s: float = 0.1) -> None:
        self.clock, self.backend, self.uuid, self.base_s = clock, backend, uuid, base_s
        self.stamps: list[float] = []

    def run(self, n: int, on_stamp=None) -> None:
        for _ in range(n):
            g = self.backend.gpu(self.uuid)
            self.clock.advance(iter_time_at(g.limit_w, g.demand_w, self.base_s))
            self.stamps.append(self.clock.now())
            if on_stamp is not None:
                on_stamp(self.clock.now())


@pytest.fixture
def vclock() -> VirtualClock:
    return VirtualClock(1000.0)


@pytest.fixture
def backend(vclock: VirtualClock) -> ScriptedBackend:
    b = ScriptedBackend(vclock, [FakeGpu("GPU-0", 0), FakeGpu("GPU-1", 1)])
    for g in b.gpus_:
        g.updated_s = vclock.now()
    return b


def close(a: float, b: float, rel: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)
