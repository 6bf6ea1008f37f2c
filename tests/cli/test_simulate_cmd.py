"""``ecolaunch simulate``: the model world's traces on a machine spec, and the measured world's traces."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ecolaunch.cli.simulate_cmd import simulate


@pytest.fixture(autouse=True)
def _no_lab_weights(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ECOLAUNCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("ECOLAUNCH_GNN_WEIGHTS", raising=False)


def _run(*args: str) -> dict:
    result = CliRunner().invoke(simulate, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_measured_trace_brings_its_own_machine_and_budget():
    doc = _run("--trace", "power-budget", "--jobs", "30", "--policy", "exclusive", "--policy", "oracle",
               "--policy", "no-gnn")
    assert doc["machine"] == "4xV100-PCIE-16GB" and doc["jobs"] == 30
    rows = doc["policies"]
    assert set(rows) == {"exclusive", "oracle", "no-gnn"}
    # the oracle knows the truth: it never uses more node energy than exclusive placement at default power
    assert rows["oracle"]["node_energy_kwh"] <= rows["exclusive"]["node_energy_kwh"]


def test_the_model_world_still_takes_a_machine_spec():
    doc = _run("--gpus", "2xA100-SXM4-80GB", "--trace", "workstation-light", "--jobs", "20", "--policy", "exclusive")
    assert doc["machine"] == "2xA100-SXM4-80GB" and doc["policies"]["exclusive"]["jobs"] == 20


def test_help_lists_every_trace_and_policy_of_the_registries() -> None:
    from ecolaunch.sim.policies import ABLATIONS, sim_policy_names
    from ecolaunch.sim.trace_registry import trace_names

    text = " ".join(CliRunner().invoke(simulate, ["--help"]).output.split()).replace("- ", "-")
    for name in [*trace_names(), *sim_policy_names(), *ABLATIONS]:
        assert name in text, name


def test_the_measured_world_runs_from_an_installed_package_without_the_checkouts_data(tmp_path) -> None:
    """The package's own copy, away from the development checkout (no ../shared beside it, as after pip install):
    the measured world's held-out priors read the vendored Zeus curves."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import REPO, clean_env

    site = tmp_path / "site"
    shutil.copytree(REPO / "ecolaunch", site / "ecolaunch", ignore=shutil.ignore_patterns("__pycache__"))
    assert not (site / ".." / "shared").exists()
    env = {**clean_env(ECOLAUNCH_STATE_DIR=str(tmp_path / "state")), "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-m", "ecolaunch", "simulate", "--trace", "workstation-mixed", "--jobs",
                          "3", "--policy", "curve", "--json"], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["policies"]["curve"]["jobs"] == 3


def test_the_queue_backfills_as_the_launchers_unless_told() -> None:
    """Under the budget the default's queue lets jobs start ahead of a waiting head (issue 40); `--backfill no` is the
    strict FIFO, which `exclusive` keeps unless told yes."""
    default = _run("--trace", "power-budget", "--jobs", "60", "--policy", "curve")["policies"]["curve"]
    fifo = _run("--trace", "power-budget", "--jobs", "60", "--policy", "curve", "--backfill", "no")["policies"]["curve"]
    # jobs started ahead of a waiting head (whether that shortens the mean on one seed is the trace's business)
    assert default["backfilled_pct"] > 0.0 and fifo["backfilled_pct"] == 0.0
    assert default["mean_jct_s"] != fifo["mean_jct_s"]
    told = _run("--trace", "power-budget", "--jobs", "60", "--policy", "exclusive", "--backfill", "no")
    assert told["policies"]["exclusive"] == _run("--trace", "power-budget", "--jobs", "60", "--policy",
                                                 "exclusive")["policies"]["exclusive"]
    bad = CliRunner().invoke(simulate, ["--backfill", "maybe"])
    assert bad.exit_code == 2 and "'maybe' is not one of 'yes', 'no'" in bad.output
