"""Scoring machine states with the trained GNN in plain torch: the launch path (no torch_geometric import).

What lives here: :class:`ModelConfig` and :func:`stages` (the architecture, shared with the torch_geometric
model of :mod:`.model`, which trains it), :class:`PlainModel` (the same forward pass written with
``index_add_``, loading the same weights; equal to the torch_geometric model within float rounding, see
``tests/policy/test_infer.py``), :func:`read_weights` / :func:`write_weights` (the weight file format),
:func:`load_default_model` (the shipped weights, read once per process) and :func:`score`.

Why a second implementation: ``import torch_geometric`` costs about 1.2 s on top of torch (mostly
``torch._dynamo``), which must not land on every launch. Training imports torch_geometric; launching does not.

**Outputs.** For every job: its normalized throughput (1.0 = as fast as alone on its GPU(s), uncapped; a
multi-GPU job runs at the speed of its slowest GPU), clamped to at most 1. For every GPU: its board power in
watts at its cap with all its jobs, at most the cap. Inputs are :class:`~ecolaunch.policy.features.HeteroGraph`
from :mod:`.features`, one or a batch; a batch of candidates is scored in one forward pass.

Speed: on 2 loaded CPU cores torch's thread pool can cost more than the work; the launcher should call
``torch.set_num_threads(1)`` before scoring (not done here: it is process-wide).
"""

from __future__ import annotations

import functools
import logging
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ecolaunch.errors import ConfigError
from ecolaunch.policy.features import EDGE_TYPES, FEATURES, LINK_RELATIONS, HeteroGraph, batch

logger = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_WEIGHTS = WEIGHTS_DIR / "gnn.pt"
WEIGHTS_FORMAT, WEIGHTS_VERSION = "ecolaunch-gnn", 1
#: the throughput head is ``THROUGHPUT_SCALE * sigmoid``, so that 1.0 (solo) is reachable; outputs are clamped to 1
THROUGHPUT_SCALE = 1.02

Relation = tuple[str, str, str, str]  # (source type, relation, destination type, aggregation)
_LOCAL: tuple[Relation, ...] = (
    ("job", "runs_on", "gpu", "sum"), ("gpu", "hosts", "job", "mean"),
    ("gpu", "nvlink", "gpu", "mean"), ("gpu", "pcie_switch", "gpu", "mean"), ("gpu", "pcie_host", "gpu", "mean"),
)
_HIERARCHY: tuple[tuple[Relation, ...], ...] = (
    (("gpu", "in", "group", "mean"),),  # pool GPUs into their NVLink island / PCIe switch
    (("group", "in", "host", "mean"),),  # pool groups into their host
    (("host", "peer", "host", "mean"),),  # hosts see each other (the cluster level)
    (("host", "has", "group", "mean"),),  # broadcast back down
    (("group", "has", "gpu", "mean"),),
)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Hyperparameters: embedding width and the number of job <-> GPU rounds before pooling."""

    hidden: int = 32
    local_rounds: int = 2

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ModelConfig:
        try:
            return cls(hidden=int(doc["hidden"]), local_rounds=int(doc["local_rounds"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"GNN weights carry a malformed config {dict(doc)!r}",
                              hint="retrain with `python benchmarks/train_gnn.py`") from e


def stages(config: ModelConfig) -> tuple[tuple[Relation, ...], ...]:
    """Message-passing stages in order: local rounds, up the hierarchy and back down, one last local round."""
    return (*([_LOCAL] * config.local_rounds), *_HIERARCHY, _LOCAL)


def message_edges(graph: HeteroGraph) -> dict[tuple[str, str, str], Tensor]:
    """The graph's edges as the model's relations: gpu-link-gpu split into one relation per bandwidth class."""
    out = {e: graph.edges[e] for e in EDGE_TYPES if e[1] != "link"}
    link = graph.edges[("gpu", "link", "gpu")]
    for kind, rel in LINK_RELATIONS.items():
        out[("gpu", rel, "gpu")] = link[:, graph.link_kind == int(kind)]
    return out


def conv_key(src: str, rel: str, dst: str) -> str:
    """The key torch_geometric's HeteroConv gives the convolution of an edge type in a state dict."""
    return "<" + "___".join((src, rel, dst)) + ">"


def write_weights(path: Path | str, config: ModelConfig, state_dict: Mapping[str, Tensor]) -> None:
    torch.save({"format": WEIGHTS_FORMAT, "version": WEIGHTS_VERSION, "config": config.to_dict(),
                "state_dict": {k: v.detach().clone().float() for k, v in state_dict.items()}}, str(path))


def read_weights(path: Path | str) -> tuple[ModelConfig, dict[str, Tensor]]:
    """The config and state dict in a weight file; ConfigError when it is missing or not ours."""
    try:
        doc = torch.load(str(path), map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:
        raise ConfigError(f"cannot read GNN weights {path}: {e}",
                          hint="reinstall ecolaunch or retrain with `python benchmarks/train_gnn.py`") from e
    if not isinstance(doc, dict) or doc.get("format") != WEIGHTS_FORMAT or doc.get("version") != WEIGHTS_VERSION:
        raise ConfigError(f"{path} is not an {WEIGHTS_FORMAT} v{WEIGHTS_VERSION} weight file",
                          hint="retrain with `python benchmarks/train_gnn.py`")
    return ModelConfig.from_dict(doc.get("config") or {}), dict(doc["state_dict"])


class PlainModel:
    """The hierarchical GNN's forward pass in plain torch (see :mod:`.model` for the architecture)."""

    def __init__(self, config: ModelConfig, state_dict: Mapping[str, Tensor]) -> None:
        self.config = config
        self.stages = stages(config)
        try:
            self._enc = {t: (state_dict[f"encoders.{t}.weight"], state_dict[f"encoders.{t}.bias"]) for t in FEATURES}
            self._convs = [
                [(src, rel, dst, aggr, *(state_dict[f"stages.{i}.convs.{conv_key(src, rel, dst)}.{n}"]
                                         for n in ("lin_l.weight", "lin_l.bias", "lin_r.weight")))
                 for src, rel, dst, aggr in stage]
                for i, stage in enumerate(self.stages)
            ]
            self._heads = {h: tuple(state_dict[f"{h}_head.{k}"] for k in ("0.weight", "0.bias", "2.weight", "2.bias"))
                           for h in ("job", "gpu")}
        except KeyError as e:
            raise ConfigError(f"GNN weights lack {e.args[0]!r} for {config}",
                              hint="retrain with `python benchmarks/train_gnn.py`") from e

    def __repr__(self) -> str:
        return f"PlainModel(hidden={self.config.hidden}, local_rounds={self.config.local_rounds})"

    def forward(self, graph: HeteroGraph) -> tuple[Tensor, Tensor]:
        """Raw heads: (job throughput in (0, THROUGHPUT_SCALE), GPU power / max power limit in (0, 1))."""
        h = {t: torch.relu(torch.addmm(b, graph.x[t], w.t())) for t, (w, b) in self._enc.items()}
        edges = message_edges(graph)
        for stage in self._convs:
            out: dict[str, Tensor] = {}
            for src, rel, dst, aggr, w_l, b_l, w_r in stage:
                e = edges[(src, rel, dst)]
                n_dst = h[dst].shape[0]
                agg = h[src].new_zeros(n_dst, h[src].shape[1]).index_add_(0, e[1], h[src].index_select(0, e[0]))
                if aggr == "mean":
                    count = torch.bincount(e[1], minlength=n_dst).clamp_(min=1).to(agg.dtype)
                    agg = agg / count.unsqueeze(1)
                o = torch.addmm(b_l, agg, w_l.t()) + h[dst] @ w_r.t()
                out[dst] = out[dst] + o if dst in out else o
            for dst, o in out.items():
                h[dst] = h[dst] + torch.relu(o)
        return (THROUGHPUT_SCALE * torch.sigmoid(self._head("job", h["job"], graph.x["job"])),
                torch.sigmoid(self._head("gpu", h["gpu"], graph.x["gpu"])))

    def _head(self, name: str, h: Tensor, x: Tensor) -> Tensor:
        w0, b0, w1, b1 = self._heads[name]
        z = torch.relu(torch.addmm(b0, torch.cat([h, x], 1), w0.t()))
        return torch.addmm(b1, z, w1.t()).squeeze(1)

    @torch.no_grad()
    def predict(self, graph: HeteroGraph) -> tuple[Tensor, Tensor]:
        """(job normalized throughput <= 1, GPU power_w <= cap) for every row of ``graph``."""
        thr, frac = self.forward(graph)
        return thr.clamp(max=1.0), torch.minimum(frac * graph.gpu_max_power_w, graph.gpu_cap_w)


def load_model(path: Path | str) -> PlainModel:
    config, state = read_weights(path)
    return PlainModel(config, state)


@functools.lru_cache(maxsize=4)
def load_model_cached(path: Path) -> PlainModel:
    """A weight file other than the shipped one (a lab's own, ``ecolaunch policy train``), read once per
    process; ConfigError when it is missing or not a weight file."""
    try:
        model = load_model(path)
    except ConfigError as e:
        raise ConfigError(str(e), hint="ECOLAUNCH_GNN_WEIGHTS names this file: fix the path (a file written by "
                                       "`ecolaunch policy train --out`), or unset it for the shipped weights") from e
    logger.debug("loaded GNN weights %s", path)
    return model


@functools.lru_cache(maxsize=1)
def load_default_model() -> PlainModel:
    """The shipped weights (``ecolaunch/policy/weights/gnn.pt``), read once per process."""
    model = load_model(DEFAULT_WEIGHTS)
    logger.debug("loaded GNN weights %s", DEFAULT_WEIGHTS)
    return model


def score(graphs: HeteroGraph | Sequence[HeteroGraph], model: PlainModel | None = None
          ) -> tuple[list[Tensor], list[Tensor]]:
    """Score graphs in one forward pass: per graph, its jobs' normalized throughputs (order of ``job_ids``) and
    its GPUs' power in watts (order of ``gpu_uuids``). A batch from ``StateEncoding.candidates`` counts as one
    graph per candidate."""
    g = graphs if isinstance(graphs, HeteroGraph) else batch(list(graphs))
    thr, power = (model or load_default_model()).predict(g)
    return list(thr.split(g.job_ptr.diff().tolist())), list(power.split(g.gpu_ptr.diff().tolist()))
