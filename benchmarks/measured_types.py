"""The learned parts on job types whose cap curve is measured and none of whose readings the measured world invented.

    python benchmarks/measured_types.py [--json] [--source NAME ...] [--no-holdout] [--cache DIR] [--out DIR]

**Why.** The measured world (:mod:`ecolaunch.sim.measured`) gives its job types utilization readings from Gavel
fits and matches Zeus curves to them by rank: a model trained on that world's readings can score well by learning
the matching back. The types here carry no such link: every number a job is described by, and every number it is
scored against, was measured on the same job.

**Types** (one job alone on its board; ``--source`` picks sources):

- ``zeus-v100``, ``zeus-a40``: Zeus's single-GPU profiling windows (``shared/data/zeus-nsdi23/profile_windows``,
  :func:`ecolaunch.profile.zeus_data.load_profile_windows`; Apache-2.0, SOURCE.md there): time and energy per
  window at every cap, **no utilization reading** (Zeus records none), so utilization is passed as unknown.
- ``zeus-multi``: the 2- and 4-GPU data-parallel windows, asked as one of the job's GPUs (per-GPU mean power;
  the window's time is the whole job's): ``ecolaunch predict`` has no multi-GPU what-if.
- ``h200``: ecolaunch's own H200 sweep (``ecolaunch/sim/data/h200_cap_sweep.csv``,
  :func:`ecolaunch.sim.truth.h200_truths`), ``mm`` and ``bw``: **utilization and curve both measured**, by NVML
  in the same run (``mlp`` is left out: its rows are launch jitter, not a curve, per that SOURCE.md).

**The question** (what a first launch's first seconds give): the job's uncapped iteration time and power (its
highest measured cap) and, where measured, its SM and memory utilization there; memory is not recorded by either
source and is passed as unknown. Asked alone on its board at every other measured cap within the board's range:
normalized throughput (time at the top cap / time at the cap) and board power. Error = ``|predicted / measured -
1|`` in %, per point; a source's row is the mean and worst over its points. Points that read *faster* than
uncapped (no cap speeds a job up: noise, e.g. the input-bound A40 ResNet-50 x4) are scored as measured and
counted.

**Rows.**

- ``gnn``: the shipped weights (:func:`ecolaunch.policy.infer.load_default_model`) through
  :func:`ecolaunch.policy.features.scenario_graph` and :func:`ecolaunch.policy.infer.score_sd` (what ``ecolaunch
  predict`` runs, without its idle-power floor). It saw every Zeus summary curve, which holds ResNet-50,
  ShuffleNetV2 and BERT at other batch sizes (and datasets) on V100 and A40: on those windows it is **not** held
  out. It never saw ResNet-18 (not in Zeus's summary) nor any H200 measurement.
- ``gnn-no-util``: the shipped weights asked with the measured utilization withheld (H200 only, the one source
  that measured it): how much of ``gnn``'s answer that reading moves.
- ``gnn-heldout``: held out by network. For a window whose network the Zeus summary curves hold (ResNet-50,
  ShuffleNetV2, BERT), the same training (:func:`ecolaunch.learn.train.train`, seed 0, full size) without every
  Zeus summary curve of that network (every board, batch size and dataset): one model per network, trained on
  first use into ``--cache`` (about 2 min each on 2 cores; the folder names the network, the file what it was
  trained without and the training fingerprint of ``benchmarks/energy.py``, so weights of other code or data are
  never reused). Its features still read the cap prior :data:`~ecolaunch.jobmodel.capcurve.DEFAULT_PRIOR`, fitted on
  all Zeus curves, that network included. For ResNet-18 and H200, which no training source holds, the shipped
  weights. ``--no-holdout`` leaves the held-out rows out.
- ``prior``: the ablation, no learning: the Zeus prior from the uncapped point alone
  (:func:`ecolaunch.jobmodel.capcurve.profile_curve` on a profile with only ``iter_time_s`` and ``power_w``), fitted on
  all Zeus summary curves; ``prior-heldout``: the same prior refitted without the window's network (for ResNet-18
  and H200: the prior itself).
- ``heuristic``: the skeptic's rule, ``time ratio = max(1, uncapped power / cap)``, ``power = min(uncapped power,
  cap)``.

**Pairs.** None of these sources measured two jobs sharing a GPU, so no pair prediction is scored here (the
JSON's ``pairs`` says so); pairs are scored on Gavel's measurements by ``benchmarks/pair_prediction.py``.

Prints the table (``--json``: the document below); writes nothing unless ``--out`` (``measured_types.json``)::

    {"sources": {SOURCE: {METHOD (those scored there): {"points", "time_mean_pct", "time_max_pct", "power_mean_pct",
                                   "power_max_pct"}, "faster_than_uncapped": N}},
     "types": [{"name", "source", "gpu", "num_gpus", "sm_util_pct", "mem_util_pct", "uncapped": {...},
                "points": [{"cap_w", "measured_speed", "measured_power_w",
                            "predicted": {METHOD: {"speed", "power_w", "time_err_pct", "power_err_pct"}}}]}],
     "methods": [...], "held_out": {METHOD: text}, "pairs": text, "heldout_weights": {NETWORK: path}}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

from _common import emit

SOURCES = ("zeus-v100", "zeus-a40", "zeus-multi", "h200")
#: the seed the held-out GNN is trained with (the shipped weights' seed)
TRAIN_SEED = 0
HELD_OUT = {
    "gnn": "shipped weights: saw every Zeus summary curve (ResNet-50, ShuffleNetV2, BERT at other batch sizes and "
           "datasets on V100/A40, so those windows are not held out); never saw ResNet-18 or any H200 measurement",
    "gnn-no-util": "the shipped weights asked without the measured utilization (only where one was measured: "
                   "H200); what that reading moves",
    "gnn-heldout": "per Zeus window: trained without every Zeus summary curve of its network (every board, batch "
                   "size, dataset); its features still read the cap prior fitted on all Zeus curves. ResNet-18 "
                   "and H200, in no training source: the shipped weights",
    "prior": "Zeus cap prior fitted on all Zeus summary curves (those networks included); no learning",
    "prior-heldout": "Zeus cap prior refitted without the window's network (ResNet-18, H200: the prior itself)",
    "heuristic": "nothing fitted: time ratio = max(1, uncapped power / cap), power = min(uncapped power, cap)",
}
PAIRS = ("none: neither Zeus's profiling windows nor the H200 sweep measured two jobs sharing a GPU, so no pair "
         "prediction can be scored on these types (Gavel's pairs: benchmarks/pair_prediction.py)")


def measured_types(sources: tuple[str, ...], zeus_dir: Path | None = None) -> list[dict]:
    """The types of ``sources``: name, source, catalogue board, GPU count, utilization (None: not measured) and
    the measured points ascending by cap."""
    from ecolaunch.profile import zeus_data
    from ecolaunch.sim.truth import H200_MODEL, ZEUS_MODELS, h200_truths

    out = []
    if any(s.startswith("zeus-") for s in sources):
        for c in zeus_data.load_profile_windows(zeus_dir or zeus_data.DEFAULT_DATA_DIR):
            source = "zeus-multi" if c.num_gpus > 1 else f"zeus-{c.gpu.lower()}"
            if source in sources:
                out.append({"name": f"Zeus window {c.key}", "source": source, "gpu": ZEUS_MODELS[c.gpu],
                            "num_gpus": c.num_gpus, "network": c.workload.replace("-", "_"),
                            "sm_util_pct": None, "mem_util_pct": None, "points": c.points})
    if "h200" in sources:
        for t in h200_truths():
            out.append({"name": t.name, "source": "h200", "gpu": H200_MODEL, "num_gpus": 1, "network": None,
                        "sm_util_pct": t.sm_util_pct, "mem_util_pct": t.mem_util_pct, "points": t.points})
    return out


def zeus_networks() -> set[str]:
    """The networks of the vendored Zeus summary curves (what training and the prior saw), e.g. ``"resnet50"``."""
    from ecolaunch.sim.truth import vendored_zeus_curves

    return {c.workload.split("/")[-1] for c in vendored_zeus_curves()}


def heldout_prior(network: str):
    """:class:`~ecolaunch.jobmodel.capcurve.CapPrior` refitted on the vendored Zeus summary curves without
    ``network`` (the same fit as :data:`~ecolaunch.jobmodel.capcurve.DEFAULT_PRIOR` otherwise)."""
    from ecolaunch.jobmodel.capcurve import CapPrior
    from ecolaunch.sim.truth import vendored_zeus_curves

    keep = [c for c in vendored_zeus_curves() if c.workload.split("/")[-1] != network]
    return CapPrior.fit([c.points for c in keep], source=f"without {network}")


def heldout_weights(cache: Path, network: str) -> Path:
    """The GNN trained without every Zeus summary curve of ``network`` (cached in ``cache``)."""
    import torch

    from energy import training_fingerprint
    from ecolaunch.learn.train import train, zeus_keys

    keys = sorted(k for k in zeus_keys() if k.split(":")[1] == network)
    tag = hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:10]
    folder = cache / f"measured-types-without-{network}"  # one folder each: train() writes manifest.json beside
    path = folder / f"gnn-{tag}-{training_fingerprint()}.pt"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"training the GNN without the {len(keys)} Zeus curves of {network} into {path} ...",
              file=sys.stderr, flush=True)
        torch.set_num_threads(1)  # as benchmarks/train_gnn.py: reproducible, fastest on 2 shared cores
        train(TRAIN_SEED, path, holdout_zeus=keys)
    return path


def _gnn(model, asks: list[tuple]) -> list[tuple[float, float]]:
    """(speed, board power) of each (catalogue board, cap, job dict) in one forward pass of ``model``."""
    import torch

    from ecolaunch.policy.features import scenario_graph
    from ecolaunch.policy.infer import score_sd
    from ecolaunch.state.graph import GpuNode

    torch.set_num_threads(1)
    graphs = [scenario_graph(GpuNode.from_model(gpu), cap, [job]) for gpu, cap, job in asks]
    thr, power, _ = score_sd(graphs, model)
    return [(float(t[0]), float(p[0])) for t, p in zip(thr, power)]


def _prior(prior, top, cap: float, max_w: float) -> tuple[float, float]:
    from ecolaunch.jobmodel.capcurve import profile_curve
    from ecolaunch.jobmodel.profile import Profile

    curve = profile_curve(Profile(iter_time_s=top.iter_time_s, power_w=top.power_w), max_w, prior=prior)
    return curve.speed(cap, max_w), curve.at(cap).power_w


def heuristic(top, cap: float) -> tuple[float, float]:
    """The skeptic's rule: speed = 1 / max(1, uncapped power / cap), power = min(uncapped power, cap)."""
    return 1.0 / max(1.0, top.power_w / cap), min(top.power_w, cap)


def run(sources: tuple[str, ...] = SOURCES, *, holdout: bool = True, cache: Path | None = None,
        zeus_dir: Path | None = None) -> dict:
    from ecolaunch.devices.catalogue import lookup
    from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR
    from ecolaunch.policy.infer import load_default_model, load_model_cached

    shipped = load_default_model()
    methods = ["gnn", *(["gnn-heldout"] if holdout else []), "prior", *(["prior-heldout"] if holdout else []),
               "heuristic"]
    known = zeus_networks()
    chosen = measured_types(sources, zeus_dir)
    held = sorted({t["network"] for t in chosen if t["network"] in known}) if holdout else []
    weights = {network: heldout_weights(cache, network) for network in held}
    held_priors = {network: heldout_prior(network) for network in held}
    types, asks = [], []  # asks: (board, cap, job, point row, held-out model)
    for t in chosen:
        priors = {"prior": DEFAULT_PRIOR}
        if holdout:
            priors["prior-heldout"] = held_priors.get(t["network"], DEFAULT_PRIOR)
        model = load_model_cached(weights[t["network"]]) if t["network"] in weights else shipped
        gpu = lookup(t["gpu"])
        pts = sorted(t["points"], key=lambda p: p.power_cap_w)
        top = pts[-1]
        job = {"id": "j", "iter_time_s": top.iter_time_s, "power_w": top.power_w,
               "sm_util_pct": t["sm_util_pct"], "mem_bw_util_pct": t["mem_util_pct"]}
        rows = []
        for p in pts[:-1]:
            if not gpu.power_limit_min_w <= p.power_cap_w <= gpu.power_limit_max_w:
                continue
            predicted = {name: dict(zip(("speed", "power_w"), _prior(prior, top, p.power_cap_w, top.power_cap_w)))
                         for name, prior in priors.items()}
            predicted["heuristic"] = dict(zip(("speed", "power_w"), heuristic(top, p.power_cap_w)))
            rows.append({"cap_w": p.power_cap_w, "measured_speed": top.iter_time_s / p.iter_time_s,
                         "measured_power_w": p.power_w, "predicted": predicted})
            asks.append((gpu, p.power_cap_w, job, rows[-1], model))
        types.append({k: v for k, v in t.items() if k not in ("points", "network")}
                     | {"uncapped": {"cap_w": top.power_cap_w, "iter_time_s": top.iter_time_s,
                                     "power_w": top.power_w}, "points": rows})
    runs = [("gnn", shipped, asks)]
    if holdout:
        runs += [("gnn-heldout", m, [a for a in asks if a[4] is m]) for m in {id(a[4]): a[4] for a in asks}.values()]
    with_util = [a for a in asks if a[2]["sm_util_pct"] is not None]
    if with_util:  # the shipped GNN with the measured utilization withheld: what that reading moves
        methods.insert(1, "gnn-no-util")
        runs.append(("gnn-no-util", shipped, [(gpu, cap, job | {"sm_util_pct": None, "mem_bw_util_pct": None}, row, m)
                                              for gpu, cap, job, row, m in with_util]))
    for name, model, batch in runs:
        for (_, _, _, row, _), (speed, power) in zip(batch, _gnn(model, [a[:3] for a in batch])):
            row["predicted"][name] = {"speed": speed, "power_w": power}
    summary: dict[str, dict] = {}
    for t in types:
        for row in t["points"]:
            for pred in row["predicted"].values():
                pred["time_err_pct"] = abs(pred["speed"] / row["measured_speed"] - 1.0) * 100.0
                pred["power_err_pct"] = abs(pred["power_w"] / row["measured_power_w"] - 1.0) * 100.0
        for name in (m for m in methods if t["points"] and m in t["points"][0]["predicted"]):
            cell = summary.setdefault(t["source"], {}).setdefault(name, {"time": [], "power": []})
            cell["time"] += [r["predicted"][name]["time_err_pct"] for r in t["points"]]
            cell["power"] += [r["predicted"][name]["power_err_pct"] for r in t["points"]]
    out_sources = {}
    for source, cells in summary.items():
        out_sources[source] = {name: {"points": len(c["time"]),
                                      "time_mean_pct": statistics.fmean(c["time"]), "time_max_pct": max(c["time"]),
                                      "power_mean_pct": statistics.fmean(c["power"]),
                                      "power_max_pct": max(c["power"])} for name, c in cells.items()}
        out_sources[source]["faster_than_uncapped"] = sum(r["measured_speed"] > 1.0 for t in types
                                                          if t["source"] == source for r in t["points"])
    first = first_launch(chosen, weights)
    return {"sources": out_sources, "types": types, "methods": methods,
            "held_out": {m: HELD_OUT[m] for m in methods}, "pairs": PAIRS,
            "heldout_weights": {network: str(path) for network, path in weights.items()}, "first_launch": first}


#: what the first-launch question's methods are (:func:`first_launch`)
FIRST_METHODS = {
    "gnn-first": "the GNN's first-launch curve (GnnFirstCurve: the job alone at each cap, nothing of it known but the "
                 "board), its standard deviation kept back FIRST_CURVE_Z times; held out by network as gnn-heldout",
    "rule": "the most pessimistic measured Zeus summary curve at the same share of the board's maximum (every "
            "board; without the window's network), as measured: the rule a skeptic tries first",
    "prior-max": "the Zeus cap prior (all Zeus curves) read as if the job drew its board's maximum uncapped: what "
                 "the GNN's features assume of a job whose power is unknown; no learning",
}


def first_launch(chosen: list[dict], weights: dict[str, Path]) -> dict:
    """The question a first launch asks before anything of it is measured: on each single-GPU type's board, its
    normalized throughput at each measured cap, from the board alone. Per source and method: the mean
    |predicted / measured - 1| of the prediction (``time_mean_pct``), and of what the method keeps back (the GNN's
    prediction less ``FIRST_CURVE_Z`` standard deviations; the others as they are): ``covered_pct``, the share of
    points measured at least that fast, and ``slack_pct``, how much faster than that they ran on average (the
    price of the cover, in % of the measured speed)."""
    from ecolaunch.devices.catalogue import lookup
    from ecolaunch.jobmodel.capcurve import profile_curve
    from ecolaunch.jobmodel.profile import Profile
    from ecolaunch.policy.gnn import FIRST_CURVE_Z, GnnFirstCurve
    from ecolaunch.sim.truth import zeus_truths
    from ecolaunch.state.graph import GpuNode

    summary = [t for t in zeus_truths() if t.time_unit == "epoch"]
    suppliers: dict[str | None, GnnFirstCurve] = {}
    cells: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for t in (t for t in chosen if t["num_gpus"] == 1):
        network = t["network"]
        if network not in suppliers:
            suppliers[network] = GnnFirstCurve(weights.get(network))
        gpu = lookup(t["gpu"])
        speeds = {round(c, 6): (v, sd) for c, v, sd, _ in suppliers[network].speeds(GpuNode.from_model(gpu))}
        pts = sorted(t["points"], key=lambda p: p.power_cap_w)
        top = pts[-1]
        others = [c for c in summary if network is None or c.name.split(" ")[1].split("/")[-1] != network]
        flat = profile_curve(Profile(iter_time_s=1.0, power_w=gpu.power_limit_max_w), gpu.power_limit_max_w)
        for p in pts[:-1]:
            key = round(p.power_cap_w, 6)
            if key not in speeds:
                continue
            measured = top.iter_time_s / p.iter_time_s
            frac = p.power_cap_w / gpu.power_limit_max_w
            speed, sd = speeds[key]
            rule = min(c.iter_time_s(c.max_cap_w) / c.iter_time_s(frac * c.max_cap_w) for c in others)
            prior = flat.speed(p.power_cap_w, gpu.power_limit_max_w)
            for name, mean, kept in (("gnn-first", speed, speed - FIRST_CURVE_Z * sd), ("rule", rule, rule),
                                     ("prior-max", prior, prior)):
                cells.setdefault(t["source"], {}).setdefault(name, []).append((mean, kept, measured))
    out = {}
    for source, methods in cells.items():
        out[source] = {name: {"points": len(rows),
                              "time_mean_pct": statistics.fmean(abs(m / y - 1.0) * 100.0 for m, _, y in rows),
                              "covered_pct": 100.0 * statistics.fmean(y >= k - 1e-9 for _, k, y in rows),
                              "slack_pct": statistics.fmean(max(0.0, y - k) / y * 100.0 for _, k, y in rows)}
                       for name, rows in methods.items()}
    return {"sources": out, "methods": FIRST_METHODS}


def table(r: dict) -> str:
    lines = ["One job alone at each measured cap, asked from its uncapped readings; |predicted / measured - 1| in %",
             f"{'source':<11} {'method':<14} {'points':>6}  {'time mean':>9} {'time max':>9}  "
             f"{'power mean':>10} {'power max':>10}"]
    for source, cells in r["sources"].items():
        for name in (m for m in r["methods"] if m in cells):
            c = cells[name]
            lines.append(f"{source:<11} {name:<14} {c['points']:>6}  {c['time_mean_pct']:>9.2f} "
                         f"{c['time_max_pct']:>9.2f}  {c['power_mean_pct']:>10.2f} {c['power_max_pct']:>10.2f}")
        lines.append(f"{'':<11} ({cells['faster_than_uncapped']} points read faster than uncapped: noise)")
    lines += ["", "held out:", *(f"  {m}: {text}" for m, text in r["held_out"].items()), f"pairs: {r['pairs']}"]
    first = r["first_launch"]
    lines += ["", "A first launch, nothing of it measured (the board alone): what is kept back, and what it costs",
              f"{'source':<11} {'method':<14} {'points':>6}  {'time mean':>9} {'covered %':>9} {'slack %':>8}"]
    for source, cells in first["sources"].items():
        for name, c in cells.items():
            lines.append(f"{source:<11} {name:<14} {c['points']:>6}  {c['time_mean_pct']:>9.2f} "
                         f"{c['covered_pct']:>9.1f} {c['slack_pct']:>8.2f}")
    lines += [f"  {m}: {text}" for m, text in first["methods"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--source", action="append", choices=SOURCES, help="a source to score (default: all)")
    parser.add_argument("--no-holdout", action="store_true", help="leave out the held-out GNN and prior rows")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ecolaunch-bench",
                        help="where the held-out GNN's weights are kept")
    parser.add_argument("--zeus-dir", type=Path, default=None,
                        help="folder holding Zeus's profile_windows/ (default: the checkout's shared/data copy)")
    parser.add_argument("--out", type=Path, default=None, help="write measured_types.json here")
    args = parser.parse_args()
    start = time.perf_counter()
    r = run(tuple(args.source or SOURCES), holdout=not args.no_holdout, cache=args.cache, zeus_dir=args.zeus_dir)
    r["run_s"] = round(time.perf_counter() - start, 1)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "measured_types.json").write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
    emit(r, args.json, table(r) + f"\n({r['run_s']} s)")


if __name__ == "__main__":
    main()
