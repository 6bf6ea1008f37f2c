"""The headroom of backfill (issue 40, item 2): what a queue that starts jobs past a waiting head could buy, in the
measured world, before anyone builds one.

    python benchmarks/backfill_headroom.py [--seeds 10] [--first-seed 0] [--trace NAME ...] [--policy NAME ...]
                                           [--share PCT ...] [--spread zeus|independent|S ...] [--jobs N]
                                           [--json] [--out benchmarks/results/issue40]
    python benchmarks/backfill_headroom.py --pool RUN.json RUN.json ... [--out DIR]   # other seeds, pooled

Each host's queue is a strict FIFO (docs/queue.md): only its head may be placed. Rows, each on the same trace, world
and seed (paired by seed against ``fifo``):

- ``fifo``: the strict FIFO (``--policy exclusive``'s queue, and every queue before backfill).
- ``backfill-true``: Slurm's EASY backfill (``ecolaunch.policy.backfill``, the launcher's rule) with every job's
  true run time (:class:`~ecolaunch.sim.lengths.TrueLengths`): the upper bound.
- ``backfill-known-P``: the same rule with what a launcher could know (:class:`~ecolaunch.sim.lengths.LauncherLengths`,
  the simulator's default): P % of the
  jobs (``--share``, drawn per seed, each share's jobs among the next larger share's) declare their total iterations,
  known before they start only at the iteration time their profile measured (a repeat's; a first launch has none),
  and from their progress once they run; any other job the median of its job key's latest completed runs; else
  nothing. No decision in these rows reads a true run time.

Every row places jobs with the same policy (``--policy``: ``curve``, the launcher's default, as ``energy.py``'s
``curve`` row; and ``exclusive``, FIFO at default power) and the backfill rule only offers jobs to it.

**Repeat runs of a job key** (user and job type). The measured traces draw every run time independently of its job
type and user, so a history predicts nothing there. ``--spread`` reassigns each seed's run times so that a key's runs
relate (:func:`related_lengths`): every run keeps its arrival and GPU count and the trace keeps its run times (so
its offered load), only which job gets which changes, by the rank of a latent ``key effect + r * noise``, ``r``
chosen so that the standard deviation of log(run time / its key's median) over the trace is ``S``. ``zeus`` is the
spread the Zeus NSDI '23 training runs show (``summary_train.csv``: one configuration trained again with another seed
reaches its target accuracy after this many epochs, :func:`zeus_repeat_spread`; the same job rerun as is, so the
tightest relation a recurring job can have); larger numbers are assumptions (a job rerun with other data or
settings); ``independent`` keeps the trace's own run times (history predicts nothing).

Figures per row: ``mean_jct_s``, ``p95_jct_s``, ``mean_wait_s`` (start minus arrival), ``gpu_idle_h`` (GPU-hours
without a job over the makespan), ``idle_waiting_h`` (GPU-hours without a job while some job waited),
``node_energy_kwh``, ``out_of_order_pct`` (jobs that started before a job that arrived earlier), ``reservations``
(heads that jobs backfilled past) and ``late_reservations`` (of those, the heads that started more than
:data:`LATE_S` after the earliest reservation they were promised; the tables give their share over every seed). ``vs_fifo``: each
seed's ``100 * (row / fifo - 1)`` for the times, waits and energy, ``row - fifo`` for the idle hours, with the mean
over the seeds and its 95 % interval (Student's t, :func:`_common.mean_ci95`).

``--json`` prints ``{"seeds", "shares", "zeus": {"spread", "loo_sd", "configs", "runs"}, "runs": {TRACE: {POLICY:
{SPREAD: {"achieved_spread": [per seed], "rows": {ROW: {KEY: mean, "ci95": {...}, "per_seed": {...}}},
"vs_fifo": {ROW: {FIGURE_pct | FIGURE_h: {"mean", "ci95", "per_seed"}}}}}}}, "wall_s"}``; ``--out`` also writes
``backfill_headroom.md`` and ``backfill_headroom.json``. ``curve`` takes about 10 s a run on a shared 2-core machine,
``exclusive`` about 2.5 s.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from ecolaunch.sim.lengths import Declared, LauncherLengths, TrueLengths, steps_of

from _common import emit
from energy import _pct_over, _policy, over_seeds, paired

TRACES = ("workstation-mixed", "workstation-measured")
POLICIES = ("curve", "exclusive")
SHARES = (0, 25, 50, 100)
#: a head that starts more than this after its reservation counts as late (the simulator's events are exact to far
#: less; a launcher polls every 0.2-0.3 s)
LATE_S = 1.0
ZEUS, INDEPENDENT = "zeus", "independent"
#: per-seed differences against ``fifo``: name -> (row key, as a % of fifo or a difference)
VS_FIFO = {"mean_jct_pct": ("mean_jct_s", True), "p95_jct_pct": ("p95_jct_s", True),
           "mean_wait_pct": ("mean_wait_s", True), "node_energy_pct": ("node_energy_kwh", True),
           "gpu_idle_h": ("gpu_idle_h", False), "idle_waiting_h": ("idle_waiting_h", False)}


# --- what repeat runs of a job key look like -----------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def zeus_repeat_spread(path: Path | None = None) -> dict:
    """How much one training configuration's runs differ in length, from Zeus's ``summary_train.csv`` (each
    configuration trained 4-10 times with other seeds): per configuration, the epochs each run took to the highest
    target every run reached (the lowest word error rate for DeepSpeech2); ``spread``, the standard deviation of
    log(epochs / the configuration's median); ``loo_sd``, of log(epochs / the median of the configuration's other
    runs), the error of a history's median."""
    from ecolaunch.profile.zeus_data import DEFAULT_DATA_DIR

    path = path or DEFAULT_DATA_DIR / "summary_train.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    runs: dict[tuple, set[str]] = defaultdict(set)
    reached: dict[tuple, dict[float, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        config = (r["dataset"], r["network"], r["batch_size"], r["optimizer"], r["learning_rate"])
        runs[config].add(r["run"])
        if r["target_epoch"] != "nan":
            reached[config][float(r["target_metric"])][r["run"]] = float(r["target_epoch"])
    resid, loo, configs = [], [], 0
    for config, by_target in reached.items():
        every = [t for t, done in by_target.items() if set(done) == runs[config]]
        if len(runs[config]) < 2 or not every:
            continue
        lower_better = config[0] == "librispeech"  # DeepSpeech2's target is a word error rate
        epochs = list(by_target[min(every) if lower_better else max(every)].values())
        configs += 1
        med = statistics.median(epochs)
        resid += [math.log(e / med) for e in epochs]
        loo += [math.log(e / statistics.median(epochs[:i] + epochs[i + 1:])) for i, e in enumerate(epochs)]
    return {"spread": round(statistics.pstdev(resid), 4), "loo_sd": round(statistics.pstdev(loo), 4),
            "configs": configs, "runs": len(resid)}


def key_spread(jobs) -> float:
    """The standard deviation of log(run time / its job key's median run time) over the jobs of keys run twice or
    more (0.0 when none is)."""
    by_key: dict[tuple[str, str], list[float]] = defaultdict(list)
    for j in jobs:
        by_key[(j.user, j.kind)].append(j.work_s)
    resid = [math.log(w / statistics.median(ws)) for ws in by_key.values() if len(ws) > 1 for w in ws]
    return statistics.pstdev(resid) if resid else 0.0


def related_lengths(trace, spread: float, seed: int):
    """``trace`` with its run times reassigned among its jobs so that a job key's runs relate (the module docstring):
    within each GPU count, the run times in the order of ``a[key] + r * e[job]`` (standard normal draws of this seed),
    ``r`` found by bisection so that :func:`key_spread` is ``spread`` (the nearest it gets). Returns the trace and the
    spread reached."""
    rng = np.random.default_rng([seed, 40])
    keys = sorted({(j.user, j.kind) for j in trace.jobs})
    effect = dict(zip(keys, rng.standard_normal(len(keys))))
    noise = rng.standard_normal(len(trace.jobs))
    groups: dict[int, list[int]] = defaultdict(list)
    for i, j in enumerate(trace.jobs):
        groups[j.nproc].append(i)

    def assign(r: float) -> list:
        jobs = list(trace.jobs)
        for members in groups.values():
            lengths = sorted(trace.jobs[i].work_s for i in members)
            order = sorted(members, key=lambda i: (effect[(trace.jobs[i].user, trace.jobs[i].kind)] + r * noise[i], i))
            for i, w in zip(order, lengths):
                jobs[i] = replace(trace.jobs[i], work_s=w)
        return jobs

    lo, hi = 0.0, 64.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if key_spread(assign(mid)) < spread else (lo, mid)
    jobs = assign((lo + hi) / 2)
    return replace(trace, jobs=tuple(jobs)), key_spread(jobs)


def declared(trace, share_pct: float, seed: int) -> dict[str, Declared]:
    """The jobs that declare their length (``share_pct`` % of them, by a draw of this seed: a smaller share's jobs are
    among a larger one's), each with its total iterations (its solo run time over its type's iteration time) and its
    steps of progress: what the job itself says, the trace's knob."""
    draw = np.random.default_rng([seed, 41]).random(len(trace.jobs))
    out = {}
    for u, j in zip(draw, trace.jobs):
        if u < share_pct / 100.0:
            iterations = j.work_s / j.profile.iter_time_s if j.profile.iter_time_s else 0.0
            out[j.id] = Declared(iterations, steps_of(j.work_s))
    return out


# --- one run ---------------------------------------------------------------------------------------------------
def row_names(shares) -> list[str]:
    return ["fifo", "backfill-true", *(f"backfill-known-{s:g}" for s in shares)]


def run_one(name: str, policy: str, spread: str | float, seed: int, row: str, jobs: int | None = None) -> dict:
    """One row of one trace on one seed: its figures (:func:`figures`) and the spread of its run times."""
    from ecolaunch.sim.trace_registry import TRACES as REGISTRY

    entry = REGISTRY[name]
    machine = entry.machine("", 1)
    trace = _trace(name, spread, seed, jobs)
    sim = entry.simulation(machine, trace, policy, _policy(policy, trace, None), seed=seed)
    sim.backfill = row != "fifo"
    if row == "backfill-true":
        sim.lengths = TrueLengths()
    elif row.startswith("backfill-known-"):
        sim.lengths = LauncherLengths(declared(trace, float(row.rsplit("-", 1)[1]), seed))
    elif row != "fifo":
        raise ValueError(f"unknown row {row!r}")
    return figures(sim.run(trace)) | {"key_spread": round(key_spread(trace.jobs), 4)}


@functools.lru_cache(maxsize=8)
def _trace(name: str, spread: str | float, seed: int, jobs: int | None):
    """The trace every row of a seed plays: the registry's, its run times related by ``spread``."""
    from ecolaunch.sim.trace_registry import TRACES as REGISTRY

    entry = REGISTRY[name]
    trace = entry.build(entry.machine("", 1), seed=seed, jobs=jobs)
    if spread == INDEPENDENT:
        return trace
    return related_lengths(trace, zeus_repeat_spread()["spread"] if spread == ZEUS else float(spread), seed)[0]


def figures(result) -> dict:
    """A run's figures (the module docstring)."""
    from ecolaunch.sim.metrics import summarize

    summary = summarize(result)
    done = [j for j in result.jobs if j.start_s is not None and j.end_s is not None]
    return {"mean_jct_s": round(summary.mean_jct_s, 2), "p95_jct_s": round(summary.p95_jct_s, 2),
            "mean_wait_s": round(statistics.fmean(j.start_s - j.arrival_s for j in done), 2),
            "gpu_idle_h": round((result.gpu_count * result.makespan_s - result.gpu_busy_s) / 3600.0, 3),
            "idle_waiting_h": round(idle_while_waiting_s(done, result.gpu_count) / 3600.0, 3),
            "node_energy_kwh": round(summary.node_energy_kwh, 4),
            "out_of_order_pct": round(100.0 * out_of_order(done) / max(1, len(done)), 2),
            "reservations": sum(1 for j in done if j.late_s is not None),
            "late_reservations": sum(1 for j in done if (j.late_s or 0.0) > LATE_S),
            "jobs": summary.jobs}


def idle_while_waiting_s(jobs, gpu_count: int) -> float:
    """GPU-seconds without a job while at least one job waited (from each job's arrival, start, end and GPUs)."""
    events = []
    for j in jobs:
        events += [(j.arrival_s, 0, 1), (j.start_s, 0, -1), (j.start_s, len(j.gpus), 0), (j.end_s, -len(j.gpus), 0)]
    events.sort()
    idle, busy, waiting, last = 0.0, 0, 0, None
    for t, d_busy, d_wait in events:
        if last is not None and waiting > 0:
            idle += (t - last) * max(0, gpu_count - busy)
        busy, waiting, last = busy + d_busy, waiting + d_wait, t
    return idle


def out_of_order(jobs) -> int:
    """How many jobs started before some job that arrived earlier (in queue order) started."""
    latest, count = -math.inf, 0
    for j in sorted(jobs, key=lambda j: (j.arrival_s, j.id)):
        count += j.start_s < latest - 1e-6
        latest = max(latest, j.start_s)
    return count


# --- every run, paired by seed ------------------------------------------------------------------------------------
def run_all(seeds: list[int], traces: list[str], policies: list[str], spreads: list, shares: list[float],
            jobs: int | None = None) -> dict:
    out: dict = {"seeds": list(seeds), "shares": list(shares), "zeus": zeus_repeat_spread(), "runs": {},
                 "wall_s": {}}
    for name in traces:
        for policy in policies:
            for spread in spreads:
                start = time.perf_counter()
                per_row: dict[str, list[dict]] = {row: [] for row in row_names(shares)}
                for seed in seeds:  # every row of a seed in turn: they play one trace
                    for row, runs in per_row.items():
                        runs.append(run_one(name, policy, spread, seed, row, jobs))
                rows = {row: over_seeds(runs) for row, runs in per_row.items()}
                label = str(spread)
                out["wall_s"][f"{name}/{policy}/{label}"] = round(time.perf_counter() - start, 1)
                out["runs"].setdefault(name, {}).setdefault(policy, {})[label] = {
                    "achieved_spread": rows["fifo"]["per_seed"]["key_spread"], "rows": rows,
                    "vs_fifo": vs_fifo(rows)}
                out["runs"][name][policy][label]["share_of_true"] = share_of_true(out["runs"][name][policy][label])
    return out


def pooled(results: list[dict]) -> dict:
    """Runs on other seeds pooled into one result, as if run together: every (trace, policy, spread) and row that
    each result has, its per-seed figures in turn, and the statistics of :func:`run_all` computed again on them."""
    shares = sorted(set.intersection(*(set(r["shares"]) for r in results)))
    out: dict = {"seeds": [s for r in results for s in r["seeds"]], "shares": shares, "zeus": results[0]["zeus"],
                 "runs": {}, "wall_s": {}}
    for name, by_policy in results[0]["runs"].items():
        for policy, by_spread in by_policy.items():
            for label in by_spread:
                parts = [r["runs"].get(name, {}).get(policy, {}).get(label) for r in results]
                if any(part is None for part in parts):
                    continue
                rows = {}
                for row in row_names(shares):
                    runs = [{k: v[i] for k, v in part["rows"][row]["per_seed"].items()}
                            for part in parts for i in range(len(part["rows"][row]["per_seed"]["mean_jct_s"]))]
                    rows[row] = over_seeds(runs)
                run = {"achieved_spread": rows["fifo"]["per_seed"]["key_spread"], "rows": rows,
                       "vs_fifo": vs_fifo(rows)}
                run["share_of_true"] = share_of_true(run)
                out["runs"].setdefault(name, {}).setdefault(policy, {})[label] = run
    return out


def share_of_true(run: dict, draws: int = 10_000) -> dict:
    """Each ``backfill-known-P`` row's reduction of mean JCT against ``fifo`` as a share of ``backfill-true``'s (%):
    the ratio of the paired means over the seeds, with a bootstrap 95 % interval (seeds drawn with replacement; a draw
    where the upper bound reduces nothing is left out). The issue's goal reads it at 100 % declaring."""
    true = np.array(run["vs_fifo"]["backfill-true"]["mean_jct_pct"]["per_seed"])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(true), size=(draws, len(true)))
    out = {}
    for row, v in run["vs_fifo"].items():
        if not row.startswith("backfill-known-") or true.mean() >= 0:
            continue
        known = np.array(v["mean_jct_pct"]["per_seed"])
        kept = true[picks].mean(axis=1) < 0
        ratios = 100.0 * known[picks].mean(axis=1)[kept] / true[picks].mean(axis=1)[kept]
        lo, hi = np.percentile(ratios, [2.5, 97.5])
        out[row] = {"mean": round(100.0 * known.mean() / true.mean(), 1), "ci95_lo": round(float(lo), 1),
                    "ci95_hi": round(float(hi), 1)}
    return out


def vs_fifo(rows: dict) -> dict:
    """Each row against ``fifo`` on the same seeds (:data:`VS_FIFO`)."""
    return {row: {name: paired(rows, row, "fifo", key, _pct_over if ratio else (lambda a, b: a - b))
                  for name, (key, ratio) in VS_FIFO.items()}
            for row in rows if row != "fifo"}


def _pm(stat: dict, unit: str = " %") -> str:
    return f"{stat['mean']:+.1f}" + ("" if stat["ci95"] is None else f" ± {stat['ci95']:.1f}") + unit


def markdown(result: dict) -> str:
    lines = []
    order = row_names(result["shares"])  # a JSON read back has its keys sorted
    for name, by_policy in sorted(result["runs"].items(), key=lambda kv: TRACES.index(kv[0])):
        for policy, by_spread in sorted(by_policy.items(), key=lambda kv: POLICIES.index(kv[0])):
            for spread, run in by_spread.items():
                reached = statistics.fmean(run["achieved_spread"])
                lines += [f"\n### {name}, `{policy}`, repeat spread {spread} (reached {reached:.3f})\n",
                          "| row | mean JCT, h | vs fifo: mean JCT (median seed) | p95 JCT | mean wait | GPU idle, h "
                          "| idle while waiting, h | node energy | out of order | late heads |",
                          "|---|---|---|---|---|---|---|---|---|---|"]
                for row in order:
                    r = run["rows"][row]
                    v = run["vs_fifo"].get(row)
                    cells = ["", "", "", "", "", ""] if v is None else [
                        _pm(v["mean_jct_pct"]) + f" ({statistics.median(v['mean_jct_pct']['per_seed']):+.1f} %)",
                        _pm(v["p95_jct_pct"]), _pm(v["mean_wait_pct"]),
                        _pm(v["gpu_idle_h"], ""), _pm(v["idle_waiting_h"], ""), _pm(v["node_energy_pct"])]
                    held = sum(r["per_seed"].get("reservations", []))
                    late = "" if not held else \
                        f"{100.0 * sum(r['per_seed']['late_reservations']) / held:.0f} % of {held}"
                    lines.append(f"| {row} | {r['mean_jct_s'] / 3600:.2f} | " + " | ".join(cells)
                                 + f" | {r['out_of_order_pct']:.1f} % | {late} |")
                shares = run.get("share_of_true", {})
                if shares:
                    lines.append("\nShare of `backfill-true`'s reduction of mean JCT (bootstrap 95 % interval): "
                                 + ", ".join(f"{row} {s['mean']:.0f} % [{s['ci95_lo']:.0f}, {s['ci95_hi']:.0f}]"
                                             for row, s in sorted(shares.items(),
                                                                  key=lambda kv: float(kv[0].rsplit("-", 1)[1]))))
    return "\n".join(lines).lstrip("\n") + "\n"


def report(result: dict, command: str) -> str:
    """``backfill_headroom.md``: the command, how to read it, and :func:`markdown`'s tables."""
    seeds, zeus = result["seeds"], result["zeus"]
    return ("# The headroom of backfill\n\nGenerated by `python benchmarks/backfill_headroom.py " + command
            + f"` (seeds {seeds[0]}-{seeds[-1]}). Each figure against `fifo` is the mean of the per-seed differences "
            "± the half-width of its 95 % interval (Student's t on the seeds); in brackets the median seed's. Zeus's "
            f"repeat spread: {zeus['spread']} ({zeus['configs']} configurations, {zeus['runs']} runs).\n\n"
            + markdown(result))


def _spread(text: str) -> str | float:
    if text in (ZEUS, INDEPENDENT):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a spread is {ZEUS}, {INDEPENDENT} or a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a spread is {ZEUS}, {INDEPENDENT} or a number > 0, got {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--trace", action="append", choices=TRACES, help="repeatable (default: both)")
    parser.add_argument("--policy", action="append", choices=POLICIES, help="repeatable (default: both)")
    parser.add_argument("--share", action="append", type=float, metavar="PCT",
                        help="a share of jobs that declare their length, 0-100 (repeatable; default 0 25 50 100)")
    parser.add_argument("--spread", action="append", type=_spread, metavar="S",
                        help=f"how a job key's runs relate in length: {ZEUS} (measured), {INDEPENDENT} (the trace's "
                             "own run times) or the sd of log(run time / key median) (repeatable; default zeus)")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per trace (default: the trace's own)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="also write backfill_headroom.md and .json here")
    parser.add_argument("--pool", nargs="+", type=Path, metavar="JSON",
                        help="run nothing: pool earlier runs' backfill_headroom.json (other seeds) into one result")
    args = parser.parse_args()
    if args.pool:
        result = pooled([json.loads(path.read_text()) for path in args.pool])
        _write(result, args.out)
        emit(result, args.json, markdown(result))
        return
    if args.seeds < 2:
        parser.error("--seeds must be at least 2 (the rows are paired by seed)")
    shares = args.share if args.share is not None else list(SHARES)
    if any(not 0 <= s <= 100 for s in shares):
        parser.error(f"--share takes percentages from 0 to 100, got {shares}")
    if args.jobs is not None and args.jobs < 2:
        parser.error("--jobs must be at least 2")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    result = run_all(seeds, args.trace or list(TRACES), args.policy or list(POLICIES), args.spread or [ZEUS],
                     shares, args.jobs)
    _write(result, args.out)
    emit(result, args.json, markdown(result))


def _write(result: dict, out: Path | None) -> None:
    """``--out``: the report and the JSON."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "backfill_headroom.md").write_text(report(result, " ".join(sys.argv[1:])))
        (out / "backfill_headroom.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
