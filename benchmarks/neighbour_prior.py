"""A first launch's cap-curve prior from its neighbours in the lab's history, replayed on the Zeus sweeps (issue 39).

The question: when the history holds a job's *neighbours* (the same script at other batch sizes on the same board,
or at the same batch size on other boards) but not the job, how much better does a prior read from them predict the
job's cap curve than the launcher's prior (:data:`~ecolaunch.jobmodel.capcurve.DEFAULT_PRIOR`, a median shape over
every network), and is a learned one (a small graph network over the neighbours) better than the simplest rule?

**Why here and not in the measured world.** Most of the world's job types play a rank-matched stand-in curve
(docs/simulator.md#what-the-measured-world-assumes): ``Transformer (batch size 16)`` plays a DeepSpeech2 sweep and
``Transformer (batch size 32)`` a ShuffleNet one, so its siblings say nothing true of it, and a neighbour prior scored
there would score that assignment. The Zeus sweeps (208 curves: 6 workloads of 5 networks, 4 boards, 4-15 batch sizes
each) hold the real structure, so the lever is scored on them. What it could be worth in energy is bounded by
``energy.py --exact-first-start`` (every first launch starting from its true curve; docs/benchmarks.md).

**What is replayed.** For each curve (the *job*) and each set of neighbours the history could hold:

- ``nearest-batch``: the same workload on the same board at the nearest other batch size (one curve);
- ``batch-sizes``: the same workload on the same board at every other batch size;
- ``other-boards``: the same workload at the same batch size on the other boards;
- ``all``: both of the last two.

each prior is handed to the launcher's own curve fit (:func:`~ecolaunch.jobmodel.capcurve.fit_curve`) with the caps
the profiler measures (``profiled``: :func:`~ecolaunch.jobmodel.powercap.profile_caps`, as
``benchmarks/powercap_accuracy.py``) or with the uncapped window alone (``uncapped``: a first launch that skips
profiling and trusts the prior), and the launcher's cap choice
(:func:`~ecolaunch.jobmodel.capchoice.choose_cap`, 10 % bound, energy only) reads the fit. The priors:

- ``held-out`` (the ablation: what a first launch reads today): :meth:`CapPrior.fit
  <ecolaunch.jobmodel.capcurve.CapPrior.fit>` on the curves of every *other* network;
- ``siblings`` (the simplest rule): ``CapPrior.fit`` on the neighbours' curves alone (the median shape; the mean of
  one or two);
- ``gnn``: the graph network below, trained on the other networks' curves (leave-one-network-out: squad and
  sentiment140 share BERT and leave together), one training per seed;
- ``gnn-alone`` (its ablation): the same network trained and asked with the job's node alone (no neighbours);
- ``exact`` (the upper bound): the job's own curve as its prior.

Figures per prior: the time error (mean absolute %, at the caps not measured), the energy the chosen cap loses
against the hindsight-best cap of the trace (%; a choice over the bound is not credited), the share of choices over
the bound, both with no margin (the curve's own accuracy, as ``powercap_accuracy.py``) and with the launcher's
margin (:data:`~ecolaunch.jobmodel.capchoice.MARGIN_Z`); and the energy loss's paired difference against
``held-out`` (mean over the same curves, bootstrap 95 % interval over curves; the GNN's figures are means over
``--seeds`` trainings, and ``gnn_seed_sd`` is the spread of its mean loss across them).

**The graph network.** One node per curve: the job's (its board, log batch size, uncapped power over the board's top
cap: what its uncapped window measures) and each neighbour's (the same, plus its shape on the prior's grid of
``u = cap / uncapped power``: log time ratio and power ratio). Edges run from each neighbour to the job, carrying the
batch sizes' log ratio and whether the boards match. Two attention layers (``TransformerConv``) with residuals,
then a head on the job's node gives the job's shape on the grid, made monotone as ``CapPrior.fit`` makes a median.
Trained on the other networks' curves with every neighbour set above (and none), mean squared error over the grid
points each curve measured.

Usage: ``python benchmarks/neighbour_prior.py [--seeds N] [--epochs N] [--json]``.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import emit  # noqa: E402
from ecolaunch.errors import ConfigError  # noqa: E402
from ecolaunch.jobmodel import capchoice as cc  # noqa: E402
from ecolaunch.jobmodel import capcurve as jc  # noqa: E402
from ecolaunch.profile.zeus_data import ZeusSweep  # noqa: E402
from ecolaunch.sim.truth import vendored_zeus_curves  # noqa: E402
from powercap_accuracy import true_optimum, profiled_caps  # noqa: E402

SCENARIOS = ("nearest-batch", "batch-sizes", "other-boards", "all")
PRIORS = ("held-out", "siblings", "gnn", "gnn-alone", "exact")
MODES = ("profiled", "uncapped")
BOUND_PCT = 10.0
GRID = jc.DEFAULT_PRIOR.u_grid
BOARDS = ("V100", "A40", "P100", "RTX6000")
BOOTSTRAP = 1000


def network(curve: ZeusSweep) -> str:
    """The network (squad and sentiment140 both train BERT: one network)."""
    return curve.workload.split("/")[-1]


def neighbours(job: ZeusSweep, curves: Sequence[ZeusSweep], scenario: str) -> list[ZeusSweep]:
    """What the history holds of ``job``'s neighbours in ``scenario`` (module docstring); ``none``: nothing."""
    if scenario == "none":
        return []
    same = [c for c in curves if c.workload == job.workload and c is not job]
    sizes = [c for c in same if c.gpu == job.gpu and c.batch_size != job.batch_size]
    boards = [c for c in same if c.gpu != job.gpu and c.batch_size == job.batch_size]
    if scenario == "nearest-batch":
        return sorted(sizes, key=lambda c: (abs(math.log2(c.batch_size / job.batch_size)), c.batch_size))[:1]
    return {"batch-sizes": sizes, "other-boards": boards, "all": sizes + boards}[scenario]


def pooled(curves: Sequence[ZeusSweep], source: str) -> jc.CapPrior:
    """``CapPrior.fit`` on ``curves`` (the median shape; one curve: its own), or the flat shape when none of them
    reaches the grid (a job that draws so little that no cap binds it: its lowest cap is over 1.5x its power)."""
    try:
        return jc.CapPrior.fit([c.points for c in curves], min_curves=1, source=source)
    except ConfigError:
        return jc.CapPrior(GRID, (1.0,) * len(GRID), (1.0,) * len(GRID), source=f"{source} (flat)")


@functools.lru_cache(maxsize=1024)
def shape(curve: ZeusSweep) -> jc.CapPrior:
    """The curve's own shape on the grid."""
    return pooled([curve], curve.key)


def _span(curve: ZeusSweep) -> tuple[float, float]:
    top = curve.points[-1]
    return curve.points[0].power_cap_w / top.power_w, top.power_cap_w / top.power_w


# --- the graph network -------------------------------------------------------------------------------------

def _node(curve: ZeusSweep, known: bool) -> list[float]:
    top = curve.points[-1]
    board = [1.0 if curve.gpu == b else 0.0 for b in BOARDS]
    base = [0.0 if known else 1.0, math.log2(curve.batch_size) / 10.0, top.power_w / top.power_cap_w, *board]
    if not known:
        return base + [0.0] * (2 * len(GRID))
    s = shape(curve)
    return base + [math.log(t) for t in s.time_ratio] + list(s.power_ratio)


def _graph(job: ZeusSweep, near: Sequence[ZeusSweep]):
    import torch
    from torch_geometric.data import Data

    x = torch.tensor([_node(job, False)] + [_node(c, True) for c in near], dtype=torch.float32)
    src = list(range(1, len(near) + 1))
    edge_index = torch.tensor([src, [0] * len(near)], dtype=torch.long).reshape(2, -1)
    edge_attr = torch.tensor([[math.log2(c.batch_size / job.batch_size) / 5.0, float(c.gpu == job.gpu)]
                              for c in near], dtype=torch.float32).reshape(-1, 2)
    s = shape(job)
    lo, hi = _span(job)
    mask = torch.tensor([lo - 1e-9 <= u <= hi + 1e-9 for u in GRID], dtype=torch.float32)
    y = torch.tensor([math.log(t) for t in s.time_ratio] + list(s.power_ratio), dtype=torch.float32)
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, y=y.unsqueeze(0), mask=mask.unsqueeze(0))


def _net(hidden: int = 64):
    import torch
    from torch_geometric.nn import TransformerConv

    features = 3 + len(BOARDS) + 2 * len(GRID)

    class NeighbourNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = torch.nn.Linear(features, hidden)
            self.convs = torch.nn.ModuleList(
                TransformerConv(hidden, hidden, heads=2, concat=False, edge_dim=2) for _ in range(2))
            self.head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                            torch.nn.Linear(hidden, 2 * len(GRID)))

        def forward(self, data):
            h = torch.relu(self.enc(data.x))
            for conv in self.convs:
                h = h + torch.relu(conv(h, data.edge_index, data.edge_attr))
            out = self.head(h[data.ptr[:-1]])  # the job is each graph's first node
            n = len(GRID)
            return torch.cat([torch.nn.functional.softplus(out[:, :n]), torch.sigmoid(out[:, n:]) * 1.2], dim=1)

    return NeighbourNet()


def train_gnn(train: Sequence[ZeusSweep], seed: int, epochs: int, *, alone: bool):
    """The graph network trained on ``train`` (every neighbour set and none; ``alone``: none only); returns
    ``predict(job, neighbours) -> CapPrior``."""
    import torch
    from torch_geometric.data import Batch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    scenarios = ("none",) if alone else ("none", *SCENARIOS)
    graphs = [_graph(c, neighbours(c, train, s)) for c in train for s in scenarios
              if s == "none" or neighbours(c, train, s)]
    rng.shuffle(graphs)
    batch = Batch.from_data_list(graphs)
    net = _net()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-5)
    for _ in range(epochs):
        opt.zero_grad()
        err = (net(batch) - batch.y) ** 2
        mask = torch.cat([batch.mask, batch.mask], dim=1)
        loss = (err * mask).sum() / mask.sum()
        loss.backward()
        opt.step()
    net.eval()

    def predict(job: ZeusSweep, near: Sequence[ZeusSweep]) -> jc.CapPrior:
        with torch.no_grad():
            out = net(Batch.from_data_list([_graph(job, [] if alone else near)]))[0].tolist()
        n = len(GRID)
        t = [math.exp(v) for v in out[:n]]
        p = out[n:]
        for i in range(n - 2, -1, -1):  # as CapPrior.fit makes a median: slower at lower caps, never below uncapped
            t[i] = max(t[i], t[i + 1])
        for i in range(1, n):
            p[i] = max(p[i], p[i - 1])
        return jc.CapPrior(GRID, tuple(max(1.0, v) for v in t), tuple(p), source="gnn")

    return predict


# --- the replay ----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Score:
    """One prior on one job: time error (mean absolute %, caps not measured) and, with no margin and with the
    launcher's, the energy lost against the hindsight-best cap (%) and whether the choice broke the bound."""

    time_err_pct: float
    loss_pct: float
    over: bool
    margin_loss_pct: float
    margin_over: bool


def score(job: ZeusSweep, prior: jc.CapPrior, mode: str) -> Score:
    pts = {p.power_cap_w: p for p in job.points}
    caps = sorted(pts)
    hi = caps[-1]
    measured = profiled_caps(pts) if mode == "profiled" else [hi]
    model = jc.fit_curve([pts[c] for c in measured], prior)
    errs = [abs(model.predict(c).iter_time_s / pts[c].iter_time_s - 1.0) for c in caps if c not in measured]
    t_ref = pts[hi].iter_time_s
    opt = pts[true_optimum(pts, BOUND_PCT, 1.0, hi)]
    best = opt.iter_time_s * opt.power_w

    def outcome(z: float) -> tuple[float, bool]:
        cap = cc.choose_cap(model, caps, BOUND_PCT, 1.0, hi, z=z, min_saving_pct=0.0).cap_w
        over = pts[cap].iter_time_s > (1 + BOUND_PCT / 100) * t_ref * (1 + 1e-9)
        loss = 100.0 * (pts[cap].iter_time_s * pts[cap].power_w / best - 1.0)
        return (max(0.0, loss) if over else loss), over

    loss, over = outcome(0.0)
    m_loss, m_over = outcome(cc.MARGIN_Z)
    return Score(100.0 * statistics.fmean(errs) if errs else 0.0, loss, over, m_loss, m_over)


def _mean(xs: Sequence[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def paired_interval(diffs: Sequence[float], rng: random.Random) -> tuple[float, float]:
    """Bootstrap 95 % interval of the mean of paired differences (resampling jobs)."""
    n = len(diffs)
    means = sorted(statistics.fmean(diffs[rng.randrange(n)] for _ in range(n)) for _ in range(BOOTSTRAP))
    return means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]


def run(seeds: int = 10, epochs: int = 400, curves: Sequence[ZeusSweep] | None = None,
        log: Callable[[str], None] = lambda _: None) -> dict:
    curves = [c for c in (curves if curves is not None else vendored_zeus_curves()) if len(c.points) >= 3]
    nets = sorted({network(c) for c in curves})
    held = {n: jc.CapPrior.fit([c.points for c in curves if network(c) != n], source=f"without {n}") for n in nets}
    # per (scenario, mode, prior): one score list per seed (rules: one), aligned on the same jobs
    scores: dict[tuple[str, str, str], list[list[Score]]] = {}
    jobs = {s: [c for c in curves if neighbours(c, curves, s)] for s in SCENARIOS}
    rules: dict[str, Callable[[ZeusSweep, list[ZeusSweep]], jc.CapPrior]] = {
        "held-out": lambda job, near: held[network(job)],
        "siblings": lambda job, near: pooled(near, "siblings"),
        "exact": lambda job, near: shape(job),
    }
    for s in SCENARIOS:
        for m in MODES:
            for name, rule in rules.items():
                scores[(s, m, name)] = [[score(j, rule(j, neighbours(j, curves, s)), m) for j in jobs[s]]]
    for seed in range(seeds):
        for net_name in nets:
            train = [c for c in curves if network(c) != net_name]
            for name, alone in (("gnn", False), ("gnn-alone", True)):
                predict = train_gnn(train, seed, epochs, alone=alone)
                for s in SCENARIOS:
                    test = [j for j in jobs[s] if network(j) == net_name]
                    for m in MODES:
                        per = scores.setdefault((s, m, name), [[] for _ in range(seeds)])
                        per[seed].extend(score(j, predict(j, neighbours(j, curves, s)), m) for j in test)
        log(f"seed {seed}: trained {2 * len(nets)} networks")
    rng = random.Random(0)
    out: dict = {"bound_pct": BOUND_PCT, "seeds": seeds, "epochs": epochs, "curves": len(curves),
                 "networks": nets, "scenarios": {}}
    for s in SCENARIOS:
        by_net = sorted(range(len(jobs[s])), key=lambda i: (nets.index(network(jobs[s][i])), i))
        rank = {i: k for k, i in enumerate(by_net)}
        # the GNN's jobs were appended network by network: rank[i] is where the rules' i-th job is in its lists
        row: dict = {"jobs": len(jobs[s])}
        for m in MODES:
            cell: dict = {}
            base = [x.loss_pct for x in scores[(s, m, "held-out")][0]]
            base_m = [x.margin_loss_pct for x in scores[(s, m, "held-out")][0]]
            for name in PRIORS:
                runs = scores[(s, m, name)]
                # per job, the mean over seeds (GNN) or the one score (rules), in the rules' job order
                per_job = [[r[rank[i]] if name.startswith("gnn") else r[i] for r in runs] for i in range(len(jobs[s]))]
                mean = lambda f, pj=per_job: [_mean([f(x) for x in xs]) for xs in pj]  # noqa: E731
                loss, m_loss = mean(lambda x: x.loss_pct), mean(lambda x: x.margin_loss_pct)
                d, dm = [a - b for a, b in zip(loss, base)], [a - b for a, b in zip(m_loss, base_m)]
                cell[name] = {
                    "time_err_pct": round(_mean(mean(lambda x: x.time_err_pct)), 2),
                    "energy_loss_pct": round(_mean(loss), 2),
                    "over_bound_pct": round(100 * _mean(mean(lambda x: float(x.over))), 1),
                    "margin_energy_loss_pct": round(_mean(m_loss), 2),
                    "margin_over_bound_pct": round(100 * _mean(mean(lambda x: float(x.margin_over))), 1),
                    "loss_vs_held_out_pp": [round(_mean(d), 2), *(round(v, 2) for v in paired_interval(d, rng))],
                    "margin_loss_vs_held_out_pp": [round(_mean(dm), 2),
                                                   *(round(v, 2) for v in paired_interval(dm, rng))],
                }
                if name.startswith("gnn") and len(runs) > 1:
                    cell[name]["gnn_seed_sd"] = round(statistics.stdev(
                        _mean([x.loss_pct for x in r]) for r in runs), 3)
            row[m] = cell
        out["scenarios"][s] = row
    return out


def table(result: dict) -> str:
    lines = [f"Neighbour priors on {result['curves']} Zeus curves, {BOUND_PCT:.0f} % bound, leave-one-network-out; "
             f"GNN: {result['seeds']} seeds x {result['epochs']} epochs",
             "loss: energy lost against the hindsight-best cap (%), no margin | with the launcher's margin; "
             "d: paired difference against held-out (pp) [95 %]"]
    for s, row in result["scenarios"].items():
        for m in MODES:
            lines.append(f"\n{s} ({row['jobs']} jobs), {m}:")
            lines.append(f"  {'prior':<10} | time err % | loss % | over % | d loss [95 %]        | margin loss % | "
                         f"over % | d margin loss [95 %]")
            for name, c in row[m].items():
                d, dm = c["loss_vs_held_out_pp"], c["margin_loss_vs_held_out_pp"]
                lines.append(f"  {name:<10} | {c['time_err_pct']:10.2f} | {c['energy_loss_pct']:6.2f} | "
                             f"{c['over_bound_pct']:6.1f} | {d[0]:+6.2f} [{d[1]:+.2f}, {d[2]:+.2f}] | "
                             f"{c['margin_energy_loss_pct']:13.2f} | {c['margin_over_bound_pct']:6.1f} | "
                             f"{dm[0]:+6.2f} [{dm[1]:+.2f}, {dm[2]:+.2f}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="trainings of each graph network (default 10)")
    ap.add_argument("--epochs", type=int, default=400, help="full-batch epochs per training (default 400)")
    ap.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.epochs < 1:
        ap.error(f"--seeds and --epochs must be >= 1, got {args.seeds} and {args.epochs}")
    result = run(args.seeds, args.epochs, log=lambda msg: print(msg, file=sys.stderr))
    emit(result, args.json, table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
