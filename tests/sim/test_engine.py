"""The simulator's event loop and the baseline policies' defining behaviour on small, hand-made traces."""

from __future__ import annotations

import random

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.jobmodel.gpu import CapBounds
from ecolaunch.devices.spec import parse_spec
from ecolaunch.policy.registry import get_policy
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.sim.metrics import summarize
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.oracle import oracle_policy


def job(i: int, arrival: float, work: float, util: float, nproc: int = 1, power=None, bound: float = 10.0) -> TraceJob:
    return TraceJob(f"j{i}", arrival, nproc, work,
                    Profile(iter_time_s=0.2, sm_util_pct=util, mem_bw_util_pct=util / 2, memory_mib=8000,
                               power_w=power), allowed_slowdown_pct=bound)


def random_trace(n: int = 120, seed: int = 1) -> Trace:
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n):
        t += rng.expovariate(1 / 400)
        jobs.append(job(i, t, rng.uniform(300, 3000), rng.uniform(10, 100), rng.choice([1, 1, 1, 2])))
    return Trace("random", tuple(jobs))


MACHINE = parse_spec("4xA100-SXM4-80GB", hostname="ws")


def run(policy, trace: Trace, machine=MACHINE):
    return Simulation(machine, policy if not isinstance(policy, str) else get_policy(policy)).run(trace)


def test_same_input_same_output() -> None:
    trace = random_trace()
    a, b = summarize(run("lucid", trace)), summarize(run("lucid", trace))
    assert a == b
    assert a.finished == a.jobs == 120


def test_a_job_alone_runs_at_solo_speed_and_idle_gpus_draw_idle_power() -> None:
    result = run("exclusive", Trace("one", (job(0, 0.0, 1000.0, 50.0),)))
    (out,) = result.jobs
    assert out.start_s == 0.0 and out.end_s == pytest.approx(1000.0)
    assert out.slowdown_pct == pytest.approx(0.0, abs=1e-6)
    e = result.energy
    assert e.node_energy_j > e.gpu_energy_j > 0
    assert sum(e.job_energy_j.values()) == pytest.approx(e.node_energy_j)  # one job ran the whole time


def test_exclusive_never_shares_and_queues_in_fifo_order() -> None:
    jobs = tuple(job(i, float(i), 500.0, 30.0) for i in range(6))
    result = run("exclusive", Trace("fifo", jobs))
    assert not any(o.shared for o in result.jobs)
    starts = [o.start_s for o in result.jobs]
    assert starts == sorted(starts) and starts[4] == pytest.approx(500.0)


def test_first_fit_shares_whenever_memory_fits_lucid_only_when_safe() -> None:
    light = tuple(job(i, float(i), 500.0, 30.0) for i in range(8))
    heavy = tuple(job(i, float(i), 500.0, 90.0) for i in range(8))
    assert sum(o.shared for o in run("first-fit", Trace("h", heavy)).jobs) == 4
    assert sum(o.shared for o in run("lucid", Trace("h", heavy)).jobs) == 0  # 0.9 + 0.9 > 1: not safe
    assert sum(o.shared for o in run("lucid", Trace("l", light)).jobs) == 4


def test_eaco_undoes_a_shared_placement_that_breaks_the_bound() -> None:
    # two short-iteration jobs whose estimated demands fit (EaCO's rule) but whose switching cost does not
    fast = tuple(
        TraceJob(f"j{i}", float(i), 1, 2000.0, Profile(iter_time_s=0.01, sm_util_pct=40.0, memory_mib=4000),
                 allowed_slowdown_pct=5.0)
        for i in range(6)
    )
    result = run("eaco", Trace("fast", fast))
    assert any(o.undone for o in result.jobs)
    assert all(o.end_s is not None for o in result.jobs)


def test_zeus_caps_power_hungry_jobs_within_bounds_and_leaves_unknown_power_alone() -> None:
    trace = Trace("z", (job(0, 0.0, 1000.0, 95.0, power=380.0), job(1, 0.0, 1000.0, 95.0, power=None)))
    result = run(get_policy("zeus"), trace)
    capped, unknown = result.jobs
    assert all(w is not None and w < 400 for w in capped.caps_w.values())
    # without a measured power the profile still carries the emulated profiling cap points
    assert capped.slowdown_pct <= 10.0 + 2.0
    assert min(capped.caps_w.values()) < 350
    bounded = Rules(cap_bounds_model={"A100-SXM4-80GB": CapBounds(min_w=350.0, max_w=None, min_fraction=None,
                                                                   max_fraction=None)})
    result = Simulation(MACHINE, get_policy("zeus"), bounded).run(trace)
    assert all(w is not None and 350 <= w < 400 for w in result.jobs[0].caps_w.values())


def test_oracle_saves_energy_against_exclusive_without_qos_violations() -> None:
    trace = random_trace(80, seed=3)
    base, best = summarize(run("exclusive", trace)), summarize(run(oracle_policy(), trace))
    assert best.node_energy_kwh < base.node_energy_kwh
    assert best.qos_violations_pct <= 2.0


def test_jobs_that_can_never_fit_are_rejected_not_stuck() -> None:
    result = run("exclusive", Trace("big", (job(0, 0.0, 100.0, 50.0, nproc=8), job(1, 1.0, 100.0, 50.0))))
    assert result.jobs[0].rejected and result.jobs[1].end_s is not None


def test_multi_host_cluster_uses_every_host() -> None:
    machine = parse_spec("4xA100-SXM4-80GB", hostname="n").replicate(3)
    result = run("exclusive", Trace("c", tuple(job(i, 0.0, 100.0, 50.0) for i in range(12))), machine)
    hosts = {Simulation(machine, get_policy("exclusive"))._host_of[o.gpus[0]] for o in result.jobs}
    assert len(hosts) == 3
    assert summarize(result).gpu_utilization_pct == pytest.approx(100.0)
