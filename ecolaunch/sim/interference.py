"""Co-location interference: each job's normalized throughput when several jobs share one GPU.

What lives here: :func:`predict` and :func:`colocate` (1..N jobs on one GPU), :class:`InterferenceModel` and its
calibration on Gavel's measured pairs (:func:`fit_gavel`, :func:`holdout_errors`), and the multi-GPU wait
(:func:`sync_wait_overhead_s`). What does not: a job's GPU demand (:attr:`ecolaunch.jobmodel.profile.Profile.demand`),
the power of a shared GPU and of the node (:mod:`ecolaunch.sim.node`), fitting the wait
(:func:`ecolaunch.sim.node.fit_sync_wait`). The model, its calibration and what it leaves out:
docs/simulator.md#the-interference-model.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ecolaunch.devices.catalogue import ARCHITECTURES, architecture, measured_for
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim import fitted
from ecolaunch.sim.models import GAVEL_GPUS, gavel_pairs, gavel_solo, least_squares

logger = logging.getLogger(__name__)

SUSPECT_POLICIES = ("values", "pairs", "keep")
_START_DEMAND = 0.6
_START_DELTA_S = 0.01


#: Gavel's boards and the generation each stands for
GENERATIONS = {"k80": "kepler", "p100": "pascal", "v100": "volta"}


@dataclass(frozen=True, slots=True)
class InterferenceModel:
    """The run-time parameters: the switching cost of a co-runner busy all the time, and the fallback iteration
    time."""

    #: on boards of an unknown architecture (the newest measured board's)
    switch_overhead_s: float
    #: used for a job whose ``iter_time_s`` is unknown: the median solo iteration time of Gavel's job types
    default_iter_time_s: float
    #: architecture ("kepler", "pascal", "volta") -> the switching overhead of the board that measured it; a board
    #: takes that of the newest measured architecture not newer than its own (:func:`~ecolaunch.devices.catalogue.measured_for`)
    switch_overhead_by_arch_s: Mapping[str, float] = field(default_factory=dict)
    #: a multi-GPU synchronous job's wait at a collective for each co-runner holding a rank's GPU (module
    #: docstring); 0: a job pays the same on k GPUs as on one
    sync_wait_s: float = 0.0

    def switch_overhead_for(self, gpu: str | GpuModel | None) -> float:
        """The switching overhead on ``gpu`` (a board name or model; None: a modern board)."""
        if gpu is None:
            return self.switch_overhead_s
        return measured_for(architecture(gpu if isinstance(gpu, str) else gpu.name), self.switch_overhead_by_arch_s,
                            self.switch_overhead_s)

    def predict(self, profiles: Sequence[Profile], gpu: str | GpuModel | None = None,
                gpus: Sequence[int] | None = None) -> list[float]:
        """Normalized throughput of each job (1.0 = as fast as alone) when all share one ``gpu``.

        ``gpus``: how many GPUs each job spans, synchronously, each shared with the same co-runners (None: one
        each); it matters only with ``sync_wait_s`` > 0.
        """
        if len(profiles) <= 1:
            return [1.0] * len(profiles)
        if gpus is not None and (len(gpus) != len(profiles) or any(k < 1 for k in gpus)):
            raise ConfigError(f"need one GPU count of at least 1 per job, got {list(gpus)} for {len(profiles)} jobs")
        demands = [p.demand for p in profiles]
        total = sum(demands)
        stretch = total if total > 1.0 else 1.0
        delta = self.switch_overhead_for(gpu)
        out = []
        for i, (p, d) in enumerate(zip(profiles, demands)):
            t = p.iter_time_s if p.iter_time_s and p.iter_time_s > 0 else self.default_iter_time_s
            extra = 0.0
            if gpus is not None and gpus[i] > 1 and self.sync_wait_s > 0.0:
                extra = sync_wait_overhead_s(demands[:i] + demands[i + 1:], gpus[i], self.sync_wait_s)
            out.append(t / (t * stretch + delta * max(0.0, total - d) + extra))
        return out


def sync_wait_overhead_s(co_runner_demands: Sequence[float], gpus: int, wait_s: float) -> float:
    """What a job spanning ``gpus`` synchronous GPUs pays per iteration beyond one GPU's cost: ``E[max over the
    ranks of W] - E[W]``, where a rank's wait ``W`` is ``wait_s`` for each co-runner holding its GPU, co-runner
    ``j`` with probability ``min(1, d_j)``, independently on every GPU (exact, over the co-runners' subsets)."""
    probs = [min(1.0, max(0.0, d)) for d in co_runner_demands]
    if gpus <= 1 or not probs or wait_s <= 0.0:
        return 0.0
    # The wait of one rank is wait_s x (number of co-runners holding it): its distribution over 0..n
    dist = [0.0] * (len(probs) + 1)
    for held in itertools.product((False, True), repeat=len(probs)):
        dist[sum(held)] += math.prod(q if h else 1.0 - q for q, h in zip(probs, held))
    below = expected_max = 0.0
    for n, pn in enumerate(dist):  # E[max] = sum_n n x (F(n)^k - F(n-1)^k)
        expected_max += n * ((below + pn) ** gpus - below ** gpus)
        below += pn
    return wait_s * (expected_max - sum(probs))


@dataclass(frozen=True, slots=True)
class Colocation:
    """Jobs sharing one GPU: predicted throughputs and why."""

    #: each job's throughput / its solo throughput, in input order
    throughputs: tuple[float, ...]
    demands: tuple[float, ...]
    #: True when the summed demand exceeds 1 (the GPU would need to be busy more than 100 % of the time)
    saturated: bool
    #: summed peak memory, None when a job's memory is unknown
    memory_mib: int | None
    #: None when the GPU's or a job's memory is unknown
    memory_fits: bool | None
    #: True unless the GPU is one Gavel measured (V100, P100, K80)
    extrapolated: bool

    @property
    def demand_sum(self) -> float:
        return sum(self.demands)

    @property
    def combined_throughput(self) -> float:
        """Sum of normalized throughputs; packing helps when it exceeds 1."""
        return sum(self.throughputs)


@functools.lru_cache(maxsize=1)
def default_interference_model() -> InterferenceModel:
    """The model calibrated on all of Gavel's single-GPU pairs (suspect values dropped): the shipped fit
    (:mod:`ecolaunch.sim.fitted`), else fitted now, once per process."""
    shipped = fitted.load()
    if shipped is not None:
        return InterferenceModel(**shipped["interference"])
    fit = fit_gavel()
    logger.debug("interference switch overhead %s", fit.switch_overhead_s)
    return fit.model


def predict(profiles: Sequence[Profile], gpu: str | GpuModel | None = None,
            model: InterferenceModel | None = None, gpus: Sequence[int] | None = None) -> list[float]:
    """Normalized throughput of each of 1..N jobs sharing one GPU (docs/simulator.md#the-interference-model).

    ``gpu`` picks the switching overhead of its generation (None: a modern board's); ``gpus``, each job's GPU
    count (:meth:`InterferenceModel.predict`). Cheap: plain Python, a few microseconds for a pair.
    """
    return (model or default_interference_model()).predict(profiles, gpu, gpus)


def colocate(profiles: Sequence[Profile], gpu: str | GpuModel | None = None,
             model: InterferenceModel | None = None) -> Colocation:
    """:func:`predict` plus demands, saturation, memory fit and the extrapolation flag for ``gpu``.

    ``gpu`` is a board name or a GPU model (whose memory the jobs' must fit in).
    """
    demands = tuple(p.demand for p in profiles)
    mems = [p.memory_mib for p in profiles]
    memory = None if any(m is None for m in mems) else sum(mems)  # type: ignore[misc]
    name = gpu if gpu is None or isinstance(gpu, str) else gpu.name
    capacity = None if gpu is None or isinstance(gpu, str) else gpu.memory_mib
    return Colocation(
        throughputs=tuple(predict(profiles, gpu, model)),
        demands=demands,
        saturated=sum(demands) > 1.0,
        memory_mib=memory,
        memory_fits=None if memory is None or capacity is None else memory <= capacity,
        extrapolated=not (name and re.search(r"[VPK](100|80)", str(name).upper())),
    )


# --- calibration on Gavel ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GavelSet:
    """Gavel's single-GPU pairs of all GPU types as arrays; job types indexed jointly over (gpu, type)."""

    keys: tuple[tuple[str, str], ...]  # (gpu, job type) per index
    iter_time_s: np.ndarray  # per index
    a: np.ndarray  # pair -> index of job a
    b: np.ndarray
    obs_a: np.ndarray  # normalized throughput of job a in the pair
    obs_b: np.ndarray
    copy_a: np.ndarray  # True where the value equals the solo throughput exactly (suspect)
    copy_b: np.ndarray
    gpus: tuple[str, ...]  # the boards, in the order of ``board``
    board: np.ndarray  # pair -> index of its board in ``gpus``

    def usable(self, suspect: str) -> tuple[np.ndarray, np.ndarray]:
        """Per-value masks of what a fit with the ``suspect`` policy may use."""
        if suspect not in SUSPECT_POLICIES:
            raise ConfigError(f"unknown suspect-row policy {suspect!r}", hint=f"use one of {SUSPECT_POLICIES}")
        if suspect == "values":
            return ~self.copy_a, ~self.copy_b
        if suspect == "pairs":
            both = self.copy_a & self.copy_b
            return ~both, ~both
        ones = np.ones(self.a.size, dtype=bool)
        return ones, ones


@functools.lru_cache(maxsize=None)
def gavel_set(gpus: tuple[str, ...] = GAVEL_GPUS) -> GavelSet:
    """Gavel's pairs on ``gpus`` as arrays, built once per process (treat the arrays as read-only)."""
    solo = gavel_solo()
    keys = tuple(k for k in solo if k[0] in gpus)
    index = {k: i for i, k in enumerate(keys)}
    rows = [p for gpu in gpus for p in gavel_pairs(gpu)]
    a = np.array([index[(p.gpu, p.job_a)] for p in rows])
    b = np.array([index[(p.gpu, p.job_b)] for p in rows])
    return GavelSet(
        keys=keys,
        iter_time_s=np.array([1.0 / solo[k] for k in keys]),
        a=a, b=b,
        obs_a=np.array([p.shared_a / p.solo_a for p in rows]),
        obs_b=np.array([p.shared_b / p.solo_b for p in rows]),
        copy_a=np.array([p.shared_a == p.solo_a for p in rows]),
        copy_b=np.array([p.shared_b == p.solo_b for p in rows]),
        gpus=gpus,
        board=np.array([gpus.index(p.gpu) for p in rows]),
    )


@dataclass(frozen=True, slots=True)
class GavelFit:
    """A calibration: the run-time model plus the latent demand of every (GPU, job type)."""

    switch_overhead_s: Mapping[str, float]  # board -> delta
    demands: Mapping[tuple[str, str], float]
    model: InterferenceModel


def pair_throughputs(data: GavelSet, demands: np.ndarray, deltas_s: np.ndarray | Mapping[str, float]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Model throughputs of both jobs of every Gavel pair (``deltas_s``: per board of ``data.gpus``, or by name)."""
    if isinstance(deltas_s, Mapping):
        deltas_s = np.array([deltas_s[g] for g in data.gpus])
    t, da, db = data.iter_time_s, demands[data.a], demands[data.b]
    stretch, delta = np.maximum(1.0, da + db), np.asarray(deltas_s)[data.board]
    return t[data.a] / (t[data.a] * stretch + delta * db), t[data.b] / (t[data.b] * stretch + delta * da)


def model_of(deltas_s: Mapping[str, float], default_iter_time_s: float) -> InterferenceModel:
    """The run-time model of per-board fits: each board's ``delta`` for its architecture, the newest board's for
    newer and unknown ones."""
    newest = max(deltas_s, key=lambda g: ARCHITECTURES.index(GENERATIONS[g]))
    return InterferenceModel(switch_overhead_s=float(deltas_s[newest]), default_iter_time_s=default_iter_time_s,
                             switch_overhead_by_arch_s={GENERATIONS[g]: float(d) for g, d in sorted(deltas_s.items())})


def fit_gavel(suspect: str = "values", train: np.ndarray | None = None, gpus: tuple[str, ...] = GAVEL_GPUS
              ) -> GavelFit:
    """Fit each board's ``delta`` and the latent demands on Gavel pairs (``train``: a per-pair mask of pairs to
    use)."""
    data = gavel_set(gpus)
    use_a, use_b = data.usable(suspect)
    if train is not None:
        use_a, use_b = use_a & train, use_b & train
    wa, wb = use_a.astype(float), use_b.astype(float)
    n, k = len(data.keys), len(data.gpus)
    t = data.iter_time_s

    def residuals(x: np.ndarray) -> np.ndarray:
        xa, xb = pair_throughputs(data, x[:n], x[n:])
        return np.concatenate([(xa - data.obs_a) * wa, (xb - data.obs_b) * wb])

    def normal_equations(x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Each residual depends on three parameters only (the two demands of its pair and its board's delta), so
        # J^T J is accumulated entry by entry instead of multiplying a dense 2*pairs x (types+boards) Jacobian.
        d, delta = x[:n], x[n:][data.board]
        sat = (d[data.a] + d[data.b]) > 1.0
        stretch = np.where(sat, d[data.a] + d[data.b], 1.0)
        hess, grad = np.zeros((n + k, n + k)), np.zeros(n + k)
        for block, (own, other, w) in enumerate(((data.a, data.b, wa), (data.b, data.a, wb))):
            den2 = (t[own] * stretch + delta * d[other]) ** 2
            res = r[block * data.a.size:(block + 1) * data.a.size]
            terms = ((own, -(t[own] ** 2) * sat / den2 * w),  # d residual / d own demand
                     (other, -t[own] * (t[own] * sat + delta) / den2 * w),  # / d the co-runner's demand
                     (n + data.board, -t[own] * d[other] / den2 * w))  # / d the board's delta
            for idx, g in terms:
                np.add.at(grad, idx, g * res)
                for idx2, g2 in terms:
                    np.add.at(hess, (idx, idx2), g * g2)
        return hess, grad

    x0 = np.r_[np.full(n, _START_DEMAND), np.full(k, _START_DELTA_S)]
    lower, upper = np.zeros(n + k), np.ones(n + k)
    x = least_squares(residuals, x0, lower, upper, normal_equations=normal_equations, max_iter=300)
    deltas = {g: float(v) for g, v in zip(data.gpus, x[n:])}
    return GavelFit(deltas, dict(zip(data.keys, map(float, x[:n]))),
                    model_of(deltas, float(statistics.median(data.iter_time_s))))


@dataclass(frozen=True, slots=True)
class HoldoutErrors:
    """Held-out error of the pair model: MAE of normalized throughput and pack (helps/hurts) accuracy."""

    split: str  # "pair" or "type"
    suspect: str
    mae: float
    pack_accuracy: float
    n_values: int
    n_pairs: int
    by_gpu: Mapping[str, tuple[float, float, int]]  # gpu -> (mae, pack accuracy, values)
    switch_overhead_s: tuple[Mapping[str, float], ...]  # of each fold's fit, per board
    #: the same errors for a model-free baseline: each value predicted by the median of the fold's training
    #: values, and "helps" predicted when most training pairs help
    baseline_mae: float
    baseline_pack_accuracy: float


def holdout_errors(split: str = "pair", *, suspect: str = "values", seed: int = 0, folds: int = 5,
                   evaluate_on: str = "values") -> HoldoutErrors:
    """Cross-validated error on Gavel pairs the fit did not see.

    ``split="pair"``: unordered pairs are dealt into ``folds`` folds by a seeded permutation. ``split="type"``:
    each job type is held out in turn with every pair it is in (on all GPUs); its demand, unknown to the fit,
    is interpolated in log batch size between the fitted demands of the same model family (e.g. ResNet-50
    batch 64 from batch 32 and 128), or the median fitted demand for a family of one (A3C, CycleGAN).
    Errors are computed on held-out values usable under ``evaluate_on`` (default: suspect values excluded).
    """
    data = gavel_set()
    eval_a, eval_b = data.usable(evaluate_on)
    pred_a, pred_b = np.full(data.a.size, np.nan), np.full(data.a.size, np.nan)
    base_value, base_helps = np.full(data.a.size, np.nan), np.zeros(data.a.size, dtype=bool)
    deltas = []
    if split == "pair":
        fold = np.random.default_rng(seed).permutation(data.a.size) % folds
        groups = [fold == f for f in range(folds)]
    elif split == "type":
        names = sorted({job for _, job in data.keys})
        groups = [np.array([data.keys[i][1] == name or data.keys[j][1] == name for i, j in zip(data.a, data.b)])
                  for name in names]
    else:
        raise ConfigError(f"unknown split {split!r}", hint="use 'pair' or 'type'")
    for held in groups:
        fit = fit_gavel(suspect, train=~held)
        deltas.append(fit.switch_overhead_s)
        d = np.array([fit.demands[k] for k in data.keys])
        if split == "type":
            d = impute_held_type(data, d, held)
        xa, xb = pair_throughputs(data, d, fit.switch_overhead_s)
        pred_a[held], pred_b[held] = xa[held], xb[held]
        train_a, train_b = eval_a & ~held, eval_b & ~held
        base_value[held] = np.median(np.concatenate([data.obs_a[train_a], data.obs_b[train_b]]))
        train_pairs = train_a & train_b
        base_helps[held] = np.mean(data.obs_a[train_pairs] + data.obs_b[train_pairs] > 1.0) > 0.5
    by_gpu = {}
    gpu_of = np.array([data.keys[i][0] for i in data.a])
    for gpu in [*GAVEL_GPUS, None]:
        sel = np.ones(data.a.size, dtype=bool) if gpu is None else gpu_of == gpu
        err = np.concatenate([np.abs(pred_a - data.obs_a)[sel & eval_a], np.abs(pred_b - data.obs_b)[sel & eval_b]])
        both = sel & eval_a & eval_b
        acc = ((pred_a + pred_b > 1.0) == (data.obs_a + data.obs_b > 1.0))[both]
        by_gpu[gpu] = (float(err.mean()), float(acc.mean()), int(err.size), int(both.sum()))
    mae, acc, n_values, n_pairs = by_gpu.pop(None)
    base_err = np.concatenate([np.abs(base_value - data.obs_a)[eval_a], np.abs(base_value - data.obs_b)[eval_b]])
    both = eval_a & eval_b
    base_acc = (base_helps == (data.obs_a + data.obs_b > 1.0))[both]
    return HoldoutErrors(split, suspect, mae, acc, n_values, n_pairs, {g: v[:3] for g, v in by_gpu.items()},
                         tuple(deltas), float(base_err.mean()), float(base_acc.mean()))


_FAMILY_BATCH = re.compile(r"^(?P<family>.+?) \(batch size (?P<batch>\d+)\)$")


def impute_held_type(data: GavelSet, d: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Replace the demands of the job type(s) that appear only in held-out pairs (see holdout_errors)."""
    seen = np.zeros(len(data.keys), dtype=bool)
    seen[data.a[~held]] = True
    seen[data.b[~held]] = True
    out = d.copy()
    for i, (gpu, job) in enumerate(data.keys):
        if seen[i]:
            continue
        m = _FAMILY_BATCH.match(job)
        peers = []
        if m:
            for j, (g2, job2) in enumerate(data.keys):
                m2 = _FAMILY_BATCH.match(job2)
                if g2 == gpu and seen[j] and m2 and m2["family"] == m["family"]:
                    peers.append((np.log2(int(m2["batch"])), d[j]))
        if peers:
            xs, ys = zip(*sorted(peers))
            out[i] = float(np.interp(np.log2(int(m["batch"])), xs, ys))
        else:
            out[i] = float(np.median([d[j] for j, (g2, _) in enumerate(data.keys) if g2 == gpu and seen[j]]))
    return out
