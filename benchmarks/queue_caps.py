"""Caps that weigh the queue: what each ``[energy] wait_weight`` buys in completion time and costs in energy, next to
the rule a skeptic would try first.

    python benchmarks/queue_caps.py [--seeds 5] [--weight W ...] [--lift N ...] [--trace NAME ...] [--json]
                                    [--out benchmarks/results/queue-caps]

Runs ``curve`` (the default policy) and ``exclusive`` on the busy traces of the measured world
(``workstation-mixed``, ``workstation-measured``: :mod:`ecolaunch.sim.measured_traces`) once as shipped
(``wait_weight = 0``) and once per weight (``benchmarks/energy.py``'s ``run_all`` with ``wait_weight``: the admin's
``[energy] wait_weight``, at placement and in every running job's closed loop, :func:`ecolaunch.jobmodel.capchoice.queue_eta`),
and once per ``--lift N``: the one-line rule, "while at least N jobs wait, every running job runs uncapped"
(``Simulation(lift_caps_waiting=N)``, an ablation the launcher does not do). Each row is paired by seed against
``curve`` as shipped on the same seed: node energy and mean JCT (``100 * (row / shipped - 1)``) and violations
(percentage points), each the mean over the seeds with its 95 % interval (Student's t); and the row against
``exclusive``. No learned part is involved (``curve`` decides from measured curves), so there is no ablation
without one: the lift rule is the comparison.

A busy queue's mean JCT is heavy-tailed over seeds: one job placed a few minutes sooner on other GPUs (say a
synchronous job on a worse-linked pair, which the measured world slows by Gavel's spread-over-servers penalty) can
delay dozens behind it, so a row's mean can be one seed's. Each seed's change is kept, and the table gives their
median next to the mean.

``--json`` prints ``{"seeds": [...], "traces": {TRACE: {ROW: {"node_energy_pct": [mean, ci], "mean_jct_pct": [...],
"violations_pp": [...], "per_seed": {"node_energy_pct": [...], "mean_jct_pct": [...]}, "vs_exclusive":
{"node_energy_pct": [...], "mean_jct_pct": [...]}}}}}``; ``--out`` also writes ``queue_caps.md`` and
``queue_caps.json`` there. About 5 minutes on 2 cores with the defaults (11 with ``--seeds 10``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from _common import emit, mean_ci95

TRACES = ("workstation-mixed", "workstation-measured")


def _diffs(rows: dict, base: dict, key: str, *, ratio: bool) -> list[float]:
    """The row's change against ``base`` on each seed (``100 * (row / base - 1)``, or ``row - base``)."""
    a, b = rows["per_seed"][key], base["per_seed"][key]
    return [100.0 * (x / y - 1.0) if ratio else x - y for x, y in zip(a, b)]


def _paired(rows: dict, base: dict, key: str, *, ratio: bool) -> list[float | None]:
    mean, ci = mean_ci95(_diffs(rows, base, key, ratio=ratio))
    return [round(mean, 3), None if ci is None else round(ci, 3)]


def compare(runs: dict[str, dict], traces: list[str]) -> dict:
    """Each row against the shipped ``curve`` (``runs["shipped"]``) and against ``exclusive``, paired by seed."""
    out: dict = {}
    for trace in traces:
        shipped = runs["shipped"]["traces"][trace]
        out[trace] = {}
        for row, result in runs.items():
            mine = result["traces"][trace]["curve"]
            out[trace][row] = {
                "node_energy_pct": _paired(mine, shipped["curve"], "node_energy_kwh", ratio=True),
                "mean_jct_pct": _paired(mine, shipped["curve"], "mean_jct_s", ratio=True),
                "violations_pp": _paired(mine, shipped["curve"], "qos_violations_pct", ratio=False),
                # a queue's mean JCT is heavy-tailed over seeds (one placement moved can delay dozens of jobs): each
                # seed's change, and their median, say whether a mean is one seed's
                "per_seed": {"node_energy_pct": _rounded(_diffs(mine, shipped["curve"], "node_energy_kwh", ratio=True)),
                             "mean_jct_pct": _rounded(_diffs(mine, shipped["curve"], "mean_jct_s", ratio=True))},
                "vs_exclusive": {
                    "node_energy_pct": _paired(mine, shipped["exclusive"], "node_energy_kwh", ratio=True),
                    "mean_jct_pct": _paired(mine, shipped["exclusive"], "mean_jct_s", ratio=True)},
            }
    return out


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 2) for v in values]


def _fmt(pair: list[float | None], unit: str) -> str:
    mean, ci = pair
    return f"{mean:+.2f}{'' if ci is None else f' ± {ci:.2f}'}{unit}"


def markdown(table: dict) -> str:
    lines = []
    for trace, rows in table.items():
        lines += [f"### {trace}", "", "| row | node energy vs shipped | mean JCT vs shipped | its median (seeds) |"
                  " violations vs shipped | node energy vs excl. | mean JCT vs excl. |", "|---|---|---|---|---|---|---|"]
        for row, r in rows.items():
            lines.append(f"| {row} | {_fmt(r['node_energy_pct'], ' %')} | {_fmt(r['mean_jct_pct'], ' %')} | "
                         f"{statistics.median(r['per_seed']['mean_jct_pct']):+.2f} % | "
                         f"{_fmt(r['violations_pp'], ' pp')} | {_fmt(r['vs_exclusive']['node_energy_pct'], ' %')} | "
                         f"{_fmt(r['vs_exclusive']['mean_jct_pct'], ' %')} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--weight", type=float, action="append", metavar="W",
                        help="a wait weight to run (repeatable; default 0.25 0.5 1 2 4)")
    parser.add_argument("--lift", type=int, action="append", metavar="N",
                        help="the lift rule's N (repeatable; default 1 and 4)")
    parser.add_argument("--trace", action="append", choices=TRACES)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    weights = args.weight or [0.25, 0.5, 1.0, 2.0, 4.0]
    lifts = args.lift or [1, 4]
    if args.seeds < 2:
        parser.error("--seeds must be at least 2 (an interval needs two)")
    if not all(0 < w <= 100 for w in weights):
        parser.error(f"--weight must be a number in (0, 100], got {weights}")
    if not all(n >= 1 for n in lifts):
        parser.error(f"--lift must be a whole number >= 1, got {lifts}")
    import energy

    traces = args.trace or list(TRACES)
    seeds = list(range(args.seeds))
    cache = Path.home() / ".cache" / "ecolaunch-bench"

    def run(**kw) -> dict:
        return energy.run_all(seeds, ["curve", "exclusive"], ["measured"], traces, False, cache, **kw)

    runs = {"shipped": run()}
    for w in weights:
        runs[f"wait_weight {w:g}"] = run(wait_weight=w)
    for n in lifts:
        runs[f"lift N={n}"] = run(lift_caps_waiting=n)
    result = {"seeds": seeds, "traces": compare(runs, traces)}
    table = markdown(result["traces"])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "queue_caps.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        (args.out / "queue_caps.md").write_text(
            "# Caps that weigh the queue\n\nGenerated by `python benchmarks/queue_caps.py` (seeds "
            f"{', '.join(map(str, seeds))}; measured world; `curve`). Paired by seed against `curve` as shipped "
            "(`wait_weight = 0`); mean ± the half-width of the 95 % interval. `lift N=n`: every running job uncapped "
            "while at least n jobs wait (the one-line rule, an ablation).\n\n" + table)
    emit(result, args.json, table)


if __name__ == "__main__":
    main()
