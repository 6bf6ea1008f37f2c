"""benchmarks/lowutil_pairs.py on a tiny made-up table in Lucid's format (Lucid's own data is not shipped): the
three rows, the utilization-sum rule computed by hand, the subsets, and a clear error without the data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env

SCRIPT = REPO / "benchmarks" / "lowutil_pairs.py"
#: the table (benchmarks/json_identity.py runs the benchmark on it too)
DATA = REPO / "tests" / "data" / "lucid-tiny"
ALONE = (DATA / "single_data.csv").read_text()
PAIRS = (DATA / "colocate_info.csv").read_text()


def run(data: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--data", str(data), *args], env=clean_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_scores_three_rows_against_the_measured_speeds(tmp_path: Path) -> None:
    (tmp_path / "single_data.csv").write_text(ALONE)
    (tmp_path / "colocate_info.csv").write_text(PAIRS)
    ran = run(tmp_path, "--json", "--bootstrap", "50")
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert (doc["pairs"], doc["jobs"]) == (3, 6) and set(doc["rows"]) == {"gnn", "prior", "util-sum"}
    rule = doc["rows"]["util-sum"]
    # A+B: 30 + 50 % fits: both at full speed; B+C: 140 %, C+C: 180 %: each at 1 / demand
    truth = [(0.98, 0.95), (0.80, 0.60), (0.55, 0.56)]
    want = [(1.0, 1.0), (1 / 1.4, 1 / 1.4), (1 / 1.8, 1 / 1.8)]
    errors = [sum(abs(p - t) for p, t in zip(ps, ts)) / 2 for ps, ts in zip(want, truth)]
    assert rule["all"]["mae"] == pytest.approx(sum(errors) / 3, abs=1e-4)
    assert rule["underused"]["pairs"] == 1 and rule["underused"]["mae"] == pytest.approx(errors[0], abs=1e-4)
    assert rule["busy"]["pairs"] == 2
    for row in doc["rows"].values():
        low, high = row["all"]["ci95"]
        assert low <= row["all"]["mae"] <= high
    assert doc["source"]["commit"].startswith("63685a3")


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_a_subset_without_pairs_is_null_not_nan(tmp_path: Path) -> None:
    (tmp_path / "single_data.csv").write_text(ALONE)
    (tmp_path / "colocate_info.csv").write_text("\n".join(PAIRS.splitlines()[::2]) + "\n")  # header, B+C only
    ran = run(tmp_path, "--json", "--bootstrap", "10")
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["rows"]["util-sum"]["underused"] == {"pairs": 0, "mae": None, "ci95": None, "bias": None}
    assert doc["rows"]["util-sum"]["busy"]["pairs"] == 1
    table = run(tmp_path, "--bootstrap", "10")
    assert table.returncode == 0 and "-" in table.stdout.splitlines()[2]


def test_without_the_data_it_says_where_to_get_it(tmp_path: Path) -> None:
    ran = run(tmp_path)
    assert ran.returncode != 0
    assert "single_data.csv not found" in ran.stderr and "S-Lab-System-Group/Lucid" in ran.stderr
