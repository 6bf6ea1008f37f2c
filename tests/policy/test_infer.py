"""The plain-torch launch path: equal to the torch_geometric model, no torch_geometric import, shipped weights."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from ecolaunch.errors import ConfigError
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.features import Placement, batch, encode_state, scenario_graph
from ecolaunch.policy.infer import (
    DEFAULT_WEIGHTS,
    ModelConfig,
    PlainModel,
    load_default_model,
    load_model,
    score,
    write_weights,
)
from ecolaunch.policy.model import HierarchicalGNN, load_gnn
from ecolaunch.policy.train import fit_gavel, gavel_heldout, synthetic_state
from tests.conftest import REPO, clean_env
from tests.policy.test_features import A100, PROFILE, small_state


@pytest.fixture(scope="module")
def graphs():
    rng = np.random.default_rng(11)
    model = fit_gavel(train=~gavel_heldout()).model
    out = [synthetic_state(rng, model).graph for _ in range(20)]
    state = small_state(("h", "k"))  # two hosts: the host-peer level is exercised
    request = JobRequest(id="new", user="u", host="h", nproc=1, profile=PROFILE)
    out.append(encode_state(state).candidates(request, [Placement(("h-G3",), {"h-G3": 200.0}), (("h-G0",), None)]))
    return out


@pytest.mark.parametrize("config", [ModelConfig(), ModelConfig(hidden=8, local_rounds=1)])
def test_plain_torch_equals_torch_geometric_on_random_graphs(graphs, config: ModelConfig) -> None:
    torch.manual_seed(5)
    pyg = HierarchicalGNN(config).eval()
    with torch.no_grad():  # random weights: push the biases off zero so every path carries signal
        for p in pyg.parameters():
            p.add_(0.1 * torch.randn_like(p))
    plain = PlainModel(config, pyg.state_dict())
    for g in [*graphs, batch(graphs)]:
        with torch.no_grad():
            a_thr, a_pow = pyg(g)
        b_thr, b_pow = plain.forward(g)
        assert torch.allclose(a_thr, b_thr, atol=1e-5) and torch.allclose(a_pow, b_pow, atol=1e-5)


def test_weights_round_trip_through_the_file(tmp_path, graphs) -> None:
    torch.manual_seed(6)
    pyg = HierarchicalGNN(ModelConfig(hidden=12)).eval()
    path = tmp_path / "w.pt"
    write_weights(path, pyg.config, pyg.state_dict())
    plain, again = load_model(path), load_gnn(path)
    assert plain.config == ModelConfig(hidden=12)
    with torch.no_grad():
        assert torch.allclose(plain.forward(graphs[0])[0], again(graphs[0])[0], atol=1e-6)
    (tmp_path / "bad.pt").write_bytes(b"not a weight file")
    with pytest.raises(ConfigError, match="cannot read GNN weights"):
        load_model(tmp_path / "bad.pt")


def test_launch_path_does_not_import_torch_geometric() -> None:
    code = ("import sys, ecolaunch.policy.infer as i, ecolaunch.policy.features; i.load_default_model(); "
            "print('torch_geometric' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_shipped_weights_load_and_match_their_manifest() -> None:
    manifest = json.loads((DEFAULT_WEIGHTS.parent / "manifest.json").read_text())
    model = load_default_model()
    assert model is load_default_model()  # read once per process
    assert model.config.to_dict() == manifest["config"]
    assert DEFAULT_WEIGHTS.stat().st_size <= 1_000_000 and manifest["parameters"] <= 100_000
    assert manifest["weights_bytes"] == DEFAULT_WEIGHTS.stat().st_size
    assert {"seed", "epochs", "data", "metrics"} <= set(manifest)


def test_score_splits_per_graph_and_bounds_outputs(graphs) -> None:
    thr, power = score(graphs)
    assert len(thr) == len(power) == len(graphs) + 1  # the last graph is a batch of two candidates
    assert [t.numel() for t in thr[:-2]] == [len(g.job_ids) for g in graphs[:-1]]
    cands = graphs[-1]
    assert thr[-1].numel() == thr[-2].numel() == len(cands.job_ids) // 2
    caps = cands.gpu_cap_w.split(len(cands.gpu_uuids) // 2)
    assert all(bool((p <= c + 1e-4).all()) for p, c in zip(power[-2:], caps))
    assert all(bool((t <= 1.0).all() and (t > 0).all()) for t in thr)


def test_shipped_model_behaves_like_the_physics() -> None:
    """Alone and uncapped is ~1; a compute-bound co-runner slows a job; a lower cap lowers power."""
    model = load_default_model()
    heavy = {"id": "h", "iter_time_s": 0.3, "sm_util_pct": 95.0, "mem_bw_util_pct": 60.0, "memory_mib": 20000,
             "power_w": 380.0}
    light = {**heavy, "id": "l", "sm_util_pct": 20.0, "mem_bw_util_pct": 10.0, "power_w": 120.0}
    (alone, paired, capped), power = score([scenario_graph(A100, None, [heavy]),
                                            scenario_graph(A100, None, [heavy, {**heavy, "id": "h2"}]),
                                            scenario_graph(A100, 200.0, [heavy])], model)
    assert float(alone[0]) > 0.97
    assert float(paired[0]) < 0.7 and float(capped[0]) < float(alone[0]) - 0.05
    assert float(power[2][0]) < float(power[0][0]) - 50.0
    light_pair, _ = score([scenario_graph(A100, None, [light, {**light, "id": "l2"}])], model)
    assert float(light_pair[0].min()) > float(paired[0].max())


def test_shipped_model_beats_the_simple_rules_on_held_out_gavel_pairs() -> None:
    """The fixed held-out fold (never trained on) of benchmarks/pair_prediction.py."""
    from benchmarks.pair_prediction import run

    models = run(DEFAULT_WEIGHTS)["models"]
    gnn = models["gnn"]
    assert gnn["pairs"] > 150
    for rule in ("utilization_sum", "lucid"):
        assert gnn["mae"] < models[rule]["mae"], rule
        assert gnn["pack_accuracy_pct"] > models[rule]["pack_accuracy_pct"], rule
