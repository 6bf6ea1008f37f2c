"""benchmarks/pace_matching.py on a small case (one job type, 1+1 GPUs): the JSON's shape, its intervals, the headline
read from its rows, and one seed's figures recomputed by hand from the measured tables (Gavel's speeds, Zeus's
curves) at the caps it reports."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import pytest

from ecolaunch.sim.measured import MeasuredWorld
from tests.conftest import REPO, clean_env

#: benchmark smoke tests: every test here runs the benchmark's script
pytestmark = pytest.mark.slow

SCRIPT = REPO / "benchmarks" / "pace_matching.py"
KIND = "ResNet-50 (batch size 64)"
V100, P100 = "V100-PCIE-16GB", "P100-PCIE-16GB"
ROWS = {"uncapped", "job-cap", "pace", "pace-no-margin", "pace-feedback", "same-tdp-fraction", "fast-board-min",
        "pace-oracle"}
FIGURES = {"saving_vs_job_pct", "saving_vs_uncapped_pct", "iter_time_vs_job_pct", "iter_time_vs_uncapped_pct"}


def _run(tmp_path, *args: str) -> dict:
    ran = subprocess.run([sys.executable, str(SCRIPT), "--kind", KIND, "--size", "1+1", "--json", *args],
                         cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory) -> tuple[dict, object]:
    out = tmp_path_factory.mktemp("pace")
    return _run(out, "--seeds", "2", "--out", str(out / "results")), out


def test_shape_intervals_and_headline(two_seeds) -> None:
    doc, out = two_seeds
    assert doc["kinds"] == [KIND] and doc["sizes"] == ["1+1"] and doc["seeds"] == [0, 1]
    # two real launchers on localhost agreed one plan: every node at its default limit, so nothing paces the job
    node = doc["multinode"]
    assert node["nodes"] == 2 and node["same_plan"] is True and node["exit_codes"] == [0, 0], node
    assert node["plan"].startswith("one plan for 2 nodes (")
    assert node["caps_w"] == {"2xA100-SXM4-80GB": [None], "2xV100-SXM2-16GB": [None]}
    assert node["slowdown_pct"] == 0.0 and node["bound_pct"] == 10.0 and node["within_bound"] is True
    mixed = doc["mixed"]
    assert set(mixed["by_wait_power"]) == {"idle", "at-cap"}
    for bound in mixed["by_wait_power"].values():
        assert set(bound["total"]) == ROWS and set(bound["jobs"][KIND]["1+1"]) == ROWS | {"caps_w"}
        for row, figures in bound["total"].items():
            assert set(figures) == FIGURES, row
            for f in figures.values():
                assert len(f["per_seed"]) == 2
                assert f["mean"] == pytest.approx(statistics.fmean(f["per_seed"]), abs=2e-3)
                assert f["ci95"] == pytest.approx(12.706 * statistics.stdev(f["per_seed"]) / math.sqrt(2), abs=2e-2)
        t = bound["total"]
        assert t["job-cap"]["saving_vs_job_pct"]["mean"] == 0 and t["uncapped"]["saving_vs_uncapped_pct"]["mean"] == 0
        assert all(c[P100] == bound["jobs"][KIND]["1+1"]["caps_w"]["job-cap"][P100]
                   for r, c in bound["jobs"][KIND]["1+1"]["caps_w"].items() if r != "uncapped")  # P100 keeps its cap
    # the headline is the pace row at the worse of the two waiting-power bounds
    worse = min(mixed["by_wait_power"].values(), key=lambda b: b["total"]["pace"]["saving_vs_job_pct"]["mean"])
    assert mixed["gpu_energy_saving_pct"] == worse["total"]["pace"]["saving_vs_job_pct"]["mean"]
    assert mixed["worse_bound"] in mixed["by_wait_power"]
    lows = [b["total"]["pace"]["saving_vs_job_pct"]["mean"] - b["total"]["pace"]["saving_vs_job_pct"]["ci95"]
            for b in mixed["by_wait_power"].values()]
    highs = [b["total"]["pace"]["iter_time_vs_job_pct"]["mean"] + b["total"]["pace"]["iter_time_vs_job_pct"]["ci95"]
             for b in mixed["by_wait_power"].values()]
    assert mixed["goal_met"] == (min(lows) >= 5.0 and max(highs) <= 1.0)
    written = json.loads((out / "results" / "pace_matching.json").read_text())
    assert written == doc
    assert "| pace |" in (out / "results" / "pace_matching.md").read_text()


def test_one_seed_recomputed_from_the_measured_tables(tmp_path) -> None:
    # bound 0: the job keeps no cap of its own, so its V100 surely waits for its P100 at full power
    doc = _run(tmp_path, "--seeds", "1", "--first-seed", "3", "--bound", "0", "--no-multinode")
    assert doc["multinode"] is None
    assert list(tmp_path.iterdir()) == []  # nothing written without --out
    world = MeasuredWorld()
    v, p = world.job_kind(KIND, V100), world.job_kind(KIND, P100)
    idle = doc["wait_power"]["idle_w"]

    def truth(caps: dict, bound: str) -> tuple[float, float]:
        tv, tp = v.iter_time_s * v.time_ratio(caps[V100]), p.iter_time_s * p.time_ratio(caps[P100])
        pv, pp = v.curve.power_w(min(caps[V100], 250.0)), p.curve.power_w(min(caps[P100], 250.0))
        t = max(tv, tp)
        waits = {"idle": (idle[V100], idle[P100]), "at-cap": (pv, pp)}[bound]
        return t, pv * tv + waits[0] * (t - tv) + pp * tp + waits[1] * (t - tp)

    for name, bound in doc["mixed"]["by_wait_power"].items():
        caps = bound["jobs"][KIND]["1+1"]["caps_w"]
        base_t, base_e = truth(caps["job-cap"], name)
        free_t, free_e = truth(caps["uncapped"], name)
        assert caps["uncapped"] == {V100: 250.0, P100: 250.0}
        for row in ROWS:
            t, e = truth(caps[row], name)
            got = bound["total"][row]
            assert got["saving_vs_job_pct"]["mean"] == pytest.approx(100 * (1 - e / base_e), abs=2e-3), (name, row)
            assert got["saving_vs_uncapped_pct"]["mean"] == pytest.approx(100 * (1 - e / free_e), abs=2e-3)
            assert got["iter_time_vs_job_pct"]["mean"] == pytest.approx(100 * (t / base_t - 1), abs=2e-3)
            assert got["saving_vs_job_pct"]["ci95"] is None  # one seed: no interval
        # the V100 waits for the P100 uncapped: pace-matching lowers it, and the P100 still sets the pace
        assert caps["job-cap"] == caps["uncapped"] and caps["pace"][V100] < caps["job-cap"][V100]
        assert bound["total"]["pace"]["iter_time_vs_job_pct"]["mean"] <= 1e-9
        assert bound["total"]["pace"]["saving_vs_job_pct"]["mean"] > 0


def test_bad_sizes_and_kinds_are_usage_errors(tmp_path) -> None:
    for args, message in ((["--size", "2+0"], "at least one GPU of each board"), (["--size", "x"], "V+P"),
                          (["--kind", "CycleGAN"], "no measured curve on both boards")):
        ran = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path, env=clean_env(),
                             capture_output=True, text=True, timeout=60)
        assert ran.returncode == 2 and message in ran.stderr, ran.stderr
