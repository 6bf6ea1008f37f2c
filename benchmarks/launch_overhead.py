"""ecolaunch vs torchrun wall time on the same trivial 2-worker script, run alternately.

    python benchmarks/launch_overhead.py [--rounds 7] [--json]

Each round runs ``torchrun --nproc-per-node 2 trivial_worker.py`` and the same argv under ``ecolaunch``
(simulated 4-GPU host, private state directory), alternating which goes first. Prints the median wall time of
each and the median of the per-round ratios; goal: ratio <= 1.10. ``--json`` prints
``{"ratio_median": …, "ecolaunch_s": …, "torchrun_s": …, "rounds": …}``.
"""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import tempfile
import time

from _common import REPO, emit, median

WORKER = str(REPO / "benchmarks" / "trivial_worker.py")


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--eco-option", action="append", default=[],
                        help="an extra ecolaunch option for the ecolaunch runs, e.g. --eco-option=--policy=exclusive")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    # Byte-compile ecolaunch first, as pip does when it installs a wheel (torch's files are compiled that way): a
    # source checkout under PYTHONDONTWRITEBYTECODE would otherwise recompile every module on every launch.
    compileall.compile_dir(str(REPO / "ecolaunch"), quiet=1)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "ECOLAUNCH_"))}
    base["PYTHONPATH"] = str(REPO)
    argv = ["--nproc-per-node", "2", WORKER]
    with tempfile.TemporaryDirectory() as state:
        eco_env = {**base, "ECOLAUNCH_SIMULATE": "4xA100-SXM4-80GB", "ECOLAUNCH_STATE_DIR": state}
        torchrun = [sys.executable, "-m", "torch.distributed.run", *argv]
        ecolaunch = [sys.executable, "-m", "ecolaunch", *args.eco_option, *argv]
        _time(torchrun, base), _time(ecolaunch, eco_env)  # warm the page cache for both
        eco_s, torch_s = [], []
        for i in range(args.rounds):
            pair = [(torch_s, torchrun, base), (eco_s, ecolaunch, eco_env)]
            for sink, cmd, env in pair if i % 2 == 0 else reversed(pair):
                sink.append(_time(cmd, env))
    ratios = [e / t for e, t in zip(eco_s, torch_s)]
    result = {
        "rounds": args.rounds,
        "eco_options": args.eco_option,
        "ecolaunch_s": round(median(eco_s), 4),
        "torchrun_s": round(median(torch_s), 4),
        "ratio_median": round(median(ratios), 4),
    }
    table = (
        f"launch overhead, trivial 2-worker script, {args.rounds} alternating rounds\n"
        f"  torchrun   median {result['torchrun_s']:.3f} s  (runs: {', '.join(f'{t:.2f}' for t in torch_s)})\n"
        f"  ecolaunch  median {result['ecolaunch_s']:.3f} s  (runs: {', '.join(f'{t:.2f}' for t in eco_s)})\n"
        f"  ratio (median of per-round ratios): {result['ratio_median']:.3f}   goal <= 1.10"
    )
    emit(result, args.json, table)


if __name__ == "__main__":
    main()
