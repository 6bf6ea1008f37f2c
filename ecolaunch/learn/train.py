"""Training the hierarchical GNN: its data, the seeded loop, held-out folds, and the weights' manifest.

What lives here: :func:`train` (behind ``benchmarks/train_gnn.py``, ``ecolaunch policy train`` and the
simulator's k-fold benchmark), the k-fold split of Gavel's job types (:func:`type_folds`), the Zeus curve keys
(:func:`zeus_keys`), the three data sources and :func:`pair_metrics`. torch_geometric is imported only inside
:func:`train`. What does not: the model (:mod:`ecolaunch.policy.model`) and its physics priors
(:mod:`ecolaunch.policy.infer`), a lab's history and calibration as samples (:mod:`ecolaunch.learn.history_data`,
:mod:`ecolaunch.learn.calibration_data`). The data, the folds and determinism: docs/gnn.md#training-data.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ecolaunch.devices.catalogue import CATALOGUE
from ecolaunch.devices.spec import default_links
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.features import HeteroGraph, batch, encode_state, scenario_graph
from ecolaunch.policy.infer import ModelConfig, write_weights
from ecolaunch.sim.interference import GavelFit, InterferenceModel, impute_held_type, fit_gavel, gavel_set
from ecolaunch.sim.models import ZEUS_GPUS, zeus_rows
from ecolaunch.sim.node import shared_gpu
from ecolaunch.sim.power import ZeusRows, BoardPowerModel, default_power_model, fit_shape
from ecolaunch.state.graph import GpuNode, Host, Job, StateGraph
from ecolaunch.statedir import GNN_MANIFEST_FILE

logger = logging.getLogger(__name__)

#: the k-fold split of Gavel's job types: seeded permutation of :func:`gavel_types`, dealt round-robin
TYPE_FOLDS, TYPE_FOLD_SEED = 5, 0
CHUNKS_PER_BATCH = 4
#: ``train(fast=True)``: a quick, small model for tests (not for decisions)
FAST_EPOCHS, FAST_SYNTHETIC, FAST_EVAL_STATES = 4, 150, 40
#: sources whose labels are measurements: only they train the uncertainty head
MEASURED_SOURCES = frozenset({"gavel", "zeus", "history", "extra"})
GAVEL_BOARDS: Mapping[str, GpuModel] = {
    "v100": CATALOGUE["V100-SXM2-16GB"], "p100": CATALOGUE["P100-PCIE-16GB"],
    "k80": GpuModel("K80", "Tesla K80", 11441, 100.0, 149.0, 175.0, 0.0, False, "Kepler",
                    "ASSUMPTION: one GK210 of a K80 board as nvidia-smi -q commonly reports it"),
}
ZEUS_BOARDS: Mapping[str, GpuModel] = {"v100": CATALOGUE["V100-PCIE-32GB"], "a40": CATALOGUE["A40"],
                                       "p100": CATALOGUE["P100-PCIE-16GB"], "rtx6000": CATALOGUE["RTX6000"]}
SYNTHETIC_BOARDS = tuple(CATALOGUE)


@dataclass(frozen=True, slots=True)
class LabelledState:
    """A graph with measured or simulated labels; ``None`` = no label for that job or GPU."""

    graph: HeteroGraph
    throughputs: tuple[float | None, ...]  # per job row of the graph
    gpu_power_frac: tuple[float | None, ...]  # per GPU row: power_w / power_limit_max_w
    weight: float = 1.0
    source: str = "extra"


# --- held-out job types --------------------------------------------------------------------------------------
def gavel_types() -> tuple[str, ...]:
    """Gavel's single-GPU job type names, sorted (26: e.g. ``"ResNet-18 (batch size 32)"``, ``"A3C"``)."""
    return tuple(sorted({job for _, job in gavel_set().keys}))


def type_folds(folds: int = TYPE_FOLDS, seed: int = TYPE_FOLD_SEED) -> list[tuple[str, ...]]:
    """Gavel's job types dealt into ``folds`` folds by a seeded permutation (each fold's types sorted)."""
    names = gavel_types()
    order = np.random.default_rng(seed).permutation(len(names))
    return [tuple(sorted(names[i] for k, i in enumerate(order) if k % folds == f)) for f in range(folds)]


def pairs_involving(types: Collection[str]) -> np.ndarray:
    """Per Gavel pair (order of :func:`~ecolaunch.sim.interference.gavel_set`): True when either job is of one of
    ``types`` (on any GPU). ConfigError for a name that is not a Gavel job type."""
    unknown = sorted(set(types) - set(gavel_types()))
    if unknown:
        raise ConfigError(f"not a Gavel job type: {unknown[0]!r}",
                          hint=f"use names as in ecolaunch.learn.train.gavel_types(), e.g. {gavel_types()[0]!r}")
    data = gavel_set()
    held = np.array([job in types for _, job in data.keys], dtype=bool)
    return held[data.a] | held[data.b]


def zeus_key(gpu: str, workload: str, batch_size: int) -> str:
    """``"<gpu>:<network>:<batch_size>"`` of a Zeus curve (``workload`` is Zeus's ``"<dataset>/<network>"``)."""
    return f"{gpu}:{workload.split('/')[-1]}:{batch_size}"


def zeus_keys() -> tuple[str, ...]:
    """Every Zeus curve key (:func:`zeus_key`), sorted."""
    return tuple(sorted({zeus_key(g, r.workload, r.batch_size) for g in ZEUS_GPUS for r in zeus_rows(g)}))


def _zeus_held(holdout_zeus: Collection[str]) -> Callable[[str, str, int], bool]:
    """A predicate (gpu, workload, batch size) -> held out; ConfigError for a key that names no curve."""
    known = set(zeus_keys()) | {f"{g}:{r.workload}:{r.batch_size}" for g in ZEUS_GPUS for r in zeus_rows(g)}
    unknown = sorted(set(holdout_zeus) - known)
    if unknown:
        raise ConfigError(f"not a Zeus curve key: {unknown[0]!r}",
                          hint="use \"<gpu>:<network>:<batch_size>\" as in ecolaunch.learn.train.zeus_keys(), "
                               "e.g. \"v100:resnet50:128\"")
    held = set(holdout_zeus)
    return lambda gpu, workload, bs: zeus_key(gpu, workload, bs) in held or f"{gpu}:{workload}:{bs}" in held


# --- Gavel pairs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PairSet:
    """Gavel pairs as graphs (job rows: a then b) with observations and which values count."""

    graphs: list[HeteroGraph]
    obs_a: np.ndarray
    obs_b: np.ndarray
    use_a: np.ndarray  # values not suspect (not a copy of the solo throughput)
    use_b: np.ndarray
    demand_a: np.ndarray  # the demands used as features (fitted on training pairs; imputed for held-out types)
    demand_b: np.ndarray
    gpu: tuple[str, ...] = field(default=())


def gavel_pairs_set(select: np.ndarray, demands: Mapping[tuple[str, str], float]) -> PairSet:
    """The Gavel pairs where ``select`` is True, their job features built from ``demands`` and the measured solo
    iteration times."""
    data = gavel_set()
    use_a, use_b = data.usable("values")
    idx = np.flatnonzero(select)
    graphs, da, db = [], [], []
    for k in idx:
        ka, kb = data.keys[data.a[k]], data.keys[data.b[k]]
        jobs = [{"id": f"{side}", "iter_time_s": float(data.iter_time_s[i]), "sm_util_pct": 100.0 * float(demands[key])}
                for side, i, key in (("a", data.a[k], ka), ("b", data.b[k], kb))]
        graphs.append(scenario_graph(GpuNode.from_model(GAVEL_BOARDS[ka[0]]), None, jobs))
        da.append(demands[ka])
        db.append(demands[kb])
    return PairSet(graphs, data.obs_a[idx], data.obs_b[idx], use_a[idx], use_b[idx], np.array(da), np.array(db),
                   tuple(data.keys[data.a[k]][0] for k in idx))


def heldout_demands(fit: GavelFit, held: np.ndarray) -> dict[tuple[str, str], float]:
    """``fit``'s demands, those of job types seen only in the ``held`` pairs imputed as
    :func:`~ecolaunch.sim.interference.holdout_errors` does (from the same model family's other batch sizes)."""
    data = gavel_set()
    d = impute_held_type(data, np.array([fit.demands[k] for k in data.keys]), held)
    return dict(zip(data.keys, map(float, d)))


def pair_metrics(pred_a: np.ndarray, pred_b: np.ndarray, pairs: PairSet,
                 pack: np.ndarray | None = None) -> dict[str, float]:
    """MAE of normalized throughput over usable values, and the accuracy (%) of "packing helps" (combined
    throughput > 1) over pairs whose two values are usable; ``pack`` overrides the predicted decision."""
    err = np.concatenate([np.abs(pred_a - pairs.obs_a)[pairs.use_a], np.abs(pred_b - pairs.obs_b)[pairs.use_b]])
    both = pairs.use_a & pairs.use_b
    decided = (pred_a + pred_b > 1.0) if pack is None else pack
    acc = (decided == (pairs.obs_a + pairs.obs_b > 1.0))[both]
    return {"mae": float(err.mean()), "pack_accuracy_pct": float(100.0 * acc.mean()),
            "values": int(err.size), "pairs": int(both.sum())}


def _gavel_samples(train_mask: np.ndarray, demands: Mapping[tuple[str, str], float], weight: float
                   ) -> list[LabelledState]:
    pairs = gavel_pairs_set(train_mask, demands)
    return [LabelledState(g, (float(oa) if ua else None, float(ob) if ub else None), (None,), weight, "gavel")
            for g, oa, ob, ua, ub in zip(pairs.graphs, pairs.obs_a, pairs.obs_b, pairs.use_a, pairs.use_b)]


# --- Zeus sweeps ---------------------------------------------------------------------------------------------
def _zeus_sweeps(gpu: str, held: Callable[[str, str, int], bool]) -> list[list[Any]]:
    """The kept Zeus curves of ``gpu`` (one per workload, batch size and optimizer), each its rows by cap."""
    groups: dict[tuple[str, int, str], list] = {}
    for row in zeus_rows(gpu):
        if not held(gpu, row.workload, row.batch_size):
            groups.setdefault((row.workload, row.batch_size, row.optimizer), []).append(row)
    return [sorted(groups[k], key=lambda r: r.power_limit_w) for k in sorted(groups)]


def _zeus_samples(rng: np.random.Generator, held: Callable[[str, str, int], bool]) -> list[LabelledState]:
    out = []
    for gpu, p_max in ZEUS_GPUS.items():
        for rows in _zeus_sweeps(gpu, held):
            top = rows[-1]  # the curve's highest cap is its uncapped reference
            for row in rows:
                job: dict[str, Any] = {"id": "z", "power_w": top.power_w}
                others = [r for r in rows if r.power_limit_w != row.power_limit_w]
                if rng.random() < 0.5 and len(others) >= 2:
                    rest = [r for r in others if r is not top]
                    pick = [top, rest[int(rng.integers(len(rest)))]]
                    job["cap_points"] = [[r.power_limit_w, r.time_per_epoch_s / top.time_per_epoch_s, r.power_w]
                                         for r in pick]
                graph = scenario_graph(GpuNode.from_model(ZEUS_BOARDS[gpu]), row.power_limit_w, [job])
                out.append(LabelledState(graph, (top.time_per_epoch_s / row.time_per_epoch_s,),
                                         (row.power_w / p_max,), 1.0, "zeus"))
    return out


def _power_model(held: Callable[[str, str, int], bool], holding: bool) -> BoardPowerModel:
    """The cap model that labels synthetic states: the default one, or refitted without the held-out curves
    (the same fit as :meth:`~ecolaunch.sim.power.BoardPowerModel.fit`, on the kept rows)."""
    if not holding:
        return default_power_model()
    shapes, idle = {}, {}
    for gpu, p_max in ZEUS_GPUS.items():
        wl, u, c, t, p = [], [], [], [], []
        for rows in _zeus_sweeps(gpu, held):
            ref = rows[-1]
            for r in rows:
                wl.append(r.workload)
                u.append(ref.power_w / p_max)
                c.append(r.power_limit_w / p_max)
                t.append(r.time_per_epoch_s / ref.time_per_epoch_s)
                p.append(r.power_w / p_max)
        shapes[gpu] = fit_shape([ZeusRows(gpu, tuple(wl), np.array(u), np.array(c), np.array(t), np.array(p))])
        idle[gpu] = min(p) if p else default_power_model().active_idle_frac[gpu]
    return BoardPowerModel(shapes, idle)


# --- synthetic machines --------------------------------------------------------------------------------------
def _profile(rng: np.random.Generator, model: GpuModel, floor_w: float) -> dict[str, Any]:
    sm = float(rng.uniform(5.0, 100.0))
    bw = sm * float(rng.uniform(0.2, 1.0))
    demand = max(sm, bw) / 100.0
    power = floor_w + demand * (model.power_limit_max_w - floor_w) * float(rng.uniform(0.7, 1.05))
    prof: dict[str, Any] = {
        "iter_time_s": float(10 ** rng.uniform(-2.0, 0.5)), "sm_util_pct": sm, "mem_bw_util_pct": bw,
        "memory_mib": int(model.memory_mib * rng.uniform(0.03, 0.45)), "power_w": min(power, model.power_limit_max_w)}
    for key, p in (("sm_util_pct", 0.1), ("mem_bw_util_pct", 0.15), ("memory_mib", 0.1), ("power_w", 0.15),
                   ("iter_time_s", 0.05)):
        if rng.random() < p:
            prof[key] = None
    return prof


def _cap_points(rng: np.random.Generator, prof: dict[str, Any], model: GpuModel, power: BoardPowerModel
                ) -> tuple[CapPoint, ...]:
    caps = sorted({float(model.power_limit_max_w), *rng.uniform(model.power_limit_min_w, model.power_limit_max_w, 2)})
    points = [power.predict(prof["power_w"], c, model, prof["iter_time_s"]) for c in caps]
    return tuple(CapPoint(p.power_cap_w, p.iter_time_s, p.power_w) for p in points)


def synthetic_state(rng: np.random.Generator, interference: InterferenceModel,
                    power: BoardPowerModel | None = None) -> LabelledState:
    """One random machine state labelled by the analytic models (docs/gnn.md#training-data, 3); ``power``: the
    cap model (None: fitted on every Zeus sweep)."""
    power = power or default_power_model()
    n_hosts = 2 if rng.random() < 0.15 else 1
    state, models, jobs_on = StateGraph(), {}, {}
    for h in range(n_hosts):
        model = CATALOGUE[SYNTHETIC_BOARDS[rng.integers(len(SYNTHETIC_BOARDS))]]
        n = int(rng.choice([1, 2, 2, 4, 4, 8])) if n_hosts == 1 else int(rng.choice([1, 2, 4]))
        host = Host(name=f"h{h}")
        for i in range(n):
            cap = model.power_limit_max_w if rng.random() < 0.4 else float(rng.uniform(model.power_limit_min_w,
                                                                                         model.power_limit_max_w))
            host.gpus[f"h{h}g{i}"] = GpuNode.from_model(model, f"h{h}g{i}", i, power_limit_w=cap)
            models[f"h{h}g{i}"], jobs_on[f"h{h}g{i}"] = model, []
        for (i, j), kind in default_links((model,) * n).items():
            host.links[(f"h{h}g{i}", f"h{h}g{j}")] = kind
        state.hosts[host.name] = host
    uuids = list(models)
    for k in range(int(rng.integers(0, 3 * len(uuids) + 1))):
        host = state.hosts[f"h{rng.integers(n_hosts)}"]
        want = min(int(rng.choice([1, 1, 1, 1, 1, 1, 1, 2, 2, 4])), len(host.gpus))
        free = [u for u in host.gpus if len(jobs_on[u]) < 4]
        if len(free) < want:
            continue
        gpus = [str(u) for u in rng.choice(free, want, replace=False)]
        model = models[gpus[0]]
        prof = _profile(rng, model, power.active_idle_power_w(model)[0])
        if prof["power_w"] is not None and prof["iter_time_s"] is not None and rng.random() < 0.25:
            prof["cap_points"] = _cap_points(rng, prof, model, power)
        state.jobs[f"j{k}"] = Job.queued(f"j{k}", user="u", host=host.name, nproc=want, seq=k, submitted_at=0.0,
                                         request={"allowed_slowdown_pct": float(rng.uniform(0.0, 30.0))}, name="x")
        state.book(f"j{k}", gpus, {}, {}, Profile(**prof), 0.0)
        for u in gpus:
            jobs_on[u].append(f"j{k}")
    speed: dict[str, float] = {}
    gpu_power: dict[str, float] = {}
    for u in uuids:
        node = state.hosts[u[:u.index("g")]].gpus[u]
        node.memory_used_mib = sum(state.jobs[j].memory_mib for j in jobs_on[u])
        sg = shared_gpu([state.jobs[j].profile for j in jobs_on[u]], models[u], node.power_limit_w,
                        interference=interference, power=power)
        gpu_power[u] = sg.power_w / models[u].power_limit_max_w
        for j, x in zip(jobs_on[u], sg.throughputs):
            speed[j] = min(speed.get(j, 1.0), x)
    graph = encode_state(state).graph()
    return LabelledState(graph, tuple(speed[j] for j in graph.job_ids),
                         tuple(gpu_power[u] for u in graph.gpu_uuids), 1.0, "synthetic")


@dataclass(frozen=True, slots=True)
class _Batch:
    graph: HeteroGraph
    thr: Tensor
    thr_w: Tensor  # per job row: sample weight, 0 = no label
    var_w: Tensor  # per job row: weight in the uncertainty loss (measured labels only)
    power: Tensor
    power_w: Tensor


def _collate(samples: Sequence[LabelledState]) -> _Batch:
    def flat(values: Sequence[tuple[float | None, ...]], weights: Sequence[float]) -> tuple[Tensor, Tensor]:
        vals = [(v if v is not None else 0.0, w if v is not None else 0.0)
                for vs, w in zip(values, weights) for v in vs]
        t = torch.tensor(vals, dtype=torch.float32).reshape(-1, 2)
        return t[:, 0], t[:, 1]

    weights = [s.weight for s in samples]
    thr, thr_w = flat([s.throughputs for s in samples], weights)
    _, var_w = flat([s.throughputs for s in samples],
                    [s.weight if s.source in MEASURED_SOURCES else 0.0 for s in samples])
    power, power_w = flat([s.gpu_power_frac for s in samples], weights)
    return _Batch(batch([s.graph for s in samples]), thr, thr_w, var_w, power, power_w)


def _merge(parts: Sequence[_Batch]) -> _Batch:
    return _Batch(batch([p.graph for p in parts]), *(torch.cat([getattr(p, f) for p in parts])
                                                    for f in ("thr", "thr_w", "var_w", "power", "power_w")))


def _loss(model: torch.nn.Module, b: _Batch) -> Tensor:
    """L1 on throughput and power (rows whose prior is a measurement carry no gradient and are left out) plus the
    Gaussian NLL of the log-throughput error under the predicted variance (measured labels; the error is not
    differentiated, so the NLL trains the uncertainty head alone)."""
    heads = model(b.graph)
    free = (~heads.fixed_job).float()
    thr_w, var_w = b.thr_w * free, b.var_w * free
    job = (torch.abs(heads.throughput - b.thr) * thr_w).sum() / thr_w.sum().clamp(min=1e-9)
    gpu = (torch.abs(heads.power_frac - b.power) * b.power_w).sum() / b.power_w.sum().clamp(min=1e-9)
    err = torch.log(b.thr.clamp(min=1e-3)) - torch.log(heads.throughput.detach().clamp(1e-3, 1.0))
    nll = 0.5 * (heads.log_var + err * err * torch.exp(-heads.log_var))
    return job + gpu + (nll * var_w).sum() / var_w.sum().clamp(min=1e-9)


@dataclass(frozen=True, slots=True)
class Dataset:
    """Every training sample, what they are (for the manifest), and the fits that built them."""

    samples: list[LabelledState]
    data: dict[str, Any]
    gavel_fit: GavelFit
    gavel_train: np.ndarray  # per Gavel pair: used for training
    power: BoardPowerModel


def build_dataset(seed: int, synthetic: int, extra: Sequence[LabelledState] = (), gavel_weight: float = 3.0, *,
                  holdout_types: Collection[str] = (), holdout_zeus: Collection[str] = ()) -> Dataset:
    """Every training sample (Gavel training pairs, Zeus rows, ``synthetic`` random states, ``extra``), none from
    a held-out type (docs/gnn.md#training-data); measured pairs weigh ``gavel_weight`` times a simulated state."""
    rng = np.random.default_rng(seed)
    train_mask = ~pairs_involving(holdout_types)
    held_zeus = _zeus_held(holdout_zeus)
    fit = fit_gavel(train=train_mask)
    power = _power_model(held_zeus, bool(holdout_zeus))
    samples = _gavel_samples(train_mask, fit.demands, gavel_weight) + _zeus_samples(rng, held_zeus)
    samples += [synthetic_state(rng, fit.model, power) for _ in range(synthetic)] + list(extra)
    counts = Counter(s.source for s in samples)
    data = {"gavel_train_pairs": counts["gavel"], "zeus_rows": counts["zeus"], "synthetic_states": counts["synthetic"],
            "history_samples": counts["history"], "extra_states": counts["extra"],
            "sources": dict(sorted(counts.items())),
            "holdout_types": sorted(holdout_types), "holdout_zeus": sorted(holdout_zeus),
            "switch_overhead_s": dict(fit.switch_overhead_s)}
    return Dataset(samples, data, fit, train_mask, power)


def evaluate(predict: Callable[[HeteroGraph], Any], dataset: Dataset, seed: int = 10_000, states: int = 300
             ) -> dict[str, Any]:
    """Errors on the held-out Gavel pairs (when types were held out; their demands imputed) and on fresh
    synthetic states labelled by the same fold's models (seeded, never trained on)."""
    out: dict[str, Any] = {}
    held = ~dataset.gavel_train
    with torch.no_grad():
        if held.any():
            pairs = gavel_pairs_set(held, heldout_demands(dataset.gavel_fit, held))
            pred = predict(batch(pairs.graphs)).throughput.clamp(max=1.0).reshape(-1, 2).numpy()
            out["gavel_heldout"] = pair_metrics(pred[:, 0], pred[:, 1], pairs)
        rng = np.random.default_rng(seed)
        fresh = [synthetic_state(rng, dataset.gavel_fit.model, dataset.power) for _ in range(states)]
        heads = predict(batch([s.graph for s in fresh]))
    t_obs = torch.tensor([v for s in fresh for v in s.throughputs])
    p_obs = torch.tensor([v for s in fresh for v in s.gpu_power_frac])
    out["synthetic_throughput_mae"] = float((heads.throughput.clamp(max=1.0) - t_obs).abs().mean())
    out["synthetic_power_mae_frac"] = float((heads.power_frac - p_obs).abs().mean())
    return out


def train(seed: int = 0, out_path: Path | str | None = None, *, epochs: int = 60, synthetic: int = 4000,
          batch_size: int = 64, lr: float = 3e-3, hidden: int = 32, gavel_weight: float = 3.0,
          extra: Sequence[LabelledState] = (), holdout_types: Collection[str] = (),
          holdout_zeus: Collection[str] = (), fast: bool = False, describe: Mapping[str, Any] | None = None,
          progress: Callable[[int, float], None] | None = None, clock: Callable[[], float] = time.perf_counter
          ) -> dict[str, Any]:
    """Train from scratch and write the weights plus ``manifest.json`` next to them when ``out_path`` is given;
    return the manifest.

    ``holdout_types`` (Gavel job type names) and ``holdout_zeus`` (Zeus curve keys) are left out of every data
    source (docs/gnn.md#training-data; unknown names raise ConfigError); the manifest's ``metrics`` then include
    ``gavel_heldout``, the errors on the held-out pairs. ``fast=True`` trains :data:`FAST_EPOCHS` epochs on
    :data:`FAST_SYNTHETIC` synthetic states (for tests; ``epochs`` and ``synthetic`` are ignored). Seeded: the
    same arguments and torch thread count give the same weights. ``describe`` adds keys to the manifest (e.g.
    what the ``extra`` samples came from).
    """
    # lazy: the model loads torch_geometric, which only training needs (learn.train's datasets are read without it)
    from ecolaunch.policy.model import HierarchicalGNN

    if fast:
        epochs, synthetic = FAST_EPOCHS, FAST_SYNTHETIC
    start = clock()
    torch.manual_seed(seed)
    ds = build_dataset(seed, synthetic, extra, gavel_weight, holdout_types=holdout_types, holdout_zeus=holdout_zeus)
    samples = ds.samples
    built = clock() - start
    prior = ds.gavel_fit.model
    model = HierarchicalGNN(ModelConfig(hidden=hidden, switch_overhead_s=prior.switch_overhead_s,
                                        default_iter_time_s=prior.default_iter_time_s,
                                        switch_overhead_by_arch_s=dict(prior.switch_overhead_by_arch_s)))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    # collating costs as much as a step: samples are collated once into fixed chunks, and each epoch shuffles the
    # chunks and merges CHUNKS_PER_BATCH of them into a batch
    perm = torch.randperm(len(samples), generator=gen).tolist()
    size = max(1, batch_size // CHUNKS_PER_BATCH)
    chunks = [_collate([samples[i] for i in perm[k:k + size]]) for k in range(0, len(perm), size)]
    steps = epochs * ((len(chunks) + CHUNKS_PER_BATCH - 1) // CHUNKS_PER_BATCH)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    loss_sum = 0.0
    for epoch in range(epochs):
        order = torch.randperm(len(chunks), generator=gen).tolist()
        loss_sum = 0.0
        for k in range(0, len(order), CHUNKS_PER_BATCH):
            b = _merge([chunks[i] for i in order[k:k + CHUNKS_PER_BATCH]])
            opt.zero_grad()
            loss = _loss(model, b)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item() / ((len(order) + CHUNKS_PER_BATCH - 1) // CHUNKS_PER_BATCH)
        if progress is not None:
            progress(epoch, loss_sum)
    model.eval()
    manifest = {
        "format": "ecolaunch-gnn-manifest", "seed": seed, "epochs": epochs, "batch_size": batch_size, "lr": lr,
        "gavel_weight": gavel_weight, "fast": fast,
        "config": model.config.to_dict(), "parameters": model.num_parameters(), "data": ds.data,
        "final_loss": loss_sum, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "metrics": evaluate(model, ds, states=FAST_EVAL_STATES if fast else 300),
        "train_s": round(clock() - start, 1), "data_s": round(built, 1),
        **(describe or {}),
    }
    if out_path is not None:
        out = Path(out_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_weights(out, model.config, model.state_dict())
        manifest["weights"] = out.name
        manifest["weights_bytes"] = out.stat().st_size
        (out.parent / GNN_MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
