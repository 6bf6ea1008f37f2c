"""Training the hierarchical GNN: its data, the seeded loop, and the shipped weights' manifest.

What lives here: :func:`train` (behind ``benchmarks/train_gnn.py`` and ``ecolaunch policy train``),
the held-out Gavel split (:func:`gavel_heldout`, shared with ``benchmarks/pair_prediction.py``), the three
data sources and :func:`pair_metrics`. torch_geometric is imported only inside :func:`train`.

**Data** (all labels are normalized throughput, 1.0 = alone and uncapped, and GPU power / max power limit):

(a) *Gavel's measured pairs* (OSDI '20; V100, P100, K80; two single-GPU jobs sharing one GPU under MPS): the
    pairs of :func:`gavel_heldout` are never used. Gavel measured no utilization, so a job type's ``sm_util_pct``
    is 100 x the demand the analytic model (:func:`ecolaunch.sim.interference.fit_gavel`) estimates **from the
    training pairs only**, and ``iter_time_s`` is 1 / its measured solo throughput; values the analytic fit
    treats as suspect (exact copies of the solo throughput) get no loss. Boards: V100 = V100-SXM2-16GB (AWS p3,
    an assumption), P100 = P100-PCIE-16GB; K80 (not in the catalogue) = one GK210 with 11441 MiB and
    100/149/175 W min/default/max limits (an assumption: what ``nvidia-smi -q`` commonly reports).
(b) *Zeus's power-limit sweeps* (NSDI '23; V100 PCIe, A40, P100, RTX 6000): one job on a capped GPU, its
    uncapped power known, iteration time and utilization unknown (Zeus gives time per epoch); labels are the
    measured time ratio and power. Half the rows also carry two other measured caps of the same curve as
    ``cap_points`` (never the labelled cap), so the model learns to use profiled cap points.
(c) *Synthetic machines* labelled by the simulator's calibrated models (:func:`ecolaunch.sim.node.shared_gpu`;
    interference refitted on the Gavel training pairs only, so no held-out pair leaks in): random catalogue
    hosts (1-8 GPUs, sometimes two hosts), 1-4 jobs per GPU, multi-GPU jobs (labelled with their slowest GPU,
    as the simulator runs them), random caps and profiles spanning Gavel's measured iteration times
    (0.01-3 s) and utilizations of 5-100 % (ranges are assumptions).

**A lab's own history** (``ecolaunch policy train``): :func:`ecolaunch.policy.history_data.history_samples` turns
the job history of a state directory into :class:`LabelledState` samples (each profiled job's measured caps; each
finished single-GPU run placed from a known profile, with the jobs it shared its GPU with), passed as
``train(extra=...)`` and weighted like measured pairs, so a lab's measurements pull the model towards its own
machines while the simulator data keeps it sane elsewhere. Any other measurements can be added the same way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ecolaunch.devices.catalogue import CATALOGUE, GpuModel
from ecolaunch.devices.spec import default_links
from ecolaunch.policy.features import HeteroGraph, batch, encode_state, scenario_graph
from ecolaunch.sim.interference import InterferenceModel, fit_gavel, gavel_set
from ecolaunch.sim.models import ZEUS_GPUS
from ecolaunch.sim.node import shared_gpu
from ecolaunch.sim.power import default_power_model, zeus_curves
from ecolaunch.state.graph import GpuNode, Host, Job, JobState, StateGraph

logger = logging.getLogger(__name__)

HELDOUT_SEED, HELDOUT_FOLDS = 0, 5
CHUNKS_PER_BATCH = 4
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


def gavel_heldout(seed: int = HELDOUT_SEED, folds: int = HELDOUT_FOLDS) -> np.ndarray:
    """Per Gavel pair (order of :func:`~ecolaunch.sim.interference.gavel_set`): True for the held-out pairs.

    Fold 0 of the seeded pair split of :func:`~ecolaunch.sim.interference.holdout_errors`, about a fifth."""
    data = gavel_set()
    return np.random.default_rng(seed).permutation(data.a.size) % folds == 0


@dataclass(frozen=True, slots=True)
class PairSet:
    """Gavel pairs as graphs (job rows: a then b) with observations and which values count."""

    graphs: list[HeteroGraph]
    obs_a: np.ndarray
    obs_b: np.ndarray
    use_a: np.ndarray  # values not suspect (not a copy of the solo throughput)
    use_b: np.ndarray
    demand_a: np.ndarray  # the training-pair demands used as features
    demand_b: np.ndarray
    gpu: tuple[str, ...] = field(default=())


def gavel_pairs_set(select: np.ndarray, demands: Mapping[tuple[str, str], float]) -> PairSet:
    """The Gavel pairs where ``select`` is True, their job features built from ``demands`` (fitted on training
    pairs) and the measured solo iteration times."""
    data = gavel_set()
    use_a, use_b = data.usable("values")
    idx = np.flatnonzero(select)
    graphs, da, db = [], [], []
    for k in idx:
        ka, kb = data.keys[data.a[k]], data.keys[data.b[k]]
        jobs = [{"id": f"{side}", "iter_time_s": float(data.iter_time_s[i]), "sm_util_pct": 100.0 * demands[key]}
                for side, i, key in (("a", data.a[k], ka), ("b", data.b[k], kb))]
        graphs.append(scenario_graph(GAVEL_BOARDS[ka[0]], None, jobs))
        da.append(demands[ka])
        db.append(demands[kb])
    return PairSet(graphs, data.obs_a[idx], data.obs_b[idx], use_a[idx], use_b[idx], np.array(da), np.array(db),
                   tuple(data.keys[data.a[k]][0] for k in idx))


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


def _zeus_samples(rng: np.random.Generator) -> list[LabelledState]:
    out = []
    for gpu, p_max in ZEUS_GPUS.items():
        cs = zeus_curves(gpu)
        workload = np.array(cs.workload)
        curve = np.cumsum(np.r_[True, (cs.u[1:] != cs.u[:-1]) | (workload[1:] != workload[:-1])])  # one per sweep
        for k in range(cs.u.size):
            job: dict[str, Any] = {"id": "z", "power_w": float(cs.u[k] * p_max)}
            others = [i for i in np.flatnonzero(curve == curve[k]) if cs.c[i] != cs.c[k]]
            if rng.random() < 0.5 and len(others) >= 2:
                top = max(others, key=lambda i: cs.c[i])  # the curve's highest cap is its uncapped reference
                pick = [top, *rng.choice([i for i in others if i != top], 1)]
                job["cap_points"] = [[float(cs.c[i] * p_max), float(cs.time_ratio[i]), float(cs.power_frac[i] * p_max)]
                                     for i in pick]
            graph = scenario_graph(ZEUS_BOARDS[gpu], float(cs.c[k] * p_max), [job])
            out.append(LabelledState(graph, (1.0 / float(cs.time_ratio[k]),), (float(cs.power_frac[k]),), 1.0, "zeus"))
    return out


def _node(uuid: str, index: int, model: GpuModel, cap_w: float) -> GpuNode:
    return GpuNode(uuid=uuid, index=index, name=model.full_name, memory_total_mib=model.memory_mib,
                   power_limit_min_w=model.power_limit_min_w, power_limit_default_w=model.power_limit_default_w,
                   power_limit_max_w=model.power_limit_max_w, power_limit_w=cap_w)


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


def _cap_points(rng: np.random.Generator, prof: dict[str, Any], model: GpuModel) -> list[list[float]]:
    power = default_power_model()
    caps = sorted({float(model.power_limit_max_w), *rng.uniform(model.power_limit_min_w, model.power_limit_max_w, 2)})
    points = [power.predict(prof["power_w"], c, model, prof["iter_time_s"]) for c in caps]
    return [[p.power_cap_w, p.iter_time_s, p.power_w] for p in points]


def synthetic_state(rng: np.random.Generator, interference: InterferenceModel) -> LabelledState:
    """One random machine state labelled by the simulator's models (see the module docstring, (c))."""
    power = default_power_model()
    n_hosts = 2 if rng.random() < 0.15 else 1
    state, models, jobs_on = StateGraph(), {}, {}
    for h in range(n_hosts):
        model = CATALOGUE[SYNTHETIC_BOARDS[rng.integers(len(SYNTHETIC_BOARDS))]]
        n = int(rng.choice([1, 2, 2, 4, 4, 8])) if n_hosts == 1 else int(rng.choice([1, 2, 4]))
        host = Host(name=f"h{h}")
        for i in range(n):
            cap = model.power_limit_max_w if rng.random() < 0.4 else float(rng.uniform(model.power_limit_min_w,
                                                                                         model.power_limit_max_w))
            host.gpus[f"h{h}g{i}"] = _node(f"h{h}g{i}", i, model, cap)
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
            prof["cap_points"] = _cap_points(rng, prof, model)
        state.jobs[f"j{k}"] = Job(id=f"j{k}", uid=0, user="u", host=host.name, launcher_pid=1, launcher_start_time=0.0,
                                  nproc=want, name="x", seq=k, submitted_at=0.0, state=JobState.RUNNING, gpus=gpus,
                                  request={"allowed_slowdown_pct": float(rng.uniform(0.0, 30.0))}, profile=prof)
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
    power, power_w = flat([s.gpu_power_frac for s in samples], weights)
    return _Batch(batch([s.graph for s in samples]), thr, thr_w, power, power_w)


def _merge(parts: Sequence[_Batch]) -> _Batch:
    return _Batch(batch([p.graph for p in parts]), *(torch.cat([getattr(p, f) for p in parts])
                                                    for f in ("thr", "thr_w", "power", "power_w")))


def _loss(model: torch.nn.Module, b: _Batch) -> Tensor:
    thr, frac = model(b.graph)
    job = (torch.abs(thr - b.thr) * b.thr_w).sum() / b.thr_w.sum().clamp(min=1e-9)
    gpu = (torch.abs(frac - b.power) * b.power_w).sum() / b.power_w.sum().clamp(min=1e-9)
    return job + gpu


def build_dataset(seed: int, synthetic: int, extra: Sequence[LabelledState] = (), gavel_weight: float = 3.0
                  ) -> tuple[list[LabelledState], dict[str, Any]]:
    """Every training sample (Gavel training pairs, Zeus rows, ``synthetic`` random states, ``extra``); measured
    pairs weigh ``gavel_weight`` times a simulated state in the loss."""
    rng = np.random.default_rng(seed)
    train_mask = ~gavel_heldout()
    fit = fit_gavel(train=train_mask)
    samples = _gavel_samples(train_mask, fit.demands, gavel_weight) + _zeus_samples(rng)
    samples += [synthetic_state(rng, fit.model) for _ in range(synthetic)] + list(extra)
    counts = {src: sum(1 for s in samples if s.source == src)
              for src in ("gavel", "zeus", "synthetic", "history", "extra")}
    data = {"gavel_train_pairs": counts["gavel"], "zeus_rows": counts["zeus"], "synthetic_states": counts["synthetic"],
            "history_samples": counts["history"], "extra_states": counts["extra"],
            "gavel_heldout": {"seed": HELDOUT_SEED, "folds": HELDOUT_FOLDS, "fold": 0},
            "switch_overhead_s": fit.switch_overhead_s}
    return samples, data


def evaluate(predict: Callable[[HeteroGraph], tuple[Tensor, Tensor]], seed: int = 10_000) -> dict[str, Any]:
    """Held-out Gavel pair errors and errors on fresh synthetic states (seeded, never trained on)."""
    fit = fit_gavel(train=~gavel_heldout())
    pairs = gavel_pairs_set(gavel_heldout(), fit.demands)
    with torch.no_grad():
        thr, _ = predict(batch(pairs.graphs))
    pred = thr.reshape(-1, 2).numpy()
    rng = np.random.default_rng(seed)
    states = [synthetic_state(rng, fit.model) for _ in range(300)]
    with torch.no_grad():
        s_thr, s_pow = predict(batch([s.graph for s in states]))
    t_obs = torch.tensor([v for s in states for v in s.throughputs])
    p_obs = torch.tensor([v for s in states for v in s.gpu_power_frac])
    return {"gavel_heldout": pair_metrics(pred[:, 0], pred[:, 1], pairs),
            "synthetic_throughput_mae": float((s_thr - t_obs).abs().mean()),
            "synthetic_power_mae_frac": float((s_pow - p_obs).abs().mean())}


def train(seed: int = 0, out_path: Path | str | None = None, *, epochs: int = 60, synthetic: int = 4000,
          batch_size: int = 64, lr: float = 3e-3, hidden: int = 32, gavel_weight: float = 3.0,
          extra: Sequence[LabelledState] = (), describe: Mapping[str, Any] | None = None,
          progress: Callable[[int, float], None] | None = None, clock: Callable[[], float] = time.perf_counter
          ) -> dict[str, Any]:
    """Train from scratch (seeded: same seed, same machine, same weights) and write the weights plus
    ``manifest.json`` next to them when ``out_path`` is given; ``describe`` adds keys to the manifest (e.g.
    what the ``extra`` samples came from). Returns the manifest."""
    from ecolaunch.policy.infer import ModelConfig, write_weights
    from ecolaunch.policy.model import HierarchicalGNN

    start = clock()
    torch.manual_seed(seed)
    samples, data = build_dataset(seed, synthetic, extra, gavel_weight)
    built = clock() - start
    model = HierarchicalGNN(ModelConfig(hidden=hidden))
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
        "gavel_weight": gavel_weight,
        "config": model.config.to_dict(), "parameters": model.num_parameters(), "data": data,
        "final_loss": loss_sum, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "metrics": evaluate(model), "train_s": round(clock() - start, 1), "data_s": round(built, 1),
        **(describe or {}),
    }
    if out_path is not None:
        out = Path(out_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_weights(out, model.config, model.state_dict())
        manifest["weights"] = out.name
        manifest["weights_bytes"] = out.stat().st_size
        (out.parent / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
