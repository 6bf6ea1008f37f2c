"""The GNN as a correction on measurements: the measured curve (exact at measured caps, monotone and between them
in between), the model returning it for a job alone, sharing multiplying it, and the uncertainty it reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ecolaunch.devices.catalogue import lookup
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.estimate import measured_curve, profile_curve
from ecolaunch.policy.features import scenario_graph
from ecolaunch.policy.infer import ModelConfig, PlainModel, load_default_model, physics_prior, score_sd
from ecolaunch.policy.model import HierarchicalGNN
from ecolaunch.state.graph import GpuNode

A100 = GpuNode.from_model(lookup("A100-SXM4-80GB"))
#: a compute-bound job measured as the profiler measures it: the max, ~85 % and ~65 % of its power
POINTS = [[400.0, 0.200, 330.0], [275.0, 0.212, 262.0], [225.0, 0.260, 218.0]]
JOB = {"id": "a", "iter_time_s": 0.2, "sm_util_pct": 90.0, "mem_bw_util_pct": 45.0, "memory_mib": 8000,
       "power_w": 330.0, "cap_points": POINTS}


def random_monotone_points(rng: np.random.Generator, n: int) -> list[list[float]]:
    caps = np.sort(rng.choice(np.arange(100.0, 401.0, 5.0), n, replace=False))
    times = np.sort(rng.uniform(0.1, 0.5, n))[::-1]
    powers = np.sort(rng.uniform(60.0, 390.0, n))
    return [[float(c), float(t), float(p)] for c, t, p in zip(caps, times, powers)]


def test_the_curve_is_the_measurement_at_measured_caps_and_monotone_between() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        points = random_monotone_points(rng, int(rng.integers(1, 5)))
        curve = measured_curve(points, 400.0)
        for cap, t, p in points:
            assert curve.at(cap) == (t, p) and curve.anchored(cap)
        grid = np.linspace(points[0][0], points[-1][0], 97)
        at = np.array([curve.at(c) for c in grid])
        assert np.all(np.diff(at[:, 0]) <= 1e-12) and np.all(np.diff(at[:, 1]) >= -1e-12)  # monotone
        for (c0, t0, p0), (c1, t1, p1) in zip(points, points[1:]):  # between the two measurements around it
            inside = at[(grid > c0) & (grid < c1)]
            assert np.all((inside[:, 0] <= t0 + 1e-12) & (inside[:, 0] >= t1 - 1e-12))
            assert np.all((inside[:, 1] >= p0 - 1e-12) & (inside[:, 1] <= p1 + 1e-12))
        below = curve.at(points[0][0] - 20.0)
        assert below[0] >= points[0][1] - 1e-12 and not curve.anchored(points[0][0] - 20.0)


def test_the_uncapped_profile_is_the_point_at_the_max_limit() -> None:
    point = CapPoint(200.0, 0.34, 195.0)
    curve = profile_curve(Profile(iter_time_s=0.3, power_w=250.0, cap_points=(point,)), 300.0)
    assert curve.caps_w == (200.0, 300.0) and curve.speed(300.0) == 1.0 and curve.speed(200.0) == 0.3 / 0.34
    no_power = profile_curve(Profile(iter_time_s=0.3, cap_points=(point,)), 300.0)
    assert no_power.speed(200.0) == 0.3 / 0.34 and no_power.anchored(200.0) and not no_power.anchored(250.0)
    assert profile_curve(Profile(iter_time_s=0.3), 300.0) is None and profile_curve(None, 300.0) is None


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
    interference = 0.2 / (0.2 * total + cfg.switch_overhead_s)
    assert float(prior.throughput[0]) == pytest.approx(0.2 / 0.212 * interference, rel=1e-5)
    heads = random_model.forward(g)
    assert not bool(heads.fixed_job.any())
    assert float(heads.throughput[0] / prior.throughput[0]) != pytest.approx(1.0)
