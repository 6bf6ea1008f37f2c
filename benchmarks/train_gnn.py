"""Train the hierarchical GNN and write its weights (the command that produced the shipped weights).

Seeded and reproducible on one machine: ``python benchmarks/train_gnn.py --seed 0`` writes
``ecolaunch/policy/weights/gnn.pt`` and ``manifest.json`` (seed, data counts, epochs, metrics), trained on every
Gavel pair and Zeus curve (how well it does on job types it never saw is ``benchmarks/pair_prediction.py``'s
k-fold). What it trains on and how a lab's own history can be added: :mod:`ecolaunch.learn.train`. Prints the
errors on fresh synthetic states, on the held-out Gavel pairs when ``--holdout-type`` leaves types out, and the
training time (``--json`` for the manifest).

Usage: ``python benchmarks/train_gnn.py [--seed N] [--out PATH] [--epochs N] [--synthetic N] [--threads N]
[--holdout-type NAME]... [--holdout-zeus KEY]... [--fast] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ecolaunch.policy.infer import DEFAULT_WEIGHTS  # noqa: E402
from ecolaunch.learn.train import train  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS, help="weight file (manifest.json goes beside it)")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--synthetic", type=int, default=4000, help="random simulator-labelled machine states")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1 is fastest on 2 shared cores; results are reproducible per setting)")
    p.add_argument("--holdout-type", action="append", default=[], metavar="NAME",
                   help="a Gavel job type to leave out of every data source, e.g. 'ResNet-18 (batch size 32)'")
    p.add_argument("--holdout-zeus", action="append", default=[], metavar="KEY",
                   help="a Zeus curve to leave out, '<gpu>:<network>:<batch_size>', e.g. v100:resnet50:128")
    p.add_argument("--fast", action="store_true", help="a tiny model in seconds (tests, smoke runs)")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    def progress(epoch: int, loss: float) -> None:
        if not args.quiet and not args.json:
            print(f"epoch {epoch + 1:3d}/{args.epochs}  loss {loss:.4f}", file=sys.stderr)

    manifest = train(args.seed, args.out, epochs=args.epochs, synthetic=args.synthetic, progress=progress,
                     holdout_types=args.holdout_type, holdout_zeus=args.holdout_zeus, fast=args.fast)
    if args.json:
        json.dump(manifest, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    m = manifest["metrics"]
    print(f"parameters            {manifest['parameters']}")
    print(f"weights               {args.out} ({manifest.get('weights_bytes', 0)} bytes)")
    print(f"training time         {manifest['train_s']} s (data {manifest['data_s']} s), {args.threads} thread(s)")
    print(f"interference prior    switch overhead {1000 * manifest['config']['switch_overhead_s']:.2f} ms "
          f"(fitted on {manifest['data']['gavel_train_pairs']} Gavel training pairs)")
    if "gavel_heldout" in m:
        g = m["gavel_heldout"]
        print(f"Gavel held-out        MAE {g['mae']:.4f}, pack accuracy {g['pack_accuracy_pct']:.1f} % "
              f"({g['values']} values, {g['pairs']} pairs)")
    print(f"synthetic (fresh)     throughput MAE {m['synthetic_throughput_mae']:.4f}, "
          f"power MAE {100 * m['synthetic_power_mae_frac']:.2f} % of max limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
