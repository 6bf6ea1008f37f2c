"""The policy file: parsing of every table, every validation error, sources, and reading files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules, load_rules, parse_rules
from ecolaunch.jobmodel.gpu import CapBounds
from ecolaunch.admin.schema import Locator
from ecolaunch.config import DEFAULT_POLICY_FILE
from ecolaunch.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"


def parse(text: str) -> tuple[Rules, dict[str, str]]:
    return parse_rules(textwrap.dedent(text), "p.toml")


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return info.value


# --- parsing ----------------------------------------------------------------------------------------
def test_empty_file_is_the_defaults() -> None:
    rules, sources = parse("# nothing here\n")
    assert rules == Rules()
    assert set(sources.values()) == {"default"}
    assert set(sources) == set(Rules.__dataclass_fields__)


def test_scalar_tables() -> None:
    rules, sources = parse(
        """
        [slowdown]
        default_pct = 5
        max_pct = 15.5
        [energy]
        eta = 1
        [colocation]
        enabled = false
        max_jobs_per_gpu = 3
        memory_margin_mib = 0
        [profiling]
        max_iterations = 40
        max_time_s = 90
        max_caps = 0
        [state]
        dir = "/var/lib/ecolaunch"
        group = "gpu-users"
        """
    )
    assert (rules.default_slowdown_pct, rules.max_slowdown_pct, rules.eta) == (5.0, 15.5, 1.0)
    assert isinstance(rules.default_slowdown_pct, float) and isinstance(rules.eta, float)
    assert (rules.allow_colocation, rules.max_jobs_per_gpu, rules.memory_margin_mib) == (False, 3, 0)
    assert (rules.profiling_max_iterations, rules.profiling_max_time_s, rules.profiling_max_caps) == (40, 90.0, 0)
    assert rules.state_dir == Path("/var/lib/ecolaunch") and rules.state_group == "gpu-users"
    assert sources["default_slowdown_pct"] == "p.toml:3"
    assert sources["eta"] == "p.toml:6"
    assert sources["memory_margin_mib"] == "p.toml:10"
    assert sources["state_group"] == "p.toml:17"
    assert sources["user_gpu_limit"] == "default"


def test_caps_by_model_and_index() -> None:
    rules, sources = parse(
        """
        [caps."A100-SXM4-80GB"]
        min_w = 200
        max_w = 350.5
        [caps."NVIDIA RTX A6000"]
        max_fraction = 0.75
        [caps.index.3]
        min_fraction = 0.5
        max_fraction = 1
        """
    )
    assert rules.cap_bounds_model == {
        "A100-SXM4-80GB": CapBounds(min_w=200.0, max_w=350.5),
        "NVIDIA RTX A6000": CapBounds(max_fraction=0.75),
    }
    assert rules.cap_bounds_index == {3: CapBounds(min_fraction=0.5, max_fraction=1.0)}
    assert sources["cap_bounds_model[A100-SXM4-80GB]"] == "p.toml:2"
    assert sources["cap_bounds_model[NVIDIA RTX A6000]"] == "p.toml:5"
    assert sources["cap_bounds_index[3]"] == "p.toml:7"
    assert sources["cap_bounds_model"] == "p.toml:2"


def test_inline_and_dotted_forms_are_accepted() -> None:
    rules, sources = parse(
        """
        [caps]
        A40 = { min_w = 150, max_w = 250 }
        index.1.max_w = 200
        [reserve]
        "GPU-0a1b2c3d-aaaa" = { users = ["bob"] }
        """
    )
    assert rules.cap_bounds_model == {"A40": CapBounds(min_w=150.0, max_w=250.0)}
    assert rules.cap_bounds_index == {1: CapBounds(max_w=200.0)}
    assert rules.reserved == {"GPU-0a1b2c3d-aaaa": ("bob",)}
    assert sources["cap_bounds_index[1]"] == "p.toml:4"
    assert sources["reserved[GPU-0a1b2c3d-aaaa]"] == "p.toml:6"


def test_reserve_by_index_and_uuid_for_users_and_groups() -> None:
    rules, sources = parse(
        """
        [reserve.0]
        users = ["alice", "alice", "bob"]
        [reserve."GPU-5f7e1c2a-1111-2222-3333-444455556666"]
        groups = ["vision-lab"]
        [reserve.07]
        users = []
        """
    )
    uuid = "GPU-5f7e1c2a-1111-2222-3333-444455556666"
    assert rules.reserved == {"0": ("alice", "bob"), uuid: (), "7": ()}
    assert rules.reserved_groups == {"0": (), uuid: ("vision-lab",), "7": ()}
    assert sources["reserved[7]"] == "p.toml:6"
    assert sources["reserved_groups[0]"] == "p.toml:2"


def test_users_limits() -> None:
    rules, sources = parse(
        """
        [users."*"]
        max_gpus = 2
        [users."alice.smith"]
        max_gpus = 0
        """
    )
    assert rules.user_gpu_limit == {"*": 2, "alice.smith": 0}
    assert sources["user_gpu_limit[alice.smith]"] == "p.toml:5"


def test_only_a_lower_max_pulls_the_default_slowdown_down() -> None:
    rules, sources = parse("[slowdown]\nmax_pct = 4\n")
    assert (rules.default_slowdown_pct, rules.max_slowdown_pct) == (4.0, 4.0)
    assert sources["default_slowdown_pct"] == "p.toml:2"


def test_example_policy_validates() -> None:
    rules, sources = load_rules(EXAMPLE)
    assert rules.cap_bounds_model and rules.cap_bounds_index and rules.reserved and rules.user_gpu_limit
    assert rules.profiling_max_caps is not None and rules.state_dir is not None
    # every key but the power budget: a budget depends on the host's boards, so the example only describes it
    assert all(s.startswith(f"{EXAMPLE}:") for f, s in sources.items() if "[" not in f and f != "power_max_total_w")


# --- validation errors: whole messages ------------------------------------------------------------------
def test_out_of_range_eta_names_file_line_key_value_and_hint() -> None:
    e = error("[energy]\n\neta = 1.5\n")
    assert str(e) == "p.toml:3: energy.eta = 1.5: must be at most 1"
    assert e.hint == "eta weighs energy against time: 0 = time only, 1 = energy only"


def test_negative_margin_message() -> None:
    e = error("[colocation]\nmemory_margin_mib = -1\n")
    assert str(e) == "p.toml:2: colocation.memory_margin_mib = -1: must be at least 0"
    assert e.hint == "write a whole number of MiB, 0 or more"


def test_min_above_max_message() -> None:
    e = error('[caps."A100-SXM4-80GB"]\nmax_w = 200\nmin_w = 300\n')
    assert str(e) == 'p.toml:3: caps.A100-SXM4-80GB.min_w = 300: is above max_w = 200'
    assert e.hint == "min_w must not exceed max_w"


def test_default_above_max_slowdown_message() -> None:
    e = error("[slowdown]\ndefault_pct = 30\n")
    assert str(e) == "p.toml:2: slowdown.default_pct = 30.0: is above slowdown.max_pct = 25.0 (the built-in default)"
    e = error("[slowdown]\nmax_pct = 12\ndefault_pct = 15\n")
    assert str(e) == "p.toml:3: slowdown.default_pct = 15.0: is above slowdown.max_pct = 12.0"


def test_key_with_spaces_is_quoted_in_messages() -> None:
    e = error('[caps."NVIDIA RTX A6000"]\nmax_fraction = 1.2\n')
    assert str(e) == 'p.toml:2: caps."NVIDIA RTX A6000".max_fraction = 1.2: must be at most 1'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[slowdown]\nmax_pct = -1", "p.toml:2: slowdown.max_pct = -1: must be at least 0"),
        ("[slowdown]\nmax_pct = 5000", "p.toml:2: slowdown.max_pct = 5000: must be at most 1000"),
        ('[slowdown]\nmax_pct = "25"', 'p.toml:2: slowdown.max_pct = "25": must be a number'),
        ("[slowdown]\nmax_pct = nan", "p.toml:2: slowdown.max_pct = nan: must be a finite number"),
        ("[slowdown]\nmax_pct = true", "p.toml:2: slowdown.max_pct = true: must be a number"),
        ("[energy]\neta = -0.1", "p.toml:2: energy.eta = -0.1: must be at least 0"),
        ("[energy]\nwait_weight = -1", "p.toml:2: energy.wait_weight = -1: must be at least 0"),
        ("[energy]\nwait_weight = 101", "p.toml:2: energy.wait_weight = 101: must be at most 100"),
        ("[colocation]\nenabled = 1", "p.toml:2: colocation.enabled = 1: must be true or false"),
        ("[colocation]\nmax_jobs_per_gpu = 0", "p.toml:2: colocation.max_jobs_per_gpu = 0: must be at least 1"),
        ("[colocation]\nmax_jobs_per_gpu = 2.0",
         "p.toml:2: colocation.max_jobs_per_gpu = 2.0: must be a whole number"),
        ("[profiling]\nmax_iterations = -5", "p.toml:2: profiling.max_iterations = -5: must be at least 0"),
        ("[profiling]\nmax_time_s = -inf", "p.toml:2: profiling.max_time_s = -inf: must be a finite number"),
        ("[profiling]\nmax_caps = [1]", "p.toml:2: profiling.max_caps = [1]: must be a whole number"),
        ('[state]\ndir = "var/lib"', 'p.toml:2: state.dir = "var/lib": must be an absolute path'),
        ('[state]\ndir = ""', 'p.toml:2: state.dir = "": must be a non-empty string'),
        ('[state]\ngroup = "gpu users"', 'p.toml:2: state.group = "gpu users": is not a valid user or group name'),
        ("slowdown = 5", "p.toml:1: slowdown = 5: must be a table"),
        ("[caps.A40]\nmin_w = 0", "p.toml:2: caps.A40.min_w = 0: must be above 0"),
        ("[caps.A40]\nmax_w = -10", "p.toml:2: caps.A40.max_w = -10: must be above 0"),
        ("[caps.A40]\nmin_fraction = 0.0", "p.toml:2: caps.A40.min_fraction = 0.0: must be above 0"),
        ("[caps.A40]\nmax_fraction = 1.01", "p.toml:2: caps.A40.max_fraction = 1.01: must be at most 1"),
        ("[caps.A40]\nmin_fraction = 0.9\nmax_fraction = 0.5",
         "p.toml:2: caps.A40.min_fraction = 0.9: is above max_fraction = 0.5"),
        ("[caps.A40]\nmin_w = 100\nmax_fraction = 0.5",
         "p.toml:3: caps.A40.max_fraction = 0.5: mixes watts and fractions in one table"),
        ("[caps.A40]\n", "p.toml:1: caps.A40: sets no bound"),
        ('[caps.A40]\nmax_w = 1\n[caps."nvidia  a40"]\nmax_w = 2',
         'p.toml:3: caps."nvidia  a40": names the same model as caps.A40'),
        ('[caps." "]\nmax_w = 1', 'p.toml:1: caps." ": is not a GPU model name'),
        ("[caps.index.gpu0]\nmax_w = 1", "p.toml:1: caps.index.gpu0: is not a GPU index"),
        ("[caps.index.1]\nmax_w = 1\n[caps.index.01]\nmax_w = 2", "p.toml:3: caps.index.01: names GPU 1 twice"),
        ("[caps]\nindex = 3", "p.toml:2: caps.index = 3: must be a table"),
        ('[reserve.gpu0]\nusers = ["a"]', "p.toml:1: reserve.gpu0: is neither a GPU index nor a UUID"),
        ('[reserve."GPU-AB"]\nusers = ["a"]\n[reserve."gpu-ab"]\nusers = ["b"]',
         'p.toml:3: reserve.gpu-ab: names the same GPU as reserve.GPU-AB'),
        ("[reserve.0]\n", "p.toml:1: reserve.0: names neither users nor groups"),
        ('[reserve.0]\nusers = "alice"', 'p.toml:2: reserve.0.users = "alice": must be a list of user names'),
        ('[reserve.0]\ngroups = ["ok", 3]', 'p.toml:2: reserve.0.groups = ["ok", 3]: 3 is not a valid group name'),
        ("[users.alice]\n", "p.toml:1: users.alice: sets no limit"),
        ("[users.alice]\nmax_gpus = -1", "p.toml:2: users.alice.max_gpus = -1: must be at least 0"),
        ('[users."al ice"]\nmax_gpus = 1', 'p.toml:1: users."al ice": is not a valid user name'),
    ],
)
def test_every_validation_error(text: str, message: str) -> None:
    e = error(text)
    assert str(e) == message
    assert e.hint


# --- unknown keys -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message", "hint_start"),
    [
        ("[slowdown]\nmax_pc = 3", "p.toml:2: unknown key slowdown.max_pc", "did you mean slowdown.max_pct? "),
        ("[slowdonw]\nmax_pct = 3", "p.toml:1: unknown key slowdonw", "did you mean slowdown? "),
        ("eta = 0.5", "p.toml:1: unknown key eta", "did you mean energy.eta? "),
        ("[caps.A40]\nmax_watts = 3", "p.toml:2: unknown key caps.A40.max_watts", "did you mean caps.A40.max_w? "),
        ("[reserve.0]\nuser = []", "p.toml:2: unknown key reserve.0.user", "did you mean reserve.0.users? "),
        ("[users.bob]\nmax_gpu = 1", "p.toml:2: unknown key users.bob.max_gpu", "did you mean users.bob.max_gpus? "),
        ("[colocation]\nzzz = 1", "p.toml:2: unknown key colocation.zzz", "[colocation] takes: "),
    ],
)
def test_unknown_keys_suggest_the_closest(text: str, message: str, hint_start: str) -> None:
    e = error(text)
    assert str(e) == message
    assert e.hint is not None and e.hint.startswith(hint_start)


def test_unknown_key_hint_lists_the_table() -> None:
    e = error("[energy]\netta = 0.5\n")
    assert e.hint == "did you mean energy.eta? [energy] takes: eta, wait_weight"


# --- syntax errors, files ---------------------------------------------------------------------------
def test_toml_syntax_error_has_line_and_column() -> None:
    e = error("[slowdown]\nmax_pct = = 3\n")
    assert str(e).startswith("p.toml:2:11: invalid TOML: ")
    assert "toml.io" in (e.hint or "")


def test_duplicate_key_is_a_syntax_error() -> None:
    assert str(error("[energy]\neta = 0.1\neta = 0.2\n")).startswith("p.toml:3:")


def test_missing_default_file_gives_defaults(tmp_path: Path) -> None:
    rules, sources = load_rules(tmp_path / "policy.toml", required=False)
    assert rules == Rules() and set(sources.values()) == {"default"}
    if not DEFAULT_POLICY_FILE.exists():
        assert load_rules(None)[0] == Rules()
        assert load_rules(DEFAULT_POLICY_FILE)[0] == Rules()


def test_missing_named_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"^policy file .*nope\.toml does not exist$"):
        load_rules(missing)
    with pytest.raises(ConfigError, match="is a directory"):
        load_rules(tmp_path)


def test_file_errors_name_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text("[energy]\neta = 7\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:2: energy\.eta = 7: must be at most 1$"):
        load_rules(bad)
    bad.write_bytes(b"[state]\ngroup = \"\xff\"\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 17\)"):
        load_rules(bad)


# --- the line locator -----------------------------------------------------------------------------------
def test_locator_finds_headers_keys_and_prefixes() -> None:
    text = textwrap.dedent(
        '''\
        # comment with max_pct = 3
        [slowdown]
        note = """
        max_pct = 1
        """
          max_pct = 2   # the real one
        [ caps . "A100 80GB" ]
        'min_w' = 1
        [caps.index.0]
        x.y = { z = 1 }
        '''
    )
    loc = Locator(text)
    assert loc.line(("slowdown", "max_pct")) == 6
    assert loc.line(("caps", "A100 80GB", "min_w")) == 8
    assert loc.line(("caps", "A100 80GB", "max_w")) == 7
    assert loc.line(("caps", "index", "0", "x", "y", "z")) == 10
    assert loc.line(("caps", "index")) == 9
    assert loc.line(("nowhere",)) is None


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("a = " + "[" * 3000 + "]" * 3000, "p.toml: invalid TOML: arrays or tables nested too deeply"),
        ("[energy]\neta = 1" + "0" * 5000, "p.toml: invalid TOML: Exceeds the limit"),
        ("[energy]\neta = ", "p.toml: invalid TOML: "),
    ],
)
def test_pathological_text_is_a_config_error(text: str, start: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_rules(text, "p.toml")
    assert str(info.value).startswith(start)


def test_the_cap_tables_keys_are_the_bounds_fields() -> None:
    """The policy file's ``[caps]`` keys (the schema's) are :class:`CapBounds`' fields, which ``describe`` spells."""
    from dataclasses import fields

    from ecolaunch.admin.schema import CAP_KEYS

    assert tuple(f.name for f in fields(CapBounds)) == CAP_KEYS
    assert CapBounds(min_w=150.0, max_fraction=0.5).describe() == "min_w=150.0 max_fraction=0.5"

