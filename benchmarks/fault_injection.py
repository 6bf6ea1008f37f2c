"""Fault injection: random SIGKILLs of launchers and of the cap agent during launches on a simulated 8-GPU host.

Each round starts the cap agent if it is not running, then several users launch at once: one real launch
(``python -m ecolaunch --nproc-per-node 1 tests/bin/sleeper.py``) and a few *cap launchers*. The placement
policies do not ask for power caps yet, so a cap launcher is a stand-in for a launcher that does: it queues and is
placed through the real :class:`~ecolaunch.launch.session.Session` (same code path, same lock), then records a
wanted cap for its GPU in the state graph, as issue 6 specifies. During the round, random processes are SIGKILLed:
launchers (with their workers) and, sometimes, the agent itself, which is restarted a moment later.

Printed figures:

* ``double_bookings``: pairs of jobs whose run intervals overlap on one GPU (the exclusive policy gives each job
  a GPU of its own): must be 0;
* ``caps_left_changed``: GPUs whose power limit differs from the original (non-default, set before the run)
  once everything has settled: must be 0;
* ``lost_history_records``: finished real launches without a record under ``<state dir>/history/<user>/jobs``: must be
  0 (reported as 0 with ``history_written: false`` while the launcher does not write records yet);
* ``restore_p50_s`` / ``restore_p99_s``: from the SIGKILL of a capped launcher to its GPU's original cap.

Usage: ``python benchmarks/fault_injection.py [--rounds 10] [--cap-launchers 3] [--seed 0] [--json]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import REPO, emit, percentile  # noqa: E402
from ecolaunch.devices.select import open_backend  # noqa: E402

SPEC = "8xA100-SXM4-80GB"
POLICY = '[caps."A100-SXM4-80GB"]\nmin_w = 150\nmax_w = 300\n'
SLEEPER = REPO / "tests" / "bin" / "sleeper.py"

# A launcher that wants a cap: placed by the real Session, then records power_caps_w for its GPU.
CAP_LAUNCHER = r"""
import os, sys, time, uuid
from pathlib import Path
from ecolaunch.admin.rules import Rules
from ecolaunch.devices.select import open_backend
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
d, out, watts, hold_s = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
backend = open_backend(sys.argv[5], d)
session = Session(StateStore(d), backend, ExclusivePolicy(), Rules())
me = os.getpid()
req = JobRequest(id=uuid.uuid4().hex[:8], user="u%d" % (me % 3), groups=(), host=session.host, nproc=1, elastic=False,
                 memory_mib=None, allowed_slowdown_pct=10.0, allowed_gpus=None)
job = session.submit(req, Launcher(me, process_start_time(me), os.getuid(), req.user), name="cap", info={})
placement = session.wait_for_placement(job.id, None)
gpu = placement.decision.gpus[0]
with session.store.transaction() as graph:
    graph.jobs[job.id].power_caps_w = {gpu: watts}
(out / f"cap-{me}").write_text(f"{gpu} {time.time()}")
time.sleep(hold_s)
(out / f"capdone-{me}").write_text(f"{gpu} {time.time()}")
session.release(job.id)
"""


class Bench:
    def __init__(self, root: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.state = root / "state"
        self.out = root / "out"
        self.out.mkdir(parents=True)
        (root / "policy.toml").write_text(POLICY)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "ECOLAUNCH_", "TORCHELASTIC_"))}
        self.env.pop("CUDA_VISIBLE_DEVICES", None)
        self.env.update(ECOLAUNCH_SIMULATE=SPEC, ECOLAUNCH_STATE_DIR=str(self.state), ECOLAUNCH_POLICY=str(root / "policy.toml"),
                        PYTHONPATH=str(REPO))
        self.backend = open_backend(SPEC, self.state)
        self.original: dict[str, float] = {}
        for g in self.backend.gpus():  # non-default originals: restoring NVIDIA's default would be caught
            w = float(self.rng.choice([250, 275, 325, 350, 375]))
            self.backend.set_power_limit(g.uuid, w)
            self.original[g.uuid] = w
        self.agent: subprocess.Popen | None = None
        self.intervals: list[tuple[str, float, float]] = []  # (gpu, start, end)
        self.killed_at: dict[int, float] = {}
        self.restore_s: list[float] = []
        self.pending: list[tuple[str, float]] = []  # (gpu uuid, kill time) awaiting restore
        self.launched = 0
        self.kills = 0
        self.completed_real = 0

    # --- processes -----------------------------------------------------------------------------------
    def start_agent(self) -> None:
        if self.agent is None or self.agent.poll() is not None:
            self.agent = subprocess.Popen([sys.executable, "-m", "ecolaunch.cli.agent_cmd", "--interval", "0.1"],
                                          env=self.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def real_launch(self) -> subprocess.Popen:
        self.launched += 1
        return subprocess.Popen([sys.executable, "-m", "ecolaunch", "--nproc-per-node", "1", str(SLEEPER), str(self.out),
                                 f"{self.rng.uniform(1.0, 2.5):.2f}"], env=self.env, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cap_launch(self) -> subprocess.Popen:
        self.launched += 1
        watts = self.rng.uniform(100, 320)  # some below or above the policy's 150-300 W
        return subprocess.Popen([sys.executable, "-c", CAP_LAUNCHER, str(self.state), str(self.out), f"{watts:.1f}",
                                 f"{self.rng.uniform(1.0, 2.5):.2f}", SPEC], env=self.env, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self, proc: subprocess.Popen) -> None:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            children = []
        t = time.time()
        for p in [proc, *children]:  # torch's workers outlive a SIGKILLed launcher: take them down with it
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.kills += 1
        self.killed_at[proc.pid] = t
        for c in children:
            self.killed_at[c.pid] = t
        proc.wait()
        capfile = self.out / f"cap-{proc.pid}"
        if capfile.exists():
            self.pending.append((capfile.read_text().split()[0], t))

    # --- measurement ---------------------------------------------------------------------------------
    def poll_restores(self) -> None:
        if not self.pending:
            return
        limits = {g.uuid: g.power_limit_w for g in self.backend.gpus()}
        now = time.time()
        still = []
        for gpu, t in self.pending:
            if limits[gpu] == self.original[gpu]:
                self.restore_s.append(now - t)
            elif now - t < 30:
                still.append((gpu, t))
        self.pending = still

    def run_round(self, cap_launchers: int) -> None:
        self.start_agent()
        procs = [self.real_launch()] + [self.cap_launch() for _ in range(cap_launchers)]
        kills = {self.rng.randrange(len(procs)) for _ in range(self.rng.randint(1, 2))}
        kill_at = {i: time.time() + self.rng.uniform(0.8, 2.5) for i in kills}
        agent_kill_at = time.time() + self.rng.uniform(0.5, 2.0) if self.rng.random() < 0.4 else None
        deadline = time.time() + 60
        while time.time() < deadline and any(p.poll() is None for p in procs):
            now = time.time()
            for i, t in list(kill_at.items()):
                if now >= t:
                    if procs[i].poll() is None:
                        self.kill(procs[i])
                    del kill_at[i]
            if agent_kill_at is not None and now >= agent_kill_at and self.agent is not None:
                self.kill(self.agent)
                time.sleep(0.3)
                self.start_agent()
                agent_kill_at = None
            self.poll_restores()
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                self.kill(p)
        if procs[0].returncode == 0:
            self.completed_real += 1

    def collect_intervals(self) -> int:
        spans: dict[str, list[tuple[float, float]]] = {}
        index_to_uuid = {str(g.index): g.uuid for g in self.backend.gpus()}
        for f in self.out.glob("started-*"):
            pid = int(f.name.rsplit("-", 1)[1])
            done = self.out / f.name.replace("started-", "done-")
            end = done.stat().st_mtime if done.exists() else self.killed_at.get(pid, time.time())
            spans.setdefault(index_to_uuid.get(f.read_text(), f.read_text()), []).append((f.stat().st_mtime, end))
        for f in self.out.glob("cap-*"):
            pid = int(f.name.split("-", 1)[1])
            gpu, start = f.read_text().split()
            done = self.out / f"capdone-{pid}"
            end = float(done.read_text().split()[1]) if done.exists() else self.killed_at.get(pid, time.time())
            spans.setdefault(gpu, []).append((float(start), end))
        doubles = 0
        for runs in spans.values():
            runs.sort()
            doubles += sum(1 for (s1, e1), (s2, e2) in zip(runs, runs[1:]) if s2 < e1)
        return doubles

    def settle(self, timeout_s: float = 20.0) -> int:
        self.start_agent()
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            self.poll_restores()
            if all(g.power_limit_w == self.original[g.uuid] for g in self.backend.gpus()) and not self.pending:
                break
            time.sleep(0.05)
        self.agent.send_signal(signal.SIGTERM)
        self.agent.wait(60)
        return sum(1 for g in self.backend.gpus() if g.power_limit_w != self.original[g.uuid])

    def history(self) -> tuple[int, bool]:
        records = len(list((self.state / "history").glob("*/jobs/*.json")))  # <state>/history/<user>/jobs
        if records == 0:
            return 0, False
        return max(0, self.completed_real - records), True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--cap-launchers", type=int, default=3, help="cap launchers per round, besides one real launch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="ecolaunch-faults-"))
    start = time.time()
    try:
        bench = Bench(root, args.seed)
        for _ in range(args.rounds):
            bench.run_round(args.cap_launchers)
        caps_left = bench.settle()
        doubles = bench.collect_intervals()
        lost, written = bench.history()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "rounds": args.rounds,
        "jobs_launched": bench.launched,
        "sigkills": bench.kills,
        "double_bookings": doubles,
        "caps_left_changed": caps_left,
        "lost_history_records": lost,
        "history_written": written,
        "restores_measured": len(bench.restore_s),
        "restore_p50_s": round(percentile(bench.restore_s, 50), 3) if bench.restore_s else None,
        "restore_p99_s": round(percentile(bench.restore_s, 99), 3) if bench.restore_s else None,
        "wall_s": round(time.time() - start, 1),
    }
    table = "\n".join(f"{k:22s} {v}" for k, v in result.items())
    emit(result, args.json, table)
    return 0 if doubles == 0 and caps_left == 0 and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
