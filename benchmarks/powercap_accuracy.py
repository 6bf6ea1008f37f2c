"""How well a few profiled caps predict a job's whole cap curve, replayed on the Zeus (NSDI '23) traces.

For every (GPU, workload, batch size) curve of ``summary_power_<gpu>.csv`` (one row per power limit; the
optimizer is the one ``summary_train.csv`` pairs with the workload), this takes the caps
``powercap.profile_caps`` would measure (max, then ~85 % and ~65 % of the job's uncapped power, minus caps that
cannot bind the job) from
the trace, fits ``jobmodel.capcurve.fit_curve`` with a prior **fitted without the evaluated workload**
(leave-one-workload-out: the prior sees only curves of other networks, on all GPUs; squad and sentiment140
share BERT and leave together; a leave-one-GPU-out row is printed too),
predicts time and power at every other cap of the trace, and chooses a cap with ``capchoice.choose_cap``.

Reported (primary figures at a 10 % slowdown bound and eta = 1, i.e. energy only, as in "energy-optimal"):

- ``time_mape_pct`` / ``power_mape_pct``: mean absolute percentage error over the caps *not* profiled
  (pooled over all curves); ``*_all_caps`` includes the profiled ones.
- ``within_one_step_pct``: share of curves whose chosen cap is within 25 W of the true optimum (the
  lowest-cost cap of the trace whose measured slowdown is within the bound). Input-bound curves are flat
  within the traces' noise, so their "true optimum" is noise; ``within_one_step_cap_bound_pct`` counts
  only curves whose uncapped power exceeds 1.2x the lowest cap.
- ``energy_loss_pct``: mean of (true energy at the chosen cap / at the true optimum - 1); a choice that
  breaks the bound is counted in ``bound_violation_pct`` and its saving is not credited (loss >= 0).
  In the eta = 0.5 row it is the loss in Zeus's cost ``eta*E + (1-eta)*P_max*T`` instead.
- ``profiling_iterations``: profiled caps x (warm-up + measured iterations per cap), summed over curves,
  against ``full_sweep_iterations``: Zeus's sweep of every 25 W step from max to min x (10 + 40).

The Zeus profile windows (``profile_windows/*.csv``, V100 and A40, 1-4 GPUs) are replayed the same way as
recorded traces (fit from <= 3 windows, predict the others); their priors leave out the same network.

``--margin`` prints instead the replay behind ``capchoice.MODEL_ERROR_PP_PER_U``: predicted minus true slowdown
(percentage points) at every cap between the lowest profiled one and the top, by distance ``u`` from the nearest
profiled cap over the job's uncapped power, leave-one-network-out; the robust sigma (1.4826 x MAD) in bins of ``u``
and the least-squares slope through zero of sigma on ``u`` (the margin's form, ``error = K u``), on all curves (with
a bootstrap over curves) and, for each set of networks a measured-world job type plays
(:func:`ecolaunch.sim.measured.played_networks`), on the curves of the other networks only.

Usage: ``python benchmarks/powercap_accuracy.py [--data DIR] [--json] [--margin]``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ecolaunch.jobmodel.profile import CapPoint  # noqa: E402
from ecolaunch.jobmodel import capchoice as cc  # noqa: E402
from ecolaunch.jobmodel import capcurve as jc  # noqa: E402
from ecolaunch.jobmodel import powercap as pc  # noqa: E402
from ecolaunch.profile import zeus_data as zd  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "zeus-nsdi23"
# profile-window networks -> the summary-trace workload of the same network (left out of their prior)
WINDOW_WORKLOAD = {"bert-base-uncased": "bert_base_uncased", "resnet50": "resnet50",
                   "shufflenetv2": "shufflenetv2", "resnet18": "resnet18"}


@dataclass
class Result:
    held_time_err: list[float]
    held_power_err: list[float]
    all_time_err: list[float]
    all_power_err: list[float]
    within: list[bool]
    within_bound: list[bool]
    loss_pct: list[float]
    violation: list[bool]
    profiling_iters: int
    sweep_iters: int

    def summary(self) -> dict[str, float]:
        pct = lambda xs: 100.0 * statistics.fmean(xs) if xs else float("nan")  # noqa: E731
        return {
            "time_mape_pct": round(pct(self.held_time_err), 2),
            "power_mape_pct": round(pct(self.held_power_err), 2),
            "within_one_step_pct": round(pct(self.within), 1),
            "energy_loss_pct": round(statistics.fmean(self.loss_pct), 2),
            "profiling_iterations": self.profiling_iters,
            "full_sweep_iterations": self.sweep_iters,
            "time_mape_all_caps_pct": round(pct(self.all_time_err), 2),
            "power_mape_all_caps_pct": round(pct(self.all_power_err), 2),
            "within_one_step_cap_bound_pct": round(pct(self.within_bound), 1),
            "bound_violation_pct": round(pct(self.violation), 1),
            "curves": len(self.within),
            "held_out_points": len(self.held_time_err),
        }


def evaluate(curves: list[zd.ZeusSweep], prior_for, *, slowdown_pct: float, eta: float,
             iters_per_cap: int) -> Result:
    res = Result([], [], [], [], [], [], [], [], 0, 0)
    for curve in curves:
        pts = {p.power_cap_w: p for p in curve.points}
        caps = sorted(pts)
        if len(caps) < 2:
            continue
        lo, hi = caps[0], caps[-1]
        profiled = profiled_caps(pts)
        model = jc.fit_curve([pts[c] for c in profiled], prior_for(curve))
        for c in caps:
            pred, true = model.predict(c), pts[c]
            et = abs(pred.iter_time_s - true.iter_time_s) / true.iter_time_s
            ep = abs(pred.power_w - true.power_w) / true.power_w
            res.all_time_err.append(et)
            res.all_power_err.append(ep)
            if c not in profiled:
                res.held_time_err.append(et)
                res.held_power_err.append(ep)
        # the curve's own accuracy: no margin (the launcher keeps one; benchmarks/cap_control.py scores that)
        choice = cc.choose_cap(model, caps, slowdown_pct, eta, hi, z=0.0, min_saving_pct=0.0)
        opt = true_optimum(pts, slowdown_pct, eta, hi)
        cost = lambda p: eta * p.iter_time_s * p.power_w + (1 - eta) * hi * p.iter_time_s  # noqa: E731, B023
        violated = pts[choice.cap_w].iter_time_s > (1 + slowdown_pct / 100) * pts[hi].iter_time_s * (1 + 1e-9)
        loss = 100.0 * (cost(pts[choice.cap_w]) / cost(pts[opt]) - 1.0)
        res.within.append(abs(choice.cap_w - opt) <= pc.DEFAULT_CAP_STEP_W + 1e-9)
        if pts[hi].power_w > 1.2 * lo:
            res.within_bound.append(res.within[-1])
        res.violation.append(violated)
        res.loss_pct.append(max(0.0, loss) if violated else loss)
        res.profiling_iters += len(profiled) * iters_per_cap
        sweep_caps = math.floor((hi - lo) / pc.DEFAULT_CAP_STEP_W + 1e-9) + 1
        res.sweep_iters += sweep_caps * (pc.ZEUS_WARMUP_ITERS_PER_CAP + pc.ZEUS_MEASURED_ITERS_PER_CAP)
    return res


def profiled_caps(pts: dict[float, CapPoint]) -> list[float]:
    """The caps of a trace (``pts``: cap -> point) the profiler would measure: the nearest to each of
    ``powercap.profile_caps`` between its lowest and its top cap, for the job's uncapped power."""
    caps = sorted(pts)
    wanted = pc.profile_caps(caps[0], caps[-1], uncapped_power_w=pts[caps[-1]].power_w)
    return sorted({min(caps, key=lambda c: abs(c - w)) for w in wanted})


def true_optimum(pts: dict[float, CapPoint], slowdown_pct: float, eta: float, hi: float) -> float:
    t_ref = pts[hi].iter_time_s
    feasible = [c for c in sorted(pts) if pts[c].iter_time_s <= (1 + slowdown_pct / 100) * t_ref * (1 + 1e-9)]
    cost = {c: eta * pts[c].iter_time_s * pts[c].power_w + (1 - eta) * hi * pts[c].iter_time_s for c in feasible}
    best = min(cost.values())
    return min(c for c in feasible if cost[c] <= best * (1 + 1e-9))


def prior_factory(train: list[zd.ZeusSweep], holdout: str):
    cache: dict[str, jc.CapPrior] = {}

    def network(workload: str) -> str:
        return workload.split("/")[-1]

    def prior_for(curve: zd.ZeusSweep) -> jc.CapPrior:
        if holdout == "workload":
            key = network(WINDOW_WORKLOAD.get(curve.workload, curve.workload))
            keep = [c for c in train if network(c.workload) != key]
        else:
            key = curve.gpu.upper()
            keep = [c for c in train if c.gpu.upper() != key]
        if key not in cache:
            cache[key] = jc.CapPrior.fit([c.points for c in keep], source=f"without {key}")
        return cache[key]

    return prior_for


def run(data: Path, slowdown_pct: float, eta: float, warmup: int, measured: int) -> dict[str, dict[str, float]]:
    traces = zd.load_power_traces(data)
    windows = zd.load_profile_windows(data)
    iters = warmup + measured
    out = {}
    for name, curves, holdout, e in [
        ("traces, leave-one-workload-out", traces, "workload", eta),
        ("traces, leave-one-GPU-out", traces, "gpu", eta),
        ("traces, leave-one-workload-out, eta 0.5", traces, "workload", 0.5),
        ("profile windows, leave-one-network-out", windows, "workload", eta),
    ]:
        res = evaluate(curves, prior_factory(traces, holdout), slowdown_pct=slowdown_pct, eta=e, iters_per_cap=iters)
        out[name] = res.summary()
    return out


MARGIN_BINS = ((0.0, 0.05), (0.05, 0.10), (0.10, 0.15), (0.15, 0.20), (0.20, 0.30), (0.30, 0.45))


def _network(curve: zd.ZeusSweep) -> str:
    return curve.workload.split("/")[-1]


def slowdown_errors(curves: list[zd.ZeusSweep], train: list[zd.ZeusSweep]) -> list[list[tuple[float, float]]]:
    """Per curve: (distance u from the nearest profiled cap, predicted minus true slowdown in points) at each cap
    not profiled and not below the lowest profiled one, the prior fitted on ``train`` without the curve's network."""
    priors: dict[str, jc.CapPrior] = {}
    out = []
    for curve in curves:
        net = _network(curve)
        if net not in priors:
            priors[net] = jc.CapPrior.fit([c.points for c in train if _network(c) != net])
        pts = {p.power_cap_w: p for p in curve.points}
        caps = sorted(pts)
        errors: list[tuple[float, float]] = []
        out.append(errors)
        if len(caps) < 2:
            continue
        hi = caps[-1]
        profiled = profiled_caps(pts)
        model = jc.fit_curve([pts[c] for c in profiled], priors[net])
        ref = model.predict(hi).iter_time_s
        for c in caps:
            if c in profiled or c < profiled[0]:
                continue  # measured, or extrapolated (EXTRAPOLATION_ERROR_PP's floor)
            u = min(abs(c - p) for p in profiled) / model.reference_power_w
            errors.append((u, 100.0 * (model.predict(c).iter_time_s / ref - pts[c].iter_time_s / pts[hi].iter_time_s)))
    return out


def margin_slope(errors: list[tuple[float, float]]) -> tuple[float, list[tuple[float, float, int]]]:
    """The slope through zero of the robust sigma on ``u`` (weighted by count), and the bins (mean u, sigma, n)."""
    bins, num, den = [], 0.0, 0.0
    for a, b in MARGIN_BINS:
        xs = [e for u, e in errors if a <= u < b]
        if len(xs) < 8:
            continue
        med = statistics.median(xs)
        sigma = 1.4826 * statistics.median(abs(x - med) for x in xs)
        u = statistics.fmean(d for d, _ in errors if a <= d < b)
        bins.append((round(u, 3), round(sigma, 2), len(xs)))
        num, den = num + len(xs) * u * sigma, den + len(xs) * u * u
    return round(num / den, 2), bins


def margin_report(traces: list[zd.ZeusSweep], boot: int = 200) -> dict:
    from ecolaunch.sim.measured import job_kinds, played_networks

    per_curve = slowdown_errors(traces, traces)
    out: dict = {"all": margin_slope([e for errs in per_curve for e in errs])}
    rng = random.Random(0)
    draws = sorted(margin_slope([e for _ in per_curve for e in rng.choice(per_curve)])[0] for _ in range(boot))
    out["all_bootstrap_95"] = (draws[int(0.025 * boot)], draws[int(0.975 * boot) - 1])
    for nets in sorted({played_networks(k) for k in job_kinds()}, key=sorted):
        keep = [c for c in traces if _network(c) not in nets]
        out["without " + "+".join(sorted(nets))] = margin_slope([e for errs in slowdown_errors(keep, keep)
                                                                 for e in errs])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="zeus-nsdi23 folder")
    ap.add_argument("--slowdown-pct", type=float, default=10.0)
    ap.add_argument("--eta", type=float, default=1.0, help="energy weight of Zeus's cost (1 = energy only)")
    ap.add_argument("--warmup-iters", type=int, default=pc.DEFAULT_WARMUP_ITERS_PER_CAP)
    ap.add_argument("--measured-iters", type=int, default=pc.DEFAULT_MEASURED_ITERS_PER_CAP)
    ap.add_argument("--json", action="store_true", help="print the primary figures (and extras) as JSON")
    ap.add_argument("--margin", action="store_true", help="print the model-error margin's replay as JSON")
    args = ap.parse_args(argv)
    if args.margin:
        print(json.dumps(margin_report(zd.load_power_traces(args.data))))
        return 0
    out = run(args.data, args.slowdown_pct, args.eta, args.warmup_iters, args.measured_iters)
    names = list(out)
    primary = dict(out[names[0]])
    if args.json:
        factor = primary["full_sweep_iterations"] / primary["profiling_iterations"]
        primary["fewer_iterations_factor"] = round(factor, 2)
        primary["slowdown_bound_pct"] = args.slowdown_pct
        primary["eta"] = args.eta
        for name, prefix in zip(names[1:], ("gpu_holdout_", "eta05_", "windows_")):
            primary.update({prefix + k: v for k, v in out[name].items()})
        print(json.dumps(primary, sort_keys=False))
        return 0
    cols = ["time_mape_pct", "power_mape_pct", "time_mape_all_caps_pct", "within_one_step_pct",
            "within_one_step_cap_bound_pct", "energy_loss_pct", "bound_violation_pct", "profiling_iterations",
            "full_sweep_iterations", "curves"]
    short = ["time MAPE %", "power MAPE %", "time MAPE all %", "within 1 step %", "(cap-bound) %",
             "energy loss %", "violations %", "profiling it", "sweep it", "curves"]
    print(f"Zeus replay: slowdown bound {args.slowdown_pct:g} %, eta {args.eta:g} (unless noted), "
          f"{args.warmup_iters}+{args.measured_iters} iterations per profiled cap vs Zeus 10+40")
    width = max(len(n) for n in names)
    print(" " * width + " | " + " | ".join(short))
    for name in names:
        row = out[name]
        print(f"{name:<{width}} | " + " | ".join(f"{row[c]:>{len(s)}}" for c, s in zip(cols, short)))
    p = out[names[0]]
    print(f"profiling: {p['profiling_iterations']} iterations vs {p['full_sweep_iterations']} for full sweeps "
          f"({p['full_sweep_iterations'] / p['profiling_iterations']:.1f}x fewer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
