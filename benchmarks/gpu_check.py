"""Validate an ecolaunch install on a real NVIDIA GPU, end to end, in at most 8 minutes.

    python benchmarks/gpu_check.py [--gpu INDEX] [--quick] [--out FILE] [--json] [--budget-s S]

Everything runs through what a user runs: ``ecolaunch ...`` (``python -m ecolaunch``), ``torchrun``
(``python -m torch.distributed.run``), the canned workloads of ``python -m ecolaunch.calibrate.canned``, and the GPU
through ecolaunch's own backend selection (NVML, or simulated GPUs when ``ECOLAUNCH_SIMULATE`` is set: then the
whole check runs on CPU stand-ins, which exercises the code but measures nothing about a GPU). Every launch is
pinned to the checked GPU (``CUDA_VISIBLE_DEVICES=<its UUID>``) and uses a private, fresh state directory.

Sections, each recorded as ``pass``, ``fail`` or ``skip`` (with a reason) and its figures:

1. ``contract``: the NVML contract tests, ``python -m pytest -q -m gpu tests/devices`` (skipped on simulated GPUs
   and where ``tests/`` is not beside ``benchmarks/``).
2. ``sweep``: ground truth. ``mm`` (compute-bound) and ``bw`` (memory-bound) at caps from the board's maximum down
   to its minimum, in one process that sets the caps itself: iteration time inside the loop, board power from the
   energy counter; then the maximum once more, last, whose iteration time against the first window's is
   ``window_error_pct`` (what ``capchoice.WINDOW_ERROR_PCT`` keeps back for the uncapped reference). Needs root on
   real GPUs; the original cap is restored in a ``finally``.
3. ``waitpower``: what the GPU draws while 1, 8 and 32 one-thread kernels spin (``torch.cuda._sleep``: a proxy for
   a rank's GPU waiting in an NCCL collective, whose kernels spin on a flag) against idle and computing, from the
   energy counter (``_spin_worker.py``): where a waiting GPU lies between the two bounds docs/pace-matching.md assumes.
   Skipped on simulated GPUs.
4. ``launches``: per workload, plain ``torchrun``, then ``ecolaunch --profile inline`` with a fresh state directory
   (first launch), then the same command again (repeat launch: the job is in the history). J per iteration and
   iteration time come from inside the loop, over the iterations after profiling; saving and slowdown are against
   torchrun. The cap ecolaunch chose comes from ``--json`` (the decision) and ``ecolaunch history --json``.
5. ``sigkill``: ``ecolaunch --profile inline`` on a long workload; once profiling has lowered the GPU's set limit,
   SIGKILL the launcher (not its workers) and time how long until the limit is back at its original (fails when
   not back within 10 s: until the cap guard lands this is expected). The workers are killed afterwards, and a cap
   still left low is put back by this script (recorded as ``restored_by_check``).
6. ``overhead``: a trivial one-worker script under ``torchrun`` and ``ecolaunch``, alternating; medians and ratio
   (the 1.10 goal is judged on a real GPU's machine only: on simulated GPUs it is reported, the section passes).
7. ``waits``: ``ecolaunch.allreduce_wait_hook`` on two DDP workers sharing the GPU (gloo, CUDA tensors: the hook's
   CUDA-event path, which only a GPU runs; CPU tensors on simulated GPUs), the second rank made 30 ms slower per
   step under plain ``torchrun`` with a hook directory: passes when rank 0's measured waste is that 30 ms within
   ``max(5 ms, 30 %)``.

Writes ``benchmarks/results/gpu-<model>.json`` (``gpu-nvidia-h200.json``; ``gpu-<model>-simulated.json`` on
simulated GPUs; ``--out`` overrides), prints a short table, or the document with ``--json``. ``--quick`` uses short
step counts and fewer caps and rounds (for simulated GPUs and tests: a few minutes on 2 CPU cores). Exit status 0
when no section failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import REPO, emit, median
from _procs import Ran, descendants, kill_pids, kill_tree, poll, run

SCHEMA, VERSION = "ecolaunch.gpu_check", 1
SECTIONS = ("contract", "sweep", "waitpower", "launches", "sigkill", "overhead", "waits")
WORKLOADS = ("mm", "bw")
BOUND_PCT = 10.0  # the slowdown bound every launch asks for (ecolaunch's default)
OVERHEAD_GOAL_RATIO = 1.10  # as benchmarks/launch_overhead.py
RESTORE_TIMEOUT_S = 10.0
TOLERANCE_W = 0.5


@dataclass(frozen=True)
class Plan:
    """Step counts and time limits: full (a real GPU, <= 8 minutes) or quick (simulated GPUs, tests)."""

    quick: bool
    sweep_caps: int
    settle_s: float
    measure_s: float
    steps: int
    warmup: int  # covers profiling (66 step marks by default, more when iterations are noisy) and the check after
    drop_wait_s: float
    overhead_rounds: int
    budget_s: dict[str, float]  # per section

    @classmethod
    def make(cls, quick: bool) -> Plan:
        if quick:
            return cls(True, 3, 0.2, 0.5, 160, 120, 60.0, 2,
                       {"contract": 60, "sweep": 60, "waitpower": 30, "launches": 240, "sigkill": 90, "overhead": 90,
                        "waits": 60})
        # sized so that sweep, waitpower, launches, sigkill and overhead fit in the 315 s benchmarks/device_check.sh
        # gives them; waits, the last, runs in what is left of them (at most 20 s; skipped under 10 s)
        return cls(False, 4, 0.5, 1.5, 160, 110, 60.0, 3,
                   {"contract": 45, "sweep": 45, "waitpower": 15, "launches": 170, "sigkill": 40, "overhead": 40,
                    "waits": 20})


class Check:
    """What every section needs: the plan, the checked GPU, a private temporary directory, the environment."""

    def __init__(self, plan: Plan, gpu_index: int, tmp: Path, deadline: float) -> None:
        import ecolaunch

        self.plan, self.tmp, self.deadline = plan, tmp, deadline
        self.pkg_root = Path(ecolaunch.__file__).resolve().parents[1]
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
        for key in ("ECOLAUNCH_STATE_DIR", "ECOLAUNCH_JOB_ID", "ECOLAUNCH_HOOK_DIR", "ECOLAUNCH_PROFILING",
                    "ECOLAUNCH_PROFILE_STEPS", "CUDA_VISIBLE_DEVICES"):
            base.pop(key, None)
        if (self.pkg_root / "pyproject.toml").is_file():  # a source checkout: its children run the same code
            base["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.pkg_root), base.get("PYTHONPATH", "")) if p)
        self.base_env = base
        self.backend = open_backend(self.env("check"))
        gpus = self.backend.gpus()
        if not 0 <= gpu_index < len(gpus):
            raise SystemExit(f"Error: no GPU {gpu_index}: this host has {len(gpus)} (indices 0-{len(gpus) - 1})")
        self.gpu = gpus[gpu_index]
        self.kind = self.backend.kind

    def env(self, state: str, **extra: str) -> dict[str, str]:
        """The environment of one run: a private state directory ``state`` and the checked GPU pinned."""
        env = {**self.base_env, "ECOLAUNCH_STATE_DIR": str(self.tmp / state), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
               **extra}
        if hasattr(self, "gpu"):
            env["CUDA_VISIBLE_DEVICES"] = self.gpu.uuid
        return env

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def limit_w(self, backend: Any) -> float | None:
        """The checked GPU's set power limit, as ``backend`` reads it."""
        return next((g.power_limit_w for g in backend.gpus() if g.uuid == self.gpu.uuid), None)


def open_backend(env: dict[str, str]) -> Any:
    """The GPU backend the launcher would open in ``env`` (NVML, or the simulated GPUs of its state directory)."""
    from ecolaunch.runtime import open_gpus, resolve

    environment, _ = resolve(env)
    return open_gpus(environment)


def ecolaunch_cmd(*args: str) -> list[str]:
    """``python -m ecolaunch args``, isolated (``-I``): this check runs as root, often from a checkout others can
    reach, and a module planted in the working directory or a ``PYTHON*`` variable must not run as root."""
    from ecolaunch.admin.interpreter import helper_argv

    return helper_argv("ecolaunch", *args)


def torchrun_cmd(*args: str) -> list[str]:
    from ecolaunch.admin.interpreter import helper_argv

    return helper_argv("torch.distributed.run", *args)


def pytest_cmd(*args: str) -> list[str]:
    from ecolaunch.admin.interpreter import helper_argv

    return helper_argv("pytest", *args)


def sweep_cmd(*args: str) -> list[str]:
    from ecolaunch.admin.interpreter import helper_argv

    return helper_argv(str(Path(__file__).resolve().with_name("_cap_sweep.py")), *args)


def workload_args(name: str, steps: int, warmup: int, result: Path | None) -> list[str]:
    tail = ["--result", str(result)] if result is not None else []
    return ["-m", "ecolaunch.calibrate.canned", name, "--steps", str(steps), "--warmup", str(warmup), *tail]


def why_failed(ran: Ran, what: str) -> str:
    if ran.code is None:
        return f"{what} timed out after {ran.wall_s:.0f} s"
    last = next((line for line in reversed(ran.err.strip().splitlines()) if line.strip()), "no output")
    return f"{what} exited {ran.code}: {last[-300:]}"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --- 1. contract tests -------------------------------------------------------------------------------


def section_contract(check: Check, timeout_s: float) -> dict[str, Any]:
    tests = REPO / "tests" / "devices"
    if check.kind != "nvml":
        return skip(f"{check.kind} GPUs: the NVML contract tests need a real GPU (the simulated half of the "
                    "contract suite runs in the default test run)")
    if not tests.is_dir():
        return skip(f"no tests/devices beside benchmarks/ ({tests.parent} is not a source checkout)")
    if importlib.util.find_spec("pytest") is None:
        return skip("pytest is not installed (pip install -e '.[test]')")
    ran = run(pytest_cmd("-q", "-m", "gpu", "-p", "no:cacheprovider", str(tests)),
              check.base_env, timeout_s, REPO)
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", ran.out)}
    failed = [line.split(" ", 1)[1] for line in ran.out.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    doc = {"counts": counts, "failed": failed, "wall_s": round(ran.wall_s, 1)}
    if ran.code == 0:
        return {"status": "pass", "reason": None, **doc}
    if ran.code == 5:
        return {"status": "skip", "reason": "pytest selected no gpu-marked test", **doc}
    return {"status": "fail", "reason": "; ".join(failed)[:500] or why_failed(ran, "pytest"), **doc}


# --- 2. cap sweep ------------------------------------------------------------------------------------


def sweep_caps(gpu: Any, levels: int) -> list[float]:
    """``levels`` caps from the board's maximum down to its minimum, on a 5 W grid."""
    hi, lo = gpu.power_limit_max_w, gpu.power_limit_min_w
    caps = [hi - i * (hi - lo) / (levels - 1) for i in range(levels)]
    return [min(hi, max(lo, round(c / 5.0) * 5.0)) for c in caps]


def section_sweep(check: Check, timeout_s: float) -> dict[str, Any]:
    g = check.gpu
    if None in (g.power_limit_min_w, g.power_limit_max_w, g.power_limit_w):
        return skip("the GPU reports no power limit range")
    if check.kind == "nvml" and os.geteuid() != 0:
        return skip("setting power caps needs root (rerun as root for the ground-truth sweep)")
    caps = sweep_caps(g, check.plan.sweep_caps)
    result = check.tmp / "sweep.json"
    cmd = sweep_cmd("--workloads", ",".join(WORKLOADS), "--caps", ",".join(f"{c:g}" for c in caps),
                    "--settle-s", str(check.plan.settle_s), "--measure-s", str(check.plan.measure_s),
                    "--result", str(result))
    ran = run(cmd, check.env("sweep"), timeout_s, check.tmp)
    doc = read_json(result)
    backend = open_backend(check.env("sweep"))
    after = check.limit_w(backend)
    restored = after is not None and abs(after - g.power_limit_w) <= TOLERANCE_W
    if not restored:
        with contextlib.suppress(Exception):  # never leave the GPU capped by this check
            backend.set_power_limit(g.uuid, g.power_limit_w)
    if ran.code != 0 or not isinstance(doc, dict) or doc.get("error"):
        reason = (doc or {}).get("error") if isinstance(doc, dict) else None
        return {"status": "fail", "reason": reason or why_failed(ran, "the sweep"), "caps_w": caps,
                "restored": restored}
    workloads = {}
    for name, entry in doc["workloads"].items():
        points = entry["points"]
        top = points[0]
        for p in points:
            p["slowdown_pct"] = pct(p["iter_time_s"], top["iter_time_s"])
            p["energy_saving_pct"] = None if p["j_per_iter"] is None or not top["j_per_iter"] else \
                round(100.0 * (1.0 - p["j_per_iter"] / top["j_per_iter"]), 2)
        repeat = entry.get("repeat")
        # a second window at the maximum, after the rest of the sweep: how far one window's mean is from another's
        window = None if not repeat or not top["iter_time_s"] else \
            round(100.0 * abs(repeat["iter_time_s"] / top["iter_time_s"] - 1.0), 2)
        workloads[name] = {"what": entry["what"], "points": points, "repeat": repeat, "window_error_pct": window}
    return {"status": "pass" if restored else "fail",
            "reason": None if restored else f"the cap was {after} W after the sweep, not {g.power_limit_w:g} W",
            "caps_w": caps, "original_w": g.power_limit_w, "restored": restored, "workloads": workloads,
            "stand_in_load": doc.get("stand_in_load"), "wall_s": round(ran.wall_s, 1)}


#: the spin kernels at once in the ``waitpower`` section (NCCL runs one block per channel: from 2 up to 32 or more)
SPIN_BLOCKS = (1, 8, 32)


def section_waitpower(check: Check, timeout_s: float) -> dict[str, Any]:
    """What the GPU draws while kernels spin, as a rank's GPU does waiting in a collective, against idle and computing
    (``_spin_worker.py``): the measurement docs/pace-matching.md's two bounds on a waiting GPU's power ask for."""
    if check.kind == "simulated":
        return skip("a spinning kernel needs a real GPU: simulated GPUs read a modelled power")
    seconds = 1.0 if check.plan.quick else 2.0
    ran = run([sys.executable, str(REPO / "benchmarks" / "_spin_worker.py"), f"{seconds:g}",
               ",".join(str(k) for k in SPIN_BLOCKS)], check.env("waitpower"), timeout_s, check.tmp)
    try:
        doc = json.loads(ran.out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        doc = None
    if ran.code != 0 or not isinstance(doc, dict) or doc.get("error"):
        reason = doc.get("error") if isinstance(doc, dict) else None
        return {"status": "fail", "reason": reason or why_failed(ran, "the spin worker")}
    return {"status": "pass", "reason": None, **doc,
            "what": "board power idle, with K one-thread spin kernels at once (torch.cuda._sleep; a proxy for a rank "
                    "waiting in NCCL, not NCCL), and computing (fp16 matmul); spin_share: 0 = idle, 1 = computing"}


# --- 3. first and repeat launch ----------------------------------------------------------------------


def section_launches(check: Check, timeout_s: float) -> dict[str, Any]:
    plan, deadline = check.plan, time.monotonic() + timeout_s
    per_run_s = timeout_s / (3 * len(WORKLOADS))
    workloads, problems = {}, []
    for name in WORKLOADS:
        result = check.tmp / f"launch-{name}.json"  # one path: the repeat launch must have the same arguments
        argv = ["--standalone", "--nproc-per-node", "1", *workload_args(name, plan.steps, plan.warmup, result)]
        runs = {}
        for label, cmd, state in (
            ("torchrun", torchrun_cmd(*argv), f"torchrun-{name}"),
            ("first", ecolaunch_cmd("--json", "--profile", "inline", "--allowed-slowdown", f"{BOUND_PCT:g}", *argv),
             f"launch-{name}"),
            ("repeat", ecolaunch_cmd("--json", "--profile", "inline", "--allowed-slowdown", f"{BOUND_PCT:g}", *argv),
             f"launch-{name}"),
        ):
            result.unlink(missing_ok=True)
            ran = run(cmd, check.env(state), min(per_run_s * 1.5, deadline - time.monotonic()), check.tmp)
            figures = read_json(result)
            if ran.code != 0 or not isinstance(figures, dict):
                problems.append(why_failed(ran, f"{name} {label}"))
                runs[label] = {"ok": False, "exit_code": ran.code, "wall_s": round(ran.wall_s, 1)}
                continue
            entry = {"ok": True, "wall_s": round(ran.wall_s, 1), **pick(figures, (
                "iter_time_s", "iter_time_median_s", "j_per_iter", "power_w", "timed_iters", "run_iter_time_s",
                "run_j_per_iter", "energy_source", "stand_in_load"))}
            if label != "torchrun":
                entry.update(ecolaunch_caps(check, ran, state))
            runs[label] = entry
        base = runs["torchrun"]
        for label in ("first", "repeat"):
            r = runs[label]
            if r.get("ok") and base.get("ok"):
                r["energy_saving_pct"] = saving(r["j_per_iter"], base["j_per_iter"])
                r["slowdown_pct"] = pct(r["iter_time_s"], base["iter_time_s"])
                r["run_energy_saving_pct"] = saving(r["run_j_per_iter"], base["run_j_per_iter"])
                r["run_slowdown_pct"] = pct(r["run_iter_time_s"], base["run_iter_time_s"])
                if check.kind == "nvml" and r["slowdown_pct"] is not None and r["slowdown_pct"] > BOUND_PCT:
                    problems.append(f"{name} {label} ran {r['slowdown_pct']:.1f} % slower than torchrun "
                                    f"(bound {BOUND_PCT:g} %)")
        workloads[name] = runs
    return {"status": "fail" if problems else "pass", "reason": "; ".join(problems) or None,
            "bound_pct": BOUND_PCT, "steps": plan.steps, "warmup": plan.warmup,
            "bound_checked": check.kind == "nvml", "workloads": workloads}


def ecolaunch_caps(check: Check, ran: Ran, state: str) -> dict[str, Any]:
    """The cap ecolaunch decided (``--json``), the one it recommended and the one the run spent most time at."""
    uuid = check.gpu.uuid
    decided = None
    with contextlib.suppress(ValueError, AttributeError):
        decided = (json.loads(ran.out).get("power_caps_w") or {}).get(uuid)
    hist = run(ecolaunch_cmd("history", "--json", "--limit", "1"), check.env(state),
               min(30.0, max(5.0, check.left_s())), check.tmp)
    records = None
    with contextlib.suppress(ValueError):
        records = json.loads(hist.out)
    rec = records[0] if isinstance(records, list) and records else {}
    lines = [line.removeprefix("ecolaunch: ") for line in ran.err.splitlines() if line.startswith("ecolaunch: ")]
    return {"decided_cap_w": decided, "recommended_cap_w": rec.get("recommended_cap_w"),
            "run_cap_w": (rec.get("power_caps_w") or {}).get(uuid), "profile_action": rec.get("profile_action"),
            "cap_line": next((line for line in lines if line.startswith("power cap:")), None),
            "warnings": [line for line in lines if line.startswith("warning:")]}


# --- 4. SIGKILL of the launcher mid-profile ----------------------------------------------------------


def section_sigkill(check: Check, timeout_s: float) -> dict[str, Any]:
    g = check.gpu
    if g.power_limit_w is None:
        return skip("the GPU reports no power limit")
    if check.kind == "nvml" and os.geteuid() != 0:
        return skip("profiling lowers caps only as root (or through the cap agent): rerun as root")
    env = check.env("sigkill")
    backend = open_backend(env)
    original = check.limit_w(backend)
    cmd = ecolaunch_cmd("--profile", "inline", "--allowed-slowdown", f"{BOUND_PCT:g}", "--standalone",
                        "--nproc-per-node", "1", *workload_args("mm", 10**7, 1, None))
    log = check.tmp / "sigkill.log"
    start = time.monotonic()
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, cwd=check.tmp, stdout=sink, stderr=sink, start_new_session=True)
    workers: list[int] = []
    doc: dict[str, Any] = {"original_w": original, "timeout_s": RESTORE_TIMEOUT_S, "restored_by_check": False}
    try:
        wait_s = min(check.plan.drop_wait_s, timeout_s - RESTORE_TIMEOUT_S - 5)
        lowered = poll(lambda: check.limit_w(backend), lambda w: w is not None and w < original - TOLERANCE_W,
                       wait_s, stop=lambda: proc.poll() is not None)
        if lowered is None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            return skip(f"profiling did not lower the cap within {wait_s:.0f} s "
                        f"(launcher {'exited ' + str(proc.returncode) if proc.poll() is not None else 'running'}: "
                        f"{tail[0][-200:]})", **doc)
        doc["lowered_w"], doc["lowered_after_s"] = lowered, round(time.monotonic() - start, 1)
        workers = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait()
        back = poll(lambda: check.limit_w(backend), lambda w: w is not None and abs(w - original) <= TOLERANCE_W,
                    RESTORE_TIMEOUT_S)
        doc["restored_after_s"] = None if back is None else round(time.monotonic() - killed, 2)
        doc["limit_after_w"] = check.limit_w(backend)
    finally:
        kill_pids(workers)
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait()
        now = check.limit_w(backend)
        if now is not None and original is not None and abs(now - original) > TOLERANCE_W:
            with contextlib.suppress(Exception):  # never leave the GPU capped by this check
                backend.set_power_limit(g.uuid, original)
                doc["restored_by_check"] = True
    if doc["restored_after_s"] is None:
        return {"status": "fail", "reason": f"the cap stayed at {doc['limit_after_w']} W for {RESTORE_TIMEOUT_S:g} s "
                f"after the launcher's SIGKILL (original {original:g} W)", **doc}
    return {"status": "pass", "reason": None, **doc}


# --- 5. launch overhead ------------------------------------------------------------------------------


def section_overhead(check: Check, timeout_s: float) -> dict[str, Any]:
    script = check.tmp / "trivial_worker.py"
    script.write_text('import os\n\nassert os.environ["WORLD_SIZE"] == "1"\n', encoding="utf-8")
    argv = ["--standalone", "--nproc-per-node", "1", str(script)]
    env = check.env("overhead")
    cmds = {"torchrun": torchrun_cmd(*argv), "ecolaunch": ecolaunch_cmd(*argv)}
    deadline = time.monotonic() + timeout_s
    times: dict[str, list[float]] = {"torchrun": [], "ecolaunch": []}
    for name, cmd in cmds.items():  # warm the page cache for both
        ran = run(cmd, env, deadline - time.monotonic(), check.tmp)
        if ran.code != 0:
            return {"status": "fail", "reason": why_failed(ran, name)}
    for i in range(check.plan.overhead_rounds):
        for name in (("torchrun", "ecolaunch") if i % 2 == 0 else ("ecolaunch", "torchrun")):
            ran = run(cmds[name], env, deadline - time.monotonic(), check.tmp)
            if ran.code != 0:
                return {"status": "fail", "reason": why_failed(ran, name), "runs_s": times}
            times[name].append(round(ran.wall_s, 3))
    ratio = median([e / t for e, t in zip(times["ecolaunch"], times["torchrun"])])
    met = ratio <= OVERHEAD_GOAL_RATIO
    # a timing goal is judged on a real GPU's machine only: on simulated GPUs the ratio is the CPU machine's load as
    # much as the launcher's (CI's busy 2 cores once read 1.10x), so it is reported and the section passes
    judged = check.kind != "simulated"
    ok = met or not judged
    why = None if met else f"ecolaunch took {ratio:.2f}x torchrun's time (goal <= {OVERHEAD_GOAL_RATIO})"
    if why and not judged:
        why += "; not judged on simulated GPUs"
    return {"status": "pass" if ok else "fail", "reason": why, "goal_met": met, "judged": judged,
            "rounds": check.plan.overhead_rounds, "runs_s": times, "torchrun_median_s": median(times["torchrun"]),
            "ecolaunch_median_s": median(times["ecolaunch"]), "ratio_median": round(ratio, 3),
            "goal_ratio": OVERHEAD_GOAL_RATIO}


#: the slow rank's extra time per step in the ``waits`` section, and how close rank 0's measured waste must come
WAIT_SLOW_S = 0.03
WAIT_TOLERANCE = (0.005, 0.30)  # seconds, share: the larger of the two


def section_waits(check: Check, timeout_s: float) -> dict[str, Any]:
    from ecolaunch.profile.channel import read_waits
    from ecolaunch.profile.ddpwait import rank_waits

    device = "cpu" if check.kind == "simulated" else "cuda"
    hook_dir = check.tmp / "waits-hook"
    hook_dir.mkdir(mode=0o700)
    env = check.env("waits", ECOLAUNCH_HOOK_DIR=str(hook_dir), OMP_NUM_THREADS="1")
    steps = 40
    ran = run(torchrun_cmd("--standalone", "--nproc-per-node", "2", str(REPO / "benchmarks" / "_wait_worker.py"),
                           str(steps), str(WAIT_SLOW_S), device), env, timeout_s, check.tmp)
    if ran.code != 0:
        return {"status": "fail", "reason": why_failed(ran, "the two DDP workers")}
    step_s = json.loads(ran.out.strip().splitlines()[-1])["step_s"]
    waits = read_waits(hook_dir)
    got = rank_waits(waits, step_s, warmup=5)
    if got is None:
        return {"status": "fail", "reason": f"no waits of two ranks recorded (ranks: {sorted(waits)})",
                "device": device}
    waste_s = got.waste_share.get(0, 0.0) * step_s
    allowed = max(WAIT_TOLERANCE[0], WAIT_TOLERANCE[1] * WAIT_SLOW_S)
    ok = got.slowest == 1 and abs(waste_s - WAIT_SLOW_S) <= allowed
    return {"status": "pass" if ok else "fail",
            "reason": None if ok else (f"rank 0 wasted {waste_s * 1e3:.1f} ms per step for rank {got.slowest}, "
                                       f"expected {WAIT_SLOW_S * 1e3:.0f} ± {allowed * 1e3:.0f} ms"),
            "device": device, "steps": steps, "step_s": round(step_s, 4), "slow_s": WAIT_SLOW_S,
            "waits_recorded": {str(r): len(w) for r, w in waits.items()},
            "rank0_waste_s": round(waste_s, 4), "slowest_rank": got.slowest}


# --- the document and its table ----------------------------------------------------------------------


def skip(reason: str, **figures: Any) -> dict[str, Any]:
    return {"status": "skip", "reason": reason, **figures}


def pick(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: d.get(k) for k in keys}


def pct(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else round(100.0 * (value / base - 1.0), 2)


def saving(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else round(100.0 * (1.0 - value / base), 2)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


RUNNERS = {"contract": section_contract, "sweep": section_sweep, "waitpower": section_waitpower,
           "launches": section_launches, "sigkill": section_sigkill, "overhead": section_overhead,
           "waits": section_waits}


def check_all(check: Check, sections: tuple[str, ...]) -> dict[str, Any]:
    g = check.gpu
    doc: dict[str, Any] = {
        "schema": SCHEMA, "version": VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ecolaunch": version("ecolaunch"), "torch": version("torch"), "python": platform.python_version(),
        "backend": check.kind, "simulate": check.base_env.get("ECOLAUNCH_SIMULATE") or None, "quick": check.plan.quick,
        "root": os.geteuid() == 0,
        "gpu": {"index": g.index, "uuid": g.uuid, "name": g.name, "memory_total_mib": g.memory_total_mib,
                "power_limit_min_w": g.power_limit_min_w, "power_limit_default_w": g.power_limit_default_w,
                "power_limit_max_w": g.power_limit_max_w, "power_limit_w": g.power_limit_w,
                "power_limit_enforced_w": g.power_limit_enforced_w,
                "busy_pids": [p.pid for p in g.processes]},
        "sections": {},
    }
    start = time.monotonic()
    for name in SECTIONS:
        if name not in sections:
            doc["sections"][name] = skip("not selected (--sections)")
            continue
        timeout_s = min(check.plan.budget_s[name], check.left_s())
        if timeout_s < 10:
            doc["sections"][name] = skip("the time budget (--budget-s) is spent")
            continue
        t0 = time.monotonic()
        try:
            result = RUNNERS[name](check, timeout_s)
        except Exception as e:  # noqa: BLE001 - one section's surprise must not lose the others' figures
            result = {"status": "fail", "reason": f"{type(e).__name__}: {e}"}
        result.setdefault("section_s", round(time.monotonic() - t0, 1))
        doc["sections"][name] = result
    doc["wall_s"] = round(time.monotonic() - start, 1)
    return doc


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "N/A" if value is None else f"{value:{spec}}{unit}"


def summary(name: str, s: dict[str, Any]) -> list[str]:
    """One line per section, and a few indented lines of figures."""
    if s["status"] == "skip" or (s["status"] == "fail" and name not in ("launches", "sweep")):
        extra = ""
        if name == "sigkill" and "lowered_w" in s:
            extra = f"cap {s['lowered_w']:g} W at kill, original {s['original_w']:g} W; "
        return [f"  {extra}{s.get('reason') or ''}"] if (extra or s.get("reason")) else []
    lines = []
    if name == "contract":
        lines.append("  " + ", ".join(f"{n} {k}" for k, n in s["counts"].items()))
    elif name == "sweep":
        for w, entry in sorted(s.get("workloads", {}).items(), key=lambda item: WORKLOADS.index(item[0])):
            cells = [f"{p['power_cap_w']:g} W {fmt(p['iter_time_s'] * 1e3, '.1f')} ms "
                     f"{fmt(p['power_w'], '.0f')} W" for p in entry["points"]]
            lines.append(f"  {w}: " + " | ".join(cells)
                         + f"; the maximum again: {fmt(entry.get('window_error_pct'), '.2f', ' %')} off")
    elif name == "launches":
        for w, runs in sorted(s["workloads"].items(), key=lambda item: WORKLOADS.index(item[0])):
            base = runs["torchrun"]
            lines.append(f"  {w} torchrun: {fmt(base.get('j_per_iter'), '.2f')} J/iter, "
                         f"{fmt((base.get('iter_time_s') or 0) * 1e3 if base.get('ok') else None, '.1f')} ms/iter")
            for label in ("first", "repeat"):
                r = runs[label]
                cap = r.get("run_cap_w") if r.get("run_cap_w") is not None else r.get("decided_cap_w")
                change = None if r.get("energy_saving_pct") is None else -r["energy_saving_pct"]
                lines.append(f"  {w} {label}: cap {fmt(cap, 'g', ' W')}, J/iter {fmt(change, '+.1f', ' %')}, "
                             f"time/iter {fmt(r.get('slowdown_pct'), '+.1f', ' %')} against torchrun"
                             if r.get("ok") else f"  {w} {label}: failed")
        if s.get("reason"):
            lines.append(f"  {s['reason']}")
    elif name == "sigkill":
        lines.append(f"  cap {s['lowered_w']:g} W at kill, back at {s['original_w']:g} W after "
                     f"{s['restored_after_s']:.2f} s")
    elif name == "overhead":
        lines.append(f"  torchrun {s['torchrun_median_s']:.2f} s, ecolaunch {s['ecolaunch_median_s']:.2f} s, "
                     f"ratio {s['ratio_median']:.2f} (goal <= {s['goal_ratio']:g}"
                     f"{'' if s['judged'] else ', not judged on simulated GPUs'})")
    elif name == "waitpower":
        w = s["power_w"]
        lines.append("  " + ", ".join(f"{k} {fmt(v, '.0f', ' W')}" for k, v in w.items()) + "; spin share "
                     + ", ".join(f"{k} {fmt(v, '.2f')}" for k, v in s["spin_share"].items()) + " (0 idle, 1 computing)")
    elif name == "waits":
        lines.append(f"  {s['device']}: rank 0 waited {s['rank0_waste_s'] * 1e3:.1f} ms per {s['step_s'] * 1e3:.1f} ms "
                     f"step for rank {s['slowest_rank']}, made {s['slow_s'] * 1e3:.0f} ms slower")
    return lines


def table(doc: dict[str, Any], out: Path) -> str:
    g = doc["gpu"]
    sim = f", simulated: {doc['simulate']}" if doc["simulate"] else ""
    lines = [f"ecolaunch gpu check: GPU {g['index']} {g['name']} ({doc['backend']}{sim}), {doc['wall_s']:.0f} s"
             + (" [quick]" if doc["quick"] else "")]
    if doc["backend"] == "simulated":
        lines.append("(CPU stand-ins on simulated GPUs: the figures exercise the code, they measure no GPU)")
    lines.append("")
    for name in SECTIONS:
        s = doc["sections"][name]
        lines.append(f"{name:<10}{s['status'].upper()}")
        lines.extend(summary(name, s))
    lines += ["", f"written to {out}"]
    return "\n".join(lines)


def default_out(doc: dict[str, Any]) -> Path:
    suffix = "-simulated" if doc["backend"] == "simulated" else ""
    return REPO / "benchmarks" / "results" / f"gpu-{slug(doc['gpu']['name'])}{suffix}.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", type=int, default=0, help="the NVML index of the GPU to check (default 0)")
    parser.add_argument("--quick", action="store_true", help="short runs (simulated GPUs, tests)")
    parser.add_argument("--out", type=Path, help="where to write the JSON (default benchmarks/results/gpu-<model>.json)")
    parser.add_argument("--json", action="store_true", help="print the document instead of the table")
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop starting sections after this (default 480)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"a subset of {','.join(SECTIONS)}")
    args = parser.parse_args()
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}: choose from {', '.join(SECTIONS)}")
    from ecolaunch.errors import EcolaunchError

    tmp = Path(tempfile.mkdtemp(prefix="ecolaunch-gpu-check-"))
    try:
        check = Check(Plan.make(args.quick), args.gpu, tmp, time.monotonic() + args.budget_s)
        doc = check_all(check, sections)
    except EcolaunchError as e:
        print(e.render(), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = args.out or default_out(doc)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    emit(doc, args.json, table(doc, out))
    return 1 if any(s["status"] == "fail" for s in doc["sections"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
