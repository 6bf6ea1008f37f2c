"""The hierarchical GNN in torch_geometric (the only module of ecolaunch that imports it): used for training.

What lives here: :class:`HierarchicalGNN` and :func:`load_gnn`. Launching never imports this module: it scores
with :class:`ecolaunch.policy.infer.PlainModel`, which loads the same weight file and computes the same
function in plain torch (the architecture constants live in :mod:`.infer` so the two cannot drift apart). The
architecture: docs/gnn.md#the-networks-priors-and-outputs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn
from torch_geometric.nn import HeteroConv, SAGEConv

from ecolaunch.policy.features import FEATURES, HeteroGraph
from ecolaunch.policy.infer import (VAR_INPUTS, Heads, ModelConfig, combine, message_edges, physics_prior,
                                    read_weights, stages)


class HierarchicalGNN(nn.Module):
    """Jobs, GPUs, interconnect groups and hosts -> job throughputs, their uncertainty, and GPU power (see
    docs/gnn.md#the-networks-priors-and-outputs)."""

    def __init__(self, config: ModelConfig | None = None) -> None:
        super().__init__()
        self.config = config or ModelConfig()
        hidden = self.config.hidden
        self.encoders = nn.ModuleDict({t: nn.Linear(len(f), hidden) for t, f in FEATURES.items()})
        with warnings.catch_warnings():  # each stage updates only some node types, on purpose
            warnings.filterwarnings("ignore", message="There exist node types", category=UserWarning)
            self.stages = nn.ModuleList(
                HeteroConv({(s, r, d): SAGEConv(hidden, hidden, aggr=aggr) for s, r, d, aggr in stage}, aggr="sum")
                for stage in stages(self.config)
            )
        self.job_head = self._head(hidden + len(FEATURES["job"]) + 3, hidden)
        self.var_head = self._head(VAR_INPUTS, 16)
        self.gpu_head = self._head(hidden + len(FEATURES["gpu"]) + 2, hidden)

    @staticmethod
    def _head(width: int, hidden: int) -> nn.Sequential:
        return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def reset_parameters(self) -> None:
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(hidden={self.config.hidden}, local_rounds={self.config.local_rounds}, "
                f"stages={len(self.stages)}, parameters={self.num_parameters()})")

    def forward(self, graph: HeteroGraph) -> Heads:
        """The heads (:class:`~ecolaunch.policy.infer.Heads`): raw throughput, power / max limit, log-variance."""
        h = {t: torch.relu(enc(graph.x[t])) for t, enc in self.encoders.items()}
        edges = message_edges(graph)
        for conv in self.stages:
            out = conv(h, edges)
            h = {t: h[t] + torch.relu(out[t]) if t in out else h[t] for t in h}
        prior = physics_prior(graph, self.config)
        return combine(prior, self.job_head(torch.cat([h["job"], graph.x["job"], prior.job_extra], 1)).squeeze(1),
                       self.var_head(prior.var_inputs).squeeze(1),
                       self.gpu_head(torch.cat([h["gpu"], graph.x["gpu"], prior.gpu_extra], 1)).squeeze(1))


def load_gnn(path: Path | str) -> HierarchicalGNN:
    """A :class:`HierarchicalGNN` with the weights of ``path`` (see :func:`ecolaunch.policy.infer.read_weights`)."""
    config, state = read_weights(path)
    model = HierarchicalGNN(config)
    model.load_state_dict(state)
    return model
