"""benchmarks/measured_types.py on a small subset (the H200 sweep, and Zeus's V100 windows where the checkout has
them): the JSON's shape, and that its figures are computed from the measured files (points recomputed by hand)."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from ecolaunch.jobmodel.capcurve import profile_curve
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.zeus_data import DEFAULT_DATA_DIR
from ecolaunch.sim.models import DATA_DIR
from tests.conftest import REPO, clean_env

SCRIPT = REPO / "benchmarks" / "measured_types.py"
#: the package's copy of Zeus's V100 ResNet-18 window: the zeus-v100 source is scored from ecolaunch/sim/data
WINDOW = DATA_DIR / "profile_windows" / "V100+resnet18+gpu0.csv"
SOURCES = ["h200", "zeus-v100"]


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> tuple[dict, Path]:
    cwd = tmp_path_factory.mktemp("measured_types")
    ran = subprocess.run([sys.executable, str(SCRIPT), "--no-holdout", "--json", "--zeus-dir", str(DATA_DIR),
                          *(a for s in SOURCES for a in ("--source", s))],
                         cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout), cwd


def _point(doc: dict, name: str, cap_w: float) -> dict:
    t = next(t for t in doc["types"] if t["name"] == name)
    return next(p for p in t["points"] if p["cap_w"] == cap_w)


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_shape_and_summaries(doc) -> None:
    doc, cwd = doc
    assert list(cwd.iterdir()) == []  # writes nothing without --out
    assert doc["methods"] == ["gnn", "gnn-no-util", "prior", "heuristic"]
    assert set(doc["held_out"]) == set(doc["methods"])
    assert "none" in doc["pairs"] and doc["heldout_weights"] == {}
    assert set(doc["sources"]) == set(SOURCES)
    for source, cells in doc["sources"].items():
        points = [p for t in doc["types"] if t["source"] == source for p in t["points"]]
        assert cells["faster_than_uncapped"] == sum(p["measured_speed"] > 1.0 for p in points)
        # the utilization-blind row only where a utilization was measured (the H200 sweep)
        assert set(cells) - {"faster_than_uncapped"} == set(doc["methods"]) - ({"gnn-no-util"} if source != "h200"
                                                                               else set())
        for method in set(cells) - {"faster_than_uncapped"}:
            c = cells[method]
            times = [p["predicted"][method]["time_err_pct"] for p in points]
            powers = [p["predicted"][method]["power_err_pct"] for p in points]
            assert c["points"] == len(points) > 0
            assert c["time_mean_pct"] == pytest.approx(statistics.fmean(times))
            assert c["time_max_pct"] == max(times) and c["power_max_pct"] == max(powers)
            assert c["power_mean_pct"] == pytest.approx(statistics.fmean(powers))
    # the H200 sweep: mm and bw (mlp is noise), every cap below the 700 W top, utilization as measured
    h200 = [t for t in doc["types"] if t["source"] == "h200"]
    assert [t["name"] for t in h200] == ["H200 mm", "H200 bw"]
    assert all([p["cap_w"] for p in t["points"]] == [200.0 + 50 * k for k in range(10)] for t in h200)
    # the GNN's answers differ from the prior's somewhere: the learned part is what is scored
    assert any(abs(p["predicted"]["gnn"]["speed"] - p["predicted"]["prior"]["speed"]) > 1e-3
               for t in doc["types"] for p in t["points"])


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_h200_point_recomputed_from_the_csv(doc) -> None:
    doc, _ = doc
    with (DATA_DIR / "h200_cap_sweep.csv").open(newline="") as f:
        rows = {float(r["power_cap_w"]): r for r in csv.DictReader(f) if r["workload"] == "mm"}
    top, at = rows[700.0], rows[400.0]
    t0, p0 = float(top["iter_time_s"]), float(top["power_w"])
    t = next(t for t in doc["types"] if t["name"] == "H200 mm")
    assert (t["sm_util_pct"], t["mem_util_pct"]) == (float(top["sm_util_pct"]), float(top["mem_util_pct"]))
    assert t["uncapped"] == {"cap_w": 700.0, "iter_time_s": t0, "power_w": p0}
    point = _point(doc, "H200 mm", 400.0)
    speed = t0 / float(at["iter_time_s"])
    assert point["measured_speed"] == pytest.approx(speed) and point["measured_power_w"] == float(at["power_w"])
    heuristic = point["predicted"]["heuristic"]
    assert heuristic["speed"] == pytest.approx(400.0 / p0)  # 715 W uncapped: the cap binds
    assert heuristic["time_err_pct"] == pytest.approx(abs(400.0 / p0 / speed - 1.0) * 100.0)
    assert heuristic["power_err_pct"] == pytest.approx(abs(400.0 / float(at["power_w"]) - 1.0) * 100.0)
    curve = profile_curve(Profile(iter_time_s=t0, power_w=p0), 700.0)
    prior = point["predicted"]["prior"]
    assert prior["speed"] == pytest.approx(t0 / curve.predict(400.0).iter_time_s)
    assert prior["power_err_pct"] == pytest.approx(abs(curve.predict(400.0).power_w / float(at["power_w"]) - 1) * 100)


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_zeus_window_point_recomputed_from_the_csv(doc) -> None:
    doc, _ = doc
    with WINDOW.open(newline="") as f:
        rows = {float(r["window_name"].rsplit("_", 1)[1]): r for r in csv.DictReader(f)}
    top, at = rows[250.0], rows[150.0]
    p0 = float(top["gpu0_energy"]) / float(top["elapsed_time"])
    point = _point(doc, "Zeus window V100 resnet18", 150.0)
    t = next(t for t in doc["types"] if t["name"] == "Zeus window V100 resnet18")
    assert t["sm_util_pct"] is None and t["mem_util_pct"] is None and t["gpu"] == "V100-PCIE-32GB"
    assert point["measured_speed"] == pytest.approx(float(top["elapsed_time"]) / float(at["elapsed_time"]))
    assert point["measured_power_w"] == pytest.approx(float(at["gpu0_energy"]) / float(at["elapsed_time"]))
    heuristic = point["predicted"]["heuristic"]
    assert heuristic["speed"] == pytest.approx(150.0 / p0)  # 190 W uncapped at 150 W: binds
    assert heuristic["time_err_pct"] == pytest.approx(abs(heuristic["speed"] / point["measured_speed"] - 1) * 100)


@pytest.mark.skipif(not (DEFAULT_DATA_DIR / "profile_windows").is_dir(),
                    reason="needs every Zeus profiling window (../shared/data/zeus-nsdi23); the package has one")
def test_held_out_networks_name_zeus_curves(monkeypatch) -> None:
    # a window network spelled otherwise than in the Zeus summary would hold nothing out: every window network but
    # ResNet-18 (absent from the summary curves) must name summary curves, and the refitted prior must differ
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import measured_types

    from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR
    from ecolaunch.learn.train import zeus_keys

    windows = {t["network"] for t in measured_types.measured_types(("zeus-v100", "zeus-a40", "zeus-multi"))}
    held = windows & measured_types.zeus_networks()
    assert held == {"bert_base_uncased", "resnet50", "shufflenetv2"} and windows - held == {"resnet18"}
    for network in held:
        assert any(k.split(":")[1] == network for k in zeus_keys()), network
        assert measured_types.heldout_prior(network).time_ratio != DEFAULT_PRIOR.time_ratio, network


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_the_first_launch_question_is_scored_on_the_measured_points(doc) -> None:
    from ecolaunch.devices.catalogue import lookup
    from ecolaunch.policy.gnn import FIRST_CURVE_Z, GnnFirstCurve
    from ecolaunch.state.graph import GpuNode

    doc, _ = doc
    first = doc["first_launch"]
    assert set(first["methods"]) == {"gnn-first", "rule", "prior-max"}
    assert set(first["sources"]) == set(SOURCES)
    h200 = first["sources"]["h200"]
    points = [p for t in doc["types"] if t["source"] == "h200" for p in t["points"]]
    assert {c["points"] for c in h200.values()} == {len(points)} and points
    # the GNN's kept-back prediction at one H200 point, by hand: its speed less FIRST_CURVE_Z standard deviations
    t = next(t for t in doc["types"] if t["source"] == "h200")
    rows = {c: (v, sd) for c, v, sd, _ in GnnFirstCurve().speeds(GpuNode.from_model(lookup(t["gpu"])))}
    covered = []
    for name in (t["name"] for t in doc["types"] if t["source"] == "h200"):
        typ = next(x for x in doc["types"] if x["name"] == name)
        for p in typ["points"]:
            speed, sd = rows[p["cap_w"]]
            covered.append(p["measured_speed"] >= speed - FIRST_CURVE_Z * sd - 1e-9)
    assert h200["gnn-first"]["covered_pct"] == pytest.approx(100.0 * statistics.fmean(covered))
    for c in h200.values():
        assert 0.0 <= c["covered_pct"] <= 100.0 and c["slack_pct"] >= 0.0 and c["time_mean_pct"] >= 0.0
