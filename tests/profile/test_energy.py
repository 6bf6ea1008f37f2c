"""Energy attribution among jobs sharing a GPU: small cases by hand, conservation by property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ecolaunch.errors import ConfigError
from ecolaunch.profile.attribution import Interval, attribute, demand_weight, intervals_from_samples
from ecolaunch.profile.sampler import GpuSample


def test_a_job_alone_is_charged_everything_idle_included() -> None:
    a = attribute([Interval(10.0, 3000.0, {"a": 250.0})], idle_power_w=50.0)
    assert a.energy_j == {"a": 3000.0}
    assert a.unattributed_j == 0.0


def test_idle_is_split_equally_and_the_rest_by_demand() -> None:
    # 10 s at 350 W: idle 50 W -> 500 J, split 250/250; active 3000 J split 200:100
    a = attribute([Interval(10.0, 3500.0, {"big": 200.0, "small": 100.0})], idle_power_w=50.0)
    assert a.energy_j["big"] == pytest.approx(250.0 + 2000.0)
    assert a.energy_j["small"] == pytest.approx(250.0 + 1000.0)


def test_unknown_demand_gets_the_mean_of_the_known_ones() -> None:
    a = attribute([Interval(1.0, 400.0, {"a": 100.0, "b": 300.0, "c": None})], idle_power_w=None)
    # weights 100, 300, 200 (mean of known) -> 400 J split 1:3:2
    assert a.energy_j == pytest.approx({"a": 400 / 6, "b": 1200 / 6, "c": 800 / 6})


def test_all_unknown_or_zero_demand_splits_equally() -> None:
    assert attribute([Interval(2.0, 600.0, {"a": None, "b": None})], 50.0).energy_j == {"a": 300.0, "b": 300.0}
    assert attribute([Interval(2.0, 600.0, {"a": 0.0, "b": 0.0})], 50.0).energy_j == {"a": 300.0, "b": 300.0}


def test_energy_below_idle_is_all_idle() -> None:
    a = attribute([Interval(10.0, 200.0, {"a": 300.0, "b": 0.0})], idle_power_w=50.0)  # GPU drew 20 W < idle
    assert a.energy_j == {"a": 100.0, "b": 100.0}


def test_intervals_without_residents_are_unattributed_and_shares_add_over_intervals() -> None:
    a = attribute([Interval(5.0, 500.0, {}), Interval(5.0, 1000.0, {"a": 1.0}),
                   Interval(5.0, 1000.0, {"a": 1.0, "b": 1.0})], idle_power_w=0.0)
    assert a.unattributed_j == 500.0
    assert a.energy_j == {"a": 1500.0, "b": 500.0}


def test_demand_weight() -> None:
    assert demand_weight(300.0, 50.0) == 250.0
    assert demand_weight(30.0, 50.0) == 0.0
    assert demand_weight(None, 50.0) is None
    assert demand_weight(120.0, None) == 120.0


@pytest.mark.parametrize("bad", [Interval(-1.0, 1.0, {"a": 1.0}), Interval(1.0, float("nan"), {"a": 1.0}),
                                 Interval(1.0, 1.0, {"a": -5.0})])
def test_rejects_bad_intervals(bad: Interval) -> None:
    with pytest.raises(ConfigError):
        attribute([bad], 10.0)
    with pytest.raises(ConfigError):
        attribute([], -1.0)


def _sample(t: float, energy: float) -> GpuSample:
    return GpuSample(t, None, None, energy, None, None, 0, None)


def test_intervals_from_samples_cut_at_residency_changes() -> None:
    samples = [_sample(0.0, 0.0), _sample(10.0, 1000.0), _sample(20.0, 3000.0)]
    residency = [(-1.0, {"a": 1.0}), (15.0, {"a": 1.0, "b": 1.0})]
    ivs = intervals_from_samples(samples, residency)
    assert [(iv.duration_s, iv.energy_j, sorted(iv.residents)) for iv in ivs] == [
        (10.0, 1000.0, ["a"]), (5.0, 1000.0, ["a"]), (5.0, 1000.0, ["a", "b"])]
    a = attribute(ivs, idle_power_w=0.0)
    assert a.energy_j == {"a": 2500.0, "b": 500.0}
    with pytest.raises(ConfigError):
        intervals_from_samples(samples, [])


@given(
    st.lists(st.tuples(st.floats(0.0, 100.0), st.floats(0.0, 1e5),
                       st.dictionaries(st.sampled_from("abcd"), st.none() | st.floats(0.0, 500.0), max_size=4)),
             max_size=12),
    st.none() | st.floats(0.0, 200.0),
)
def test_shares_always_add_up_to_the_gpu_energy(rows, idle) -> None:
    ivs = [Interval(d, e, r) for d, e, r in rows]
    a = attribute(ivs, idle)
    assert sum(a.energy_j.values()) + a.unattributed_j == pytest.approx(sum(iv.energy_j for iv in ivs), rel=1e-9, abs=1e-6)
    assert all(v >= 0 for v in a.energy_j.values())
