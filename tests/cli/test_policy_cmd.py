"""``ecolaunch policy show`` and ``ecolaunch policy check``: whole outputs and exit codes."""

from __future__ import annotations

import inspect
import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from ecolaunch.admin.rules import Rules
from ecolaunch.cli.policy_cmd import policy
from tests.conftest import NO_POLICY, clean_env, ecolaunch_cmd

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
POLICY = textwrap.dedent(
    """\
    [slowdown]
    max_pct = 15

    [caps.A40]
    max_w = 250
    [caps.index.1]
    max_fraction = 0.8

    [reserve.0]
    users = ["alice"]

    [users.bob]
    max_gpus = 1
    """
)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def invoke(runner: CliRunner, args: list[str], env: dict[str, str] | None = None):
    env = {"ECOLAUNCH_POLICY": str(NO_POLICY), "ECOLAUNCH_JSON": None, **(env or {})}
    return runner.invoke(policy, args, env=env, prog_name="ecolaunch policy")


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path


def test_show_prints_every_value_with_its_source(runner: CliRunner, policy_file: Path) -> None:
    result = invoke(runner, ["show", "--file", str(policy_file)])
    assert result.exit_code == 0, result.output
    f = str(policy_file)
    rows = [
        ("KEY", "VALUE", "SOURCE"),
        ("slowdown.default_pct", "10.0", "default"),
        ("slowdown.max_pct", "15.0", f"{f}:2"),
        ("energy.eta", repr(Rules().eta), "default"),  # the built-in default, whatever it is
        ("energy.wait_weight", repr(Rules().wait_weight), "default"),
        ("power.max_total_w", "none (no power budget)", "default"),
        ("colocation.enabled", "true", "default"),
        ("colocation.max_jobs_per_gpu", "2", "default"),
        ("colocation.memory_margin_mib", "1024", "default"),
        ("colocation.share_if_sooner", "false", "default"),
        ("queue.backfill", "true", "default"),
        ("profiling.max_iterations", "none (a full profile takes 65 iterations)", "default"),
        ("profiling.max_time_s", "none (no time limit)", "default"),
        ("profiling.max_caps", "none (profiling tries at most 3 caps)", "default"),
        ("profiling.colleagues", "true", "default"),
        ("state.dir", "none ($ECOLAUNCH_STATE_DIR, else /var/tmp/ecolaunch)", "default"),
        ("state.group", "none (the directory's group is not checked)", "default"),
        ("caps.A40", "max_w=250.0", f"{f}:4"),
        ("caps.index.1", "max_fraction=0.8", f"{f}:6"),
        ("reserve.0", 'users=["alice"] groups=[]', f"{f}:9"),
        ("users.bob.max_gpus", "1", f"{f}:13"),
        ("agent.gpus", "every GPU of the host", "default"),
    ]
    kw = max(len(r[0]) for r in rows)
    vw = max(len(r[1]) for r in rows)
    expected = [f"Policy file: {f}"] + [f"{k:<{kw}}  {v:<{vw}}  {s}" for k, v, s in rows]
    assert result.output == "\n".join(expected) + "\n"


def test_show_missing_named_file_is_error_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    result = invoke(runner, ["show", "--json", "--file", str(missing)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: policy file {missing} does not exist\n"
        "HINT: check the path (without --file or ECOLAUNCH_POLICY, /etc/ecolaunch/policy.toml is read if it exists)\n"
    )


def test_show_reads_the_environment_variable(runner: CliRunner, policy_file: Path) -> None:
    result = invoke(runner, ["show", "--json"], env={"ECOLAUNCH_POLICY": str(policy_file)})
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["file"] == str(policy_file) and doc["found"] is True
    assert doc["rules"]["max_slowdown_pct"] == 15.0
    assert doc["rules"]["cap_bounds_index"] == {
        "1": {"min_w": None, "max_w": None, "min_fraction": None, "max_fraction": 0.8}
    }
    assert doc["rules"]["reserved"] == {"0": ["alice"]}
    assert doc["sources"]["max_slowdown_pct"] == f"{policy_file}:2"
    assert doc["sources"]["eta"] == "default"
    assert doc["sources"]["user_gpu_limit[bob]"] == f"{policy_file}:13"


def test_json_flag_from_environment(runner: CliRunner, policy_file: Path) -> None:
    result = invoke(runner, ["show", "--file", str(policy_file)], env={"ECOLAUNCH_JSON": "1"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["found"] is True


def test_show_env_named_missing_file_is_error_default_is_not(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an environment that names a missing file is an explicit choice: an error, not silent defaults
    result = invoke(runner, ["show"], env={"ECOLAUNCH_POLICY": str(tmp_path / "gone.toml")})
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: policy file {tmp_path / 'gone.toml'} does not exist\n")
    # a missing default file is built-in defaults; the default path is moved here so the host's own is never read
    default = tmp_path / "etc" / "policy.toml"
    for module in ("ecolaunch.config", "ecolaunch.admin.rules", "ecolaunch.admin.binding"):
        monkeypatch.setattr(f"{module}.DEFAULT_POLICY_FILE", default)
    result = invoke(runner, ["show"], env={"ECOLAUNCH_POLICY": None})
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"Policy file: {default} (not found: built-in defaults)"
    assert "slowdown.max_pct              25.0" in result.output


def test_show_bad_file_is_error_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[energy]\neta = 3\n")
    result = invoke(runner, ["show", "--file", str(bad)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {bad}:2: energy.eta = 3: must be at most 1\n"
        "HINT: eta weighs energy against time: 0 = time only, 1 = energy only\n"
    )


def _four_a40s(tmp_path: Path) -> dict[str, str]:
    """The GPUs `policy check` compares the file with: four simulated A40s (not whatever this machine has)."""
    return {"ECOLAUNCH_SIMULATE": "4xA40", "ECOLAUNCH_STATE_DIR": str(tmp_path / "state")}


@pytest.fixture
def local_policy(tmp_path: Path) -> Path:
    """POLICY naming users this host has (root): nothing in it applies to nobody here."""
    path = tmp_path / "local.toml"
    path.write_text(POLICY.replace('"alice"', '"root"').replace("[users.bob]", "[users.root]"))
    return path


def test_check_ok(runner: CliRunner, local_policy: Path, tmp_path: Path) -> None:
    result = invoke(runner, ["check", str(local_policy)], env=_four_a40s(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.output == f"OK: {local_policy}\n"


def _missing(kind, names: list[str]) -> list[str]:
    found = []
    for name in names:
        try:
            kind(name)
        except KeyError:
            found.append(name)
    return found


def test_check_example_policy(runner: CliRunner, tmp_path: Path) -> None:
    import grp
    import pwd

    # on its four A40s the example's only warnings are the lab's users and groups this host does not have
    result = invoke(runner, ["check", str(EXAMPLE)], env=_four_a40s(tmp_path))
    assert result.exit_code == 0, result.output
    unknown = [*_missing(pwd.getpwnam, ["alice"]), *_missing(grp.getgrnam, ["vision-lab"]),  # in file order
               *_missing(pwd.getpwnam, ["bob"]), *_missing(grp.getgrnam, ["gpu-users"])]
    warnings = [line for line in result.output.splitlines() if line.startswith("Warning: ")]
    assert [w.split(": no ", 1)[1].split("'")[1] for w in warnings] == unknown, result.output
    count = f" ({len(unknown)} warning{'s' if len(unknown) > 1 else ''})" if unknown else ""
    assert result.output.endswith(f"OK: {EXAMPLE}{count}\n")


def test_check_says_when_gpu_indices_could_not_be_checked(runner: CliRunner, local_policy: Path) -> None:
    policy_file = local_policy
    result = invoke(runner, ["check", str(policy_file)], env={"ECOLAUNCH_SIMULATE": "4xH9000"})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Note: GPU indices and UUIDs not checked against this host: bad machine spec "
                                    "'4xH9000': unknown GPU model 'H9000'"), result.output
    assert result.output.endswith(f"\nOK: {policy_file}\n")


def test_check_unknown_key_prints_error_and_hint(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[colocation]\nenabled = true\nmax_job_per_gpu = 3\n")
    result = invoke(runner, ["check", str(bad)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {bad}:3: unknown key colocation.max_job_per_gpu\n"
        "HINT: did you mean colocation.max_jobs_per_gpu? [colocation] takes: enabled, max_jobs_per_gpu, "
        "memory_margin_mib, share_if_sooner\n"
    )


def test_check_prints_every_error_not_only_the_first(runner: CliRunner, tmp_path: Path) -> None:
    """Issue 41: a file with two errors showed the first; fixed, the admin met the second on the next run."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[slowdown]\ndefault_pct = -5\nmax_pct = \"x\"\n[colocation]\nmax_job_per_gpu = 3\n[power]\n"
                   "max_total_w = 100\n")
    result = invoke(runner, ["check", str(bad)])
    assert result.exit_code == 1, result.output
    pct_hint = "HINT: a slowdown is in percent of the solo, uncapped iteration time: 10 means at most 10 % slower\n"
    assert result.output == (
        f"Error: {bad}:2: slowdown.default_pct = -5: must be at least 0\n{pct_hint}"
        f"Error: {bad}:3: slowdown.max_pct = \"x\": must be a number\n{pct_hint}"
        f"Error: {bad}:5: unknown key colocation.max_job_per_gpu\n"
        "HINT: did you mean colocation.max_jobs_per_gpu? [colocation] takes: enabled, max_jobs_per_gpu, "
        "memory_margin_mib, share_if_sooner\n"
    )


def test_check_errors_go_to_stderr(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[slowdown\n")
    # click < 8.2 mixes stderr into output unless told not to; later versions always keep it apart
    separate = "mix_stderr" in inspect.signature(CliRunner.__init__).parameters
    result = (CliRunner(mix_stderr=False) if separate else CliRunner()).invoke(policy, ["check", str(bad)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"Error: {bad}:1:10: invalid TOML: ")
    assert "HINT: fix the syntax there" in result.stderr


def test_check_missing_file_is_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    result = invoke(runner, ["check", str(tmp_path / "nope.toml")])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: policy file {tmp_path / 'nope.toml'} does not exist\n")


def test_usage_errors_exit_2(runner: CliRunner) -> None:
    result = invoke(runner, ["check"])
    assert result.exit_code == 2
    assert "Missing argument 'FILE'" in result.output
    assert "Try 'ecolaunch policy check --help' for help." in result.output
    result = invoke(runner, ["show", "--bogus"])
    assert result.exit_code == 2
    assert "Error: No such option" in result.output and "--bogus" in result.output


def test_help_names_the_environment_variables(runner: CliRunner) -> None:
    result = invoke(runner, ["show", "--help"])
    assert result.exit_code == 0
    assert "ECOLAUNCH_POLICY" in result.output and "ECOLAUNCH_JSON" in result.output
    assert "/etc/ecolaunch/policy.toml" in result.output


# --- the real command line: rules that apply to no GPU, built-in defaults in words ------------------------------
def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd("policy", *args), env=clean_env(**env), capture_output=True, text=True,
                          timeout=60)


def test_check_warns_about_rules_that_apply_to_no_gpu(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[caps.H9000]\nmax_w = 300\n[caps."V100-SXM2-32GB"]\nmax_w = 200\n[caps.index.7]\nmax_w = 200\n'
                    '[reserve.99]\nusers = ["root"]\n[agent]\ngpus = [0, 4]\n[caps.A40]\nmax_w = 250\n')
    out = _cli(["check", str(path)], _four_a40s(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"OK: {path} (5 warnings)\n"
    assert out.stderr == (
        f"Warning: {path}:1: caps.H9000: no GPU model 'H9000' in ecolaunch's catalogue or on this host: the bounds "
        "apply to no GPU\n"
        "HINT: write the model as nvidia-smi -L shows it, e.g. [caps.H200]\n"
        f"Warning: {path}:3: caps.V100-SXM2-32GB: no GPU reports the name 'V100-SXM2-32GB': NVML calls the "
        "V100-SXM2-32GB 'Tesla V100-SXM2-32GB'\n"
        'HINT: write [caps."Tesla V100-SXM2-32GB"]\n'
        f"Warning: {path}:5: caps.index.7: this host has no GPU 7 (its GPUs are 0-3): these bounds apply to no GPU\n"
        "HINT: check the index or UUID with nvidia-smi -L\n"
        f"Warning: {path}:7: reserve.99: this host has no GPU 99 (its GPUs are 0-3): the reservation applies to no "
        "GPU\n"
        "HINT: check the index or UUID with nvidia-smi -L\n"
        f"Warning: {path}:10: agent.gpus: this host has no GPU 4 (its GPUs are 0-3)\n"
        "HINT: check the index or UUID with nvidia-smi -L\n"
    )


def test_show_names_built_in_defaults_and_agent_gpus(tmp_path: Path) -> None:
    out = _cli(["show", "--file", str(EXAMPLE)], {})
    assert out.returncode == 0, out.stderr
    assert "N/A" not in out.stdout
    line = EXAMPLE.read_text().splitlines().index("gpus = [0, 1, 2, 3]") + 1
    assert [line.split() for line in out.stdout.splitlines() if line.startswith("agent.")] == [
        ["agent.gpus", "[0,", "1,", "2,", "3]", f"{EXAMPLE}:{line}"]]
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    out = _cli(["show", "--file", str(empty)], {})
    assert out.returncode == 0, out.stderr
    assert "N/A" not in out.stdout
    assert "profiling.max_caps            none (profiling tries at most 3 caps)" in out.stdout
    assert [line.split(None, 1)[1].rsplit(None, 1) for line in out.stdout.splitlines()
            if line.startswith("agent.")] == [["every GPU of the host", "default"]]


def test_check_warns_about_rules_that_apply_to_nothing_on_this_host(tmp_path: Path) -> None:
    """The README's promise: [caps.A40] on a host without A40s, a bound above the board's maximum, and a user or
    group this host does not know are warnings (exit 0, counted in the summary), not a silent OK."""
    path = tmp_path / "p.toml"
    path.write_text('[caps.A40]\nmax_w = 250\n[caps."A100-SXM4-80GB"]\nmax_w = 900\n[users.no-such-user-9]\n'
                    'max_gpus = 1\n[reserve.0]\ngroups = ["no-such-group-9"]\n')
    out = _cli(["check", str(path)], {"ECOLAUNCH_SIMULATE": "4xA100-SXM4-80GB",
                                      "ECOLAUNCH_STATE_DIR": str(tmp_path / "state")})
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"OK: {path} (4 warnings)\n"
    warnings = [line for line in out.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings == [
        f"Warning: {path}:1: caps.A40: this host has no A40 (its GPUs are 4 x NVIDIA A100-SXM4-80GB): the bounds "
        "apply to no GPU here",
        f"Warning: {path}:3: caps.A100-SXM4-80GB.max_w: 900 W is above the power-limit range of the NVIDIA "
        "A100-SXM4-80GB, 100-400 W: caps stay within the board's range, so this bound means 400 W",
        f"Warning: {path}:6: users.no-such-user-9.max_gpus: no user 'no-such-user-9' on this host: the limit applies "
        "to nobody",
        f"Warning: {path}:7: reserve.0.groups: no group 'no-such-group-9' on this host: the reservation lets no "
        "member of it use GPU 0",
    ]
    assert len([line for line in out.stderr.splitlines() if line.startswith("HINT: ")]) == 4
