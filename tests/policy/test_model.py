"""The torch_geometric model: size, output shapes and bounded residuals, determinism, batching, and that it can
learn."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ecolaunch.policy.features import batch, encode_state
from ecolaunch.policy.infer import (LOG_VAR_MAX, LOG_VAR_MIN, POWER_RESIDUAL_MAX, THROUGHPUT_RESIDUAL_MAX, ModelConfig,
                                    physics_prior)
from ecolaunch.policy.model import HierarchicalGNN
from ecolaunch.learn.train import synthetic_state
from ecolaunch.sim.interference import fit_gavel
from tests.policy.test_features import small_state


@pytest.fixture(scope="module")
def states():
    rng = np.random.default_rng(3)
    model = fit_gavel().model
    return [synthetic_state(rng, model) for _ in range(12)]


def test_small_model_with_hyperparameters_in_repr() -> None:
    model = HierarchicalGNN()
    assert model.num_parameters() <= 100_000
    assert repr(model) == f"HierarchicalGNN(hidden=32, local_rounds=2, stages=8, parameters={model.num_parameters()})"
    assert HierarchicalGNN(ModelConfig(hidden=16)).num_parameters() < model.num_parameters()


def test_outputs_one_value_per_job_and_gpu_within_the_residual_bounds() -> None:
    torch.manual_seed(0)
    g = encode_state(small_state()).graph()
    model = HierarchicalGNN()
    heads, prior = model(g), physics_prior(g, model.config)
    assert heads.throughput.shape == (3,) and heads.power_frac.shape == (4,) and heads.log_var.shape == (3,)
    ratio = heads.throughput / prior.throughput
    assert bool(((ratio >= math.exp(-THROUGHPUT_RESIDUAL_MAX) - 1e-6)
                 & (ratio <= math.exp(THROUGHPUT_RESIDUAL_MAX) + 1e-6)).all())
    ratio = heads.power_frac / prior.power_frac
    assert bool(((ratio >= math.exp(-POWER_RESIDUAL_MAX) - 1e-6)
                 & (ratio <= math.exp(POWER_RESIDUAL_MAX) + 1e-6)).all())
    assert bool(((heads.log_var >= LOG_VAR_MIN) & (heads.log_var <= LOG_VAR_MAX)).all())


def test_seeded_models_are_identical_and_reset_changes_them() -> None:
    g = encode_state(small_state()).graph()
    torch.manual_seed(7)
    a = HierarchicalGNN()
    torch.manual_seed(7)
    b = HierarchicalGNN()
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert torch.equal(a(g).throughput, b(g).throughput)
    before = a(g).throughput.detach().clone()
    a.reset_parameters()
    assert not torch.equal(a(g).throughput, before)


def test_a_batch_scores_like_its_graphs_one_by_one(states) -> None:
    torch.manual_seed(1)
    model = HierarchicalGNN().eval()
    graphs = [s.graph for s in states]
    with torch.no_grad():
        heads = model(batch(graphs))
        one = [model(g) for g in graphs]
    for field in ("throughput", "power_frac", "log_var"):
        assert torch.allclose(getattr(heads, field), torch.cat([getattr(o, field) for o in one]), atol=1e-6), field


def test_a_few_steps_fit_simulated_labels(states, one_thread) -> None:
    torch.manual_seed(2)
    model = HierarchicalGNN()
    g = batch([s.graph for s in states])
    target = torch.tensor([x for s in states for x in s.throughputs])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = (model(g).throughput - target).abs().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
