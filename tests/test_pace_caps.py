"""Pace-matching caps (benchmarks/_pace.py, the model benchmarks/pace_matching.py scores): a rank that would wait is
slowed to the slowest rank's pace and no further; equal GPUs and the slowest rank keep their caps; the cap bounds
hold; bad input is a ConfigError."""

from __future__ import annotations

import math

import pytest

from benchmarks._pace import RankCurve, WaitPower, pace_caps, rank_energy_j
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.capcurve import fit_curve
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, cap_margin_pct

BOUNDS = (100.0, 250.0)


def _curve(time_scale: float = 1.0):
    """A compute-bound job measured at three caps (a curve shaped like Zeus's V100 ResNet-50, times scaled)."""
    pts = [(250.0, 0.100, 210.0), (200.0, 0.105, 190.0), (150.0, 0.125, 148.0), (100.0, 0.170, 99.0)]
    return fit_curve([CapPoint(c, t * time_scale, p) for c, t, p in pts])


def _rank(name: str, time_scale: float = 1.0, cap_w: float = 250.0, bounds=BOUNDS, idle_w: float = 30.0):
    return RankCurve(name, _curve(time_scale), bounds, cap_w, idle_w)


@pytest.mark.parametrize("wait_power", list(WaitPower))
def test_a_fast_rank_is_capped_lower_and_the_pace_does_not_move(wait_power) -> None:
    fast, slow = _rank("fast", 0.8), _rank("slow", 1.0)
    plan = pace_caps([fast, slow], wait_power=wait_power)
    got = {r.name: r for r in plan.ranks}
    assert got["slow"].cap_w == 250.0 and not got["slow"].lowered
    assert got["fast"].cap_w < 250.0 and got["fast"].lowered
    pace = slow.curve.predict(250.0).iter_time_s
    assert plan.iter_time_s == pytest.approx(pace)
    # the fast rank stays off the critical path with the cap choice's margin at its new cap
    f = got["fast"]
    margin_s = fast.curve.reference_iter_time_s * cap_margin_pct(fast.curve, f.cap_w) / 100.0
    assert f.compute_time_s + margin_s <= pace + 1e-12
    assert f.wait_s == pytest.approx(pace - f.compute_time_s)
    assert f.cap_w % CHOICE_STEP_W == 0
    assert plan.energy_j_per_iter < plan.start_energy_j_per_iter and plan.saving_pct > 0
    assert "pace set by slow" in f.reason and "sets the pace" in got["slow"].reason


def test_at_cap_waiting_gives_the_lowest_cap_that_keeps_the_pace() -> None:
    fast, slow = _rank("fast", 0.8), _rank("slow", 1.0)
    plan = pace_caps([fast, slow], wait_power=WaitPower.AT_CAP)
    pace = plan.iter_time_s
    cap = plan.ranks[0].cap_w
    lower = cap - CHOICE_STEP_W
    p = fast.curve.predict(lower)
    margin_s = fast.curve.reference_iter_time_s * cap_margin_pct(fast.curve, lower) / 100.0
    assert lower < BOUNDS[0] or p.iter_time_s + margin_s > pace  # one step lower would not keep it


def test_energy_counts_computing_then_waiting() -> None:
    assert rank_energy_j(0.08, 150.0, 0.1, 30.0) == pytest.approx(150.0 * 0.08 + 30.0 * 0.02)
    assert rank_energy_j(0.1, 150.0, 0.1, 30.0) == pytest.approx(15.0)
    plan = pace_caps([_rank("fast", 0.8), _rank("slow")], wait_power=WaitPower.IDLE)
    f = plan.ranks[0]
    assert f.energy_j_per_iter == pytest.approx(f.power_w * f.compute_time_s + 30.0 * f.wait_s)
    assert plan.energy_j_per_iter == pytest.approx(sum(r.energy_j_per_iter for r in plan.ranks))


@pytest.mark.parametrize("start_w", [250.0, 160.0])
def test_equal_gpus_change_nothing(start_w) -> None:
    ranks = [_rank(f"gpu{i}", 1.0, start_w) for i in range(4)]
    plan = pace_caps(ranks)
    assert plan.caps_w == (start_w,) * 4
    assert not any(r.lowered for r in plan.ranks)
    assert plan.iter_time_s == pytest.approx(ranks[0].curve.predict(start_w).iter_time_s)
    assert plan.saving_pct == pytest.approx(0.0)


def test_the_lowest_cap_bound_holds() -> None:
    # a rank three times as fast could keep the pace far below any bound: it stops at its own minimum
    plan = pace_caps([_rank("fast", 0.3, bounds=(180.0, 250.0)), _rank("slow", 1.0)])
    assert plan.ranks[0].cap_w == 180.0
    plan = pace_caps([_rank("fast", 0.3), _rank("slow", 1.0)])
    assert plan.ranks[0].cap_w == BOUNDS[0]


def test_a_cap_is_never_raised_above_the_start() -> None:
    plan = pace_caps([_rank("fast", 0.8, cap_w=150.0), _rank("slow", 1.0, cap_w=250.0)])
    assert all(r.cap_w <= r.start_cap_w for r in plan.ranks)
    assert plan.ranks[0].cap_w <= 150.0


def test_the_margin_is_what_keeps_a_near_rank_where_it_is() -> None:
    # 0.3 % faster: without a margin a lower cap would seem to keep the pace; the margin says not within what is known
    ranks = [_rank("near", 0.997), _rank("slow", 1.0)]
    assert pace_caps(ranks).ranks[0].cap_w == 250.0
    assert "no lower cap keeps it" in pace_caps(ranks).ranks[0].reason
    assert pace_caps(ranks, z=0.0).ranks[0].cap_w < 250.0


@pytest.mark.parametrize(("kwargs", "ranks", "message"), [
    ({}, [], "at least one rank"),
    ({}, [_rank("a"), _rank("a")], "unique"),
    ({}, [_rank("a", cap_w=90.0)], "outside its bounds"),
    ({}, [_rank("a", bounds=(200.0, 150.0), cap_w=200.0)], "0 < min <= max"),
    ({}, [_rank("a", bounds=(0.0, 250.0))], "0 < min <= max"),
    ({}, [_rank("a", bounds=(100.0, math.inf))], "0 < min <= max"),
    ({}, [_rank("a", cap_w=math.nan)], "outside its bounds"),
    ({}, [_rank("a", idle_w=-1.0)], "idle power"),
    ({"step_w": 0.0}, [_rank("a")], "cap step"),
    ({"z": -1.0}, [_rank("a")], "margin quantile"),
])
def test_bad_input_is_a_config_error(kwargs, ranks, message) -> None:
    with pytest.raises(ConfigError, match=message):
        pace_caps(ranks, **kwargs)


def test_a_curve_that_is_not_a_cap_curve_is_refused() -> None:
    with pytest.raises(ConfigError, match="CapCurve"):
        pace_caps([RankCurve("a", {"250": 0.1}, BOUNDS, 250.0, 30.0)])  # type: ignore[arg-type]
