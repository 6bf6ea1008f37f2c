"""Calibration results -> GNN training samples (ecolaunch/learn/calibration_data.py); ``ecolaunch policy train``
picks them up and writes its weights into the state directory, where ``Environment`` finds them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ecolaunch.calibrate.results import FORMAT, VERSION, read_results, write_result
from ecolaunch.config import ENV_GNN_WEIGHTS, Environment
from ecolaunch.learn.calibration_data import (FLAGGED, SIMULATED_SOURCE, SOURCE, calibration_samples,
                                              document_samples)
from ecolaunch.statedir import StateLayout
from tests.conftest import REPO, clean_env, ecolaunch_cmd

GPU = {"uuid": "GPU-1", "index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771, "power_limit_min_w": 200.0,
       "power_limit_default_w": 700.0, "power_limit_max_w": 700.0, "power_limit_found_w": 700.0}


def alone(workload: str, cap: float, it: float, power: float, **extra) -> dict:
    return {"workload": workload, "power_cap_w": cap, "iters": 20, "iter_time_s": it, "iter_time_cv_pct": 1.0,
            "power_w": power, "sm_util_pct": 99.0, "mem_util_pct": 24.0, "memory_used_mib": 1700,
            "disturbed_by": [], **extra}


def pair(a: str, b: str, thr: tuple, power: float, sharing: str = "time-slicing", **extra) -> dict:
    return {"workloads": [a, b], "sharing": sharing, "power_cap_w": 700.0, "power_w": power, "disturbed_by": [],
            "jobs": [{"workload": a, "iter_time_s": 0.3, "normalized_throughput": thr[0]},
                     {"workload": b, "iter_time_s": 0.3, "normalized_throughput": thr[1]}], **extra}


def document(simulated: bool = False, **changes) -> dict:
    # figures shaped on the H200 sweep (../shared/data/h200-2026-11-30): mm at 700/600/450 W, bw at 700/350 W
    doc = {"format": FORMAT, "version": VERSION, "simulated": simulated, "gpu": dict(GPU),
           "alone": [alone("mm", 700.0, 0.1644, 714.6), alone("mm", 600.0, 0.1772, 614.1),
                     alone("mm", 450.0, 0.2177, 447.0), alone("bw", 700.0, 0.0935, 412.0),
                     alone("bw", 350.0, 0.0944, 350.0)],
           "pairs": [pair("mm", "bw", (0.45, 0.52), 690.0), pair("mm", "mm", (0.49, 0.50), 700.0),
                     pair("mm", "bw", (0.7, 0.8), 700.0, sharing="mps")]}
    doc.update(changes)
    return doc


def test_alone_points_and_time_sliced_pairs_become_labelled_states() -> None:
    data = document_samples(document())
    assert data.counts == {"cap_points": 5, "pairs": 2}
    assert data.skipped == {"pair under MPS (launches share by time-slicing)": 1}
    assert all(s.weight == 3.0 and s.source == SOURCE for s in data.samples)
    mm = data.samples[:3]  # highest cap first: its speed is the reference
    assert [s.throughputs[0] for s in mm] == pytest.approx([1.0, 0.1644 / 0.1772, 0.1644 / 0.2177])
    assert mm[0].gpu_power_frac[0] == 1.0  # 714.6 W of 700: clamped
    assert mm[2].gpu_power_frac[0] == pytest.approx(447.0 / 700.0)
    assert mm[0].graph.x["job"].shape[0] == 1
    mixed, same = data.samples[5:]
    assert mixed.throughputs == (0.45, 0.52) and mixed.gpu_power_frac == (pytest.approx(690.0 / 700.0),)
    assert same.throughputs == (0.49, 0.5) and mixed.graph.x["job"].shape[0] == 2


def test_disturbed_unusable_and_simulated_measurements() -> None:
    doc = document(alone=[alone("mm", 700.0, 0.16, 700.0, disturbed_by=[{"user": "bob", "pid": 7}]),
                          alone("bw", 700.0, None, 400.0), alone("mlp", 700.0, 0.2, 300.0)],
                   pairs=[pair("mm", "mlp", (0.5, 0.5), 600.0), pair("mlp", "mlp", (None, None), None)])
    data = document_samples(doc)
    assert data.counts == {"cap_points": 1}
    assert data.skipped == {"measured beside someone else's work": 1, "no cap, iteration time or power": 1,
                            "pair of a workload not measured alone": 1, "pair without throughput or power": 1}
    assert {s.source for s in document_samples(document(simulated=True)).samples} == {SIMULATED_SOURCE}
    no_range = document(gpu={**GPU, "power_limit_max_w": None})
    assert document_samples(no_range).skipped == {"no power limit range": 1}


def test_pairs_that_cannot_be_true_are_left_out_and_counted() -> None:
    flagged = pair("mm", "mm", (1.53, 1.54), 700.0, flagged="mm ran 1.53 times its speed alone", remeasured=True)
    checked = pair("mm", "bw", (0.45, 0.52), 690.0, flagged=None, remeasured=False)
    # a file from before the check (no 'flagged' key): the same check runs here, on the bw+bw figures
    old = pair("bw", "bw", (1.69, 0.24), 420.0)
    data = document_samples(document(pairs=[flagged, checked, old]))
    assert data.counts == {"cap_points": 5, "pairs": 1}
    assert data.skipped == {FLAGGED: 2}
    assert data.samples[-1].throughputs == (0.45, 0.52)
    # the calibrator's verdict stands: a pair it measured and passed is not checked again
    assert document_samples(document(pairs=[pair("bw", "bw", (1.69, 0.24), 420.0, flagged=None)])).counts["pairs"] == 1


def test_files_of_the_state_directory_count_when_trusted_and_of_the_same_kind(tmp_path: Path) -> None:
    write_result(tmp_path, document())
    write_result(tmp_path, document(simulated=True, gpu={**GPU, "name": "NVIDIA A100-SXM4-80GB"}))
    real = calibration_samples(tmp_path, simulated=False)
    assert real.summary() == {"samples": 7, "files": [str(tmp_path / "calibration" / "nvidia-h200.json")],
                              "cap_points": 5, "pairs": 2,
                              "skipped": {"made on simulated GPUs": 1, "pair under MPS (launches share by "
                                          "time-slicing)": 1}}
    assert calibration_samples(tmp_path, simulated=True).counts == {"cap_points": 5, "pairs": 2}
    os.chmod(tmp_path / "calibration" / "nvidia-h200.json", 0o664)  # a group member could have written it
    assert calibration_samples(tmp_path, simulated=False).skipped == {"file unreadable or not trusted": 1,
                                                                      "made on simulated GPUs": 1}
    (tmp_path / "calibration" / "other.json").write_text('{"format": "ecolaunch-calibration", "version": 99}')
    os.chmod(tmp_path / "calibration" / "other.json", 0o644)
    problems = {r.path.name: r.problem for r in read_results(tmp_path) if r.doc is None}
    assert "version 99" in problems["other.json"] and "writable by others" in problems["nvidia-h200.json"]


def test_a_calibration_directory_of_another_user_is_not_used(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the directory to another uid")
    write_result(tmp_path, document())
    os.chown(tmp_path / "calibration", 65534, 65534)
    (only,) = read_results(tmp_path)
    assert only.doc is None and "owned by uid 65534" in only.problem
    assert calibration_samples(tmp_path, simulated=False).skipped == {"file unreadable or not trusted": 1}


def test_environment_finds_the_state_directorys_weights_when_trusted(tmp_path: Path) -> None:
    env = {"ECOLAUNCH_STATE_DIR": str(tmp_path)}
    assert Environment.from_env(env).gnn_weights is None  # none written yet: the shipped weights
    weights = StateLayout(tmp_path).gnn_weights
    weights.parent.mkdir(mode=0o755)
    weights.write_bytes(b"w")
    os.chmod(weights, 0o644)
    e = Environment.from_env(env)
    assert (e.gnn_weights, e.gnn_weights_source) == (weights, "state directory")
    mine = tmp_path / "mine.pt"
    e = Environment.from_env({**env, ENV_GNN_WEIGHTS: str(mine)})
    assert (e.gnn_weights, e.gnn_weights_source) == (mine, ENV_GNN_WEIGHTS)  # the variable wins
    os.chmod(weights, 0o666)  # anyone could have replaced it: not used
    assert Environment.from_env(env).gnn_weights is None
    os.chmod(weights, 0o644)
    os.chmod(weights.parent, 0o777)
    assert Environment.from_env(env).gnn_weights is None


def test_policy_train_uses_the_calibration_and_writes_weights_the_environment_finds(sim_env, state_dir) -> None:
    env = sim_env("1xA100-SXM4-80GB")
    doc = document(simulated=True, gpu={**GPU, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920,
                                        "power_limit_min_w": 100.0, "power_limit_default_w": 400.0,
                                        "power_limit_max_w": 400.0})
    doc["pairs"].append(pair("mm", "mm", (1.53, 1.54), 700.0, flagged="mm ran 1.53 times its speed alone"))
    write_result(state_dir, doc)
    done = subprocess.run(ecolaunch_cmd("policy", "train", "--epochs", "1", "--synthetic", "0", "--no-history"),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    weights = state_dir / "gnn" / "weights.pt"
    lines = done.stdout.splitlines()
    assert lines[1] == ("calibration 7 samples from 1 file(s) (simulated GPUs: not measurements) (5 caps alone, "
                        "2 pairs); left out: 1 pair flagged: its figures cannot be true, 1 pair under MPS "
                        "(launches share by time-slicing)")
    assert lines[2].startswith(f"weights     {weights} (")
    assert lines[-1].startswith(f"use it:     launches, predict and simulate with state directory {state_dir} use it")
    manifest = json.loads((state_dir / "gnn" / "manifest.json").read_text())
    assert manifest["calibration"]["samples"] == 7 and manifest["calibration"]["simulated"] is True
    assert oct(weights.stat().st_mode & 0o777) == "0o640" and not list(weights.parent.glob(".train-*"))
    assert Environment.from_env(env).gnn_weights == weights
    real = clean_env(ECOLAUNCH_STATE_DIR=str(state_dir))  # real GPUs: simulated calibration is left out
    assert Environment.from_env(real).gnn_weights == weights


SCENARIO = json.dumps({"gpu": "A100-SXM4-80GB", "power_cap_w": None, "jobs": [
    {"id": "a", "iter_time_s": 0.12, "sm_util_pct": 45, "mem_bw_util_pct": 30, "memory_mib": 9000, "power_w": 180},
    {"id": "b", "iter_time_s": 0.30, "sm_util_pct": 60, "mem_bw_util_pct": 20, "memory_mib": 12000, "power_w": 210}]})


def predict(env: dict[str, str]) -> dict:
    done = subprocess.run(ecolaunch_cmd("predict", "--json"), input=SCENARIO, env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # trains the GNN twice
def test_predict_uses_the_state_directorys_weights_unless_the_variable_names_others(sim_env, state_dir,
                                                                                    tmp_path) -> None:
    env = sim_env("1xA100-SXM4-80GB")
    write_result(state_dir, document(simulated=True))
    for args in ([], ["--seed", "1", "--out", str(tmp_path / "other" / "gnn.pt")]):
        done = subprocess.run(ecolaunch_cmd("policy", "train", "--epochs", "1", "--synthetic", "0", *args), env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    ours = predict(env)
    assert ours == predict({**env, ENV_GNN_WEIGHTS: str(state_dir / "gnn" / "weights.pt")})
    assert ours != predict({**env, ENV_GNN_WEIGHTS: str(tmp_path / "other" / "gnn.pt")})
