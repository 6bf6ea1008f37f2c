"""The measured world: a simulator truth built only from measured tables, and what the policies see of it.

What lives here: :class:`JobKind` (a job type with its measured solo speed, its pair loss and its cap curve,
measured or a stand-in, with the curve's source), :func:`job_kinds`, :class:`Noise`, :class:`MeasuredWorld` (the
truth the event loop of :mod:`ecolaunch.sim.engine` plays when given ``world=``, and the noisy readings the
policies get), :func:`held_out_prior` and :class:`HeldOutPriors` (the cap-curve prior each job is read with) and
:func:`measured_oracle` (the hindsight oracle on that truth). What does not: interpolating a measured curve
(:mod:`ecolaunch.sim.truth`), the traces (:mod:`ecolaunch.sim.measured_traces`), and any model a policy predicts
with: a model is never scored against itself. What the world plays, what the policies see, and every assumption:
docs/simulator.md#the-measured-world.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ecolaunch.admin.rules import Rules
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.budgeted import BudgetedPolicy
from ecolaunch.policy.candidates import best_link, worst_link
from ecolaunch.policy.energy import Candidate, EnergyAwarePolicy, Outcome
from ecolaunch.policy.linkwait import LinkWait
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, MIN_SAVING_PCT, cap_margin_pct, job_cap_choice, queue_eta
from ecolaunch.caps.control import CapController, ControlSettings
from ecolaunch.jobmodel.capcurve import CapPrior, fit_curve, merge_points
from ecolaunch.jobmodel.powercap import cap_grid, profile_caps
from ecolaunch.sim.interference import fit_gavel, gavel_set, impute_held_type
from ecolaunch.sim.models import gavel_solo, read_data_csv
from ecolaunch.sim.truth import TruthCurve, vendored_zeus_curves, zeus_truths, zeus_window_truths
from ecolaunch.sim.workloads import ASSUMED_MEMORY_MIB
from ecolaunch.state.graph import GpuNode, StateGraph

__all__ = ["BOARD", "FOLDS", "FOLD_SEED", "HeldOutPriors", "JobKind", "MeasuredWorld", "Noise", "held_out_prior",
           "holdout_key", "job_kinds", "link_speed_of", "measured_oracle", "network_of"]

BOARD = "V100-PCIE-16GB"
GAVEL_GPU = "v100"
#: the boards the measured world can play: catalogue name -> Gavel's GPU type and Zeus's board (the 100/125-250 W
#: PCIe cards Zeus swept; 16 GB, as Gavel's)
BOARDS = {"V100-PCIE-16GB": "v100", "P100-PCIE-16GB": "p100"}
FOLDS = 5
#: the seed of the one deal of job types into folds (independent of a world's ``seed``)
FOLD_SEED = 1000
#: seconds a job that cannot share (a pair Gavel could not run) runs before it fails and is queued again
OOM_AFTER_S = 60.0
#: iterations a profiled cap is measured over (the profiler's window)
PROFILE_ITERS = 30
#: iterations the closed loop is played for after a job starts (its moves settle within a few hundred)
CONTROL_ITERS = 600


@dataclass(frozen=True, slots=True)
class JobKind:
    """One Gavel job type with what was measured of it, and where its curve came from
    (docs/simulator.md#what-the-measured-world-assumes)."""

    name: str
    solo_its: float  # iterations/s alone on V100 (Gavel)
    curve: TruthCurve  # its cap curve (Zeus, the board's)
    curve_source: str  # where the curve came from: "measured: ..." or "rank-matched stand-in: ..."
    pair_loss: float  # 1 - mean normalized throughput over the pairs the world plays (trustworthy values only)

    @property
    def iter_time_s(self) -> float:
        return 1.0 / self.solo_its

    @property
    def power_w(self) -> float:
        return self.curve.power_w(self.curve.max_cap_w)

    def time_ratio(self, cap_w: float) -> float:
        """True time per iteration at ``cap_w`` over uncapped (>= 1)."""
        c = self.curve
        return c.iter_time_s(min(cap_w, c.max_cap_w)) / c.iter_time_s(c.max_cap_w)


@functools.lru_cache(maxsize=4)
def _pairs(gpu: str = GAVEL_GPU) -> Mapping[tuple[str, str], tuple[float, float]]:
    """Measured normalized throughputs of both jobs on Gavel's ``gpu``, by ordered pair of types (both orders): only
    the pairs whose two values are trustworthy (docs/simulator.md#what-the-measured-world-assumes: a pair holding a
    copy of a solo throughput is not played, as :meth:`GavelSet.usable
    <ecolaunch.sim.interference.GavelSet.usable>` marks copies for training)."""
    data = gavel_set((gpu,))
    use_a, use_b = data.usable("values")
    out = {}
    for i, j, xa, xb, ok in zip(data.a, data.b, data.obs_a, data.obs_b, use_a & use_b):
        if ok:
            a, b = data.keys[i][1], data.keys[j][1]
            out[(a, b)] = (float(xa), float(xb))
            out[(b, a)] = (float(xb), float(xa))
    return out


@functools.lru_cache(maxsize=1)
def _multi_gpu() -> Mapping[tuple[str, int], tuple[float, float]]:
    """Gavel's V100 multi-GPU throughputs: (type, GPUs) -> (one server, spread over servers), iterations/s."""
    return {(r["job_type"], int(r["scale_factor"])): (float(r["consolidated"]), float(r["unconsolidated"]))
            for r in read_data_csv("gavel_multi_gpu.csv") if r["gpu"] == GAVEL_GPU}


def _own_curve(name: str, board: str, summary: Mapping[str, TruthCurve], windows: Mapping[str, TruthCurve]
               ) -> tuple[TruthCurve, str] | None:
    """The measured curve of the type's own network on ``board`` (``"V100"``) and its source; None: Zeus has none."""
    if name.startswith("ResNet-50 (batch size "):
        batch = name.split("batch size ")[1].rstrip(")")
        c = summary.get(f"{board} imagenet/resnet50 bs{batch}")
        if c is not None:
            return c, f"measured: Zeus sweep {c.name} (same network and batch size)"
    if name.startswith("ResNet-18 (batch size "):
        c = windows.get(f"{board} resnet18")
        if c is not None:
            return c, f"measured: Zeus profile window {c.name} (same network; batch size not recorded, every " \
                      "batch size plays it)"
    return None


@functools.lru_cache(maxsize=4)
def job_kinds(gavel_gpu: str = GAVEL_GPU) -> Mapping[str, JobKind]:
    """Every Gavel job type on ``gavel_gpu`` (``v100``, ``p100``) with its cap curve on that board (docs/simulator.md:
    its own network's measured curve, else a rank-matched stand-in); ``curve_source`` says which."""
    solo = {job: tp for (gpu, job), tp in gavel_solo().items() if gpu == gavel_gpu}
    pairs = _pairs(gavel_gpu)
    loss = {}
    for name in solo:
        own = [x for (a, _), (x, _) in pairs.items() if a == name]
        loss[name] = 1.0 - float(np.mean(own)) if own else 0.0
    prefix = gavel_gpu.upper()
    curves = [c for c in zeus_truths() if c.name.startswith(prefix + " ")]
    windows = {c.name: c for c in zeus_window_truths()}
    measured = {n: m for n in solo if (m := _own_curve(n, prefix, {c.name: c for c in curves}, windows))}
    rest_types = sorted((n for n in solo if n not in measured), key=lambda n: (loss[n], n))
    taken = {c for c, _ in measured.values()}
    rest_curves = sorted((c for c in curves if c not in taken),
                         key=lambda c: (c.power_w(c.max_cap_w) / c.max_cap_w, c.name))
    out = {}
    for i, name in enumerate(rest_types):
        c = rest_curves[round(i / max(1, len(rest_types) - 1) * (len(rest_curves) - 1))]
        out[name] = JobKind(name, solo[name], c, f"rank-matched stand-in: Zeus sweep {c.name} (no {prefix} curve "
                            "of its network; matched by pair loss to uncapped power)", loss[name])
    for name, (c, source) in measured.items():
        out[name] = JobKind(name, solo[name], c, source, loss[name])
    return {n: out[n] for n in solo}


def network_of(curve: TruthCurve) -> str:
    """The network of a Zeus curve, whatever its dataset and batch size (``"V100 imagenet/resnet50 bs64"``:
    ``"resnet50"``; the profile window ``"V100 resnet18"``: ``"resnet18"``)."""
    return curve.name.split(" ")[1].split("/")[-1]


def played_networks(kind: str) -> frozenset[str]:
    """The networks whose Zeus curves the type plays, on every board the world has."""
    return frozenset(network_of(job_kinds(gpu)[kind].curve) for gpu in BOARDS.values())


@functools.lru_cache(maxsize=64)
def _prior_without(networks: frozenset[str]) -> CapPrior:
    keep = [c.points for c in vendored_zeus_curves() if c.workload.split("/")[-1] not in networks]
    return CapPrior.fit(keep, source=f"Zeus curves without {', '.join(sorted(networks))} ({len(keep)} curves)")


def held_out_prior(kind: str) -> CapPrior:
    """The cap-curve prior a job of type ``kind`` is read with: :meth:`CapPrior.fit
    <ecolaunch.jobmodel.capcurve.CapPrior.fit>` on the Zeus curves (every GPU) of no network the type plays
    (:func:`played_networks`; docs/simulator.md)."""
    return _prior_without(played_networks(kind))


class HeldOutPriors:
    """The :data:`~ecolaunch.jobmodel.capcurve.Priors` of a trace: job id -> :func:`held_out_prior` of its type
    (``kind_of``: job id -> type)."""

    def __init__(self, kind_of: Mapping[str, str]) -> None:
        self.kind_of = dict(kind_of)

    def __repr__(self) -> str:
        return f"HeldOutPriors({len(self.kind_of)} jobs)"

    def __call__(self, job_id: str) -> CapPrior:
        return held_out_prior(self.kind_of[job_id])


@dataclass(frozen=True, slots=True)
class Noise:
    """Relative standard deviations of what is read (fractions), and of utilization (percentage points).

    Readings are drawn afresh at every reading, but for ``persistent_time``: the part of a profiled window's time
    error that repeats in every run of the same job type on the same board at the same cap, drawn once per world
    seed and (type, board, cap) (:meth:`MeasuredWorld.persistent_time_error`), so averaging windows of repeated runs
    does not remove it. The defaults and where they come from: docs/simulator.md#what-the-measured-world-assumes."""

    time: float = 0.01
    power: float = 0.02
    iteration: float = 0.03
    util_pp: float = 5.0
    persistent_time: float = 0.023


@dataclass(slots=True)
class _Known:
    """What history holds of one (user, job type): the profile the next launch arrives with."""

    points: list[CapPoint]
    util_pct: float
    power_w: float
    iter_time_s: float
    runs: int = 1  # launches of it so far, this one included
    updated: int = 0  # when history last stored it (the world's count of stores): first launches take the newest


def link_speed_of(slowdown_pct: float) -> float:
    """The share of its speed a job keeps on a worse-linked set that runs it ``slowdown_pct`` % slower (its time
    times 1 + slowdown / 100): :attr:`MeasuredWorld.link_speed` of a lab's ``--link-slowdown``."""
    return 1.0 / (1.0 + slowdown_pct / 100.0)


@dataclass
class MeasuredWorld:
    """The truth of the measured tables, and the noisy views of it (docs/simulator.md#the-measured-world).

    One world serves one simulation run (it keeps history). ``kind_of`` maps a trace job's ``kind`` to a Gavel
    type name; a trace job's ``kind`` must be one of :func:`job_kinds`.
    """

    seed: int = 0
    noise: Noise = field(default_factory=Noise)
    board: str = BOARD
    max_jobs_per_gpu: int = 2
    oom_after_s: float = OOM_AFTER_S
    #: the share of its speed every multi-GPU job keeps on GPUs linked worse than the best set of its size: a lab's
    #: own figure (``ecolaunch calibrate --links``' ``speed_kept``); None: Gavel's per type (:meth:`link_factor`)
    link_speed: float | None = None

    def __post_init__(self) -> None:
        if self.link_speed is not None and not 0 < self.link_speed <= 1:
            raise ConfigError(f"a split set's share of speed must be in (0, 1], got {self.link_speed!r}",
                              hint="give the link slowdown as a percentage >= 0")
        self.kinds = job_kinds()  # the reference board's (V100): folds, and the speed work_s is counted at
        self.model: GpuModel = lookup(self.board)
        self._boards = {name: (lookup(name), job_kinds(gpu)) for name, gpu in BOARDS.items()}
        self._rng = np.random.default_rng(self.seed)
        self._history: dict[tuple[str, str], _Known] = {}
        self._fold_of = self._deal_folds()
        self._demand_cache: dict[int, Mapping[str, float]] = {}
        self.first_launches = 0
        self.repeat_launches = 0
        #: first launches that started from a colleague's profile of the same job (:meth:`adopt_colleague`)
        self.adopted_launches = 0
        #: of those, the runs whose own reference window contradicted it (their loop dropped it: :meth:`settle_cap`)
        self.disowned_launches = 0
        self._stores = 0  # history's stores so far (:attr:`_Known.updated`)
        self.oom_failures = 0
        #: (job type, covered, at a measured cap, run index) of every capped job alone on its GPUs:
        #: :meth:`record_coverage`
        self.coverage: list[tuple[str, bool, bool, int]] = []

    # --- folds ---------------------------------------------------------------------------------------
    def _deal_folds(self) -> dict[str, int]:
        names = sorted(self.kinds)
        order = np.random.default_rng(FOLD_SEED).permutation(len(names))
        return {names[i]: k % FOLDS for k, i in enumerate(order)}

    def fold_of(self, kind: str) -> int:
        return self._fold_of[kind]

    def fold_types(self, fold: int) -> tuple[str, ...]:
        """The job types of ``fold``: what a model used on those types must be trained without."""
        return tuple(sorted(n for n, f in self._fold_of.items() if f == fold))

    def fold_curves(self, fold: int) -> tuple[TruthCurve, ...]:
        """The Zeus sweeps the GNN of ``fold`` is trained without: on each board the world has, every sweep (all
        batch sizes and datasets) of each network a type of the fold plays there. Training reads no profile window,
        so the ResNet-18 window needs no hold-out. The same networks on the boards the world does not have (A40,
        RTX 6000) stay: held out there too, two folds would keep no Zeus curve at all (their types play all five
        networks), and training could not fit the cap model its synthetic states are labelled with."""
        held = {(table[n].curve.name.split(" ")[0], network_of(table[n].curve)) for _, table in self._boards.values()
                for n in self.fold_types(fold)}
        return tuple(c for c in zeus_truths() if (c.name.split(" ")[0], network_of(c)) in held)

    def priors(self, kind_of: Mapping[str, str]) -> HeldOutPriors:
        """The curve priors of a trace's jobs (``kind_of``: job id -> type): what every reader of a curve uses."""
        return HeldOutPriors(kind_of)

    def job_kind(self, kind: str, board: str | None = None) -> JobKind:
        """A type's measurements on ``board``."""
        return self._board(board)[1][kind]

    def board_model(self, board: str | None = None) -> GpuModel:
        """The catalogue's model of ``board`` (its power limits)."""
        return self._board(board)[0]

    def _demand(self, kind: str) -> float:
        """The type's demand fitted on Gavel pairs without its fold (its own interpolated)."""
        fold = self._fold_of[kind]
        if fold not in self._demand_cache:
            data = gavel_set()
            held_names = set(self.fold_types(fold))
            held = np.array([data.keys[i][1] in held_names or data.keys[j][1] in held_names
                             for i, j in zip(data.a, data.b)])
            fit = fit_gavel(train=~held)
            d = impute_held_type(data, np.array([fit.demands[k] for k in data.keys]), held)
            self._demand_cache[fold] = {job: float(v) for (gpu, job), v in zip(data.keys, d) if gpu == GAVEL_GPU}
        return self._demand_cache[fold][kind]

    # --- the truth -------------------------------------------------------------------------------------
    def link_factor(self, kind: str, nproc: int, best: bool) -> float:
        """The speed a multi-GPU job keeps on GPUs linked worse than the best set of its size on the host
        (``best``: they are as well linked as any): Gavel's measured unconsolidated / consolidated throughput of
        its type and size (1.0 when unmeasured), or :attr:`link_speed` for every type and size when set."""
        if nproc < 2 or best:
            return 1.0
        if self.link_speed is not None:
            return self.link_speed
        pair = _multi_gpu().get((kind, nproc))
        return 1.0 if pair is None else min(1.0, pair[1] / pair[0])

    def _board(self, board: str | None) -> tuple[GpuModel, Mapping[str, JobKind], str]:
        name = board or self.board
        if name not in self._boards:
            raise ConfigError(f"the measured world has no measurements of a {name}",
                              hint=f"use one of {', '.join(BOARDS)}")
        model, kinds = self._boards[name]
        return model, kinds, BOARDS[name]

    def board_of(self, gpu_name: str) -> str:
        """The catalogue name of a GPU as the state graph names it (NVML's name, e.g. "Tesla V100-PCIE-16GB")."""
        for name, (model, _) in self._boards.items():
            if gpu_name in (name, model.full_name):
                return name
        raise ConfigError(f"the measured world has no measurements of a {gpu_name}",
                          hint=f"use one of {', '.join(BOARDS)}")

    def speed_factor(self, kind: str, board: str | None = None) -> float:
        """The type's solo speed on ``board`` against on the reference board (Gavel's measured throughputs): the
        rate at which a job's work, counted at the reference board's solo speed, gets done there."""
        return self._board(board)[1][kind].solo_its / self.kinds[kind].solo_its

    def feasible(self, kinds: Sequence[str], board: str | None = None) -> bool:
        """Whether these job types can run together on one GPU (measured by Gavel on that board)."""
        if len(kinds) <= 1:
            return True
        if len(kinds) > 2:
            return False
        return (kinds[0], kinds[1]) in _pairs(self._board(board)[2])

    def gpu_load(self, kinds: Sequence[str], cap_w: float | None, board: str | None = None
                 ) -> tuple[list[float], float, float, list[float]]:
        """Truth on one GPU of ``board`` (default: the world's): each job's normalized throughput (1 = alone and
        uncapped on that board), the board power, its floor (idle) and each job's dynamic power. Infeasible sets run
        as if each were alone (they fail at :data:`OOM_AFTER_S`)."""
        model, table, gpu = self._board(board)
        idle = float(model.idle_power_w)
        limit = float(model.power_limit_max_w)
        if not kinds:
            return [], idle, idle, []
        jobs = [table[k] for k in kinds]
        if len(jobs) == 1 or not self.feasible(kinds, board):
            x = [1.0] * len(jobs)
        else:
            x = list(_pairs(gpu)[(kinds[0], kinds[1])])
        dyn = [max(0.0, j.power_w - idle) * xi for j, xi in zip(jobs, x)]
        total = min(limit, idle + sum(dyn))
        if sum(dyn) > 0 and idle + sum(dyn) > limit:
            dyn = [d * (limit - idle) / sum(dyn) for d in dyn]
        ratio = 1.0
        if cap_w is not None and cap_w < total:
            dom = max(range(len(jobs)), key=lambda i: dyn[i])
            j = jobs[dom]
            rel = cap_w * j.power_w / total  # the same fraction of its own power as the cap is of the board's draw
            ratio = j.time_ratio(rel)
            new_total = min(cap_w, total * j.curve.power_w(min(rel, j.curve.max_cap_w)) / j.power_w)
            scale = max(0.0, new_total - idle) / max(1e-9, total - idle)
            dyn = [d * scale for d in dyn]
            total = idle + sum(dyn)
        return [xi / ratio for xi in x], total, idle, dyn

    # --- what the policies see ---------------------------------------------------------------------------
    def request_profile(self, user: str, kind: str, board: str | None = None) -> Profile | None:
        """The profile a launch arrives with: history's for a repeat on ``board``, None for a first launch (history is
        per board model, as the launcher's fingerprints are)."""
        known = self._history.get((user, kind, board or self.board))
        if known is None:
            return None
        # the points as a policy reads them from the launcher's history: with how well each was measured (its
        # iterations and their spread), which sets the margins the policy keeps
        return Profile(known.iter_time_s, known.util_pct, None, _memory_mib(kind), known.power_w,
                       tuple(known.points))

    def true_profile(self, kind: str, board: str | None = None) -> Profile:
        """The type's profile on ``board`` as the truth has it (what only the oracle may read)."""
        m, table, _ = self._board(board)
        j = table[kind]
        points = tuple(CapPoint(c, j.iter_time_s * j.time_ratio(c), j.curve.power_w(min(c, j.curve.max_cap_w)))
                       for c in cap_grid(m.power_limit_min_w, m.power_limit_max_w, 25.0))
        return Profile(j.iter_time_s, None, None, _memory_mib(kind), j.power_w, points)

    def machine_history_profile(self, user: str, kind: str, board: str | None = None) -> Profile | None:
        """What the history of this machine holds of the type on ``board`` from *other* users (the same script run the
        same way by a colleague): the profile the one who stored last arrives with (as :meth:`request_profile` reads
        it), None when no other user has run it there."""
        newest = self._colleague(user, kind, board)
        return None if newest is None else self.request_profile(newest, kind, board)

    def _colleague(self, user: str, kind: str, board: str | None) -> str | None:
        """The other user whose history of the type on ``board`` was stored last (the launcher's
        :meth:`~ecolaunch.profile.history.History.colleague_profile` takes the newest), None when none ran it."""
        board = board or self.board
        others = [(known.updated, u) for (u, k, b), known in self._history.items()
                  if k == kind and b == board and u != user]
        return max(others)[1] if others else None

    def adopt_colleague(self, user: str, kind: str, board: str | None = None) -> bool:
        """A first launch of ``user`` whose job a colleague has run on ``board`` starts from the colleague's profile,
        as the launcher does (docs/profiling.md#a-colleagues-profile-of-the-same-job): a copy of what the colleague's
        history holds (every pooled window and what their loops measured) becomes the user's, which the run's closed
        loop then corrects; nothing is profiled. Returns whether there was one to adopt."""
        newest = self._colleague(user, kind, board)
        if newest is None:
            return False
        board = board or self.board
        theirs = self._history[(newest, kind, board)]
        self._history[(user, kind, board)] = _Known(list(theirs.points), theirs.util_pct, theirs.power_w,
                                                    theirs.iter_time_s, updated=self._stamp())
        self.adopted_launches += 1
        return True

    def _stamp(self) -> int:
        self._stores += 1
        return self._stores

    def is_first(self, user: str, kind: str, board: str | None = None) -> bool:
        return (user, kind, board or self.board) not in self._history

    def note_repeat(self, user: str, kind: str, board: str | None = None) -> None:
        """A launch of a job history knows (``user``, ``kind`` on ``board``): counted, its run index one more."""
        self.repeat_launches += 1
        self._history[(user, kind, board or self.board)].runs += 1

    def _noisy(self, value: float, sd: float) -> float:
        return value * (1.0 + sd * float(self._rng.standard_normal())) if sd > 0 else value

    def persistent_time_error(self, kind: str, board: str | None, cap_w: float) -> float:
        """The repeating part of a profiled window's relative time error for job type ``kind`` on ``board`` at
        ``cap_w`` (:attr:`Noise.persistent_time`): the same in every run of this world, drawn from a generator of its
        own keyed by the seed and the window, so the world's other draws are the same as without it."""
        if self.noise.persistent_time <= 0:
            return 0.0
        key = zlib.crc32(f"{kind}|{board or self.board}|{float(cap_w):.1f}".encode())
        return self.noise.persistent_time * float(np.random.default_rng([self.seed, key]).standard_normal())

    def profile_inline(self, user: str, kind: str, board: str | None = None) -> Profile | None:
        """A first launch's inline profile on ``board`` (three caps, noisy), stored in history; returns it."""
        m, table, _ = self._board(board)
        j = table[kind]
        t0 = j.iter_time_s
        top_power = self._noisy(j.power_w, self.noise.power)
        points = []
        for cap in profile_caps(m.power_limit_min_w, m.power_limit_max_w, top_power):
            repeats = 1.0 + self.persistent_time_error(kind, board, cap)  # the same in every run of this window
            points.append(CapPoint(cap, self._noisy(t0 * j.time_ratio(cap), self.noise.time) * repeats,
                                   self._noisy(j.curve.power_w(min(cap, j.curve.max_cap_w)), self.noise.power),
                                   PROFILE_ITERS, 100.0 * self.noise.iteration))
        util = min(100.0, max(1.0, 100.0 * self._demand(kind) + self.noise.util_pp * float(self._rng.standard_normal())))
        self._history[(user, kind, board or self.board)] = _Known(points, util, points[0].power_w,
                                                                  points[0].iter_time_s, updated=self._stamp())
        self.first_launches += 1
        return self.request_profile(user, kind, board)

    def settle_cap(self, user: str, kind: str, cap_w: float | None, rules: Rules, gpus: Sequence[GpuNode],
                   bound_pct: float, board: str | None = None, *, first: bool = False,
                   reference: bool = True, borrowed: bool = False) -> float | None:
        """The cap a job alone on ``gpus`` ends at: a first launch's profiler choice, then the real closed loop fed
        noisy iterations of the truth; what the loop measured goes to history. ``cap_w``: the decision's cap (None:
        uncapped); ``first``: the job was profiled inline at this start, so its profiler's choice from its own
        measurement sets the cap its closed loop starts from, whatever cap a curve it was told (a colleague's, a
        prediction) had it placed at, as the launcher's profiler does when it finishes. ``reference``: the loop may
        measure the uncapped reference for a window (the launcher's does when no budget's ceiling holds the cap
        below the top); its iterations there, as all of the loop's, carry no window error that repeats.
        ``borrowed``: the history's profile was adopted from a colleague at this start (:meth:`adopt_colleague`): the
        loop tests it against its own reference window, as the launcher's does, and keeps only its own measurements
        when they contradict it (:class:`~ecolaunch.caps.control.CapController`)."""
        known = self._history.get((user, kind, board or self.board))
        bounds = job_cap_bounds(rules, gpus)
        if known is None or bounds is None:
            return cap_w
        prior = held_out_prior(kind)
        if cap_w is None or first:
            cap_w = self.loop_cap(user, kind, rules, gpus, bound_pct, board)
            if cap_w is None:
                return None
        j = self._board(board)[1][kind]
        ctl = CapController(known.points, bounds, bound_pct, cap_w, rules=rules, prior=prior,
                            settings=ControlSettings(reference_window=reference), borrowed=borrowed)
        done, batch = 0, 10
        t0 = j.iter_time_s
        while done < CONTROL_ITERS:
            cap = ctl.cap_w
            mean = t0 * j.time_ratio(cap)
            times = mean * (1.0 + self.noise.iteration * self._rng.standard_normal(batch))
            power = self._noisy(j.curve.power_w(min(cap, j.curve.max_cap_w)), self.noise.power / 3)
            ctl.observe(times.tolist(), power)
            done += batch
        self.disowned_launches += ctl.disowned is not None
        known.points = list(merge_points([*(() if ctl.disowned else known.points), *ctl.learned()]))
        known.updated = self._stamp()
        final = ctl.cap_w
        return None if final >= bounds[1] - 1e-9 else final

    def loop_cap(self, user: str, kind: str, rules: Rules, gpus: Sequence[GpuNode], bound_pct: float,
                 board: str | None = None, *, waiting: float = 0.0) -> float | None:
        """The cap a running job's closed loop chooses on what its history knows of it (profiled points and what its
        loops learned) with ``waiting`` jobs delayed by its slowdown counted (``[energy] wait_weight``,
        :func:`~ecolaunch.jobmodel.capchoice.queue_eta`); None: uncapped, or nothing known."""
        known = self._history.get((user, kind, board or self.board))
        bounds = job_cap_bounds(rules, gpus)
        if known is None or bounds is None:
            return None
        choice = job_cap_choice(known.points, bounds, bound_pct, queue_eta(rules.eta, rules.wait_weight, waiting),
                                prior=held_out_prior(kind))
        return None if choice is None or choice.cap_w >= bounds[1] - 1e-9 else choice.cap_w

    def record_coverage(self, user: str, kind: str, cap_w: float, bounds: tuple[float, float],
                        board: str | None = None) -> bool | None:
        """Whether the type's true slowdown at ``cap_w`` stays within what the job's history (the curve its launcher
        reads: profiled points and what the closed loop learned) predicts there plus the margin the cap choice keeps
        back (:func:`~ecolaunch.jobmodel.capchoice.cap_margin_pct`); kept in :attr:`coverage` as ``(kind, covered,
        measured, run)``, ``measured``: the history holds a point measured at ``cap_w`` (where the margin is measurement
        error alone, no curve between caps), ``run`` the run index (1: the job's first launch on that board, 2: its
        first repeat, ...). None (nothing kept): no history, or ``cap_w`` at the top of ``bounds`` (uncapped: nothing
        predicted)."""
        known = self._history.get((user, kind, board or self.board))
        if known is None or cap_w >= bounds[1] - 1e-9:
            return None
        model = fit_curve(known.points, held_out_prior(kind))
        predicted = 100.0 * (model.predict(cap_w).iter_time_s / model.predict(bounds[1]).iter_time_s - 1.0)
        j = self._board(board)[1][kind]
        true = 100.0 * (j.time_ratio(cap_w) / j.time_ratio(bounds[1]) - 1.0)
        covered = true <= predicted + cap_margin_pct(model, cap_w) + 1e-9
        measured = any(abs(p.power_cap_w - cap_w) < 1e-6 for p in model.points)
        self.coverage.append((kind, covered, measured, known.runs))
        return covered


def holdout_key(curve: TruthCurve) -> str:
    """The Zeus curve's key as :func:`ecolaunch.learn.train.train` takes it in ``holdout_zeus``
    (``"v100:imagenet/resnet50:64"``: GPU, dataset/network, batch size)."""
    gpu, workload, batch = curve.name.split(" ")
    return f"{gpu.lower()}:{workload}:{batch.removeprefix('bs')}"


def _memory_mib(kind: str) -> int:
    return ASSUMED_MEMORY_MIB[kind]


# --- the hindsight oracle on the measured truth ---------------------------------------------------------------

class MeasuredTruthPredictor:
    """Predicts with the measured truth itself: exact, no policy a launcher could run (the upper bound)."""

    name = "measured-truth"

    def __init__(self, world: MeasuredWorld, kind_of: Mapping[str, str]) -> None:
        self.world, self.kind_of = world, kind_of

    def __repr__(self) -> str:
        return "MeasuredTruthPredictor()"

    def scorer(self, state: StateGraph, job: JobRequest) -> _TruthScorer:
        return _TruthScorer(self, state, job)


class _TruthScorer:
    def __init__(self, p: MeasuredTruthPredictor, state: StateGraph, job: JobRequest) -> None:
        self._p, self._state, self._job = p, state, job

    def _kind(self, job_id: str) -> str:
        return self._p.kind_of[job_id]

    def _outcome(self, gpus: Sequence[str], caps: Sequence[float | None], new: str | None) -> Outcome:
        host = self._state.hosts[self._job.host]
        thr: dict[str, float] = {}
        power: dict[str, float] = {}
        for u, cap in zip(gpus, caps):
            node = host.gpus[u]
            ids = [j.id for j in self._state.jobs_on(u)] + ([new] if new else [])
            if cap is None and node.power_limit_w is not None and node.power_limit_max_w is not None \
                    and node.power_limit_w < node.power_limit_max_w:
                cap = node.power_limit_w
            kinds = [self._kind(i) for i in ids]
            board = self._p.world.board_of(node.name)
            if not self._p.world.feasible(kinds, board):
                for i in ids:
                    thr[i] = 0.0
                power[u] = float(node.power_limit_max_w or 0.0)
                continue
            x, p, _, _ = self._p.world.gpu_load(kinds, cap, board)
            power[u] = p
            for i, xi in zip(ids, x):
                thr[i] = min(xi, thr.get(i, xi))
        return Outcome(thr, power)

    def alone_cap(self, job: JobRequest, gpus: Sequence[GpuNode], rules: Rules) -> tuple[float | None, str | None]:
        """The least true energy per work within the bound, alone on ``gpus`` (known with or without a profile:
        the oracle knows every job)."""
        bounds = job_cap_bounds(rules, gpus)
        if bounds is None:
            return None, None
        world = self._p.world
        kinds = [world.job_kind(self._kind(job.id), world.board_of(g.name)) for g in gpus]

        def at(cap: float) -> tuple[float, float]:  # slowdown (the slowest board) and energy per work, every GPU
            r = max(k.time_ratio(cap) for k in kinds)
            return r, r * sum(k.curve.power_w(min(cap, k.curve.max_cap_w)) for k in kinds)

        _, base = at(bounds[1])
        best, best_cost = None, base
        for cap in cap_grid(bounds[0], bounds[1], CHOICE_STEP_W):
            r, cost = at(cap)
            if 100.0 * (r - 1.0) <= job.allowed_slowdown_pct + 1e-9 and cost < best_cost:
                best, best_cost = cap, cost
        if best is None or 100.0 * (1.0 - best_cost / base) < MIN_SAVING_PCT:
            return None, None
        return best, None

    def predict(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        out = []
        host = self._state.hosts[self._job.host]
        for c in candidates:
            o = self._outcome(c.gpus, c.caps_w, self._job.id)
            best = worst_link(host, list(c.gpus)) <= best_link(host, len(c.gpus))
            o.throughput[self._job.id] *= self._p.world.link_factor(self._kind(self._job.id), len(c.gpus), best)
            out.append(o)
        return out

    def current(self, gpus: Sequence[str]) -> Outcome:
        merged = Outcome({}, {})
        for u in gpus:
            out = self._outcome((u,), (None,), None)
            merged.gpu_power_w.update(out.gpu_power_w)
            for k, x in out.throughput.items():
                merged.throughput[k] = min(x, merged.throughput.get(k, x))
        return merged


def measured_oracle(world: MeasuredWorld, kind_of: Mapping[str, str]):
    """The oracle of the measured world: energy-aware placement predicting with the truth, no margin, with every
    lever a launcher's policy has: a multi-GPU job holds out for a best-linked set as ``curve-link``'s does
    (:class:`~ecolaunch.policy.linkwait.LinkWait`, on the true lengths the oracle knows), under the admin's power
    budget, when there is one, like every policy, which reads the jobs' curves with :class:`HeldOutPriors`."""
    return BudgetedPolicy(LinkWait(EnergyAwarePolicy(MeasuredTruthPredictor(world, kind_of), name="oracle",
                                                     margin_pct=0.0)), HeldOutPriors(kind_of))
