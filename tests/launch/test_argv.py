"""The launch parser keeps torchrun's meaning for every option, spelling and abbreviation."""

from __future__ import annotations

import argparse
import sys

import pytest
from torch.distributed.run import get_args_parser

from ecolaunch.launch.argv import build_parser, expand_prefix, parse
from ecolaunch.launch.options import declarations


@pytest.fixture(autouse=True)
def _in_a_dir_with_scripts(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """parse() refuses a training script that does not exist: give the scripts these tests name a home."""
    for name in ("train.py", "t.py"):
        (tmp_path / name).write_text("")
    monkeypatch.chdir(tmp_path)


def _resolve(parser: argparse.ArgumentParser, arg: str):
    """What argparse makes of an option-like argument: the action's dest, 'ambiguous', or None (unknown)."""
    real_error = parser.error

    def error(message: str):
        raise ValueError(message)

    parser.error = error
    try:
        found = parser._parse_optional(arg)
    except ValueError as e:
        return "ambiguous" if "ambiguous" in str(e) else f"error: {e}"
    finally:
        parser.error = real_error
    if isinstance(found, list):  # Python >= 3.12 returns a list of candidates
        found = found[0] if len(found) == 1 else None
    if not found or found[0] is None:
        return None
    return found[0].dest


def test_every_torchrun_abbreviation_keeps_its_meaning() -> None:
    torch_parser = get_args_parser()
    ours = build_parser()
    checked = 0
    for action in torch_parser._actions:
        for option in action.option_strings:
            if not option.startswith("--"):
                continue
            for end in range(3, len(option) + 1):
                prefix = option[:end]
                assert _resolve(ours, prefix) == _resolve(torch_parser, prefix), prefix
                checked += 1
    assert checked > 300


def test_ecolaunch_options_are_new_names_with_env_vars() -> None:
    torch_strings = {s for a in get_args_parser()._actions for s in a.option_strings}
    for _, spec in declarations():
        assert not set(spec.flags) & torch_strings
        assert spec.env.startswith("ECOLAUNCH_")
    help_text = build_parser().format_help()
    for _, spec in declarations():
        assert spec.env in help_text


def test_torchrun_options_parse_as_torch_parses_them() -> None:
    argv = ["--nproc_per_node", "2", "--standalone", "--max-r", "3", "-m", "pkg.mod", "--lr", "1", "--dry-run"]
    theirs = get_args_parser().parse_args(argv)
    ours = parse(argv, {}).workers.namespace()
    assert vars(ours) == vars(theirs)
    assert ours.training_script_args == ["--lr", "1", "--dry-run"]  # after the script: the script's


def test_pet_env_fallback_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PET_NPROC_PER_NODE", "3")
    assert parse(["train.py"], {}).workers.nproc_per_node == "3"


def test_eco_options_from_flags_and_env() -> None:
    p = parse(["--dry-run", "--wait-timeout", "0", "--allowed-slowdown=5", "train.py"], {})
    assert p.options.dry_run and not p.options.wait and p.options.allowed_slowdown_pct == 5.0
    p = parse(["train.py"], {"ECOLAUNCH_JSON": "1", "ECOLAUNCH_WAIT_TIMEOUT": "30", "ECOLAUNCH_MEMORY_MIB": "2048"})
    assert p.options.json and p.options.wait and p.options.wait_timeout_s == 30.0 and p.options.memory_mib == 2048
    assert not hasattr(p.workers.namespace(), "eco_json")


def test_share_if_sooner_is_yes_no_or_the_admins_default() -> None:
    assert parse(["train.py"], {}).options.share_if_sooner is None  # the admin's [colocation] share_if_sooner
    assert parse(["--share-if-sooner", "yes", "train.py"], {}).options.share_if_sooner is True
    assert parse(["--share-if-sooner=NO", "train.py"], {}).options.share_if_sooner is False
    assert parse(["train.py"], {"ECOLAUNCH_SHARE_IF_SOONER": "1"}).options.share_if_sooner is True
    assert parse(["--share-if-sooner", "no", "python", "train.py"], {}).workers.script == "train.py"


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["--wait-timeout", "soon", "t.py"], {}, "--wait-timeout (or ECOLAUNCH_WAIT_TIMEOUT) must be a number, got 'soon'"),
        (["--allowed-slowdown", "-3", "t.py"], {}, "must be a finite number >= 0"),
        (["t.py"], {"ECOLAUNCH_DRY_RUN": "maybe"}, "ECOLAUNCH_DRY_RUN='maybe' is not a boolean"),
        (["--nproc", "2", "t.py"], {}, "ambiguous option: --nproc"),
        (["python", "-u", "t.py"], {}, "interpreter option '-u' is not supported"),
        (["--policy", "magic", "t.py"], {}, "--policy (or ECOLAUNCH_PLACEMENT_POLICY) must be a placement policy, got 'magic'\nHINT: use one of: curve, curve-link, eaco, exclusive, first-fit, gnn, lucid, zeus"),
        (["t.py"], {"ECOLAUNCH_PLACEMENT_POLICY": "magic"}, "must be a placement policy, got 'magic'"),
        (["--profile", "sometimes", "t.py"], {}, "--profile 'sometimes' is not a profiling mode\nHINT: use one of: auto, pre, inline, off"),
        (["--memory-mib", "lots", "t.py"], {}, "--memory-mib (or ECOLAUNCH_MEMORY_MIB) must be a number, got 'lots'"),
        (["--share-if-sooner", "maybe", "t.py"], {}, "--share-if-sooner (or ECOLAUNCH_SHARE_IF_SOONER) must be yes or "
                                                     "no, got 'maybe'\nHINT: e.g. --share-if-sooner yes (the script "
                                                     "comes after the value)"),
        (["missing.py"], {}, "training script 'missing.py' does not exist"),
        (["python", "missing.py", "--lr", "1"], {}, "training script 'missing.py' does not exist"),
        (["--run-path", "missing.py"], {}, "training script 'missing.py' does not exist"),
        (["--nproc-per-node", "0", "t.py"], {}, "--nproc-per-node must be a whole number >= 1, gpu, auto or cpu, got '0'"),
        (["--no-python", "-m", "t"], {}, "Don't use both the '--no-python' flag and the '--module' flag"),
    ],
)
def test_bad_input_exits_2_with_message(argv, env, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(argv, env)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


#: a bad value of every ecolaunch option that takes one (the registry below checks none is missing)
BAD_VALUES = {"--wait-timeout": "abc", "--policy": "magic", "--allowed-slowdown": "-5", "--memory-mib": "-1",
              "--profile": "sometimes", "--name": "a b", "--job-key": " ", "--share-if-sooner": "maybe",
              "--steps": "0", "--backfill": "maybe"}


def test_every_option_that_takes_a_value_is_in_bad_values() -> None:
    assert set(BAD_VALUES) == {spec.flag for _, spec in declarations() if spec.takes_value}


@pytest.mark.parametrize("flag", sorted(BAD_VALUES))
def test_a_bad_value_of_every_option_ends_with_a_hint(flag: str, capsys) -> None:
    """The README's promise: a HINT line after every bad option value (issue 41: three numeric options had none)."""
    with pytest.raises(SystemExit) as exc:
        parse([flag, BAD_VALUES[flag], "t.py"], {})
    assert exc.value.code == 2
    error, hint = capsys.readouterr().err.splitlines()[-2:]
    assert error.startswith("ecolaunch: error: ") and repr(BAD_VALUES[flag]) in error, error
    assert hint.startswith("HINT: ") and len(hint) > len("HINT: "), hint


def test_prefix_forms() -> None:
    assert expand_prefix(["torchrun", "--nproc-per-node", "2", "t.py"]) == (["--nproc-per-node", "2", "t.py"], None)
    assert expand_prefix(["--dry-run", "torchrun", "t.py", "a"]) == (["--dry-run", "t.py", "a"], None)
    args, exe = expand_prefix(["--policy", "exclusive", "python", "t.py", "--x"], executable=sys.executable)
    assert args == ["--policy", "exclusive", "--nproc-per-node", "1", "t.py", "--x"]
    assert expand_prefix(["python3", "-m", "pkg.mod", "1"])[0] == ["--nproc-per-node", "1", "-m", "pkg.mod", "1"]
    assert expand_prefix(["./python_helper.py"]) == (["./python_helper.py"], None)
    assert expand_prefix(["t.py", "python"]) == (["t.py", "python"], None)


def test_a_script_that_is_no_file_is_not_looked_for() -> None:
    assert parse(["-m", "no.such.module"], {}).workers.module
    assert parse(["--no-python", "true"], {}).workers.no_python  # a program on PATH, not a file here
    assert parse(["python", "-m", "no.such.module"], {}).workers.script == "no.such.module"


def test_every_policy_name_parses() -> None:
    from ecolaunch.policy.registry import policy_names

    for name in policy_names():
        assert parse(["--policy", name, "t.py"], {}).options.policy == name
    assert parse(["t.py"], {}).options.policy == "curve"
