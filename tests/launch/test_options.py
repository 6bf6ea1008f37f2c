"""Each launch option is declared once (ecolaunch.launch.options): the parser, the variables, launch()'s keywords."""

from __future__ import annotations

import dataclasses

import pytest

from ecolaunch import api
from ecolaunch.errors import ConfigError
from ecolaunch.launch.options import LaunchOptions, api_keywords, declarations, spec_of

#: the units a keyword adds to its flag's name (docs/python-api.md says so)
UNITS = {"allowed_slowdown_pct": "--allowed-slowdown", "wait_timeout_s": "--wait-timeout"}


def test_every_keyword_is_its_flag_with_underscores() -> None:
    for name in api_keywords():
        assert UNITS.get(name, "--" + name.replace("_", "-")) == spec_of(name).flag
    assert {"dry_run", "json", "verbose"}.isdisjoint(api_keywords())


def test_the_command_line_wins_over_the_variable_and_unset_is_the_default() -> None:
    env = {"ECOLAUNCH_PLACEMENT_POLICY": "exclusive", "ECOLAUNCH_WAIT_TIMEOUT": "30", "ECOLAUNCH_DRY_RUN": "1"}
    options = LaunchOptions.from_env(env, {"policy": "first-fit"})
    assert (options.policy, options.wait_timeout_s, options.dry_run) == ("first-fit", 30.0, True)
    assert LaunchOptions.from_env(env, api=True).dry_run is False  # launch() reads no printing flag
    defaults = LaunchOptions.from_env({})
    assert defaults == LaunchOptions() and all(
        getattr(defaults, f.name) == f.default for f, _ in declarations())


def test_a_bad_variable_names_the_option_the_variable_and_the_value() -> None:
    with pytest.raises(ConfigError, match=r"--memory-mib \(or ECOLAUNCH_MEMORY_MIB\) must be a number, got 'lots'"):
        LaunchOptions.from_env({"ECOLAUNCH_MEMORY_MIB": "lots"})


def test_launch_refuses_an_option_it_does_not_take(tmp_path) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    with pytest.raises(TypeError, match="unexpected keyword argument 'dry_run'"):
        api.launch(script, dry_run=True)
    with pytest.raises(ValueError, match="--policy \\(or ECOLAUNCH_PLACEMENT_POLICY\\) must be a placement policy"):
        api.launch(script, policy="magic", env={})


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LaunchOptions().policy = "gnn"  # type: ignore[misc]


def test_steps_is_a_whole_number_of_iterations_from_the_flag_the_variable_or_launch() -> None:
    assert LaunchOptions.from_env({"ECOLAUNCH_STEPS": "20000"}).steps == 20000
    assert LaunchOptions.from_env({"ECOLAUNCH_STEPS": "5"}, {"steps": "7"}).steps == 7
    assert "steps" in api_keywords()
    for bad in ("0", "-3", "2.5", "many", str(10 ** 12 + 1)):
        with pytest.raises(ConfigError) as e:
            LaunchOptions.from_env({"ECOLAUNCH_STEPS": bad})
        assert str(e.value) == (f"--steps (or ECOLAUNCH_STEPS) must be a whole number from 1 to 1000000000000, "
                                f"got {bad!r}")
        assert e.value.hint.startswith("e.g. --steps 20000")
