"""Precedence: the admin policy over a user's request (slowdown, caps, reservations, GPU limits)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ecolaunch.admin.rules import (
    Rules,
    cap_bounds_w,
    clip_slowdown,
    job_bound_pct,
    may_use_gpu,
    parse_rules,
    user_gpu_limit,
)
from ecolaunch.jobmodel.gpu import CapBounds
from ecolaunch.errors import ConfigError, DeviceError

RULES = Rules(default_slowdown_pct=8.0, max_slowdown_pct=20.0)


# --- slowdown -----------------------------------------------------------------------------------------
def test_no_request_gets_the_default() -> None:
    assert clip_slowdown(RULES, None) == (8.0, False)
    assert job_bound_pct(RULES, None) == 8.0


def test_a_tighter_request_is_kept() -> None:
    assert clip_slowdown(RULES, 3) == (3.0, False)
    assert clip_slowdown(RULES, 0.0) == (0.0, False)
    assert clip_slowdown(RULES, 20.0) == (20.0, False)


def test_a_looser_request_is_clipped_and_flagged(caplog: pytest.LogCaptureFixture) -> None:
    assert clip_slowdown(RULES, 50.0) == (20.0, True)
    assert caplog.records == []  # the flag tells its caller
    assert job_bound_pct(RULES, 50.0) == 20.0
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "allowed slowdown 50 % is above the admin policy's maximum: the job gets 20 %")]
    caplog.clear()
    assert job_bound_pct(RULES, 20.0) == 20.0 and caplog.records == []


def test_the_command_line_beats_the_declared_bound_which_beats_the_default(caplog: pytest.LogCaptureFixture) -> None:
    assert job_bound_pct(RULES, 5.0, 3.0) == 5.0  # the command line wins, tighter or looser
    assert job_bound_pct(RULES, 2.0, 3.0) == 2.0
    assert job_bound_pct(RULES, None, 3.0) == 3.0  # else what the script declared
    assert job_bound_pct(RULES, None, 50.0) == 20.0  # never above the maximum, and not warned (the script's)
    assert job_bound_pct(RULES, None, None) == 8.0  # else the default
    assert caplog.records == []
    with pytest.raises(ConfigError, match="is not a percentage"):
        job_bound_pct(RULES, None, -1.0)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_a_nonsense_request_is_a_config_error(bad: float) -> None:
    with pytest.raises(ConfigError, match="allowed slowdown .* is not a percentage of 0 or more") as info:
        clip_slowdown(RULES, bad)
    assert "ECOLAUNCH_ALLOWED_SLOWDOWN" in (info.value.hint or "")


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_the_bound_never_exceeds_the_policy(requested: float) -> None:
    value, clipped = clip_slowdown(RULES, requested)
    assert value <= RULES.max_slowdown_pct
    assert clipped == (requested > RULES.max_slowdown_pct)
    assert value == min(requested, RULES.max_slowdown_pct)


# --- power-cap bounds --------------------------------------------------------------------------------------
CAPS = parse_rules(
    """
    [caps."A100-SXM4-80GB"]
    min_w = 200
    max_w = 350
    [caps.A40]
    max_fraction = 0.5
    [caps.index.2]
    min_fraction = 0.6
    [caps.index.5]
    min_w = 500
    max_w = 600
    """
)[0]


def test_no_rule_gives_the_board_range() -> None:
    assert cap_bounds_w(Rules(), "NVIDIA A100-SXM4-80GB", 0, 100.0, 400.0) == (100.0, 400.0)
    assert cap_bounds_w(CAPS, "Tesla V100-SXM2-16GB", 0, 150.0, 300.0) == (150.0, 300.0)


def test_model_rule_matches_nvml_names() -> None:
    assert cap_bounds_w(CAPS, "NVIDIA A100-SXM4-80GB", 0, 100.0, 400.0) == (200.0, 350.0)
    assert cap_bounds_w(CAPS, "a100-sxm4-80gb", 1, 100.0, 400.0) == (200.0, 350.0)
    assert cap_bounds_w(CAPS, "NVIDIA A40", 0, 100.0, 300.0) == (100.0, 150.0)


def test_index_rule_replaces_the_model_rule() -> None:
    # GPU 2's index rule sets only the minimum: its maximum is the board's, not the model's 350 W
    assert cap_bounds_w(CAPS, "NVIDIA A100-SXM4-80GB", 2, 100.0, 400.0) == (240.0, 400.0)


def test_bounds_never_leave_the_board_range() -> None:
    assert cap_bounds_w(CAPS, "NVIDIA A100-SXM4-80GB", 5, 100.0, 400.0) == (400.0, 400.0)
    assert cap_bounds_w(CAPS, "NVIDIA A100-SXM4-80GB", 0, 250.0, 300.0) == (250.0, 300.0)


@pytest.mark.parametrize(("lo", "hi"), [(300.0, 200.0), (-1.0, 100.0), (100.0, math.nan), (100.0, math.inf)])
def test_broken_board_range_is_a_device_error(lo: float, hi: float) -> None:
    with pytest.raises(DeviceError, match="reports power limits"):
        cap_bounds_w(CAPS, "NVIDIA A40", 0, lo, hi)


bounds_strategy = st.builds(
    CapBounds,
    min_w=st.none() | st.floats(1, 2000),
    max_w=st.none() | st.floats(1, 2000),
    min_fraction=st.none() | st.floats(0.01, 1),
    max_fraction=st.none() | st.floats(0.01, 1),
)


@given(bounds_strategy, st.floats(0, 1000), st.floats(0, 1000), st.booleans())
def test_resolved_bounds_are_always_inside_the_board(bounds: CapBounds, a: float, b: float, by_index: bool) -> None:
    board_min, board_max = sorted((a, b))
    rules = Rules(cap_bounds_index={0: bounds}) if by_index else Rules(cap_bounds_model={"A40": bounds})
    lo, hi = cap_bounds_w(rules, "NVIDIA A40", 0, board_min, board_max)
    assert board_min <= lo <= hi <= board_max


# --- reservations --------------------------------------------------------------------------------------------
UUID0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID1 = "GPU-bbbbbbbb-1111-1111-1111-111111111111"
RESERVE = parse_rules(
    f"""
    [reserve.0]
    users = ["alice"]
    [reserve."{UUID1.upper()}"]
    groups = ["vision"]
    [reserve.2]
    users = []
    [reserve."{UUID0}"]
    users = ["carol"]
    """
)[0]


def test_unreserved_gpus_are_open_to_everyone() -> None:
    assert may_use_gpu(RESERVE, "bob", [], "GPU-cccc", 3)
    assert may_use_gpu(Rules(), "bob", [], UUID0, 0)


def test_reserved_by_index_for_a_user() -> None:
    assert may_use_gpu(RESERVE, "alice", [], "GPU-other", 0)
    assert not may_use_gpu(RESERVE, "bob", ["alice"], "GPU-other", 0)


def test_reserved_by_uuid_for_a_group_ignores_uuid_case() -> None:
    assert may_use_gpu(RESERVE, "bob", ["users", "vision"], UUID1, 1)
    assert not may_use_gpu(RESERVE, "bob", ["users"], UUID1, 1)
    assert not may_use_gpu(RESERVE, "vision", [], UUID1, 1)


def test_index_and_uuid_reservations_of_one_gpu_combine() -> None:
    assert may_use_gpu(RESERVE, "alice", [], UUID0, 0)
    assert may_use_gpu(RESERVE, "carol", [], UUID0, 0)
    assert not may_use_gpu(RESERVE, "dave", [], UUID0, 0)


def test_an_empty_reservation_admits_nobody() -> None:
    assert not may_use_gpu(RESERVE, "alice", ["vision"], "GPU-x", 2)


# --- per-user GPU limits ----------------------------------------------------------------------------------------
def test_user_limits_fall_back_to_star_then_none() -> None:
    rules = Rules(user_gpu_limit={"alice": 4, "bob": 0})
    assert user_gpu_limit(rules, "alice") == 4
    assert user_gpu_limit(rules, "bob") == 0
    assert user_gpu_limit(rules, "carol") is None
    star = Rules(user_gpu_limit={"*": 2, "alice": 4, "bob": 0})
    assert user_gpu_limit(star, "carol") == 2
    assert user_gpu_limit(star, "bob") == 0
