"""``--profile auto|pre|inline|off`` against history, and the profiling-run environment."""

from __future__ import annotations

import pytest

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.history import ProfileEntry
from ecolaunch.profile.modes import (ProfileAction, ProfileMode, ProfilerSettings, parse_mode, pre_run_env,
                                     pre_run_steps, resolve_mode)

FP = "cd" * 32
PROFILE = Profile(0.05, 80.0, 40.0, 10_000, 290.0)
KNOWN = ProfileEntry(FP, PROFILE, profile_safe=False, job_id="j1")
KNOWN_SAFE = ProfileEntry(FP, PROFILE, profile_safe=True)
SAFE_NO_PROFILE = ProfileEntry(FP, None, profile_safe=True)
UNSAFE_NO_PROFILE = ProfileEntry(FP, None, profile_safe=False)


@pytest.mark.parametrize("mode, entry, action, profile", [
    ("auto", None, ProfileAction.INLINE, None),
    ("auto", UNSAFE_NO_PROFILE, ProfileAction.INLINE, None),
    ("auto", SAFE_NO_PROFILE, ProfileAction.PRE, None),
    ("auto", KNOWN, ProfileAction.HISTORY, PROFILE),
    ("auto", KNOWN_SAFE, ProfileAction.HISTORY, PROFILE),
    ("pre", None, ProfileAction.PRE, None),
    ("pre", KNOWN, ProfileAction.HISTORY, PROFILE),
    ("inline", None, ProfileAction.INLINE, None),
    ("inline", SAFE_NO_PROFILE, ProfileAction.INLINE, None),
    ("inline", KNOWN, ProfileAction.HISTORY, PROFILE),
    ("off", None, ProfileAction.OFF, None),
    ("off", KNOWN, ProfileAction.OFF, PROFILE),
    ("OFF", SAFE_NO_PROFILE, ProfileAction.OFF, None),
])
def test_resolution_table(mode, entry, action, profile) -> None:
    plan = resolve_mode(mode, entry)
    assert (plan.action, plan.profile) == (action, profile)
    assert plan.reason


def test_auto_never_runs_an_unknown_script_twice() -> None:
    plan = resolve_mode(ProfileMode.AUTO, None)
    assert plan.action is ProfileAction.INLINE
    assert "profile_safe=True" in plan.reason
    assert "from job j1" in resolve_mode("auto", KNOWN).reason


def test_parse_mode_rejects_unknown_values() -> None:
    assert parse_mode(" Inline ") is ProfileMode.INLINE
    with pytest.raises(ConfigError) as e:
        parse_mode("sometimes")
    assert "auto, pre, inline, off" in (e.value.hint or "")


def test_pre_run_environment() -> None:
    settings = ProfilerSettings(warmup_iters=2, settle_iters=1, measured_iters=3, max_caps=3)
    assert settings.planned_steps() == 1 + 2 + 3 + 2 * 4
    assert pre_run_steps(settings) == 2 * 14
    assert pre_run_env(settings) == {"ECOLAUNCH_PROFILING": "1", "ECOLAUNCH_PROFILE_STEPS": "28"}
