"""benchmarks/compare_runs.py: two energy.py runs paired by seed, a renamed row read under its new name, runs on
other seeds refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env

SCRIPT = REPO / "benchmarks" / "compare_runs.py"


def run_doc(seeds: list[int], rows: dict[str, tuple[list[float], list[float]]]) -> dict:
    """An energy.py JSON with, per policy, each seed's node energy and violations (JCT = energy, dynamic = half)."""
    return {"seeds": seeds, "traces": {"t": {p: {"per_seed": {
        "node_energy_kwh": node, "gpu_dynamic_energy_kwh": [x / 2 for x in node], "mean_jct_s": node,
        "qos_violations_pct": viol}} for p, (node, viol) in rows.items()}}}


def compare(tmp_path: Path, before: dict, after: dict, *extra: str) -> subprocess.CompletedProcess:
    a, b = tmp_path / "before.json", tmp_path / "after.json"
    a.write_text(json.dumps(before))
    b.write_text(json.dumps(after))
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), *extra, "--json"], env=clean_env(),
                          capture_output=True, text=True, timeout=60)


def test_a_change_is_read_paired_by_seed_and_a_renamed_row_under_its_new_name(tmp_path: Path) -> None:
    before = run_doc([0, 1], {"exclusive": ([100.0, 200.0], [1.0, 1.0]), "curve": ([90.0, 180.0], [2.0, 0.0])})
    after = run_doc([0, 1], {"exclusive": ([100.0, 200.0], [1.0, 1.0]), "curve-untold": ([99.0, 198.0], [1.0, 1.0]),
                             "curve": ([95.0, 190.0], [3.0, 1.0])})
    ran = compare(tmp_path, before, after, "--rename", "curve=curve-untold")
    assert ran.returncode == 0, ran.stderr
    rows = json.loads(ran.stdout)["traces"]["t"]
    assert set(rows) == {"exclusive", "curve-untold"}  # the after run's curve has no row before it
    untold = rows["curve-untold"]
    assert untold["node_energy_pct"] == {"mean": 10.0, "ci95": 0.0}  # 99 / 90 and 198 / 180: +10 % on each seed
    assert untold["gpu_dynamic_energy_pct"]["mean"] == 10.0
    assert untold["violations_pp"]["mean"] == 0.0  # -1 and +1
    assert untold["before_vs_exclusive_pct"]["mean"] == -10.0 and untold["after_vs_exclusive_pct"]["mean"] == -1.0


def test_runs_on_other_seeds_are_refused(tmp_path: Path) -> None:
    doc = run_doc([0, 1], {"curve": ([1.0, 2.0], [0.0, 0.0])})
    ran = compare(tmp_path, doc, {**doc, "seeds": [1, 2]})
    assert ran.returncode == 1 and "different seeds" in ran.stderr
    bad = subprocess.run([sys.executable, str(SCRIPT), "a", "b", "--rename", "curve"], env=clean_env(),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rename takes OLD=NEW, got 'curve'" in bad.stderr


@pytest.mark.parametrize("missing", ["before.json", "after.json"])
def test_an_unreadable_run_is_named(tmp_path: Path, missing: str) -> None:
    doc = run_doc([0], {"curve": ([1.0], [0.0])})
    ran = compare(tmp_path, doc, doc)
    assert ran.returncode == 0
    (tmp_path / missing).unlink()
    again = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "before.json"), str(tmp_path / "after.json")],
                           env=clean_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and f"cannot read {tmp_path / missing}" in again.stderr
