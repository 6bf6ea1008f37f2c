"""The replayed GPU backend and job on virtual time (benchmarks/_replay.py, what benchmarks/cap_control.py runs):
noisy readings, exact true totals, the uncapped counterfactual."""

from __future__ import annotations

import statistics

import pytest

from benchmarks import _replay as replay
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.backend import GpuBackend, LinkKind
from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError, DeviceError
from ecolaunch.sim.truth import TruthCurve, h200_truths, true_energy_per_iter, true_slowdown_pct


def truth(name: str) -> TruthCurve:
    return next(t for t in h200_truths() if t.name == name)


def start(t: TruthCurve, *, power_noise: float = 0.0, seed: int = 0, **job_kw):
    clock = VirtualClock(100.0)
    backend = replay.ReplayBackend(clock, [t.gpu_model], power_noise=power_noise, seed=seed)
    job = replay.ReplayJob(backend, backend.uuids[0], t, seed=seed, **job_kw)
    return clock, backend, job


# --- the replayed GPU and job ----------------------------------------------------------------------------

def test_backend_satisfies_the_protocol_and_validates_caps() -> None:
    clock = VirtualClock()
    backend = replay.ReplayBackend(clock, ["H200-SXM-141GB", "H200-SXM-141GB"])
    assert isinstance(backend, GpuBackend)
    a, b = backend.uuids
    snaps = backend.gpus()
    assert [s.uuid for s in snaps] == [a, b] and snaps[0].name == "NVIDIA H200"
    assert (snaps[0].power_limit_min_w, snaps[0].power_limit_w, snaps[0].power_limit_max_w) == (200.0, 700.0, 700.0)
    assert list(backend.topology().values()) == [LinkKind.NVLINK]
    for bad in (199.0, 700.5, True, "450"):
        with pytest.raises(DeviceError):
            backend.set_power_limit(a, bad)  # type: ignore[arg-type]
    with pytest.raises(DeviceError):
        backend.set_power_limit("GPU-nope", 450.0)
    assert backend.calls == [] and backend.gpu(a).limit_w == 700.0


def test_cap_calls_and_time_at_each_cap_are_recorded() -> None:
    clock, backend, job = start(truth("H200 mm"))
    uuid = backend.uuids[0]
    job.run(10)
    backend.set_power_limit(uuid, 500.0)
    job.run(10)
    backend.set_power_limit(uuid, 500.0)  # same value: a call, not a change
    backend.set_power_limit(uuid, 650.0)
    job.run(5)
    backend.energy_j(uuid)
    t_700, t_500 = 100.0 + 10 * 0.164389, 100.0 + 10 * 0.164389 + 10 * 0.197982
    assert [(c.t_s, c.power_w, c.previous_w) for c in backend.calls] == [
        pytest.approx((t_700, 500.0, 700.0)), pytest.approx((t_500, 500.0, 500.0)),
        pytest.approx((t_500, 650.0, 500.0))]
    assert backend.cap_changes(uuid) == 2
    spent = backend.gpu(uuid).time_at_cap_s
    assert spent[700.0] == pytest.approx(10 * 0.164389) and spent[500.0] == pytest.approx(10 * 0.197982)
    assert spent[650.0] == pytest.approx(5 * 0.170665)


def test_energy_counter_integrates_the_truth_through_caps_stalls_and_idle() -> None:
    t = truth("H200 mm")
    clock, backend, job = start(t, power_noise=0.05, time_noise=0.03, stall_prob=0.05, stall_factor=4.0, seed=7)
    uuid = backend.uuids[0]
    caps = iter([450.0, 600.0, 300.0, 700.0])

    def on_iteration(_: float) -> None:
        if job.iterations % 50 == 0:
            backend.set_power_limit(uuid, next(caps, 550.0))
        if job.iterations % 7 == 0:
            backend.gpus()  # occasional readings must not disturb the integration

    job.run(400, on_iteration)
    assert job.stalls > 0
    assert backend.energy_j(uuid) == pytest.approx(job.true_energy_j, rel=1e-12)
    assert clock.now() - 100.0 == pytest.approx(job.true_time_s, rel=1e-12)
    job.finish()
    idle_w = lookup("H200-SXM-141GB").idle_power_w
    clock.advance(10.0)
    assert backend.energy_j(uuid) == pytest.approx(job.true_energy_j + 10.0 * idle_w, rel=1e-12)
    assert backend.gpus()[0].memory_used_mib == 0 and backend.gpus()[0].util_gpu_pct == 0.0


def test_iteration_noise_has_the_requested_sigma() -> None:
    t = truth("H200 mm")
    clock, backend, job = start(t, time_noise=0.03, seed=3)
    backend.set_power_limit(backend.uuids[0], 450.0)
    stamps = [clock.now()]
    job.run(4000, stamps.append)
    ratios = [(b - a) / t.iter_time_s(450.0) for a, b in zip(stamps, stamps[1:])]
    assert statistics.fmean(ratios) == pytest.approx(1.0, abs=0.003)
    assert statistics.stdev(ratios) == pytest.approx(0.03, rel=0.1)


def test_noiseless_job_takes_exactly_the_truths_time() -> None:
    t = truth("H200 bw")
    clock, backend, job = start(t)
    job.run(20)
    assert clock.now() - 100.0 == pytest.approx(20 * 0.060658) and job.true_slowdown_pct == 0.0


def test_power_readings_are_noisy_around_the_truth_and_the_counter_is_exact() -> None:
    t = truth("H200 mm")
    clock, backend, job = start(t, power_noise=0.02, seed=5)
    backend.set_power_limit(backend.uuids[0], 500.0)
    powers, utils = [], []
    for _ in range(3000):
        job.run(1)
        snap = backend.gpus()[0]
        powers.append(snap.power_w)
        utils.append(snap.util_gpu_pct)
        assert snap.energy_j == backend.gpu(snap.uuid).true_energy_j
        assert snap.power_limit_enforced_w == 500.0
    rel = [p / t.power_w(500.0) for p in powers]
    assert statistics.fmean(rel) == pytest.approx(1.0, abs=0.003)
    assert statistics.stdev(rel) == pytest.approx(0.02, rel=0.1)
    assert max(utils) <= 100.0 and statistics.fmean(utils) == pytest.approx(99.8, abs=1.0)
    hidden = replay.ReplayBackend(clock, ["A40"], energy_counter=False)
    assert hidden.gpus()[0].energy_j is None and hidden.energy_j(hidden.uuids[0]) is None


def test_counterfactual_equals_an_uncapped_replay_with_the_same_seed() -> None:
    t = truth("H200 mm")
    kw = dict(time_noise=0.03, stall_prob=0.02, stall_factor=5.0, seed=11)
    _, backend, capped = start(t, **kw)
    uuid = backend.uuids[0]
    capped.run(100)
    backend.set_power_limit(uuid, 400.0)
    capped.run(200, lambda _: backend.gpus())
    backend.set_power_limit(uuid, 600.0)
    capped.run(100)
    _, _, plain = start(t, **kw)
    plain.run(400)
    assert capped.uncapped_time_s == pytest.approx(plain.true_time_s, rel=1e-12)
    assert capped.uncapped_energy_j == pytest.approx(plain.true_energy_j, rel=1e-12)
    assert plain.true_slowdown_pct == pytest.approx(0.0, abs=1e-9) and plain.true_saving_pct == pytest.approx(0.0)
    assert capped.true_slowdown_pct > 10.0 and capped.true_saving_pct > 5.0


def test_a_fixed_cap_run_scores_exactly_the_oracles_figures() -> None:
    t = truth("H200 mm")
    _, backend, job = start(t, time_noise=0.03, seed=2)
    backend.set_power_limit(backend.uuids[0], 650.0)
    job.run(500)
    assert job.true_slowdown_pct == pytest.approx(true_slowdown_pct(t, 650.0), rel=1e-9)
    energy_ratio = true_energy_per_iter(t, 650.0) / true_energy_per_iter(t, 700.0)
    assert job.true_saving_pct == pytest.approx(100.0 * (1.0 - energy_ratio), rel=1e-9)


def test_one_job_per_gpu_and_bad_noise_raise() -> None:
    t = truth("H200 mm")
    _, backend, job = start(t)
    with pytest.raises(DeviceError):
        replay.ReplayJob(backend, backend.uuids[0], t)
    job.finish()
    with pytest.raises(DeviceError):
        job.run(1)
    replay.ReplayJob(backend, backend.uuids[0], t)  # free again
    with pytest.raises(ConfigError):
        replay.ReplayJob(backend, backend.uuids[0], t, time_noise=-0.1)
    with pytest.raises(ConfigError):
        replay.ReplayBackend(VirtualClock(), ["A40"], power_noise=float("nan"))
