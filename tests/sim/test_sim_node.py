"""Shared-GPU power and the three energy accountings (ecolaunch.sim.node)."""

from __future__ import annotations

import pytest

from ecolaunch.devices.catalogue import lookup
from ecolaunch.sim import node
from ecolaunch.jobmodel.profile import Profile

V100 = lookup("V100-PCIE-32GB")  # 100-250 W, idle 30 W


def job(util: float, power_w: float, iter_time_s: float = 0.3) -> Profile:
    return Profile(iter_time_s=iter_time_s, sm_util_pct=util, power_w=power_w, memory_mib=4000)


def test_empty_gpu_draws_idle_power() -> None:
    g = node.shared_gpu([], V100)
    assert g.power_w == 30.0 and g.throughputs == ()


def test_one_job_uncapped_draws_its_own_power() -> None:
    g = node.shared_gpu([job(60, 200.0)], V100)
    assert g.throughputs == (1.0,)
    assert g.power_w == pytest.approx(200.0)
    assert g.floor_power_w + sum(g.job_dynamic_w) == pytest.approx(g.power_w)


def test_light_jobs_add_power_saturated_jobs_do_not() -> None:
    light = node.shared_gpu([job(20, 90.0), job(20, 90.0)], V100)
    busy = node.shared_gpu([job(100, 220.0), job(100, 220.0)], V100)
    floor = light.floor_power_w
    # light pair: nearly additive dynamic power
    assert light.power_w - floor == pytest.approx(2 * (90.0 - floor), rel=0.06)
    # saturated pair: the board does not draw more than one busy job alone (work is shared, not added)
    assert busy.saturated
    assert busy.power_w <= 220.0 + 1e-9


def test_a_binding_cap_slows_every_job_on_the_board_equally() -> None:
    free = node.shared_gpu([job(50, 150.0), job(40, 120.0)], V100)
    capped = node.shared_gpu([job(50, 150.0), job(40, 120.0)], V100, power_cap_w=125.0)
    assert capped.cap_time_ratio > 1.05
    assert capped.power_w < free.power_w
    for f, c in zip(free.throughputs, capped.throughputs):
        assert c == pytest.approx(f / capped.cap_time_ratio)


def test_energy_meter_accountings_add_up() -> None:
    meter = node.EnergyMeter(host_static_w=100.0)
    idle_gpu = node.GpuLoad(power_w=30.0, floor_power_w=30.0)
    shared = node.GpuLoad(power_w=250.0, floor_power_w=50.0, jobs={"a": 150.0, "b": 50.0})
    alone = node.GpuLoad(power_w=150.0, floor_power_w=50.0, jobs={"a": 100.0})
    meter.add(10.0, [shared, alone, idle_gpu], host_dynamic_w={"b": 20.0})
    meter.add(5.0, [idle_gpu, idle_gpu, idle_gpu])  # nobody runs: static is unattributed
    rep = meter.report()
    assert rep.gpu_energy_j == pytest.approx((250 + 150 + 30) * 10 + 90 * 5)
    assert rep.node_energy_j == pytest.approx(rep.gpu_energy_j + 100 * 15 + 20 * 10)
    assert rep.unattributed_energy_j == pytest.approx((100 + 90) * 5)
    assert sum(rep.job_energy_j.values()) + rep.unattributed_energy_j == pytest.approx(rep.node_energy_j)
    # job a holds 1.5 GPUs' worth (half of the shared one, all of the other), b holds 0.5
    static_pool = (100 + 30) * 10
    assert rep.job_energy_j["a"] == pytest.approx((150 + 25 + 100 + 50) * 10 + static_pool * 0.75)
    assert rep.job_energy_j["b"] == pytest.approx((50 + 25 + 20) * 10 + static_pool * 0.25)
    assert rep.duration_s == 15.0


def test_the_dynamic_gpu_energy_is_what_the_boards_drew_above_their_idle_power() -> None:
    meter = node.EnergyMeter(host_static_w=100.0, gpu_idle_w=2 * 30.0)  # two boards idling at 30 W
    meter.add(10.0, [node.GpuLoad(power_w=230.0, floor_power_w=50.0, jobs={"a": 180.0}), node.GpuLoad(30.0, 30.0)])
    meter.add(5.0, [node.GpuLoad(30.0, 30.0), node.GpuLoad(30.0, 30.0)])
    rep = meter.report()
    assert rep.gpu_idle_energy_j == pytest.approx(60 * 15)
    assert rep.gpu_dynamic_energy_j == pytest.approx((230 - 30) * 10)  # idle boards add nothing to it
    assert node.EnergyMeter(100.0).report().gpu_dynamic_energy_j == 0.0


def test_meter_ignores_empty_intervals() -> None:
    meter = node.EnergyMeter(50.0)
    meter.add(0.0, [node.GpuLoad(30.0, 30.0)])
    assert meter.report().node_energy_j == 0.0
