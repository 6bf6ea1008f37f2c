"""The GNN as a correction on measurements: the job's curve (exact at measured caps, anchored only within them), the
model returning it for a job alone, sharing multiplying it, and the uncertainty it reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ecolaunch.devices.catalogue import lookup
from ecolaunch.jobmodel.capcurve import fit_curve, profile_curve
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.features import scenario_graph
from ecolaunch.policy.infer import ModelConfig, PlainModel, load_default_model, physics_prior, score_sd
from ecolaunch.policy.model import HierarchicalGNN
from ecolaunch.state.graph import GpuNode

A100 = GpuNode.from_model(lookup("A100-SXM4-80GB"))
#: a compute-bound job measured as the profiler measures it: the max, ~85 % and ~65 % of its power
POINTS = [[400.0, 0.200, 330.0], [275.0, 0.212, 262.0], [225.0, 0.260, 218.0]]
JOB = {"id": "a", "iter_time_s": 0.2, "sm_util_pct": 90.0, "mem_bw_util_pct": 45.0, "memory_mib": 8000,
       "power_w": 330.0, "cap_points": POINTS}


def test_the_curve_is_the_measurement_at_measured_caps_and_anchored_only_within_them() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        top_w = float(rng.uniform(150.0, 400.0))
        power = float(rng.uniform(0.6, 1.0)) * top_w  # drawn at the top cap; every lower cap can bind it
        caps = np.sort(rng.uniform(0.4, 1.25, int(rng.integers(0, 4))) * power)
        caps = caps[caps < top_w]
        times = np.sort(rng.uniform(0.1, 0.5, caps.size + 1))[::-1]
        points = [CapPoint(float(c), float(t), float(min(c, power) * rng.uniform(0.9, 1.0)))
                  for c, t in zip(caps, times)] + [CapPoint(top_w, float(times[-1]), power)]
        curve = fit_curve(points)
        for p in points:
            at = curve.predict(p.power_cap_w)
            assert at.iter_time_s == pytest.approx(p.iter_time_s, rel=1e-9)
            assert at.power_w == pytest.approx(p.power_w, rel=1e-9) and curve.anchored(p.power_cap_w)
        assert not curve.anchored(points[0].power_cap_w - 20.0) and not curve.anchored(top_w + 20.0)


def test_caps_that_cannot_bind_the_job_pool_its_power_and_keep_their_own_time() -> None:
    top, loose = CapPoint(300.0, 0.20, 100.0), CapPoint(200.0, 0.22, 104.0)  # 200 W >= 1.3 x 102 W: not binding
    curve = fit_curve([loose, top])
    assert curve.is_flat and curve.reference_power_w == pytest.approx(102.0)
    # the reference time is the top's (what the bound is promised against); the loose cap's own time stays its own
    assert curve.reference_iter_time_s == 0.20 and curve.predict(200.0).iter_time_s == pytest.approx(0.22)


def test_the_profile_curve_is_its_cap_points_else_its_uncapped_point() -> None:
    point = CapPoint(200.0, 0.34, 195.0)
    curve = profile_curve(Profile(iter_time_s=0.3, power_w=250.0, cap_points=(point,)), 300.0)
    assert curve.points == (point, CapPoint(300.0, 0.3, 250.0))  # the uncapped point where none was measured
    assert curve.speed(200.0, 300.0) == pytest.approx(0.3 / 0.34) and curve.anchored(250.0)
    no_power = profile_curve(Profile(iter_time_s=0.3, cap_points=(point,)), 300.0)
    assert no_power.points == (point,) and not no_power.anchored(300.0)
    assert no_power.speed(200.0, 300.0) < 1.0  # the prior's shape above its one measured cap
    alone = profile_curve(Profile(iter_time_s=0.3, power_w=250.0), 300.0)
    assert alone.points == (CapPoint(300.0, 0.3, 250.0),) and alone.speed(300.0, 300.0) == 1.0
    assert alone.speed(150.0, 300.0) < 1.0 and not alone.anchored(150.0)  # the prior's shape below it
    assert profile_curve(Profile(iter_time_s=0.3), 300.0) is None and profile_curve(None, 300.0) is None
    ratios = profile_curve(Profile(power_w=250.0), 300.0, unknown_time_s=1.0)
    assert ratios.points == (CapPoint(300.0, 1.0, 250.0),)


@pytest.fixture(scope="module")
def random_model() -> PlainModel:
    torch.manual_seed(3)
    pyg = HierarchicalGNN(ModelConfig())
    with torch.no_grad():
        for p in pyg.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return PlainModel(pyg.config, pyg.state_dict())


@pytest.mark.parametrize("which", ["shipped", "random"])
def test_alone_at_a_measured_cap_any_model_returns_the_measurement(which: str, random_model) -> None:
    model = load_default_model() if which == "shipped" else random_model
    graphs = [scenario_graph(A100, cap, [JOB]) for cap, _, _ in POINTS]
    thr, power, sd = score_sd(graphs, model)
    for (_cap, t, p), x, w, s in zip(POINTS, thr, power, sd):
        assert float(x[0]) == pytest.approx(0.2 / t, rel=1e-6) and float(w[0]) == pytest.approx(p, rel=1e-6)
        assert float(s[0]) == 0.0
    caps = np.arange(225.0, 401.0, 5.0)
    thr, power, _ = score_sd([scenario_graph(A100, float(c), [JOB]) for c in caps], model)
    speeds, watts = [float(x[0]) for x in thr], [float(w[0]) for w in power]
    assert all(b >= a - 1e-6 for a, b in zip(speeds, speeds[1:]))  # a higher cap is never slower
    assert all(b >= a - 1e-3 for a, b in zip(watts, watts[1:]))  # nor draws less


def test_sharing_multiplies_the_anchored_speed_by_the_interference_factor(random_model) -> None:
    """The prior of a job that shares is its measured speed at the cap times the analytic interference factor,
    and the learned residual multiplies that (within its bound)."""
    other = {**JOB, "id": "b", "cap_points": [], "iter_time_s": 0.05, "sm_util_pct": 70.0}
    g = scenario_graph(A100, 275.0, [JOB, other])
    prior = physics_prior(g, random_model.config)
    cfg = random_model.config
    total = 0.9 + 0.7
    interference = 0.2 / (0.2 * total + cfg.switch_overhead_s * 0.7)  # the co-runner holds the GPU 70 % of the time
    assert float(prior.throughput[0]) == pytest.approx(0.2 / 0.212 * interference, rel=1e-5)
    heads = random_model.forward(g)
    assert not bool(heads.fixed_job.any())
    assert float(heads.throughput[0] / prior.throughput[0]) != pytest.approx(1.0)


def test_below_its_measured_caps_a_job_draws_at_most_the_cap() -> None:
    curve = fit_curve([CapPoint(700.0, 0.1, 690.0)])  # an H200 job drawing ~ its max; the prior's grid ends at 0.3
    for cap in (150.0, 200.0, 250.0, 300.0):
        assert curve.predict(cap).power_w <= cap
    assert curve.predict(700.0).power_w == pytest.approx(690.0)  # a measured cap keeps what it read
