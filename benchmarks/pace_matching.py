"""Pace-matching caps (:mod:`_pace`, beside this script) on synchronous jobs over a V100 and a P100, in the measured
world: GPU energy and iteration time against the job's own cap, uncapped, a skeptic's one-line rules and the
hindsight oracle, as means over seeds with their 95 % intervals.

    python benchmarks/pace_matching.py [--seeds 5] [--first-seed 0] [--bound 10] [--size 1+1 --size 2+2]
                                       [--kind NAME ...] [--json] [--out benchmarks/results]

**Jobs.** One synchronous data-parallel job per Gavel job type that the measured world plays with a *measured* cap
curve on both boards (:func:`ecolaunch.sim.measured.job_kinds`, whose ``curve_source`` says so; no stand-in curve
is used here: today the four ResNet-50 batch sizes, Zeus's ImageNet ResNet-50 sweeps at the same batch size), over
``V`` V100 PCIe and ``P`` P100 PCIe GPUs for each ``--size V+P``. Truth (what scores): a rank's compute time at a
cap is its type's Gavel solo iteration time on its board times its board's Zeus time ratio at that cap, its power
there Zeus's measured board power (:class:`ecolaunch.sim.measured.JobKind`, both interpolated, never fitted); the
iteration time is the slowest rank's compute time. Every rank of a board computes alike, so ``1+1`` and ``2+2``
give the same percentages (the energies double); the all-reduce's own time, the same for every rank and every
row, is not modelled (it would add waiting at every row and dilute each percentage the same way).

**What the decisions see.** On each seed the world profiles the type on each board once, inline and noisy
(:meth:`ecolaunch.sim.measured.MeasuredWorld.profile_inline`: three caps, the world's :class:`~ecolaunch.sim.
measured.Noise`); each board's curve is fitted from its profile with the type's held-out prior
(:func:`~ecolaunch.sim.measured.held_out_prior`). The seed varies only that noise, so the rows differ by seed
through their decisions; the truth that scores them is deterministic.

**Rows** (per-rank caps; "fast" ranks: those whose board the profiles predict faster than the slowest at the job's
cap):

- ``uncapped``: every GPU at its board's maximum.
- ``job-cap``: every GPU at the job's own cap (:func:`~ecolaunch.jobmodel.capchoice.job_cap_choice` on the slowest
  board's profile, within the caps every GPU allows, at ``--bound`` % slowdown: the one cap the launcher sets today).
- ``pace``: ``job-cap``, then :func:`~_pace.pace_caps` (each fast rank down to the slowest rank's
  pace, with the cap choice's margin), deciding under the same waiting-power bound it is scored under.
- ``pace-no-margin``: the ablation: the same with no margin (``z = 0``).
- ``pace-feedback``: what the launcher does (:class:`~ecolaunch.profile.pacing.PaceController`, no curve): from
  ``job-cap``, windows of ``WINDOW_ITERS`` iterations with the world's per-iteration noise; each window it reads
  every rank's all-reduce span and the mean iteration time and lowers (or undoes) one GPU's cap, for at most
  ``FEEDBACK_WINDOWS`` windows or until three windows make no move.
- ``same-tdp-fraction``: the skeptic's rule: each fast GPU at the same fraction of its board's default limit (TDP)
  as the slowest GPU's cap, on the 5 W grid. Both boards here have a 250 W TDP, so it equals ``job-cap``.
- ``fast-board-min``: the skeptic's other rule: each fast GPU at its board's lowest allowed cap.
- ``pace-oracle``: pace-matching on the truth (each fast rank at the grid cap with the least true energy whose true
  time stays within the true pace): the most pace-matching could give.

**What a waiting GPU draws** is measured by no source in ``../shared/data`` (Zeus's sweeps and the H200 sweep record
power while computing), so every figure is given under both bounds of :class:`~_pace.WaitPower`:
``idle`` (the catalogue's idle power of the board, itself an assumption: ``ecolaunch/devices/catalogue.py``) and
``at-cap`` (the power the rank draws computing at its cap).

**Figures.** Energy per iteration of each job and the iteration time, per row; ``total`` sums the energies of
every job and size of a seed (each job running the same number of iterations). Savings and time changes are
against ``job-cap`` and against ``uncapped`` on the same seed; each figure is the mean over seeds ± the half-width of
its 95 % interval (Student's t, :func:`_common.mean_ci95`). The issue's goal: ``pace`` >= 5 % less GPU energy than
``job-cap`` with the iteration time within +1 %, under both bounds (``goal_met``: the interval's low end of the saving
and its high end of the time change, at the worse bound). ``--json`` prints::

    {"seeds": [...], "bound_pct": B, "sizes": ["1+1", ...], "kinds": [...],
     "wait_power": {"idle_w": {BOARD: W}, "source": "..."},
     "mixed": {"gpu_energy_saving_pct": mean at the worse bound, "gpu_energy_saving_ci95": ...,
               "iter_time_change_pct": mean at the worse bound, "iter_time_change_ci95": ...,
               "worse_bound": "idle" | "at-cap", "goal": "...", "goal_met": bool,
               "by_wait_power": {BOUND: {"total": {ROW: {FIGURE: {"mean", "ci95", "per_seed"}}},
                                         "jobs": {KIND: {SIZE: {ROW: {FIGURE: {"mean", "ci95"}},
                                                                "caps_w": {ROW: {BOARD: mean cap}}}}}}}},
     "multinode": {"nodes": 2, "same_plan": bool, "plan": "...", "exit_codes": [...], "caps_w": {SPEC: [...]},
                   "slowdown_pct": ..., "bound_pct": ..., "within_bound": bool, "wall_s": ..., "how": "..."}}

``multinode`` (``--no-multinode`` skips it) comes from two real launchers on localhost, a 2xA100 and a 2xV100
simulated node, one worker each, through torch's static rendezvous (:func:`multinode`): whether they agreed one plan
(:mod:`ecolaunch.launch.nodes`), the caps each set and the slowdown those predict. Simulated caps do not slow CPU
workers: it checks the protocol, not the speed.

``FIGURE``: ``saving_vs_job_pct``, ``saving_vs_uncapped_pct``, ``iter_time_vs_job_pct``,
``iter_time_vs_uncapped_pct``. With ``--out DIR`` it also writes ``pace_matching.json`` and ``pace_matching.md``
there (``pace_matching_bound<B>.*`` for another bound than the admin policy's default; nothing is written without
``--out``). ``--bound 0`` gives the job no cap of its own: pace-matching alone, Perseus's setting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np

from _common import emit, mean_ci95
from _pace import RankCurve, WaitPower, pace_caps, rank_energy_j

from ecolaunch.admin.rules import Rules, cap_bounds_w
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.jobmodel.capcurve import fit_curve
from ecolaunch.profile.pacing import WINDOW_ITERS, PaceController
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, job_cap_choice
from ecolaunch.jobmodel.powercap import cap_grid
from ecolaunch.sim.measured import BOARDS, MeasuredWorld, held_out_prior, job_kinds
from ecolaunch.state.graph import GpuNode

FAST, SLOW = "V100-PCIE-16GB", "P100-PCIE-16GB"  # the boards of a mixed job, in rank order
ROWS = ("uncapped", "job-cap", "pace", "pace-no-margin", "pace-feedback", "same-tdp-fraction", "fast-board-min",
        "pace-oracle")
#: windows the feedback controller runs for at most (each of WINDOW_ITERS iterations)
FEEDBACK_WINDOWS = 60
FIGURES = ("saving_vs_job_pct", "saving_vs_uncapped_pct", "iter_time_vs_job_pct", "iter_time_vs_uncapped_pct")
GOAL_SAVING_PCT, GOAL_TIME_PCT = 5.0, 1.0
USER = "bench"


def measured_kinds() -> list[str]:
    """The Gavel types the measured world plays with a measured curve (its own network's Zeus curve) on both boards."""
    tables = [job_kinds(gpu) for gpu in (BOARDS[FAST], BOARDS[SLOW])]
    return [k for k in tables[0] if all(k in t and t[k].curve_source.startswith("measured:") for t in tables)]


def parse_size(text: str) -> tuple[int, int]:
    try:
        v, p = (int(x) for x in text.split("+"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be V+P GPU counts such as 2+2, got {text!r}") from None
    if v < 1 or p < 1:
        raise argparse.ArgumentTypeError(f"a mixed job needs at least one GPU of each board, got {text!r}")
    return v, p


class Job:
    """One mixed job on one seed: its ranks' boards, what the profiles say of each board, and the truth."""

    def __init__(self, world: MeasuredWorld, kind: str, size: tuple[int, int], bound_pct: float, rules: Rules,
                 profiles: dict) -> None:
        self.world, self.kind = world, kind
        self.boards = [FAST] * size[0] + [SLOW] * size[1]
        self.names = [f"{b.split('-')[0]}#{i}" for i, b in enumerate(self.boards)]
        models = {b: world.board_model(b) for b in set(self.boards)}
        gpus = [GpuNode(f"GPU-{i}", i, models[b].full_name, models[b].memory_mib,
                        power_limit_min_w=models[b].power_limit_min_w, power_limit_max_w=models[b].power_limit_max_w,
                        power_limit_w=models[b].power_limit_max_w) for i, b in enumerate(self.boards)]
        self.bounds = {b: cap_bounds_w(rules, m.full_name, 0, m.power_limit_min_w, m.power_limit_max_w)
                       for b, m in models.items()}
        self.idle_w = {b: float(m.idle_power_w) for b, m in models.items()}
        self.tdp_w = {b: float(m.power_limit_default_w) for b, m in models.items()}
        prior = held_out_prior(kind)
        self.curves = {b: fit_curve(profiles[(kind, b)].cap_points, prior) for b in set(self.boards)}
        slowest = max(set(self.boards), key=lambda b: self.curves[b].predict(self.bounds[b][1]).iter_time_s)
        job_bounds = job_cap_bounds(rules, gpus)
        choice = job_cap_choice(profiles[(kind, slowest)].cap_points, job_bounds, bound_pct, rules.eta, prior=prior)
        self.slowest = slowest
        self.job_cap_w = job_bounds[1] if choice is None else choice.cap_w
        self.start = [self._clip(b, self.job_cap_w) for b in self.boards]
        pace_at = max(self.curves[b].predict(c).iter_time_s for b, c in zip(self.boards, self.start))
        self.fast = [self.curves[b].predict(c).iter_time_s < pace_at for b, c in zip(self.boards, self.start)]

    def _clip(self, board: str, cap_w: float) -> float:
        lo, hi = self.bounds[board]
        return min(hi, max(lo, cap_w))

    # --- the truth ----------------------------------------------------------------------------------
    def true_time_s(self, board: str, cap_w: float) -> float:
        j = self.world.job_kind(self.kind, board)
        return j.iter_time_s * j.time_ratio(cap_w)

    def true_power_w(self, board: str, cap_w: float) -> float:
        c = self.world.job_kind(self.kind, board).curve
        return c.power_w(min(cap_w, c.max_cap_w))

    def score(self, caps: list[float], wait: WaitPower) -> tuple[float, float]:
        """True (iteration time s, GPU energy per iteration J) with these per-rank caps."""
        times = [self.true_time_s(b, c) for b, c in zip(self.boards, caps)]
        t = max(times)
        energy = 0.0
        for b, c, ti in zip(self.boards, caps, times):
            p = self.true_power_w(b, c)
            energy += rank_energy_j(ti, p, t, wait.power_w(self.idle_w[b], p))
        return t, energy

    # --- the rows -----------------------------------------------------------------------------------
    def caps(self, row: str, wait: WaitPower) -> list[float]:
        if row == "uncapped":
            return [self.bounds[b][1] for b in self.boards]
        if row == "job-cap":
            return list(self.start)
        if row in ("pace", "pace-no-margin"):
            ranks = [RankCurve(n, self.curves[b], self.bounds[b], c, self.idle_w[b])
                     for n, b, c in zip(self.names, self.boards, self.start)]
            return list(pace_caps(ranks, wait_power=wait, **({"z": 0.0} if row == "pace-no-margin" else {})).caps_w)
        if row == "same-tdp-fraction":
            share = self.job_cap_w / self.tdp_w[self.slowest]
            return [self._clip(b, CHOICE_STEP_W * round(share * self.tdp_w[b] / CHOICE_STEP_W)) if f else c
                    for b, c, f in zip(self.boards, self.start, self.fast)]
        if row == "fast-board-min":
            return [self.bounds[b][0] if f else c for b, c, f in zip(self.boards, self.start, self.fast)]
        if row == "pace-oracle":
            return self._oracle(wait)
        if row == "pace-feedback":
            return self._feedback()
        raise ValueError(f"unknown row {row!r}")

    def _feedback(self) -> list[float]:
        """What the launcher does (:class:`~ecolaunch.profile.pacing.PaceController`): from the job's cap, every
        window of ``WINDOW_ITERS`` iterations it reads each rank's all-reduce span (the true iteration time minus the
        rank's true compute time) and the window's mean iteration time, both with the world's per-iteration noise,
        and lowers or undoes one GPU's cap. It sees no curve: it needs no profile of each board."""
        rng = np.random.default_rng(zlib.crc32(f"{self.world.seed}|{self.kind}|{len(self.boards)}".encode()))
        sd = self.world.noise.iteration
        caps = {n: c for n, c in zip(self.names, self.start)}
        board = dict(zip(self.names, self.boards))
        pace = PaceController(self.names, dict(caps), {n: self.bounds[board[n]][1] for n in self.names},
                              lambda n, w: self._clip(board[n], w))
        quiet = 0
        for _ in range(FEEDBACK_WINDOWS):
            compute = {n: self.true_time_s(board[n], pace.caps_w[n]) for n in self.names}
            iters = [max(compute[n] * (1 + sd * rng.standard_normal()) for n in self.names)
                     for _ in range(WINDOW_ITERS)]
            t = float(np.mean(iters))
            spans = {i: max(0.0, t - compute[n] * (1 + sd / np.sqrt(WINDOW_ITERS) * rng.standard_normal()))
                     for i, n in enumerate(self.names)}
            move = pace.decide(spans, t, float(np.std(iters, ddof=1) / np.sqrt(WINDOW_ITERS)))
            quiet = 0 if move is not None else quiet + 1
            if quiet >= 3:
                break
        return [pace.caps_w[n] for n in self.names]

    def _oracle(self, wait: WaitPower) -> list[float]:
        pace = max(self.true_time_s(b, c) for b, c in zip(self.boards, self.start))
        out = []
        for b, c in zip(self.boards, self.start):
            best, best_e = c, None
            for cap in cap_grid(self.bounds[b][0], c, CHOICE_STEP_W):
                t, p = self.true_time_s(b, cap), self.true_power_w(b, cap)
                e = rank_energy_j(t, p, pace, wait.power_w(self.idle_w[b], p))
                if t <= pace * (1 + 1e-12) and (best_e is None or e < best_e - 1e-12):
                    best, best_e = cap, e
            out.append(best)
        return out


def run(seeds: list[int], kinds: list[str], sizes: list[tuple[int, int]], bound_pct: float) -> dict:
    rules = Rules()
    # raw[wait][seed][(kind, size)][row] = (time s, energy J, caps)
    raw: dict = {w.value: defaultdict(dict) for w in WaitPower}
    for seed in seeds:
        world = MeasuredWorld(seed=seed)
        profiles = {(k, b): world.profile_inline(USER, k, b) for k in kinds for b in (FAST, SLOW)}
        for kind in kinds:
            for size in sizes:
                job = Job(world, kind, size, bound_pct, rules, profiles)
                for wait in WaitPower:
                    cells = {}
                    for row in ROWS:
                        caps = job.caps(row, wait)
                        cells[row] = (*job.score(caps, wait), caps, job.boards)
                    raw[wait.value][seed][(kind, size)] = cells
    by_wait = {w: _aggregate(raw[w], seeds, kinds, sizes) for w in raw}
    worse = min(by_wait, key=lambda w: by_wait[w]["total"]["pace"]["saving_vs_job_pct"]["mean"])
    saving = by_wait[worse]["total"]["pace"]["saving_vs_job_pct"]
    slowest = max(by_wait, key=lambda w: by_wait[w]["total"]["pace"]["iter_time_vs_job_pct"]["mean"])
    time = by_wait[slowest]["total"]["pace"]["iter_time_vs_job_pct"]
    met = all(_lo(b["total"]["pace"]["saving_vs_job_pct"]) >= GOAL_SAVING_PCT
              and _hi(b["total"]["pace"]["iter_time_vs_job_pct"]) <= GOAL_TIME_PCT for b in by_wait.values())
    world = MeasuredWorld()
    return {
        "seeds": seeds, "bound_pct": bound_pct, "sizes": [f"{v}+{p}" for v, p in sizes], "kinds": kinds,
        "wait_power": {"idle_w": {b: float(world.board_model(b).idle_power_w) for b in (FAST, SLOW)},
                       "source": "assumption: no source in ../shared/data measures a waiting GPU; idle = the "
                                 "catalogue's idle power (itself an assumption), at-cap = the rank's power computing "
                                 "at its cap"},
        "mixed": {"gpu_energy_saving_pct": saving["mean"], "gpu_energy_saving_ci95": saving["ci95"],
                  "iter_time_change_pct": time["mean"], "iter_time_change_ci95": time["ci95"],
                  "worse_bound": worse, "goal": f"pace >= {GOAL_SAVING_PCT:g} % less GPU energy than job-cap, "
                  f"iteration time within +{GOAL_TIME_PCT:g} %, under both waiting-power bounds (95 % intervals)",
                  "goal_met": met, "by_wait_power": by_wait},
    }


#: the two "nodes" of the multi-node check: different simulated boards, each its own state directory
MULTINODE_SPECS = ("2xA100-SXM4-80GB", "2xV100-SXM2-16GB")


def multinode(bound_pct: float, timeout_s: float = 120.0) -> dict:
    """Two real launchers on localhost (static rendezvous, one worker each, ``benchmarks/trivial_worker.py``), each
    its own simulated board and state directory: whether both print the same plan, the caps each node's decision
    set, and the slowdown those caps predict for the job (the largest over the nodes: one node paces all). Simulated
    caps do not slow CPU workers, so this checks the protocol, not the speed."""
    import os
    import socket
    import subprocess
    import tempfile
    import time

    root = Path(__file__).resolve().parents[1]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "ECOLAUNCH_", "SLURM_"))}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank, spec in enumerate(MULTINODE_SPECS):
            env = {**base, "ECOLAUNCH_SIMULATE": spec, "ECOLAUNCH_STATE_DIR": f"{tmp}/node{rank}",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(root), base.get("PYTHONPATH")]))}
            cmd = [sys.executable, "-m", "ecolaunch", "--json", "--allowed-slowdown", f"{bound_pct:g}", "--nnodes",
                   "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
                   "--nproc-per-node", "1", str(root / "benchmarks" / "trivial_worker.py")]
            procs.append(subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        ran = [p.communicate(timeout=timeout_s) for p in procs]
    plans, caps, slowdowns = [], {}, []
    for rank, (out, err) in enumerate(ran):
        plans += [line.split("; this node")[0].split(": ", 2)[-1] for line in err.splitlines() if "one plan for" in line]
        decision = json.loads(out) if out.strip().startswith("{") else {}
        caps[MULTINODE_SPECS[rank]] = sorted({c for c in decision.get("power_caps_w", {}).values()}, key=str)
        # the decision's predicted slowdown of each job it affects (here: this node's part of the job alone)
        slowdowns.append(max((float(v) for v in (decision.get("predicted", {}).get("slowdown_pct") or {}).values()),
                             default=0.0))
    return {"nodes": len(MULTINODE_SPECS), "same_plan": len(plans) == len(procs) and len(set(plans)) == 1,
            "plan": plans[0] if plans else None, "exit_codes": [p.returncode for p in procs], "caps_w": caps,
            "slowdown_pct": max(slowdowns), "bound_pct": bound_pct,
            "within_bound": max(slowdowns) <= bound_pct, "wall_s": round(time.perf_counter() - start, 1),
            "how": "two real launchers on localhost (static rendezvous), simulated GPUs, CPU workers: the protocol, "
                   "not the speed; slowdown_pct is what the nodes' caps predict (0: every node at its default limit)"}


def _lo(stat: dict) -> float:
    return stat["mean"] - (stat["ci95"] or 0.0)


def _hi(stat: dict) -> float:
    return stat["mean"] + (stat["ci95"] or 0.0)


def _stat(values: list[float], per_seed: bool = True) -> dict:
    mean, half = mean_ci95(values)
    out = {"mean": round(mean, 3), "ci95": None if half is None else round(half, 3)}
    return out | ({"per_seed": [round(v, 4) for v in values]} if per_seed else {})


def _figures(rows: list[dict], row: str, per_seed: bool) -> dict:
    """``rows``: per seed, {row: (time s, energy J)} of one job or a sum of jobs."""
    return {
        "saving_vs_job_pct": _stat([100 * (1 - r[row][1] / r["job-cap"][1]) for r in rows], per_seed),
        "saving_vs_uncapped_pct": _stat([100 * (1 - r[row][1] / r["uncapped"][1]) for r in rows], per_seed),
        "iter_time_vs_job_pct": _stat([100 * (r[row][0] / r["job-cap"][0] - 1) for r in rows], per_seed),
        "iter_time_vs_uncapped_pct": _stat([100 * (r[row][0] / r["uncapped"][0] - 1) for r in rows], per_seed),
    }


def _aggregate(raw: dict, seeds: list[int], kinds: list[str], sizes: list[tuple[int, int]]) -> dict:
    totals = []
    for seed in seeds:
        cells = raw[seed].values()
        # every job runs the same number of iterations: their energies add, and so do their times
        totals.append({row: (sum(c[row][0] for c in cells), sum(c[row][1] for c in cells)) for row in ROWS})
    jobs: dict = {}
    for kind in kinds:
        for v, p in sizes:
            per_seed = [raw[s][(kind, (v, p))] for s in seeds]
            cell = {row: _figures(per_seed, row, per_seed=False) for row in ROWS}
            cell["caps_w"] = {row: {b: round(statistics.fmean(
                c for ps in per_seed for c, bb in zip(ps[row][2], ps[row][3]) if bb == b), 1) for b in (FAST, SLOW)}
                for row in ROWS}
            jobs.setdefault(kind, {})[f"{v}+{p}"] = cell
    return {"total": {row: _figures(totals, row, per_seed=True) for row in ROWS}, "jobs": jobs}


def _pm(stat: dict) -> str:
    return f"{stat['mean']:+.1f}" + ("" if stat["ci95"] is None else f" ± {stat['ci95']:.1f}")


def markdown(result: dict) -> str:
    lines = []
    for wait, b in result["mixed"]["by_wait_power"].items():
        lines += [f"### waiting GPUs draw: {wait}", "",
                  "| row | GPU energy vs job-cap % | vs uncapped % | iteration time vs job-cap % | vs uncapped % |",
                  "|---|---|---|---|---|"]
        for row in ROWS:
            f = b["total"][row]
            lines.append(f"| {row} | {_pm(_neg(f['saving_vs_job_pct']))} | {_pm(_neg(f['saving_vs_uncapped_pct']))} "
                         f"| {_pm(f['iter_time_vs_job_pct'])} | {_pm(f['iter_time_vs_uncapped_pct'])} |")
        lines += ["", "| job | size | job cap W (P100) | pace cap W (V100) | pace: energy vs job-cap % | "
                      "time vs job-cap % | fast-board-min: energy % | time % | oracle: energy % |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for kind, by_size in b["jobs"].items():
            for size, cell in by_size.items():
                lines.append(
                    f"| {kind} | {size} | {cell['caps_w']['job-cap'][SLOW]:.0f} | {cell['caps_w']['pace'][FAST]:.0f} "
                    f"| {_pm(_neg(cell['pace']['saving_vs_job_pct']))} | {_pm(cell['pace']['iter_time_vs_job_pct'])} "
                    f"| {_pm(_neg(cell['fast-board-min']['saving_vs_job_pct']))} "
                    f"| {_pm(cell['fast-board-min']['iter_time_vs_job_pct'])} "
                    f"| {_pm(_neg(cell['pace-oracle']['saving_vs_job_pct']))} |")
        lines.append("")
    m = result["mixed"]
    lines.append(f"headline (worse bound, {m['worse_bound']}): pace saves {m['gpu_energy_saving_pct']:.1f} % "
                 f"(± {m['gpu_energy_saving_ci95'] or 0:.1f}) GPU energy against job-cap, iteration time "
                 f"{m['iter_time_change_pct']:+.2f} % (± {m['iter_time_change_ci95'] or 0:.2f}); goal met: "
                 f"{m['goal_met']}")
    n = result.get("multinode")
    if n is not None:
        caps = "; ".join(f"{spec}: {', '.join('default' if c is None else f'{c:g} W' for c in cs) or 'none'}"
                         for spec, cs in n["caps_w"].items())
        lines += ["", f"multinode ({n['nodes']} real launchers on localhost): same plan on every node: {n['same_plan']}; "
                      f"caps: {caps}; predicted slowdown {n['slowdown_pct']:g} % (bound {n['bound_pct']:g} %); exit "
                      f"codes {n['exit_codes']}"]
    return "\n".join(lines)


def _neg(stat: dict) -> dict:
    """A saving as an energy change (negative: less energy), interval unchanged."""
    return {"mean": -stat["mean"], "ci95": stat["ci95"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="how many seeds (each draws the profiles' noise)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--bound", type=float, default=Rules().default_slowdown_pct,
                        help="the job's slowdown bound %% (the admin policy's default)")
    parser.add_argument("--size", action="append", type=parse_size, help="V+P GPUs of a job (repeatable; "
                        "default 1+1 and 2+2)")
    parser.add_argument("--kind", action="append", help="restrict to these job types (repeatable)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-multinode", action="store_true", help="skip the two real launchers of 'multinode'")
    parser.add_argument("--out", type=Path, help="also write pace_matching.json and .md there")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    kinds = measured_kinds()
    if args.kind:
        unknown = sorted(set(args.kind) - set(kinds))
        if unknown:
            parser.error(f"no measured curve on both boards for {', '.join(unknown)}; choose from {', '.join(kinds)}")
        kinds = [k for k in kinds if k in args.kind]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    result = run(seeds, kinds, args.size or [(1, 1), (2, 2)], args.bound)
    result["multinode"] = None if args.no_multinode else multinode(args.bound)
    table = markdown(result)
    if args.out:
        # another bound than the admin default is another experiment: its files sit beside, not over, the default's
        stem = "pace_matching" + ("" if args.bound == Rules().default_slowdown_pct else f"_bound{args.bound:g}")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        (args.out / f"{stem}.md").write_text(
            "# Pace-matching caps on mixed V100 + P100 jobs\n\nGenerated by `python benchmarks/pace_matching.py` "
            f"(seeds {', '.join(map(str, seeds))}; bound {args.bound:g} %; sizes {', '.join(result['sizes'])}; "
            "measured world). Energy and time changes are per-seed changes against the row named, summed over every "
            "job (each running the same number of iterations), mean ± the half-width of the 95 % interval over the "
            "seeds (Student's t). Waiting power is an assumption, given at two bounds (the script's docstring). "
            "`multinode`: two real launchers on localhost (the protocol, not the speed).\n\n" + table + "\n")
    emit(result, args.json, table)


if __name__ == "__main__":
    main()
