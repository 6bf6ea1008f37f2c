"""Scoring machine states with the trained GNN in plain torch: the launch path (no torch_geometric import).

What lives here: :class:`ModelConfig` and :func:`stages` (the architecture, shared with the torch_geometric
model of :mod:`.model`, which trains it), :func:`physics_prior` and :func:`combine` (the priors and how the
learned residuals correct them, shared by both models), :class:`PlainModel` (the same forward pass written with
``index_add_``, loading the same weights), :func:`read_weights` / :func:`write_weights` (the weight file format),
:func:`load_default_model` (the shipped weights, read once per process), :func:`score` and :func:`score_sd`.
What does not: ``torch.set_num_threads`` (process-wide: the launcher's). Why a second implementation, the
priors and the outputs: docs/gnn.md#the-networks-priors-and-outputs.
"""

from __future__ import annotations

import copy
import functools
import logging
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ecolaunch.devices.catalogue import ARCHITECTURES, measured_for
from ecolaunch.errors import ConfigError
from ecolaunch.policy.features import (EDGE_TYPES, FEATURES, GPU_FEATURES, JOB_FEATURES, LINK_RELATIONS, HeteroGraph,
                                       batch)

logger = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_WEIGHTS = WEIGHTS_DIR / "gnn.pt"
WEIGHTS_FORMAT, WEIGHTS_VERSION = "ecolaunch-gnn", 3
#: v1 (before issue 12) predicted from scratch; its weights cannot serve the residual heads
_RETRAIN_HINT = ("retrain with `ecolaunch policy train --out FILE` (a lab's own weights) or "
                 "`python benchmarks/train_gnn.py` (the shipped ones), or reinstall ecolaunch")
#: bounds of the learned log-residuals: a prior is corrected by a factor within exp(+-bound)
THROUGHPUT_RESIDUAL_MAX, POWER_RESIDUAL_MAX = 0.7, 0.5
#: the log-variance head's range: a standard deviation of 0.7 % to 270 % of the prediction
LOG_VAR_MIN, LOG_VAR_MAX = -10.0, 2.0
#: idle power / max limit of a board the catalogue does not know (an assumption: 10-15 % is typical)
IDLE_FALLBACK_FRAC = 0.12
#: the physical descriptors the uncertainty head reads (see :func:`physics_prior`)
VAR_INPUTS = 8

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
    """Hyperparameters (embedding width, job <-> GPU rounds before pooling) and the interference prior's fitted
    parameters (the switching cost of a co-runner busy all the time, and the iteration time assumed when unknown)."""

    hidden: int = 32
    local_rounds: int = 2
    #: on boards of an unknown architecture
    switch_overhead_s: float = 0.01
    default_iter_time_s: float = 0.1
    #: measured architecture ("kepler", "pascal", "volta") -> its switching overhead (other boards: the newest
    #: measured architecture's not newer than theirs)
    switch_overhead_by_arch_s: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ModelConfig:
        try:
            by_arch = doc.get("switch_overhead_by_arch_s") or {}
            return cls(hidden=int(doc["hidden"]), local_rounds=int(doc["local_rounds"]),
                       switch_overhead_s=float(doc["switch_overhead_s"]),
                       default_iter_time_s=float(doc["default_iter_time_s"]),
                       switch_overhead_by_arch_s={str(k): float(v) for k, v in dict(by_arch).items()})
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"GNN weights carry a malformed config {dict(doc)!r}", hint=_RETRAIN_HINT) from e


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
    """The config and state dict in a weight file; ConfigError when it is missing, not ours, or of another
    version (v1 files, from before the GNN became a correction on physics priors, say so)."""
    try:
        doc = torch.load(str(path), map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:
        raise ConfigError(f"cannot read GNN weights {path}: {e}", hint=_RETRAIN_HINT) from e
    if not isinstance(doc, dict) or doc.get("format") != WEIGHTS_FORMAT:
        raise ConfigError(f"{path} is not an {WEIGHTS_FORMAT} weight file", hint=_RETRAIN_HINT)
    if doc.get("version") != WEIGHTS_VERSION:
        raise ConfigError(f"{path} holds {WEIGHTS_FORMAT} v{doc.get('version')} weights; this ecolaunch reads "
                          f"v{WEIGHTS_VERSION} (its prior charges a co-runner's switching by how busy it keeps "
                          "the GPU)",
                          hint=_RETRAIN_HINT)
    return ModelConfig.from_dict(doc.get("config") or {}), dict(doc["state_dict"])


_J = {name: i for i, name in enumerate(JOB_FEATURES)}
_G = {name: i for i, name in enumerate(GPU_FEATURES)}


@dataclass(frozen=True, slots=True)
class Prior:
    """The physics priors of one graph (docs/gnn.md#the-networks-priors-and-outputs) and what the heads read besides embeddings."""

    throughput: Tensor  # [jobs] A * I
    fixed_job: Tensor  # [jobs] bool: alone at a measured (or the max) cap: no residual, no uncertainty
    power_frac: Tensor  # [gpus] prior power / max limit
    fixed_gpu: Tensor  # [gpus] bool: its only job is anchored
    job_extra: Tensor  # [jobs, 3] log I, log A, alone
    gpu_extra: Tensor  # [gpus, 2] prior power fraction, jobs / 4
    var_inputs: Tensor  # [jobs, VAR_INPUTS]


def switch_overheads(xg: Tensor, config: ModelConfig) -> Tensor:
    """Each GPU's switching overhead, by its architecture (one-hot in the GPU features)."""
    per_arch = xg.new_tensor([measured_for(a, config.switch_overhead_by_arch_s, config.switch_overhead_s)
                              for a in ARCHITECTURES])
    onehot = xg[:, _G[ARCHITECTURES[0]]:_G[ARCHITECTURES[-1]] + 1]
    known = onehot.sum(1) > 0.5
    return torch.where(known, onehot @ per_arch, xg.new_tensor(config.switch_overhead_s))


def physics_prior(graph: HeteroGraph, config: ModelConfig) -> Prior:
    """The priors, from the graph's features alone (no parameters are learned here)."""
    xj, xg = graph.x["job"], graph.x["gpu"]
    e = graph.edges[("job", "runs_on", "gpu")]
    j, g = e[0], e[1]
    n_jobs, n_gpus = xj.shape[0], xg.shape[0]
    t = torch.where(xj[:, _J["iter_time_missing"]] > 0.5, xj.new_tensor(config.default_iter_time_s),
                    0.1 * torch.pow(10.0, xj[:, _J["iter_time"]]))
    demand, alone_speed = xj[:, _J["demand"]], xj[:, _J["alone_speed"]].clamp(1e-3, 1.0)
    count = xg.new_zeros(n_gpus).index_add_(0, g, torch.ones_like(g, dtype=xg.dtype))
    total = xg.new_zeros(n_gpus).index_add_(0, g, demand[j])
    te = t[j]
    others = (total[g] - demand[j]).clamp(min=0.0)  # the co-runners' summed demand
    x_edge = te / (te * total[g].clamp(min=1.0) + switch_overheads(xg, config)[g] * others)
    interference = xj.new_ones(n_jobs).scatter_reduce(0, j, x_edge, reduce="amin", include_self=True)
    most = xj.new_zeros(n_jobs).scatter_reduce(0, j, count[g], reduce="amax", include_self=True)
    busiest = xj.new_zeros(n_jobs).scatter_reduce(0, j, total[g], reduce="amax", include_self=True)
    alone = most <= 1.0
    anchored = xj[:, _J["anchored"]] > 0.5
    fixed_job = alone & (anchored | (xj[:, _J["uncapped"]] > 0.5))
    idle = torch.where(xg[:, _G["idle_power_missing"]] > 0.5, xg.new_tensor(IDLE_FALLBACK_FRAC),
                       xg[:, _G["idle_power"]])
    cap = xg[:, _G["cap"]].clamp(max=1.0)
    idle_e, cap_e = idle[g], cap[g]
    solo = torch.where(xj[j, _J["alone_power_missing"]] > 0.5, idle_e + demand[j] * (1.0 - idle_e),
                       xj[j, _J["alone_power"]])
    dynamic = interference[j] * (torch.minimum(solo, cap_e) - idle_e).clamp(min=0.0)
    power = torch.minimum(idle + xg.new_zeros(n_gpus).index_add_(0, g, dynamic), cap)
    anchored_on = xg.new_zeros(n_gpus).index_add_(0, g, anchored[j].to(xg.dtype))
    fixed_gpu = (count == 1.0) & (anchored_on > 0.5)
    # a GPU whose only job is anchored draws what that job was measured drawing, even a little above the cap
    measured = xg.new_zeros(n_gpus).index_add_(0, g, xj[j, _J["alone_power"]])
    power = torch.where(fixed_gpu, measured, power)
    log_i, log_a = torch.log(interference.clamp(min=1e-4)), torch.log(alone_speed)
    alone_f = alone.to(xj.dtype)
    return Prior(
        throughput=alone_speed * interference, fixed_job=fixed_job, power_frac=power, fixed_gpu=fixed_gpu,
        job_extra=torch.stack([log_i, log_a, alone_f], 1), gpu_extra=torch.stack([power, count / 4.0], 1),
        var_inputs=torch.stack([log_i, log_a, alone_f, most / 4.0, busiest, torch.log10(t / 0.1) / 2.0,
                                anchored.to(xj.dtype), xj[:, _J["uncapped"]]], 1),
    )


@dataclass(frozen=True, slots=True)
class Heads:
    """A forward pass: raw throughput (prior x learned factor, not clamped), power / max limit (not clamped to
    the cap), log-variance of the log-throughput, and which jobs and GPUs have no learned part."""

    throughput: Tensor
    power_frac: Tensor
    log_var: Tensor
    fixed_job: Tensor
    fixed_gpu: Tensor


def combine(prior: Prior, job_out: Tensor, var_out: Tensor, gpu_out: Tensor) -> Heads:
    """The priors corrected by the heads' raw outputs (bounded residuals; none where the prior is measured)."""
    r = THROUGHPUT_RESIDUAL_MAX * torch.tanh(job_out) * (~prior.fixed_job).to(job_out.dtype)
    q = POWER_RESIDUAL_MAX * torch.tanh(gpu_out) * (~prior.fixed_gpu).to(gpu_out.dtype)
    log_var = LOG_VAR_MIN + (LOG_VAR_MAX - LOG_VAR_MIN) * torch.sigmoid(var_out)
    return Heads(prior.throughput * torch.exp(r), prior.power_frac * torch.exp(q), log_var, prior.fixed_job,
                 prior.fixed_gpu)


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
                           for h in ("job", "var", "gpu")}
        except KeyError as e:
            raise ConfigError(f"GNN weights lack {e.args[0]!r} for {config}", hint=_RETRAIN_HINT) from e

    def __repr__(self) -> str:
        return f"PlainModel(hidden={self.config.hidden}, local_rounds={self.config.local_rounds})"

    def forward(self, graph: HeteroGraph) -> Heads:
        """The heads (see :class:`Heads`)."""
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
        prior = physics_prior(graph, self.config)
        return combine(prior, self._head("job", torch.cat([h["job"], graph.x["job"], prior.job_extra], 1)),
                       self._head("var", prior.var_inputs),
                       self._head("gpu", torch.cat([h["gpu"], graph.x["gpu"], prior.gpu_extra], 1)))

    def prior_only(self, *, switching: bool = True) -> PlainModel:
        """This network with its residual heads silenced: its throughputs and powers are the physics priors alone
        (the analytic interference model of docs/gnn.md#the-networks-priors-and-outputs, the simulator's); ``switching=False`` also sets
        every board's switching overhead to 0, so a shared GPU slows its jobs only once their summed demand passes 1
        (the utilization-sum rule). Its standard deviations are meaningless: a caller drops them."""
        twin = copy.copy(self)
        twin._heads = dict(self._heads)
        for name in ("job", "gpu"):
            w0, b0, w1, b1 = self._heads[name]
            twin._heads[name] = (w0, b0, torch.zeros_like(w1), torch.zeros_like(b1))
        if not switching:
            twin.config = replace(self.config, switch_overhead_s=0.0, switch_overhead_by_arch_s={})
        return twin

    def _head(self, name: str, x: Tensor) -> Tensor:
        w0, b0, w1, b1 = self._heads[name]
        return torch.addmm(b1, torch.relu(torch.addmm(b0, x, w0.t())), w1.t()).squeeze(1)

    @torch.no_grad()
    def predict(self, graph: HeteroGraph) -> tuple[Tensor, Tensor, Tensor]:
        """(job normalized throughput <= 1, GPU power_w <= cap, job throughput standard deviation) for every row
        of ``graph``; where the prediction is a measurement, the standard deviation is 0 and the power as
        measured."""
        return outputs(self.forward(graph), graph)


def outputs(heads: Heads, graph: HeteroGraph) -> tuple[Tensor, Tensor, Tensor]:
    """:meth:`PlainModel.predict` from a forward pass (also of the torch_geometric model). Power is at most the
    cap, except where it comes from measurements (a board measured drawing a little above its limit stays so)."""
    thr = heads.throughput.clamp(max=1.0)
    sd = torch.where(heads.fixed_job, torch.zeros_like(thr), thr * torch.exp(0.5 * heads.log_var))
    watts = heads.power_frac * graph.gpu_max_power_w
    return thr, torch.where(heads.fixed_gpu, watts, torch.minimum(watts, graph.gpu_cap_w)), sd


def load_model(path: Path | str) -> PlainModel:
    config, state = read_weights(path)
    return PlainModel(config, state)


def load_model_cached(path: Path) -> PlainModel:
    """A weight file other than the shipped one (a lab's own, ``ecolaunch policy train``; a k-fold's), read once
    per process and version of the file (a file rewritten in place is read again); ConfigError when it is missing
    or not a weight file."""
    try:
        st = Path(path).stat()
    except OSError:
        return _load_cached(Path(path), 0, -1)  # reports the missing file
    return _load_cached(Path(path), st.st_mtime_ns, st.st_size)


def chosen_weights(environment: Any) -> Path | None:
    """The weight file launches, ``predict`` and ``simulate`` use: ``environment.gnn_weights`` (None: the shipped
    weights). ``ECOLAUNCH_GNN_WEIGHTS`` naming a file that does not load is an error (ConfigError); the state
    directory's own file (``ecolaunch policy train``'s default) that does not load, e.g. one written by an older
    ecolaunch in an older format, is passed over for the shipped weights with a warning: a lab's stale file must not
    stop every launch."""
    path = environment.gnn_weights
    if path is None:
        return None
    try:
        load_model_cached(path)
    except ConfigError as e:
        if environment.gnn_weights_source != "state directory":
            raise
        logger.warning("the state directory's GNN weights %s cannot be used (%s): using the shipped weights; "
                       "run `ecolaunch policy train` again to replace them", path, e)
        return None
    return path


@functools.lru_cache(maxsize=8)
def _load_cached(path: Path, mtime_ns: int, size: int) -> PlainModel:
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
    thr, power, _ = score_sd(graphs, model)
    return thr, power


def score_sd(graphs: HeteroGraph | Sequence[HeteroGraph], model: PlainModel | None = None
             ) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """:func:`score` plus, per graph, its jobs' throughput standard deviations."""
    g = graphs if isinstance(graphs, HeteroGraph) else batch(list(graphs))
    thr, power, sd = (model or load_default_model()).predict(g)
    jobs, gpus = g.job_ptr.diff().tolist(), g.gpu_ptr.diff().tolist()
    return list(thr.split(jobs)), list(power.split(gpus)), list(sd.split(jobs))
