"""Co-location prediction on Gavel's held-out measured pairs: the GNN against the analytic model and simple rules.

The held-out pairs are fold 0 of the seeded pair split (:func:`ecolaunch.policy.train.gavel_heldout`, about a
fifth of Gavel's single-GPU pairs on V100, P100 and K80); the GNN never trained on them. Every model below
sees only what the training pairs tell it:

- ``gnn``: the shipped weights (or ``--weights``), scored in plain torch (:mod:`ecolaunch.policy.infer`). Job
  features: measured solo iteration time and, because Gavel measured no utilization, ``sm_util_pct`` = 100 x
  the demand the analytic model estimates from the training pairs;
- ``analytic``: the simulator's interference model (:mod:`ecolaunch.sim.interference`) refitted on the training
  pairs only (its shipped default is fitted on all pairs, which would leak the held-out ones);
- ``utilization_sum``: pack iff the two demands sum to at most 1; each job's throughput = min(1, 1 / sum);
- ``lucid``: Lucid's (ASPLOS '23) packing labels: each job type's mean co-located speed over its training pairs
  on that GPU is labelled 0 (>= 0.95, safe), 1 (0.85-0.95) or 2 (< 0.85); pack iff the labels sum to at most
  2 (as Lucid's ``job_pair_picker``); each job's throughput = its type's mean co-located speed;
- ``training_median``: every value = the median of the training values; pack iff most training pairs helped.

Metrics: MAE of normalized throughput over held-out values that are not suspect copies of the solo throughput,
and pack accuracy = how often the model's "pack" matches "packing helped" (measured combined throughput > 1),
over held-out pairs whose two values are usable (for the GNN and analytic model, "pack" = predicted combined
throughput > 1).

Usage: ``python benchmarks/pair_prediction.py [--json] [--weights PATH]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit  # noqa: E402
from ecolaunch.policy.features import batch  # noqa: E402
from ecolaunch.policy.infer import DEFAULT_WEIGHTS, load_model  # noqa: E402
from ecolaunch.policy.train import gavel_heldout, gavel_pairs_set, pair_metrics  # noqa: E402
from ecolaunch.sim.interference import fit_gavel, gavel_set, pair_throughputs  # noqa: E402


def lucid_rule(held: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(throughput a, throughput b, pack) of Lucid's labels learned on the training pairs."""
    data = gavel_set()
    use_a, use_b = data.usable("values")
    train = ~held
    speeds: dict[int, list[float]] = {}
    for idx, obs, use in ((data.a, data.obs_a, use_a), (data.b, data.obs_b, use_b)):
        for k in np.flatnonzero(train & use):
            speeds.setdefault(int(idx[k]), []).append(float(obs[k]))
    fallback = float(np.mean([v for vs in speeds.values() for v in vs]))
    mean = np.array([np.mean(speeds[i]) if i in speeds else fallback for i in range(len(data.keys))])
    label = np.where(mean >= 0.95, 0, np.where(mean >= 0.85, 1, 2))
    a, b = data.a[held], data.b[held]
    return mean[a], mean[b], label[a] + label[b] <= 2


def run(weights: Path) -> dict:
    data = gavel_set()
    held = gavel_heldout()
    fit = fit_gavel(train=~held)
    pairs = gavel_pairs_set(held, fit.demands)
    models: dict[str, dict] = {}

    thr, _ = load_model(weights).predict(batch(pairs.graphs))
    pred = thr.reshape(-1, 2).numpy().astype(float)
    models["gnn"] = pair_metrics(pred[:, 0], pred[:, 1], pairs)

    demands = np.array([fit.demands[k] for k in data.keys])
    xa, xb = pair_throughputs(data, demands, fit.switch_overhead_s)
    models["analytic"] = pair_metrics(xa[held], xb[held], pairs)

    total = pairs.demand_a + pairs.demand_b
    share = np.minimum(1.0, 1.0 / np.maximum(total, 1e-9))
    models["utilization_sum"] = pair_metrics(share, share, pairs, pack=total <= 1.0)

    la, lb, pack = lucid_rule(held)
    models["lucid"] = pair_metrics(la, lb, pairs, pack=pack)

    use_a, use_b = data.usable("values")
    train = ~held
    median = float(np.median(np.concatenate([data.obs_a[train & use_a], data.obs_b[train & use_b]])))
    both = train & use_a & use_b
    helps = bool(np.mean(data.obs_a[both] + data.obs_b[both] > 1.0) > 0.5)
    flat = np.full(len(pairs.graphs), median)
    models["training_median"] = pair_metrics(flat, flat, pairs, pack=np.full(len(pairs.graphs), helps))
    by_gpu = {}
    for gpu in ("v100", "p100", "k80"):
        sel = np.array([g == gpu for g in pairs.gpu])
        sub = type(pairs)([], pairs.obs_a[sel], pairs.obs_b[sel], pairs.use_a[sel], pairs.use_b[sel],
                          pairs.demand_a[sel], pairs.demand_b[sel])
        by_gpu[gpu] = {"gnn": pair_metrics(pred[sel, 0], pred[sel, 1], sub),
                       "analytic": pair_metrics(xa[held][sel], xb[held][sel], sub)}
    return {"models": models, "by_gpu": by_gpu, "heldout_pairs": int(held.sum()), "weights": weights.name,
            "split": {"seed": 0, "folds": 5, "fold": 0}}


def table(result: dict) -> str:
    lines = [f"Gavel held-out pairs (fold 0 of 5, seed 0): {result['heldout_pairs']} pairs",
             f"{'model':<17}{'MAE':>8}{'pack acc %':>12}{'values':>8}{'pairs':>7}"]
    for name, m in result["models"].items():
        lines.append(f"{name:<17}{m['mae']:>8.4f}{m['pack_accuracy_pct']:>12.1f}{m['values']:>8}{m['pairs']:>7}")
    lines.append("by GPU (MAE / pack acc %): " + "; ".join(
        f"{gpu}: gnn {v['gnn']['mae']:.3f}/{v['gnn']['pack_accuracy_pct']:.0f}, analytic "
        f"{v['analytic']['mae']:.3f}/{v['analytic']['pack_accuracy_pct']:.0f}" for gpu, v in result["by_gpu"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS)
    args = p.parse_args(argv)
    result = run(args.weights)
    emit(result, args.json, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
