"""The plain-torch launch path: equal to the torch_geometric model, no torch_geometric import, shipped weights, old
weights refused, the analytic interference model as the prior."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from ecolaunch.errors import ConfigError
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.features import CandidatePlacement, batch, encode_state, scenario_graph
from ecolaunch.policy.infer import (
    DEFAULT_WEIGHTS,
    ModelConfig,
    PlainModel,
    load_default_model,
    load_model,
    score,
    score_sd,
    write_weights,
)
from ecolaunch.policy.model import HierarchicalGNN, load_gnn
from ecolaunch.learn.train import gavel_pairs_set, synthetic_state
from ecolaunch.sim.interference import fit_gavel, gavel_set, pair_throughputs
from tests.conftest import REPO, clean_env
from ecolaunch.jobmodel.codec import profile_from_json
from tests.policy.test_features import A100_NODE, PROFILE, small_state


@pytest.fixture(scope="module")
def graphs():
    rng = np.random.default_rng(11)
    model = fit_gavel().model
    out = [synthetic_state(rng, model).graph for _ in range(20)]
    state = small_state(("h", "k"))  # two hosts: the host-peer level is exercised
    request = JobRequest(id="new", user="u", host="h", nproc=1, profile=profile_from_json(PROFILE, where="test"))
    out.append(encode_state(state).candidates(request, [CandidatePlacement(("h-G3",), {"h-G3": 200.0}), (("h-G0",), None)]))
    return out


@pytest.mark.parametrize("config", [ModelConfig(), ModelConfig(hidden=8, local_rounds=1, switch_overhead_s=0.03)])
def test_plain_torch_equals_torch_geometric_on_random_graphs(graphs, config: ModelConfig) -> None:
    torch.manual_seed(5)
    pyg = HierarchicalGNN(config).eval()
    with torch.no_grad():  # random weights: push the biases off zero so every path carries signal
        for p in pyg.parameters():
            p.add_(0.1 * torch.randn_like(p))
    plain = PlainModel(config, pyg.state_dict())
    for g in [*graphs, batch(graphs)]:
        with torch.no_grad():
            a = pyg(g)
        b = plain.forward(g)
        for field in ("throughput", "power_frac", "log_var"):
            assert torch.allclose(getattr(a, field), getattr(b, field), atol=1e-5), field
        assert torch.equal(a.fixed_job, b.fixed_job)


def test_weights_round_trip_through_the_file(tmp_path, graphs) -> None:
    torch.manual_seed(6)
    pyg = HierarchicalGNN(ModelConfig(hidden=12, switch_overhead_s=0.02, default_iter_time_s=0.2)).eval()
    path = tmp_path / "w.pt"
    write_weights(path, pyg.config, pyg.state_dict())
    plain, again = load_model(path), load_gnn(path)
    assert plain.config == ModelConfig(hidden=12, switch_overhead_s=0.02, default_iter_time_s=0.2)
    with torch.no_grad():
        assert torch.allclose(plain.forward(graphs[0]).throughput, again(graphs[0]).throughput, atol=1e-6)
    (tmp_path / "bad.pt").write_bytes(b"not a weight file")
    with pytest.raises(ConfigError, match="cannot read GNN weights"):
        load_model(tmp_path / "bad.pt")


def test_weights_of_the_first_release_are_refused_with_a_hint(tmp_path) -> None:
    """A v1 file (the GNN that predicted from scratch) cannot serve the residual heads: a clear error, not garbage."""
    old = tmp_path / "gnn.pt"
    torch.save({"format": "ecolaunch-gnn", "version": 1, "config": {"hidden": 32, "local_rounds": 2},
                "state_dict": {"job_head.0.weight": torch.zeros(1)}}, str(old))
    with pytest.raises(ConfigError, match=r"holds ecolaunch-gnn v1 weights; this ecolaunch reads v3") as caught:
        load_model(old)
    assert "retrain" in caught.value.hint and "ecolaunch policy train" in caught.value.hint


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
    (alone, paired, capped), power = score([scenario_graph(A100_NODE, None, [heavy]),
                                            scenario_graph(A100_NODE, None, [heavy, {**heavy, "id": "h2"}]),
                                            scenario_graph(A100_NODE, 200.0, [heavy])], model)
    assert float(alone[0]) > 0.97
    assert float(paired[0]) < 0.7 and float(capped[0]) < float(alone[0]) - 0.05
    assert float(power[2][0]) < float(power[0][0]) - 50.0
    light_pair, _ = score([scenario_graph(A100_NODE, None, [light, {**light, "id": "l2"}])], model)
    assert float(light_pair[0].min()) > float(paired[0].max())


def test_without_its_residual_the_model_is_the_analytic_interference_model() -> None:
    """The prior inside the network is exactly the simulator's analytic model (each board's switching cost, the same
    demands):
    with the residual heads silenced, the GNN predicts every Gavel pair as ``pair_throughputs`` does."""
    fit = fit_gavel()
    torch.manual_seed(8)
    pyg = HierarchicalGNN(ModelConfig(switch_overhead_s=fit.model.switch_overhead_s,
                                      switch_overhead_by_arch_s=fit.model.switch_overhead_by_arch_s,
                                      default_iter_time_s=fit.model.default_iter_time_s)).eval()
    with torch.no_grad():
        for head in (pyg.job_head, pyg.gpu_head):
            head[2].weight.zero_()
            head[2].bias.zero_()
    data = gavel_set()
    select = np.zeros(data.a.size, dtype=bool)
    select[::7] = True
    pairs = gavel_pairs_set(select, fit.demands)
    with torch.no_grad():
        thr = pyg(batch(pairs.graphs)).throughput.reshape(-1, 2).numpy()
    xa, xb = pair_throughputs(data, np.array([fit.demands[k] for k in data.keys]), fit.switch_overhead_s)
    assert np.allclose(thr[:, 0], xa[select], atol=1e-4) and np.allclose(thr[:, 1], xb[select], atol=1e-4)


def test_the_shipped_model_says_how_unsure_it_is() -> None:
    """Sharing carries a standard deviation; a job alone at a measured cap or uncapped carries none."""
    heavy = {"id": "h", "iter_time_s": 0.3, "sm_util_pct": 95.0, "mem_bw_util_pct": 60.0, "memory_mib": 20000,
             "power_w": 380.0}
    pair = [heavy, {**heavy, "id": "x"}]
    (alone, paired), _, (sd_alone, sd_paired) = score_sd([scenario_graph(A100_NODE, None, [heavy]),
                                                          scenario_graph(A100_NODE, None, pair)])
    assert float(alone[0]) == 1.0 and float(sd_alone[0]) == 0.0
    assert 0.005 < float(sd_paired.min()) and float(sd_paired.max()) < 0.5


def test_a_weight_file_rewritten_in_place_is_read_again(tmp_path) -> None:
    """A k-fold benchmark may write each fold's weights to the same path: the cache must not serve the old ones."""
    from ecolaunch.policy.infer import load_model_cached

    path = tmp_path / "gnn.pt"
    for seed, hidden in ((1, 8), (2, 12)):
        torch.manual_seed(seed)
        pyg = HierarchicalGNN(ModelConfig(hidden=hidden))
        write_weights(path, pyg.config, pyg.state_dict())
        assert load_model_cached(path).config.hidden == hidden
    assert load_model_cached(path) is load_model_cached(path)


def test_a_stale_state_directory_weight_file_falls_back_to_the_shipped_weights(tmp_path, caplog) -> None:
    """A lab's own file that no longer loads (an older format) must not stop launches; a file the user named must."""
    import logging

    from ecolaunch.config import Environment
    from ecolaunch.errors import ConfigError
    from ecolaunch.policy.infer import chosen_weights

    stale = tmp_path / "weights.pt"
    stale.write_bytes(b"not a weight file")
    lab = Environment(tmp_path, None, tmp_path / "policy.toml", stale, "state directory")
    with caplog.at_level(logging.WARNING, logger="ecolaunch.policy.infer"):
        assert chosen_weights(lab) is None
    assert "cannot be used" in caplog.text
    named = Environment(tmp_path, None, tmp_path / "policy.toml", stale, "ECOLAUNCH_GNN_WEIGHTS")
    with pytest.raises(ConfigError):
        chosen_weights(named)
    assert chosen_weights(Environment(tmp_path, None, tmp_path / "policy.toml")) is None


def test_the_prior_alone_is_the_analytic_model_and_without_switching_the_utilization_sum_rule() -> None:
    """``PlainModel.prior_only``: the rows ``analytic-share`` and ``util-share`` (benchmarks/energy.py) read the
    shipped network with its residual heads silenced; without switching, two jobs whose summed demand stays within 1
    share a GPU at full speed, and past 1 each keeps 1 / (summed demand)."""
    model = load_default_model()
    light = {"id": "a", "iter_time_s": 0.1, "sm_util_pct": 30.0, "mem_bw_util_pct": 10.0, "memory_mib": 2000,
             "power_w": 150.0}
    busy = {**light, "sm_util_pct": 80.0}
    graphs = [scenario_graph(A100_NODE, None, [light, {**light, "id": "b", "sm_util_pct": 40.0}]),
              scenario_graph(A100_NODE, None, [busy, {**busy, "id": "b"}])]
    util, _, _ = model.prior_only(switching=False).predict(batch(graphs))
    analytic, _, _ = model.prior_only().predict(batch(graphs))
    learned, _, _ = model.predict(batch(graphs))
    assert torch.allclose(util[:2], torch.ones(2)) and torch.allclose(util[2:], torch.full((2,), 1 / 1.6))
    assert bool((analytic < util - 1e-3).all())  # each co-runner costs its switching while it holds the GPU
    assert not torch.allclose(analytic, learned)  # the residual moved the shipped model's answer
    assert torch.equal(model.predict(batch(graphs))[0], learned)  # the shipped model itself is left as it was
