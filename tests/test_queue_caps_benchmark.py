"""benchmarks/queue_caps.py: each row paired by seed against ``curve`` as shipped, a short real run's JSON, and the
arguments it refuses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, clean_env

BENCHMARKS = REPO / "benchmarks"


@pytest.fixture
def queue_caps(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import queue_caps

    return queue_caps


def _run(energy_kwh, jct_s, violations_pct, excl_kwh=(10.0, 10.0), excl_jct=(100.0, 100.0)) -> dict:
    return {"traces": {"t": {"curve": {"per_seed": {"node_energy_kwh": list(energy_kwh), "mean_jct_s": list(jct_s),
                                                    "qos_violations_pct": list(violations_pct)}},
                             "exclusive": {"per_seed": {"node_energy_kwh": list(excl_kwh),
                                                        "mean_jct_s": list(excl_jct),
                                                        "qos_violations_pct": [0.0, 0.0]}}}}}


def test_rows_are_paired_by_seed_against_the_shipped_curve(queue_caps) -> None:
    runs = {"shipped": _run((9.0, 8.0), (120.0, 110.0), (1.0, 2.0)),
            "wait_weight 1": _run((9.09, 8.16), (108.0, 104.5), (1.0, 1.0))}
    table = queue_caps.compare(runs, ["t"])["t"]
    assert table["shipped"]["node_energy_pct"] == [0.0, 0.0]
    row = table["wait_weight 1"]
    assert row["node_energy_pct"][0] == pytest.approx(1.5)  # +1 % and +2 %, paired by seed
    assert row["mean_jct_pct"][0] == pytest.approx(-7.5)  # -10 % and -5 %
    assert row["violations_pp"][0] == pytest.approx(-0.5)
    assert row["vs_exclusive"]["node_energy_pct"][0] == pytest.approx(100 * ((9.09 + 8.16) / 20 - 1))
    assert row["per_seed"]["mean_jct_pct"] == pytest.approx([-10.0, -5.0])  # each seed's change, kept
    assert "| wait_weight 1 | +1.50 ± 6.35 % | -7.50 ± 31.77 % | -7.50 % |" in queue_caps.markdown({"t": table})


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_a_short_run_prints_every_row_and_refuses_bad_arguments() -> None:
    cmd = [sys.executable, str(BENCHMARKS / "queue_caps.py"), "--seeds", "2", "--trace", "workstation-measured",
           "--weight", "4", "--lift", "1", "--json"]
    ran = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    rows = json.loads(ran.stdout)["traces"]["workstation-measured"]
    assert set(rows) == {"shipped", "wait_weight 4", "lift N=1"}
    assert rows["wait_weight 4"]["mean_jct_pct"][0] < 0.0  # caps lifted for the queue: jobs finish sooner
    for args, message in ((["--weight", "0"], "--weight must be a number in (0, 100]"),
                          (["--lift", "0"], "--lift must be a whole number >= 1"),
                          (["--seeds", "1"], "--seeds must be at least 2")):
        bad = subprocess.run([sys.executable, str(BENCHMARKS / "queue_caps.py"), *args], env=clean_env(),
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and message in bad.stderr
