"""Fit errors of the simulator's measured models (``ecolaunch.sim``).

Power cap -> time and power (Zeus, NSDI '23 sweeps), per GPU:

- ``in_sample``: MAPE of iteration-time ratio and of board power over all rows, shape fitted on all rows;
- ``leave_one_workload_out``: each workload (dataset/network, all batch sizes and optimizers) predicted by a
  shape fitted without it (the headline figure);
- ``leave_one_gpu_out``: each GPU predicted by one shape fitted on the other three GPUs pooled (how well a
  borrowed, normalized shape does on a board it was not fitted on: the situation of A100/H100/H200/Ada);
- ``profile_windows``: Zeus's later JIT-profiling captures (A40, V100, 1-4 GPUs), predicted from each window
  set's highest-cap window with the shape fitted on the sweeps (read from ``../shared/data`` when present).

Interference (Gavel, OSDI '20 pairs), for each suspect-row policy (``values``: every value equal to the solo
throughput dropped, the default; ``pairs``: only pairs where both are; ``keep``): the switching cost ``delta`` of
each GPU type fitted on all pairs, and cross-validated errors (5 folds by pair, seed 0; and holding out
each job type): MAE of normalized throughput and accuracy of "packing helps" (combined > 1), on held-out
values that are not suspect (``clean``) and on all held-out values (``all``), next to a model-free baseline
(training median; always-pack). ``eaco_jct_increase_pct`` shows what the one-GPU model (no synchronization wait) predicts for EaCO's V100 sets, and
``eaco_jct_increase_pct_per_gpu_delta`` what it would with each GPU type's ``delta``.

Usage: ``python benchmarks/model_fit.py [--json] [--seed N]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ecolaunch.devices.catalogue import lookup  # noqa: E402
from ecolaunch.sim import interference as itf  # noqa: E402
from ecolaunch.sim import power as pw  # noqa: E402
from ecolaunch.sim.models import ZEUS_GPUS  # noqa: E402
from ecolaunch.sim.node import reproduce_eaco  # noqa: E402
from ecolaunch.sim.truth import ZEUS_MODELS  # noqa: E402

WINDOWS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "zeus-nsdi23" / "profile_windows"


def _mape(pred: np.ndarray, obs: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - obs) / obs) * 100.0)


def power_cap_errors() -> dict:
    out = {}
    curves = {g: pw.zeus_curves(g) for g in ZEUS_GPUS}
    for gpu, cs in curves.items():
        full = pw.fit_shape([cs])
        t, p = full.ratios_array(cs.u, cs.c)
        lo_t, lo_p = np.empty_like(cs.u), np.empty_like(cs.u)
        wl = np.array(cs.workload)
        for w in sorted(set(cs.workload)):
            held = wl == w
            shape = pw.fit_shape([cs], [~held])
            tt, pp = shape.ratios_array(cs.u[held], cs.c[held])
            lo_t[held], lo_p[held] = tt, pp
        others = pw.fit_shape([curves[g] for g in curves if g != gpu], name=f"not-{gpu}")
        ot, op = others.ratios_array(cs.u, cs.c)
        out[gpu] = {
            "rows": int(cs.u.size), "workloads": len(set(cs.workload)),
            "shape": {"floor_frac": round(full.floor_frac, 4), "power_peak_ratio": round(full.power_peak_ratio, 4),
                      "time_peak_ratio": round(full.time_peak_ratio, 4), "gamma": round(full.gamma, 4),
                      "softness": round(full.softness, 3)},
            "in_sample": {"time_mape_pct": _mape(t, cs.time_ratio), "power_mape_pct": _mape(p, cs.power_frac)},
            "leave_one_workload_out": {"time_mape_pct": _mape(lo_t, cs.time_ratio),
                                       "power_mape_pct": _mape(lo_p, cs.power_frac)},
            "leave_one_gpu_out": {"time_mape_pct": _mape(ot, cs.time_ratio),
                                  "power_mape_pct": _mape(op, cs.power_frac)},
        }
    out["profile_windows"] = _window_errors()
    return out


def _window_errors() -> dict | None:
    if not WINDOWS.is_dir():
        return None
    model = pw.default_power_model()
    rows = {}
    for path in sorted(WINDOWS.glob("*.csv")):
        gpu = path.name.split("+")[0].lower()
        with path.open(newline="") as f:
            recs = list(csv.DictReader(f))
        energy_cols = [k for k in recs[0] if k.endswith("_energy")]
        pts = []
        for r in recs:
            cap = float(r["window_name"].rsplit("_", 1)[1])
            secs = float(r["elapsed_time"])
            pts.append((cap, secs, sum(float(r[k]) for k in energy_cols) / len(energy_cols) / secs))
        ref = max(pts)
        board = lookup(ZEUS_MODELS[gpu.upper()])
        pred = [model.predict(ref[2], cap, board) for cap, _, _ in pts]
        rows[path.stem] = {
            "time_mape_pct": _mape(np.array([q.time_ratio for q in pred]), np.array([s / ref[1] for _, s, _ in pts])),
            "power_mape_pct": _mape(np.array([q.power_w for q in pred]), np.array([w for _, _, w in pts])),
        }
    rows["mean"] = {k: float(np.mean([v[k] for v in rows.values()])) for k in ("time_mape_pct", "power_mape_pct")}
    return rows


def _eaco_jct(delta_s: float) -> list[float]:
    model = itf.InterferenceModel(delta_s, itf.default_interference_model().default_iter_time_s,
                                  {"volta": delta_s})
    return [round(s.jct_increase_pct, 2) for s in reproduce_eaco(model, sync_wait_s=0.0).sets]


def interference_errors(seed: int) -> dict:
    out = {"eaco_sets": [s.name for s in reproduce_eaco(sync_wait_s=0.0).sets],
           "eaco_paper_jct_increase_pct": [round(s.paper_jct_increase_pct, 2) for s in reproduce_eaco(sync_wait_s=0.0).sets]}
    data = itf.gavel_set()
    out["suspect_values"] = {"v100_values_equal_to_solo": int(data.copy_a.sum() + data.copy_b.sum()),
                             "v100_pairs_both_equal_to_solo_unordered": int((data.copy_a & data.copy_b).sum()),
                             "pairs_unordered": int(data.a.size)}
    for policy in itf.SUSPECT_POLICIES:
        fit = itf.fit_gavel(policy)
        per_gpu = {g: fit.switch_overhead_s[g] for g in itf.GAVEL_GPUS}
        entry = {
            "switch_overhead_ms_per_gpu_fit": {g: d * 1000.0 for g, d in per_gpu.items()},
            "eaco_jct_increase_pct": [round(s.jct_increase_pct, 2) for s in reproduce_eaco(fit.model, sync_wait_s=0.0).sets],
            "eaco_jct_increase_pct_per_gpu_delta": {g: _eaco_jct(d) for g, d in per_gpu.items()},
        }
        for split in ("pair", "type"):
            for evaluate_on, label in (("values", "clean"), ("keep", "all")):
                h = itf.holdout_errors(split, suspect=policy, seed=seed, evaluate_on=evaluate_on)
                entry[f"holdout_by_{split}_{label}"] = {
                    "mae": h.mae, "pack_accuracy": h.pack_accuracy, "values": h.n_values, "pairs": h.n_pairs,
                    "baseline_mae": h.baseline_mae, "baseline_pack_accuracy": h.baseline_pack_accuracy,
                    "by_gpu": {g: {"mae": v[0], "pack_accuracy": v[1], "values": v[2]} for g, v in h.by_gpu.items()},
                }
        out[policy] = entry
    return out


def _table(res: dict) -> str:
    lines = ["Power cap -> time/power (Zeus sweeps), MAPE %: time / power"]
    lines.append(f"{'gpu':<9}{'rows':>5} {'in-sample':>15} {'leave-workload-out':>20} {'leave-gpu-out':>16}")
    for gpu in ZEUS_GPUS:
        r = res["power_cap"][gpu]
        cells = [f"{r[k]['time_mape_pct']:5.1f} / {r[k]['power_mape_pct']:4.1f}"
                 for k in ("in_sample", "leave_one_workload_out", "leave_one_gpu_out")]
        lines.append(f"{gpu:<9}{r['rows']:>5} {cells[0]:>15} {cells[1]:>20} {cells[2]:>16}")
    win = res["power_cap"]["profile_windows"]
    if win:
        mean = win["mean"]
        lines.append(f"Zeus profile windows ({len(win) - 1} files), mean MAPE: time {mean['time_mape_pct']:.1f} %,"
                     f" power {mean['power_mape_pct']:.1f} %")
    itf_res = res["interference"]
    sv = itf_res["suspect_values"]
    lines.append("")
    lines.append(f"Interference (Gavel pairs: {sv['pairs_unordered']} unordered; V100 values equal to solo:"
                 f" {sv['v100_values_equal_to_solo']}, pairs with both:"
                 f" {sv['v100_pairs_both_equal_to_solo_unordered']})")
    lines.append(f"{'policy':<7} {'delta ms v100/p100/k80':>25}  held-out (clean values):"
                 f" MAE / pack acc [baseline]")
    for policy in itf.SUSPECT_POLICIES:
        e = itf_res[policy]
        per = "/".join(f"{v:.1f}" for v in e["switch_overhead_ms_per_gpu_fit"].values())
        cells = []
        for split in ("pair", "type"):
            h = e[f"holdout_by_{split}_clean"]
            cells.append(f"by {split}: {h['mae']:.3f} / {h['pack_accuracy']:.3f} "
                         f"[{h['baseline_mae']:.3f} / {h['baseline_pack_accuracy']:.3f}]")
        lines.append(f"{policy:<7} {per:>25}  " + "; ".join(cells))
    lines.append("EaCO JCT increase % per set " + ", ".join(itf_res["eaco_sets"]))
    lines.append(f"  paper:                  {itf_res['eaco_paper_jct_increase_pct']}")
    default = itf_res["values"]
    lines.append(f"  the model (V100 delta): {default['eaco_jct_increase_pct']}")
    for g, v in default["eaco_jct_increase_pct_per_gpu_delta"].items():
        lines.append(f"  {g}-only delta:         {v}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--seed", type=int, default=0, help="seed of the by-pair fold assignment (default 0)")
    args = parser.parse_args(argv)
    res = {"power_cap": power_cap_errors(), "interference": interference_errors(args.seed)}
    if args.json:
        json.dump(res, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
