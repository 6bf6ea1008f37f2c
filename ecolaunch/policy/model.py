"""The hierarchical GNN in torch_geometric (the only module of ecolaunch that imports it): used for training.

What lives here: :class:`HierarchicalGNN` and :func:`load_gnn`. Launching never imports this module: it scores
with :class:`ecolaunch.policy.infer.PlainModel`, which loads the same weight file and computes the same
function in plain torch (the architecture constants live in :mod:`.infer` so the two cannot drift apart).

**Architecture** (``ModelConfig(hidden=32, local_rounds=2)``, about 47k parameters):

1. one ``Linear -> ReLU`` encoder per node type (job, gpu, group, host; features in :mod:`.features`);
2. ``local_rounds`` x job <-> gpu message passing (``HeteroConv`` of ``SAGEConv``: jobs -> their GPUs summed so a
   GPU counts its co-runners, GPUs -> their jobs averaged, GPU <-> GPU per link class: NVLink, PCIe switch, PCIe
   host bridge), so a job sees its co-runners and its GPU's neighbours;
3. pooling up (gpu -> group -> host), across hosts (host <-> host, the cluster level) and broadcast back down
   (host -> group -> gpu), so every GPU sees its island's and its host's load;
4. one last job <-> gpu round;
5. heads ``MLP([embedding, raw features])``: each job's normalized throughput (``1.02 * sigmoid``: 1.0 = alone,
   uncapped) and each GPU's power at its cap as a fraction of its max power limit (``sigmoid``).

Every stage updates node type ``t`` as ``h_t <- h_t + ReLU(sum over relations into t of SAGEConv(h_src, h_t))``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn
from torch_geometric.nn import HeteroConv, SAGEConv

from ecolaunch.policy.features import FEATURES, HeteroGraph
from ecolaunch.policy.infer import THROUGHPUT_SCALE, ModelConfig, message_edges, read_weights, stages


class HierarchicalGNN(nn.Module):
    """Jobs, GPUs, interconnect groups and hosts -> job throughputs and GPU power (see the module docstring)."""

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
        self.job_head = self._head(hidden + len(FEATURES["job"]))
        self.gpu_head = self._head(hidden + len(FEATURES["gpu"]))

    def _head(self, width: int) -> nn.Sequential:
        hidden = self.config.hidden
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

    def forward(self, graph: HeteroGraph) -> tuple[Tensor, Tensor]:
        """(job throughput in (0, 1.02), GPU power / max power limit in (0, 1)) for every row of ``graph``."""
        h = {t: torch.relu(enc(graph.x[t])) for t, enc in self.encoders.items()}
        edges = message_edges(graph)
        for conv in self.stages:
            out = conv(h, edges)
            h = {t: h[t] + torch.relu(out[t]) if t in out else h[t] for t in h}
        job = self.job_head(torch.cat([h["job"], graph.x["job"]], 1)).squeeze(1)
        gpu = self.gpu_head(torch.cat([h["gpu"], graph.x["gpu"]], 1)).squeeze(1)
        return THROUGHPUT_SCALE * torch.sigmoid(job), torch.sigmoid(gpu)


def load_gnn(path: Path | str) -> HierarchicalGNN:
    """A :class:`HierarchicalGNN` with the weights of ``path`` (see :func:`ecolaunch.policy.infer.read_weights`)."""
    config, state = read_weights(path)
    model = HierarchicalGNN(config)
    model.load_state_dict(state)
    return model
