"""Pairs of jobs on an underused GPU: the GNN of ``ecolaunch predict`` against the utilization-sum rule, scored on
Lucid's measured pairs (validation only: the data is not shipped).

    python benchmarks/lowutil_pairs.py --data DIR [--json] [--bootstrap 1000]

**The data.** Lucid (Hu et al., ASPLOS '23), ``github.com/S-Lab-System-Group/Lucid`` at commit
``63685a3ab7d15d8e940bb47ef98b6d5cca472b13``: ``simulation/data/colocate_info.csv``, 1,388 pairs of single-GPU
training jobs run together on one RTX 3090 (two processes, no MPS), each job's speed normalized to its speed alone
(``speed1``, ``speed2``); ``simulation/analyzer/single_data.csv``, each job alone: throughput (samples/s),
``gpu_util`` and ``gmem_util`` (nvidia-smi's utilization.gpu and utilization.memory, %) and ``gmem`` (MiB). Its
licence (S-Lab License 1.0) allows redistribution for non-commercial purposes only, so ecolaunch does not ship it:
``--data`` is a checkout of that repository (or a folder holding the two files). The issue "a busy machine" cites
these pairs as the held-out check of predictions on underused GPUs.

**What is predicted.** For each pair, each job's normalized throughput sharing the GPU, from what a launcher would
know of each job alone: its iteration time (batch size / throughput), ``sm_util_pct`` = ``gpu_util``,
``mem_bw_util_pct`` = ``gmem_util``, ``memory_mib`` = ``gmem``, on the catalogue's ``RTX3090``, uncapped:

- ``gnn``: the shipped network (:func:`ecolaunch.cli.predict_cmd.predict_scenarios`, as ``ecolaunch predict``);
- ``prior``: its physics prior alone (:func:`ecolaunch.policy.infer.physics_prior`: time-slicing with the switching
  overhead fitted on Gavel's pairs), the same prediction without its learned part;
- ``util-sum``: the skeptic's one-line rule (:func:`ecolaunch.policy.estimate.shared_speeds`: full speed while the
  summed demand is at most 100 %, else each at 1 / demand).

**Scored**: mean absolute error over every job of every pair, with a 95 % interval from resampling the pairs
(``--bootstrap`` draws, seed 0), in all and split by the pair's summed solo ``gpu_util`` (at most 100 %: an underused
GPU). The truth is Lucid's as measured: one run per pair, about 6 % of the speeds above 1.1 (mostly VGG, which Lucid
profiled separately), none dropped.

``--json`` prints ``{"pairs": N, "jobs": N, "source": {...}, "rows": {ROW: {"all" | "underused" | "busy":
{"pairs", "mae", "ci95": [low, high], "bias"}}}}`` (``bias``: mean of predicted minus measured; ``mae``, ``ci95``
and ``bias`` null where a subset holds no pair).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit  # noqa: E402

LUCID = {"repository": "github.com/S-Lab-System-Group/Lucid", "commit": "63685a3ab7d15d8e940bb47ef98b6d5cca472b13",
         "pairs": "simulation/data/colocate_info.csv", "alone": "simulation/analyzer/single_data.csv",
         "licence": "S-Lab License 1.0 (redistribution for non-commercial purposes only)", "gpu": "RTX 3090"}
GPU = "RTX3090"
ROWS = ("gnn", "prior", "util-sum")


def find(data: Path, relative: str) -> Path:
    """The file ``relative`` of Lucid's tree under ``data``, or its bare name there."""
    for path in (data / relative, data / Path(relative).name):
        if path.is_file():
            return path
    raise SystemExit(f"error: {Path(relative).name} not found under {data} (looked for {data / relative}); "
                     f"HINT: --data is a checkout of {LUCID['repository']} at {LUCID['commit'][:7]}, or a folder "
                     "with colocate_info.csv and single_data.csv")


def read(data: Path) -> tuple[list[dict], dict[tuple[str, int, int], dict]]:
    """Lucid's pairs and its solo rows keyed by (model, batch size, amp)."""
    with find(data, LUCID["alone"]).open(newline="") as f:
        alone = {(r["model"], int(r["batchsize"]), int(r["amp"])): r for r in csv.DictReader(f)}
    with find(data, LUCID["pairs"]).open(newline="") as f:
        pairs = [r for r in csv.DictReader(f) if r["gpu_num1"] == "1" and r["gpu_num2"] == "1"]
    return pairs, alone


def job(solo: dict, name: str) -> dict:
    """A job as ``ecolaunch predict`` reads it, from its solo row."""
    return {"id": name, "iter_time_s": int(solo["batchsize"]) / float(solo["speed"]),
            "sm_util_pct": min(100.0, float(solo["gpu_util"])), "mem_bw_util_pct": min(100.0, float(solo["gmem_util"])),
            "memory_mib": int(float(solo["gmem"]))}


def predictions(pairs: list[dict], alone: dict) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Each row's predictions ([pairs, 2]), the measured speeds ([pairs, 2]) and each pair's summed solo util."""
    from ecolaunch.cli.predict_cmd import parse_scenario, predict_scenarios
    from ecolaunch.jobmodel.codec import profile_from_json
    from ecolaunch.policy.estimate import shared_speeds
    from ecolaunch.policy.features import scenario_graph
    from ecolaunch.policy.infer import load_default_model, physics_prior
    from ecolaunch.state.graph import GpuNode

    scenarios, truth, util = [], [], []
    for i, r in enumerate(pairs):
        a, b = (alone[(r[f"model{k}"], int(r[f"batchsize{k}"]), int(r[f"amp{k}"]))] for k in (1, 2))
        # validated as `ecolaunch predict` validates its input
        scenarios.append(parse_scenario({"gpu": GPU, "power_cap_w": None, "jobs": [job(a, f"{i}a"), job(b, f"{i}b")]}))
        truth.append((float(r["speed1"]), float(r["speed2"])))
        util.append(float(a["gpu_util"]) + float(b["gpu_util"]))
    out = {"gnn": np.array([[j["normalized_throughput"] for j in s["jobs"]] for s in predict_scenarios(scenarios)])}
    config = load_default_model().config
    out["prior"] = np.array([physics_prior(scenario_graph(GpuNode.from_model(gpu), cap, jobs), config)
                             .throughput.tolist() for gpu, cap, jobs in scenarios])
    out["util-sum"] = np.array([shared_speeds([profile_from_json({k: v for k, v in j.items() if k != "id"}, where=j["id"])
                                               for j in jobs]) for _, _, jobs in scenarios])
    return out, np.array(truth), np.array(util)


def score(pred: np.ndarray, truth: np.ndarray, keep: np.ndarray, draws: int) -> dict:
    """MAE over the jobs of the pairs ``keep`` selects, its bootstrap 95 % interval (pairs resampled) and bias."""
    err = np.abs(pred[keep] - truth[keep]).mean(axis=1)  # per pair
    if not len(err):  # no pair in this subset: nothing to score (and no NaN in the JSON)
        return {"pairs": 0, "mae": None, "ci95": None, "bias": None}
    rng = np.random.default_rng(0)
    boot = [err[rng.integers(0, len(err), len(err))].mean() for _ in range(draws)]
    return {"pairs": int(keep.sum()), "mae": round(float(err.mean()), 4),
            "ci95": [round(float(np.percentile(boot, 2.5)), 4), round(float(np.percentile(boot, 97.5)), 4)],
            "bias": round(float((pred[keep] - truth[keep]).mean()), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True,
                        help=f"a checkout of {LUCID['repository']} (or a folder with its two CSV files)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples of the pairs for the 95 %% interval")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.bootstrap < 1:
        parser.error(f"--bootstrap must be at least 1, got {args.bootstrap}")
    pairs, alone = read(args.data)
    preds, truth, util = predictions(pairs, alone)
    subsets = {"all": np.ones(len(truth), bool), "underused": util <= 100.0, "busy": util > 100.0}
    rows = {row: {name: score(preds[row], truth, keep, args.bootstrap) for name, keep in subsets.items()}
            for row in ROWS}
    doc = {"pairs": len(truth), "jobs": 2 * len(truth), "source": LUCID, "rows": rows}
    lines = [f"{len(truth)} measured pairs ({LUCID['repository']} at {LUCID['commit'][:7]}, {LUCID['gpu']}, "
             "time-slicing); MAE of each job's normalized throughput [95 % interval], bias",
             f"{'row':<10}" + "".join(f"{name + ' (' + str(rows['gnn'][name]['pairs']) + ' pairs)':>34}"
                                        for name in subsets)]
    for row in ROWS:
        lines.append(f"{row:<10}" + "".join(
            (f"{r['mae']:>9.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] {r['bias']:+.3f}" if r["pairs"] else "-")
            .rjust(34) for r in rows[row].values()))
    emit(doc, args.json, "\n".join(lines))


if __name__ == "__main__":
    main()
