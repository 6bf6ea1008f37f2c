"""The sampler: series, energy from the counter or from power, windows, thinning, failures, the thread."""

from __future__ import annotations

import logging
import os
import time

import pytest

from ecolaunch.clock import SystemClock, VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import ConfigError
from ecolaunch.profile.sampler import Sampler, downsample


def test_samples_a_simulated_backend_on_virtual_time(tmp_path, vclock: VirtualClock) -> None:
    spec = parse_spec("2xA100-SXM4-80GB", hostname="simhost").hosts[0]
    backend = SimulatedBackend(spec, tmp_path / "gpus.json", clock=lambda: 1.7e9 + vclock.now())
    uuid = spec.uuids[0]
    backend.attach(uuid, os.getpid(), 12_000, util_gpu_pct=70.0, util_mem_pct=30.0, power_w=250.0)
    sampler = Sampler(backend, [uuid], clock=vclock, interval_s=0.5)
    for _ in range(21):
        sampler.sample_once()
        vclock.advance(0.5)
    series = sampler.series(uuid)
    assert len(series) == 21
    assert [s.t_s for s in series[:3]] == [1000.0, 1000.5, 1001.0]
    last = series[-1]
    assert (last.power_w, last.util_gpu_pct, last.util_mem_pct, last.memory_used_mib) == (250.0, 70.0, 30.0, 12_000)
    assert last.power_limit_w == 400.0
    # 10 s at 250 W, from the simulated energy counter
    assert sampler.energy_j(uuid) == pytest.approx(2500.0)
    assert last.energy_counter_j is not None
    assert sampler.duration_s() == pytest.approx(10.0)
    assert sampler.gpu_name(uuid) == "NVIDIA A100-SXM4-80GB"


def test_energy_falls_back_to_trapezoidal_power_without_a_counter(backend, vclock) -> None:
    backend.counter = False
    gpu = backend.gpu("GPU-0")
    sampler = Sampler(backend, ["GPU-0"], clock=vclock)
    for demand in (100.0, 200.0, 300.0):  # ramp: trapezoids 150 * 2 s + 250 * 2 s
        gpu.demand_w = demand
        sampler.sample_once()
        vclock.advance(2.0)
    assert sampler.series("GPU-0")[-1].energy_counter_j is None
    assert sampler.energy_j("GPU-0") == pytest.approx(150 * 2 + 250 * 2)


def test_a_counter_that_goes_backwards_is_not_trusted(backend, vclock) -> None:
    sampler = Sampler(backend, ["GPU-0"], clock=vclock)
    sampler.sample_once()
    vclock.advance(4.0)
    backend.gpu("GPU-0").energy_j = -1e6  # counter reset (driver reload)
    backend.gpu("GPU-0").updated_s = vclock.now()
    sampler.sample_once()
    assert sampler.energy_j("GPU-0") == pytest.approx(300.0 * 4)  # from power, not from the delta


def test_window_stats_and_coverage(backend, vclock) -> None:
    sampler = Sampler(backend, ["GPU-0", "GPU-1"], clock=vclock)
    gpu = backend.gpu("GPU-0")
    for i in range(10):
        gpu.memory_used_mib = 10_000 + 100 * i
        sampler.sample_once()
        vclock.advance(1.0)
    w = sampler.window("GPU-0", 1002.0, 1006.0)
    assert w is not None
    assert w.energy_j == pytest.approx(4 * 300.0)
    assert w.power_w == pytest.approx(300.0)
    assert w.duration_s == 4.0
    assert (w.util_gpu_pct, w.util_mem_pct) == (80.0, 40.0)
    assert w.memory_mib == 10_600
    assert sampler.window("GPU-0", 1002.25, 1002.75).power_w == pytest.approx(300.0)  # inside one interval
    assert sampler.window("GPU-0", 1005.0, 1020.0) is None  # not sampled up to the end yet
    assert sampler.window("GPU-0", 990.0, 1001.0) is None  # before the first sample
    assert sampler.window("GPU-0", 1003.0, 1003.0) is None
    assert sampler.last_sample_s() == 1009.0


def test_thinning_keeps_energy_exact(backend, vclock) -> None:
    sampler = Sampler(backend, ["GPU-0"], clock=vclock, max_samples=8)
    gpu = backend.gpu("GPU-0")
    for i in range(100):
        gpu.demand_w = 100.0 + (i % 7) * 30
        sampler.sample_once()
        vclock.advance(1.0)
    series = sampler.series("GPU-0")
    assert len(series) <= 8
    assert series[0].t_s == 1000.0 and series[-1].t_s == 1099.0
    assert sampler.energy_j("GPU-0") == pytest.approx(backend.gpu("GPU-0").energy_j)


def test_a_failed_read_warns_once_and_is_skipped(backend, vclock, caplog) -> None:
    sampler = Sampler(backend, ["GPU-0"], clock=vclock)
    sampler.sample_once()
    backend.fail = True
    with caplog.at_level(logging.WARNING, logger="ecolaunch.profile.sampler"):
        assert sampler.sample_once() == []
        assert sampler.sample_once() == []
    assert sum("GPU read failed" in r.message for r in caplog.records) == 1
    assert len(sampler.series("GPU-0")) == 1


def test_a_vanished_gpu_is_skipped(backend, vclock) -> None:
    sampler = Sampler(backend, ["GPU-0", "GPU-9"], clock=vclock)
    assert [s.power_w for s in sampler.sample_once()] == [300.0]
    assert sampler.series("GPU-9") == []
    assert sampler.last_sample_s() is None


def test_background_thread_samples_until_stopped(backend) -> None:
    sampler = Sampler(backend, ["GPU-0"], clock=SystemClock(), interval_s=0.01)
    backend.clock = SystemClock()  # type: ignore[assignment]
    sampler.start()
    deadline = time.monotonic() + 5.0
    while len(sampler.series("GPU-0")) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    n = len(sampler.series("GPU-0"))
    assert n >= 4  # first, at least two from the thread, and the final one
    time.sleep(0.05)
    assert len(sampler.series("GPU-0")) == n  # stopped


@pytest.mark.parametrize("kwargs", [{"interval_s": 0}, {"interval_s": float("nan")}, {"max_samples": 2}])
def test_rejects_bad_settings(backend, vclock, kwargs) -> None:
    with pytest.raises(ConfigError):
        Sampler(backend, ["GPU-0"], clock=vclock, **kwargs)
    with pytest.raises(ConfigError):
        Sampler(backend, [], clock=vclock)


def test_downsample_buckets_and_bounds(backend, vclock) -> None:
    sampler = Sampler(backend, ["GPU-0"], clock=vclock)
    gpu = backend.gpu("GPU-0")
    for i in range(100):
        gpu.demand_w = 100.0 if i < 50 else 300.0
        sampler.sample_once()
        vclock.advance(1.0)
    points = downsample(sampler.series("GPU-0"), 10, origin_s=1000.0)
    assert len(points) == 10
    assert points[0]["t_s"] == 9.0 and points[-1]["t_s"] == 99.0
    assert points[2]["power_w"] == pytest.approx(100.0)
    assert points[-1]["power_w"] == pytest.approx(300.0)
    assert set(points[0]) == {"t_s", "power_w", "util_gpu_pct", "util_mem_pct", "memory_used_mib", "power_limit_w"}
    assert downsample([], 10) == []
    with pytest.raises(ConfigError):
        downsample(sampler.series("GPU-0"), 0)
