"""``[power] max_total_w``: validated with file:line, checked against this host's GPUs by ``policy check``, shown by
``policy show``. Whole CLI outputs; four simulated A40s (100-300 W each: 400-1200 W in all)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ecolaunch.admin.lint import check_power_budget, policy_warnings
from ecolaunch.admin.rules import Rules, budget_range_w, parse_rules
from ecolaunch.cli.policy_cmd import policy
from ecolaunch.errors import ConfigError
from ecolaunch.state.graph import GpuNode
from tests.conftest import NO_POLICY

HINT = "HINT: the budget is in watts for all of this host's GPUs together, e.g. max_total_w = 1200; leave [power] " \
       "out for no budget\n"


def invoke(args: list[str], env: dict[str, str | None]):
    env = {"ECOLAUNCH_POLICY": str(NO_POLICY), "ECOLAUNCH_JSON": None, **env}
    return CliRunner().invoke(policy, args, env=env, prog_name="ecolaunch policy")


def four_a40s(tmp_path: Path) -> dict[str, str]:
    return {"ECOLAUNCH_SIMULATE": "4xA40", "ECOLAUNCH_STATE_DIR": str(tmp_path / "state")}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"lots"', 'power.max_total_w = "lots": must be a number'),
        ("true", "power.max_total_w = true: must be a number"),
        ("[1000]", "power.max_total_w = [1000]: must be a number"),
        ("nan", "power.max_total_w = nan: must be a finite number"),
        ("0", "power.max_total_w = 0: must be at least 1"),
        ("-5.0", "power.max_total_w = -5.0: must be at least 1"),
        ("2e6", "power.max_total_w = 2000000.0: must be at most 1e+06"),
    ],
)
def test_a_budget_that_is_not_a_power_is_an_error_with_its_line(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_rules(f"[slowdown]\nmax_pct = 20\n\n[power]\nmax_total_w = {value}\n", "p.toml")
    assert str(info.value) == f"p.toml:5: {problem}"
    assert "watts for all of this host's GPUs together" in info.value.hint


def test_a_budget_is_read_with_its_source() -> None:
    rules, sources = parse_rules("[power]\nmax_total_w = 900\n", "p.toml")
    assert rules.power_max_total_w == 900.0 and sources["power_max_total_w"] == "p.toml:2"
    assert Rules().power_max_total_w is None


def test_check_refuses_a_budget_below_the_boards_minimum_limits(tmp_path: Path) -> None:
    path = write(tmp_path, "[power]\n# the whole workstation\nmax_total_w = 350\n")
    result = invoke(["check", str(path)], four_a40s(tmp_path))
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: {path}:3: power.max_total_w = 350.0: below the 400 W this host needs to run any job: its GPUs' "
        "minimum power limits add up to 400 W (4 x NVIDIA A40 at 100 W)\n"
        "HINT: raise it to at least 400 (a GPU without a job counts at its minimum limit), or remove [power] for no "
        "budget\n")


def test_check_counts_the_caps_lower_bound_of_the_gpu_a_job_would_get(tmp_path: Path) -> None:
    path = write(tmp_path, "[caps.A40]\nmin_w = 150\n[power]\nmax_total_w = 420\n")
    result = invoke(["check", str(path)], four_a40s(tmp_path))
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: {path}:4: power.max_total_w = 420.0: below the 450 W this host needs to run any job: its GPUs' "
        "minimum power limits add up to 400 W (4 x NVIDIA A40 at 100 W), and [caps] keeps a GPU with a job at "
        "least 50 W above its minimum limit (GPU 0 at 150 W)\n"
        "HINT: raise it to at least 450 (a GPU without a job counts at its minimum limit), or remove [power] for no "
        "budget\n")


def test_check_refuses_a_budget_above_what_the_boards_can_draw(tmp_path: Path) -> None:
    path = write(tmp_path, "[power]\nmax_total_w = 1250\n")
    result = invoke(["check", str(path)], four_a40s(tmp_path))
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: {path}:2: power.max_total_w = 1250.0: above the 1200 W this host's GPUs can draw: their maximum "
        "power limits add up to 1200 W (4 x NVIDIA A40 at 300 W), so the budget would never bind\n"
        "HINT: lower it to at most 1200, or remove [power] for no budget\n")


def test_check_accepts_a_budget_between_the_sums(tmp_path: Path) -> None:
    for watts in (400, 800, 1200):
        path = write(tmp_path, f"[power]\nmax_total_w = {watts}\n")
        result = invoke(["check", str(path)], four_a40s(tmp_path))
        assert (result.exit_code, result.output) == (0, f"OK: {path}\n")


def test_check_warns_when_not_every_gpu_can_run_a_job_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, "[caps.A40]\nmin_w = 200\n[power]\nmax_total_w = 700\n")
    result = invoke(["check", str(path)], four_a40s(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"Warning: {path}:4: power.max_total_w: with a job on every GPU the lowest caps [caps] allows add up to "
        "800 W, above the 700 W budget: some jobs will wait for others to end\n"
        "HINT: raise it to 800 to let every GPU run a job at once, or lower the [caps] min_w\n"
        f"OK: {path} (1 warning)\n")


def test_check_without_gpus_checks_the_file_and_says_what_it_could_not(tmp_path: Path) -> None:
    path = write(tmp_path, "[power]\nmax_total_w = 10\n")
    result = invoke(["check", str(path)], {"ECOLAUNCH_SIMULATE": "4xH9000"})
    assert result.exit_code == 0, result.output
    note, ok = result.output.splitlines()
    assert note.startswith("Note: power.max_total_w not checked against this host's GPUs' power limits (it must lie "
                           "between the sums of their minimum and maximum limits): bad machine spec '4xH9000': "
                           "unknown GPU model 'H9000'")
    assert ok == f"OK: {path}"
    path = write(tmp_path, '[power]\nmax_total_w = "10"\n')  # the file itself is still checked
    result = invoke(["check", str(path)], {"ECOLAUNCH_SIMULATE": "4xH9000"})
    assert result.exit_code == 1
    assert result.output == f'Error: {path}:2: power.max_total_w = "10": must be a number\n' + HINT


def test_show_prints_the_budget_and_its_source(tmp_path: Path) -> None:
    path = write(tmp_path, "[power]\nmax_total_w = 900\n")
    result = invoke(["show", "--file", str(path)], {})
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split(None, 1)[1].rsplit(None, 1) for line in result.output.splitlines()[2:]}
    assert rows["power.max_total_w"] == ["900.0", f"{path}:2"]
    result = invoke(["show", "--json", "--file", str(path)], {})
    doc = json.loads(result.output)
    assert doc["rules"]["power_max_total_w"] == 900.0 and doc["sources"]["power_max_total_w"] == f"{path}:2"
    empty = write(tmp_path, "")
    result = invoke(["show", "--file", str(empty)], {})
    line = next(x for x in result.output.splitlines() if x.startswith("power."))
    assert line.split(None, 1)[1].rsplit(None, 1) == ["none (no power budget)", "default"]


def _a40(i: int, lo: float | None = 100.0, hi: float | None = 300.0) -> GpuNode:
    return GpuNode(f"GPU-{i}", i, "NVIDIA A40", 46068, power_limit_min_w=lo, power_limit_max_w=hi)


def test_a_gpu_without_a_limit_range_is_left_out_of_both_sums() -> None:
    gpus = [_a40(0), _a40(1, None, None)]
    assert budget_range_w(gpus) == (100.0, 300.0, 1)
    rules, sources = parse_rules("[power]\nmax_total_w = 5000\n", "p.toml")
    check_power_budget(rules, sources, gpus)  # the unknown GPU may draw anything: no upper check
    rules, sources = parse_rules("[power]\nmax_total_w = 50\n", "p.toml")
    with pytest.raises(ConfigError, match="below the 100 W"):
        check_power_budget(rules, sources, gpus)
    assert policy_warnings(Rules(), {}, gpus) == []
