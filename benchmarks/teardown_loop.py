"""Run a two-worker example many times on loaded cores and count the exit codes (issue 41, item 2).

    python benchmarks/teardown_loop.py [--runs 50] [--load 2] [--launcher ecolaunch|torchrun|both]
                                       [--script examples/ddp_train.py] [--keep DIR] [--json]

Each run is ``ecolaunch --nproc-per-node 2 <script>`` (simulated 4-GPU host, private state directory, no admin
policy) or the same argv under ``python -m torch.distributed.run``, one after the other, while ``--load`` busy
loops keep the cores occupied (a loaded machine is where a gloo worker aborted at exit: exit code 134,
"terminate called without an active exception"). ``--keep DIR`` writes the output of every failed run there.
``--json`` prints ``{"runs": …, "load": …, "script": …, "exit_codes": {"ecolaunch": {"0": …}, …}}``.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO, emit

NO_POLICY = REPO / "tests" / "data" / "no-policy.toml"
LAUNCHERS = {"ecolaunch": ["-m", "ecolaunch"], "torchrun": ["-m", "torch.distributed.run"]}


def _env(state_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "ECOLAUNCH_", "TORCHELASTIC_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(PYTHONPATH=str(REPO), ECOLAUNCH_POLICY=str(NO_POLICY), ECOLAUNCH_SIMULATE="4xA100-SXM4-80GB",
               ECOLAUNCH_STATE_DIR=state_dir)
    return env


def _run_once(launcher: str, script: str, keep: Path | None, index: int) -> int:
    with tempfile.TemporaryDirectory() as state:
        cmd = [sys.executable, *LAUNCHERS[launcher], "--nproc-per-node", "2", script]
        done = subprocess.run(cmd, env=_env(state), cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and keep is not None:
        (keep / f"{launcher}-{index}.txt").write_text(done.stdout + "\n---- stderr ----\n" + done.stderr)
    return done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50, help="runs per launcher")
    parser.add_argument("--load", type=int, default=2, help="busy loops kept running meanwhile")
    parser.add_argument("--launcher", choices=[*LAUNCHERS, "both"], default="ecolaunch")
    parser.add_argument("--script", default="examples/ddp_train.py")
    parser.add_argument("--keep", type=Path, default=None, help="write each failed run's output here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    launchers = list(LAUNCHERS) if args.launcher == "both" else [args.launcher]
    counts: dict[str, collections.Counter[int]] = {name: collections.Counter() for name in launchers}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        for i in range(args.runs):
            for name in launchers:
                code = _run_once(name, args.script, args.keep, i)
                counts[name][code] += 1
                print(f"{name} run {i + 1}/{args.runs}: exit {code}", file=sys.stderr, flush=True)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    result = {"runs": args.runs, "load": args.load, "script": args.script,
              "exit_codes": {name: {str(code): n for code, n in sorted(c.items())} for name, c in counts.items()}}
    lines = [f"{args.script}: {args.runs} runs per launcher, {args.load} busy loops"]
    lines += [f"  {name:9s} " + ", ".join(f"exit {code}: {n}" for code, n in sorted(c.items()))
              for name, c in counts.items()]
    emit(result, args.json, "\n".join(lines))


if __name__ == "__main__":
    main()
