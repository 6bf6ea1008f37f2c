"""Co-location prediction on Gavel pairs of job types never trained on: the GNN against the analytic model, simple
rules and a constant, k-fold by job type.

Gavel's 26 single-GPU job types are dealt into 5 folds (:func:`ecolaunch.learn.train.type_folds`, seeded). For each
fold the GNN is trained from scratch without every pair that involves a type of the fold, on any GPU
(``train(holdout_types=...)``: no Gavel label, no interference refit, no synthetic label from them), and every model
is scored on exactly those held-out pairs. Every model sees only what the fold's training pairs tell it:

- ``gnn``: the fold's weights, scored in plain torch (:mod:`ecolaunch.policy.infer`): a residual over the analytic
  prior below. Job features: measured solo iteration time and, because Gavel measured no utilization,
  ``sm_util_pct`` = 100 x the demand the analytic model estimates from the training pairs; a held-out type's demand
  is imputed from its model family's other batch sizes (:func:`ecolaunch.learn.train.heldout_demands`);
- ``analytic``: the simulator's interference model (:mod:`ecolaunch.sim.interference`) refitted on the fold's
  training pairs, the same imputed demands (what ``holdout_errors(split="type")`` does, per fold);
- ``utilization_sum``: pack iff the two demands sum to at most 1; each job's throughput = min(1, 1 / sum);
- ``lucid``: Lucid's (ASPLOS '23) packing labels: each job type's mean co-located speed over its training pairs
  on that GPU is labelled 0 (>= 0.95, safe), 1 (0.85-0.95) or 2 (< 0.85); pack iff the labels sum to at most
  2 (as Lucid's ``job_pair_picker``); each job's throughput = its type's mean co-located speed (the mean of all
  training values for a type never seen);
- ``constant``: always the training majority ("pack": most training pairs gain from packing), every value = the
  median of the training values.

Metrics: MAE of normalized throughput over held-out values that are not suspect copies of the solo throughput,
and pack accuracy = how often the model's "pack" matches "packing helped" (measured combined throughput > 1),
over held-out pairs whose two values are usable ("pack" = predicted combined throughput > 1 for the GNN and the
analytic model). A pair whose two types sit in different folds is scored in both; ``mean`` is the mean of the
folds, ``pooled`` the errors of all folds' values together.

**Uncertainty.** The GNN's standard deviation ``sd`` per prediction; a decision keeps ``z * sd`` back. The
one-sided coverage P(measured >= predicted - z * sd) is reported at z = 1.645 (95 % if the errors were Gaussian)
and at a cross-fitted z: for each fold, the 95th percentile of (predicted - measured) / sd on the *other* folds'
held-out values, scored on this fold. ``z_all_folds`` is that percentile over every fold (the policy's
``SD_Z``: :mod:`ecolaunch.policy.energy`).

Usage: ``python benchmarks/pair_prediction.py [--json] [--folds 5] [--seed 0] [--epochs 60] [--synthetic 4000]
[--fast]`` (about a minute per fold on 2 cores; ``--fast`` trains tiny models, for a smoke test only).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._common import emit  # noqa: E402
from ecolaunch.policy.features import batch  # noqa: E402
from ecolaunch.policy.infer import load_model  # noqa: E402
from ecolaunch.learn.train import (gavel_pairs_set, heldout_demands, pair_metrics, pairs_involving,  # noqa: E402
                                    train, type_folds)
from ecolaunch.sim.interference import fit_gavel, gavel_set, pair_throughputs  # noqa: E402

MODELS = ("gnn", "analytic", "utilization_sum", "lucid", "constant")
#: one-sided coverage the uncertainty is calibrated to
COVERAGE = 0.95
NOMINAL_Z = 1.645


def lucid_rule(held: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(throughput a, throughput b, pack) of Lucid's labels learned on the training pairs."""
    data = gavel_set()
    use_a, use_b = data.usable("values")
    train_sel = ~held
    speeds: dict[int, list[float]] = {}
    for idx, obs, use in ((data.a, data.obs_a, use_a), (data.b, data.obs_b, use_b)):
        for k in np.flatnonzero(train_sel & use):
            speeds.setdefault(int(idx[k]), []).append(float(obs[k]))
    fallback = float(np.mean([v for vs in speeds.values() for v in vs]))
    mean = np.array([np.mean(speeds[i]) if i in speeds else fallback for i in range(len(data.keys))])
    label = np.where(mean >= 0.95, 0, np.where(mean >= 0.85, 1, 2))
    a, b = data.a[held], data.b[held]
    return mean[a], mean[b], label[a] + label[b] <= 2


def heldout_pairs(types: tuple[str, ...]):
    """The Gavel pairs involving ``types`` as every model sees them (the interference fit and the demands imputed
    without them), the mask of those pairs, and the fit."""
    held = pairs_involving(types)
    fit = fit_gavel(train=~held)
    demands = heldout_demands(fit, held)
    return gavel_pairs_set(held, demands), held, demands, fit


def gnn_on_pairs(weights: Path, pairs) -> tuple[np.ndarray, np.ndarray]:
    """The GNN's (predicted throughput, sd) on ``pairs``, one row per pair."""
    thr, _, sd = load_model(weights).predict(batch(pairs.graphs))
    return thr.reshape(-1, 2).numpy().astype(float), sd.reshape(-1, 2).numpy().astype(float)


def z_scores(pairs, pred: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """(predicted - measured) / sd over usable values: the errors the margin must cover."""
    return np.concatenate([((pred[:, 0] - pairs.obs_a) / np.maximum(sd[:, 0], 1e-9))[pairs.use_a],
                           ((pred[:, 1] - pairs.obs_b) / np.maximum(sd[:, 1], 1e-9))[pairs.use_b]])


def run_fold(types: tuple[str, ...], seed: int, epochs: int, synthetic: int, fast: bool) -> dict:
    data = gavel_set()
    pairs, held, demands, fit = heldout_pairs(types)
    preds: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}

    with tempfile.TemporaryDirectory() as tmp:
        manifest = train(seed, Path(tmp) / "gnn.pt", epochs=epochs, synthetic=synthetic, holdout_types=types,
                         fast=fast)
        pred, sd = gnn_on_pairs(Path(tmp) / "gnn.pt", pairs)
    preds["gnn"] = (pred[:, 0], pred[:, 1], None)

    d = np.array([demands[k] for k in data.keys])
    xa, xb = pair_throughputs(data, d, fit.switch_overhead_s)
    preds["analytic"] = (xa[held], xb[held], None)
    total = pairs.demand_a + pairs.demand_b
    share = np.minimum(1.0, 1.0 / np.maximum(total, 1e-9))
    preds["utilization_sum"] = (share, share, total <= 1.0)
    preds["lucid"] = lucid_rule(held)
    use_a, use_b = data.usable("values")
    train_sel = ~held
    median = float(np.median(np.concatenate([data.obs_a[train_sel & use_a], data.obs_b[train_sel & use_b]])))
    both = train_sel & use_a & use_b
    helps = bool(np.mean(data.obs_a[both] + data.obs_b[both] > 1.0) > 0.5)
    flat = np.full(len(pairs.graphs), median)
    preds["constant"] = (flat, flat, np.full(len(pairs.graphs), helps))

    models = {name: pair_metrics(a, b, pairs, pack=pack) for name, (a, b, pack) in preds.items()}
    z = z_scores(pairs, pred, sd)
    errors = {name: np.concatenate([np.abs(a - pairs.obs_a)[pairs.use_a], np.abs(b - pairs.obs_b)[pairs.use_b]])
              for name, (a, b, _) in preds.items()}
    hits = {name: ((pairs.obs_a + pairs.obs_b > 1.0) == ((a + b > 1.0) if pack is None else pack))
            [pairs.use_a & pairs.use_b] for name, (a, b, pack) in preds.items()}
    return {"types": list(types), "heldout_pairs": int(held.sum()), "models": models,
            "gnn_train": {"train_s": manifest["train_s"], "gavel_train_pairs": manifest["data"]["gavel_train_pairs"]},
            "sd_median": float(np.median(np.concatenate([sd[:, 0][pairs.use_a], sd[:, 1][pairs.use_b]]))),
            "_z": z, "_errors": errors, "_hits": hits}


def calibration(folds: list[dict]) -> dict:
    """Coverage of the GNN's sd at the nominal z and at a z cross-fitted on the other folds."""
    zs = [f["_z"] for f in folds]
    out = {"nominal_z": NOMINAL_Z, "target_coverage": COVERAGE, "folds": []}
    for i, z in enumerate(zs):
        others = np.concatenate([zs[j] for j in range(len(zs)) if j != i]) if len(zs) > 1 else z
        z_cross = float(np.quantile(others, COVERAGE))
        out["folds"].append({"coverage_nominal": float(np.mean(z <= NOMINAL_Z)), "z_cross": z_cross,
                             "coverage_cross": float(np.mean(z <= z_cross))})
    everything = np.concatenate(zs)
    out["coverage_nominal"] = float(np.mean(everything <= NOMINAL_Z))
    out["coverage_cross"] = float(np.mean(np.concatenate([z <= f["z_cross"] for z, f in zip(zs, out["folds"])])))
    out["z_all_folds"] = float(np.quantile(everything, COVERAGE))
    return out


def run(folds: int = 5, seed: int = 0, epochs: int = 60, synthetic: int = 4000, fast: bool = False) -> dict:
    torch.set_num_threads(1)  # reproducible, and fastest on a small shared machine
    results = [run_fold(types, seed, epochs, synthetic, fast) for types in type_folds(folds)]
    mean = {m: {k: float(np.mean([f["models"][m][k] for f in results])) for k in ("mae", "pack_accuracy_pct")}
            for m in MODELS}
    pooled = {m: {"mae": float(np.concatenate([f["_errors"][m] for f in results]).mean()),
                  "pack_accuracy_pct": float(100.0 * np.concatenate([f["_hits"][m] for f in results]).mean())}
              for m in MODELS}
    cal = calibration(results)
    for f in results:
        for key in ("_z", "_errors", "_hits"):
            f.pop(key)
    gnn = mean["gnn"]
    goals = {f"gnn_mae_below_{m}": gnn["mae"] < mean[m]["mae"] for m in ("utilization_sum", "analytic", "constant")}
    goals["gnn_pack_accuracy_above_constant"] = gnn["pack_accuracy_pct"] > mean["constant"]["pack_accuracy_pct"]
    return {"split": {"by": "gavel job type", "folds": folds, "seed": 0}, "train": {"seed": seed, "epochs": epochs,
            "synthetic": synthetic, "fast": fast}, "folds": results, "mean": mean, "pooled": pooled,
            "uncertainty": cal, "goals": goals}


def table(result: dict) -> str:
    folds = result["folds"]
    lines = [f"Gavel pairs of held-out job types: {len(folds)} folds by type (seed {result['split']['seed']}), "
             f"MAE / pack accuracy %",
             f"{'model':<17}" + "".join(f"{'fold ' + str(i):>15}" for i in range(len(folds)))
             + f"{'mean':>15}{'pooled':>15}"]
    for m in MODELS:
        cells = [f"{f['models'][m]['mae']:.3f} / {f['models'][m]['pack_accuracy_pct']:.1f}" for f in folds]
        cells += [f"{result[k][m]['mae']:.3f} / {result[k][m]['pack_accuracy_pct']:.1f}" for k in ("mean", "pooled")]
        lines.append(f"{m:<17}" + "".join(f"{c:>15}" for c in cells))
    lines.append(f"{'held-out pairs':<17}" + "".join(f"{f['models']['gnn']['pairs']:>15}" for f in folds))
    cal = result["uncertainty"]
    lines.append(f"GNN uncertainty: coverage P(measured >= predicted - z sd) {100 * cal['coverage_nominal']:.1f} % "
                 f"at z = {cal['nominal_z']}, {100 * cal['coverage_cross']:.1f} % at z cross-fitted per fold ("
                 + ", ".join(f"{f['z_cross']:.2f}" for f in cal["folds"]) + f"); z over all folds "
                 f"{cal['z_all_folds']:.2f} (target {100 * cal['target_coverage']:.0f} %)")
    lines.append("goals: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["goals"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="training seed (the fold split is fixed: seed 0)")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--synthetic", type=int, default=4000)
    p.add_argument("--fast", action="store_true", help="tiny models (a smoke test, not a result)")
    args = p.parse_args(argv)
    result = run(args.folds, args.seed, args.epochs, args.synthetic, args.fast)
    emit(result, args.json, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
