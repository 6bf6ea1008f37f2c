"""How long a multi-GPU job should hold out for a best-linked set: the link rule (``ecolaunch.policy.linkwait``) with
each wait swept, beside the default row ``curve``, on measured traces, paired by seed.

    python benchmarks/link_wait.py [--seeds 5] [--first-seed 0] [--trace NAME ...] [--wait SHARE:UNKNOWN_S ...]
                                   [--link-slowdown PCT] [--json] [--out benchmarks/results/issue39/link]

Each ``--wait SHARE:UNKNOWN_S`` is a row ``curve-link`` holding out at most ``SHARE`` times the job's expected length
(``bound``: its slowdown bound's share; ``inf``: without limit) and ``UNKNOWN_S`` seconds when its length is unknown
(``inf``: without limit), as the launcher's ``curve`` row is built (``benchmarks/energy.py``: a first launch told a
colleague's profile, the measured world's held-out priors). For every row: node energy, mean JCT and the share of jobs
over their bound, the mean over the seeds and the mean of the per-seed differences against ``curve`` (energies and JCT
in %, the share in points) with its 95 % interval. Writes ``link_wait.json`` under ``--out``.

``--split-speeds`` prints instead what the rule's default wait rests on: Gavel's V100 multi-GPU jobs' share of speed
spread over servers (``gavel_multi_gpu.csv``, unconsolidated / consolidated), by job size, and the wait (in job lengths)
at which waiting costs a job as much as the worst split of its size, ``1 / share - 1``; writes ``split_speeds.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from _common import REPO, emit, mean_ci95

DEFAULT_WAITS = ("bound:0", "1:0", "4:0", "inf:0", "inf:inf")
DEFAULT_TRACES = ("workstation-topology", "workstation-mixed")
KEYS = ("node_energy_kwh", "mean_jct_s", "qos_violations_pct")


def _number(text: str) -> float | None:
    return None if text == "bound" else math.inf if text == "inf" else float(text)


def _row(policy, trace, share: float | None, unknown_s: float):
    from ecolaunch.policy.budgeted import BudgetedPolicy
    from ecolaunch.policy.curve import CurvePolicy
    from ecolaunch.policy.linkwait import LinkWait
    from ecolaunch.sim.first_curves import as_launched
    from ecolaunch.sim.measured import HeldOutPriors

    priors = HeldOutPriors({j.id: j.kind for j in trace.jobs})
    inner = CurvePolicy(name=policy, priors=priors)
    if share is not None or unknown_s is not None:
        inner = LinkWait(inner, share, unknown_s)
    return as_launched(BudgetedPolicy(inner, priors), trace, policy)


def run(traces: list[str], seeds: list[int], waits: list[str], save=None, link_speed: float | None = None) -> dict:
    from ecolaunch.sim.metrics import summarize
    from ecolaunch.sim.trace_registry import TRACES

    out: dict = {"seeds": seeds, "waits": waits, "link_speed": link_speed, "traces": {}}
    for name in traces:
        entry = TRACES[name]
        machine = entry.machine(None)
        rows: dict = {}
        for wait in ["curve", *waits]:
            per_seed: dict = {k: [] for k in KEYS}
            for seed in seeds:
                trace = entry.build(machine, seed=seed)
                if wait == "curve":
                    policy = _row("curve", trace, None, None)
                else:
                    share, unknown = wait.split(":")
                    policy = _row("curve-link", trace, _number(share), _number(unknown))
                sim = entry.simulation(machine, trace, "curve" if wait == "curve" else "curve-link", policy, seed=seed,
                                       link_speed=link_speed)
                summary = summarize(sim.run(trace))
                for k in KEYS:
                    per_seed[k].append(round(getattr(summary, k), 4))
            rows[wait] = {"per_seed": per_seed, **{k: round(mean_ci95(v)[0], 3) for k, v in per_seed.items()}}
            print(f"{name} {wait}: " + ", ".join(f"{k} {rows[wait][k]}" for k in KEYS), file=sys.stderr, flush=True)
        base = rows["curve"]["per_seed"]
        for wait in waits:
            mine = rows[wait]["per_seed"]
            rows[wait]["vs_curve"] = {
                "node_energy_pct": _paired([100 * (a / b - 1) for a, b in zip(mine["node_energy_kwh"],
                                                                               base["node_energy_kwh"])]),
                "mean_jct_pct": _paired([100 * (a / b - 1) for a, b in zip(mine["mean_jct_s"], base["mean_jct_s"])]),
                "violations_pp": _paired([a - b for a, b in zip(mine["qos_violations_pct"],
                                                                base["qos_violations_pct"])])}
        out["traces"][name] = rows
        if save is not None:  # each trace as it ends: a long sweep stopped midway keeps what it measured
            save(out)
    return out


def split_speeds() -> dict:
    """Gavel's measured share of speed a multi-GPU job keeps spread over servers, by size (``GAVEL_GPU`` rows)."""
    from ecolaunch.sim.measured import GAVEL_GPU
    from ecolaunch.sim.models import read_data_csv

    sizes: dict[int, list[float]] = {}
    for r in read_data_csv("gavel_multi_gpu.csv"):
        if r["gpu"] == GAVEL_GPU:
            sizes.setdefault(int(r["scale_factor"]), []).append(
                min(1.0, float(r["unconsolidated"]) / float(r["consolidated"])))
    out = {}
    for n, shares in sorted(sizes.items()):
        shares.sort()
        out[str(n)] = {"types": len(shares), "min": round(shares[0], 3), "median": round(shares[len(shares) // 2], 3),
                       "max": round(shares[-1], 3), "worst_split_lengths": round(1.0 / shares[0] - 1.0, 2)}
    return out


def _paired(values: list[float]) -> dict:
    mean, half = mean_ci95(values)
    return {"mean": round(mean, 3), "ci95": None if half is None else round(half, 3)}


def table(result: dict) -> str:
    lines = [f"seeds {result['seeds'][0]}..{result['seeds'][-1]}; differences against curve, paired by seed (95 % "
             "interval)", "", "| trace | wait (share:unknown s) | node energy | mean JCT | over bound |", "|---|---|---|---|---|"]
    for name, rows in result["traces"].items():
        for wait, r in rows.items():
            vs = r.get("vs_curve")
            if vs is None:
                lines.append(f"| {name} | curve | {r['node_energy_kwh']:.1f} kWh | {r['mean_jct_s']:.0f} s | "
                             f"{r['qos_violations_pct']:.2f} % |")
                continue
            cell = [f"{vs[k]['mean']:+.2f} ± {vs[k]['ci95']:.2f}" if vs[k]["ci95"] is not None else f"{vs[k]['mean']:+.2f}"
                    for k in ("node_energy_pct", "mean_jct_pct", "violations_pp")]
            lines.append(f"| {name} | {wait} | {cell[0]} % | {cell[1]} % | {cell[2]} pp |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--trace", action="append", help="restrict to these traces (repeatable)")
    parser.add_argument("--wait", action="append", help="SHARE:UNKNOWN_S (repeatable)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "issue39" / "link")
    parser.add_argument("--split-speeds", action="store_true", help="only Gavel's split speeds (see above)")
    parser.add_argument("--link-slowdown", type=float, default=None, metavar="PCT",
                        help="the measured world's multi-GPU jobs run PCT %% slower on a worse-linked set, every type "
                             "alike (default: Gavel's across-server slowdown of each type); writes "
                             "link_wait-slowdown-PCT.{json,md}")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.split_speeds:
        speeds = split_speeds()
        (args.out / "split_speeds.json").write_text(json.dumps(speeds, indent=2, sort_keys=True) + "\n")
        emit(speeds, args.json, "\n".join(f"{n} GPUs ({r['types']} types): keeps {r['min']}-{r['max']} of its speed "
                                         f"(median {r['median']}); the worst split costs {r['worst_split_lengths']} "
                                         "lengths" for n, r in speeds.items()))
        return
    if args.link_slowdown is not None and not args.link_slowdown >= 0:
        parser.error(f"--link-slowdown must be a percentage >= 0, got {args.link_slowdown}")
    from ecolaunch.sim.measured import link_speed_of

    link_speed = None if args.link_slowdown is None else link_speed_of(args.link_slowdown)
    stem = "link_wait" if args.link_slowdown is None else f"link_wait-slowdown-{args.link_slowdown:g}"

    def save(result: dict) -> None:
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        (args.out / f"{stem}.md").write_text(table(result) + "\n")

    result = run(args.trace or list(DEFAULT_TRACES), list(range(args.first_seed, args.first_seed + args.seeds)),
                 args.wait or list(DEFAULT_WAITS), save, link_speed)
    emit(result, args.json, table(result))


if __name__ == "__main__":
    main()
