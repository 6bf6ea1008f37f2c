"""One GPU's calibration: book it, measure the canned workloads alone at caps and in pairs, release, restore.

What lives here: :func:`calibrate_gpu`, the whole of it for one GPU. What does not: choosing the GPUs, who sets caps
and the command line's settings (:mod:`ecolaunch.calibrate.plan`), the workers (:mod:`ecolaunch.calibrate.worker`),
the plausibility check (:mod:`ecolaunch.calibrate.plausible`). Nothing here prints: progress lines go to
``progress``. The order of the work and what stops it: docs/admin.md#how-a-calibration-runs.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ecolaunch._version import __version__
from ecolaunch.caps.limits import clip_cap_w
from ecolaunch.admin.rules import may_manage_gpu
from ecolaunch.calibrate.booking import GpuBusy, Occupant, book, still_alone
from ecolaunch.calibrate.mps import CONTROL, private_daemon, why_not_mps
from ecolaunch.calibrate.plan import Settings, cap_access
from ecolaunch.calibrate.plausible import SAME_CAP_W, check_pair, reference
from ecolaunch.calibrate.results import FORMAT, VERSION
from ecolaunch.calibrate.readings import GpuSampler, HostLoad, host_busy, mean
from ecolaunch.calibrate.worker import ANSWER_SLACK_S, Worker, WorkerError
from ecolaunch.errors import DeviceError, PermissionDenied
from ecolaunch.caps.job import JobCaps
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.jobmodel.powercap import profile_caps
from ecolaunch.state.graph import GpuNode

__all__ = ["SIMULATED_NOTE", "calibrate_gpu"]

logger = logging.getLogger(__name__)

SIMULATED_NOTE = ("simulated GPUs: the workloads ran their CPU stand-ins and power comes from the simulator's "
                  "models; these figures are not measurements")
#: how long a cap may take to show in the GPU's readings (a cap agent applies it at its next pass)
CAP_WAIT_S = 10.0
_TOLERANCE_W = SAME_CAP_W


def calibrate_gpu(session: Session, gpu: GpuNode, state_dir: Path, env: Mapping[str, str], settings: Settings, *,
                  launcher: Launcher, progress: Callable[[str], None] = lambda line: None,
                  shielded: Callable[[], Any] = contextlib.nullcontext, mps_control: str | None = None) -> dict:
    """Calibrate ``gpu`` (docs/admin.md#how-a-calibration-runs); returns the result document (not yet written).

    Raises GpuBusy (someone uses the GPU, or took it meanwhile, and not ``settings.force``), WorkerError (a
    workload process failed), EcolaunchError (state directory, backend). Caps are restored in every case.
    """
    return _Calibration(session, gpu, Path(state_dir), env, settings, launcher, progress, shielded, mps_control).run()


class _Calibration:
    def __init__(self, session: Session, gpu: GpuNode, state_dir: Path, env: Mapping[str, str], settings: Settings,
                 launcher: Launcher, progress: Callable[[str], None], shielded: Callable[[], Any],
                 mps_control: str | None) -> None:
        self.session, self.gpu, self.state_dir, self.env, self.s = session, gpu, state_dir, dict(env), settings
        self.launcher, self.shielded, self.mps_control = launcher, shielded, mps_control
        self.say = lambda line: progress(f"GPU {gpu.index} ({gpu.name}): {line}")
        self.backend = session.backend
        self.simulated = self.backend.kind == "simulated"
        self.alone: list[dict] = []
        self.pairs: list[dict] = []
        self.skipped: list[dict] = []
        self.workloads: dict[str, dict] = {}
        self.caps: JobCaps | None = None
        self.caps_by: str | None = None
        self.caps_why_not: str | None = None
        self.bounds_w: tuple[float, float] | None = None
        self.job = None
        self.forced_beside: list[Occupant] = []
        self.mps_why_not: str | None = "not reached"
        self.mps_ignore: tuple[str, ...] = ()
        self.started_pids: list[int] = []  # every worker's: their CPU time is the calibration's, not others'

    # --- the whole run -------------------------------------------------------------------------------
    def run(self) -> dict:
        started, t0 = time.time(), time.monotonic()
        self.deadline = t0 + self.s.budget_s
        placement, found = book(self.session, self.gpu.uuid, self.launcher, force=self.s.force)
        self.job = placement.job
        self.forced_beside = found
        if found:
            self.say("measuring beside " + "; ".join(o.describe() for o in found) + " (--force): figures disturbed")
        workers: list[Worker] = []
        try:
            self._setup_caps(placement)
            self._alone(workers)
            self._pairs(workers, "time-slicing", self._worker_env())
            self._close(workers)
            self._mps_pairs(workers)
        finally:
            self._close(workers)
            with self.shielded():
                self.session.release(self.job.id)
                if self.caps is not None:
                    self.caps.release()
        return self._document(started, time.monotonic() - t0)

    # --- caps ----------------------------------------------------------------------------------------
    def _setup_caps(self, placement) -> None:
        g, rules = self.gpu, self.session.rules
        if not self.s.caps:
            self.caps_why_not = "--no-caps"
        elif g.power_limit_min_w is None or g.power_limit_max_w is None:
            self.caps_why_not = "the GPU reports no power limit range"
        elif not may_manage_gpu(rules, g.uuid, g.index):
            self.caps_why_not = f"the admin policy's [agent] gpus does not name GPU {g.index}"
        else:
            self.caps_by = cap_access(self.backend, self.state_dir)
            if self.caps_by is None:
                self.caps_why_not = "not root, and no cap agent serves this state directory"
            else:
                _, self.bounds_w = clip_cap_w(rules, g, g.power_limit_max_w)
                self.caps = JobCaps(self.session, placement, self.state_dir, self.env, on_message=self._caps_said)
                self.caps.begin()  # the owner's protocol: nothing to apply yet (the booking wants no cap)
        if self.caps_why_not:
            self.say(f"caps not measured ({self.caps_why_not}): alone at the current limit, pairs as found")

    def _caps_said(self, line: str) -> None:
        self.say(line)
        if self.caps is not None and self.caps.refused:
            self.caps_why_not = line

    def _set_cap(self, watts: float) -> float | None:
        """Make ``watts`` the GPU's cap and wait to see it; the cap in force, or None (recorded as skipped)."""
        if self.caps is None or self.caps_why_not:
            return None
        try:
            clipped = self.caps.set_cap(self.gpu.uuid, watts)  # clipped to the policy there
        except PermissionDenied as e:
            self.caps_why_not = self.caps_why_not or str(e)
            return None
        deadline = time.monotonic() + (CAP_WAIT_S if self.caps.by_agent else 2.0)
        while True:
            limit = self._snapshot().power_limit_w
            if limit is None or abs(limit - clipped) <= _TOLERANCE_W:
                return clipped
            if time.monotonic() >= deadline:
                self._skip(f"cap {clipped:.0f} W", f"not applied (the GPU's limit reads {limit:.0f} W)")
                return None
            time.sleep(0.05)

    def _top_cap(self) -> float | None:
        """The cap the uncapped measurements run at: the policy's highest (None: the current limit)."""
        return None if self.bounds_w is None else self._set_cap(self.bounds_w[1])

    # --- alone -------------------------------------------------------------------------------------------
    def _alone(self, workers: list[Worker]) -> None:
        worker = self._start(workers, "worker A", self._worker_env())
        for name in self.s.workloads:
            if not self._fits(f"{name} alone"):
                continue
            self._load(worker, name)
            top = self._top_cap()
            entry = self._measure_alone(worker, name, top)
            if self.bounds_w is None or top is None or entry["power_w"] is None:
                continue
            lo, hi = self.bounds_w
            for cap in profile_caps(lo, hi, entry["power_w"])[1:3]:
                if not self._fits(f"{name} alone at {cap:.0f} W"):
                    break
                applied = self._set_cap(cap)
                if applied is not None:
                    self._measure_alone(worker, name, applied)
        worker.idle()

    def _measure_alone(self, worker: Worker, name: str, cap: float | None) -> dict:
        self._settle()
        (job,), figures = self._measure([worker])
        entry = {"workload": name, "power_cap_w": self._cap_of(cap, figures), **_job_figures(job), **figures}
        self.alone.append(entry)
        self.say(f"{name} alone at {_w(entry['power_cap_w'])}: {1e3 * job['iter_time_s']:.2f} ms/iter, "
                 f"{_w(entry['power_w'])}, SM {_pct(entry['sm_util_pct'])}")
        return entry

    # --- pairs -------------------------------------------------------------------------------------------
    def _pairs(self, workers: list[Worker], sharing: str, env: Mapping[str, str]) -> None:
        pairs = list(itertools.combinations_with_replacement(self.s.workloads, 2))
        if not pairs or not self._fits(f"{sharing} pairs"):
            return
        first = next((w for w in workers if w.label == "worker A"), None)
        a = first or self._start(workers, "worker A", env)
        b = self._start(workers, "worker B", env)
        top = self._top_cap()
        for x, y in pairs:
            if not self._fits(f"{x}+{y} ({sharing})"):
                continue
            entry = self._measure_pair(a, b, x, y, sharing, top)
            busy = self._busy(entry, x, y)
            if entry["flagged"] and busy:
                if self._fits(f"{x}+{y} ({sharing}) measured again", windows=1 + len(set((x, y)))):
                    self.say(f"{x}+{y} ({sharing}) cannot be true: {entry['flagged']}; the host was busy ({busy}): "
                             "measuring it once more, its workloads alone first")
                    self._remeasure_alone(a, b, (x, y), top)
                    entry = self._measure_pair(a, b, x, y, sharing, top, remeasured=True)
            self.pairs.append(entry)
            self.say(f"{x}+{y} ({sharing}) at {_w(entry['power_cap_w'])}: throughput " +
                     " / ".join("N/A" if j["normalized_throughput"] is None else f"{j['normalized_throughput']:.2f}"
                                for j in entry["jobs"]) + f", {_w(entry['power_w'])}" +
                     (f"; FLAGGED, left out of training: {entry['flagged']}" if entry["flagged"] else ""))

    def _measure_pair(self, a: Worker, b: Worker, x: str, y: str, sharing: str, top: float | None, *,
                      remeasured: bool = False) -> dict:
        if a.loaded != x:
            self._load(a, x)
        if b.loaded != y:
            self._load(b, y)
        self._settle()
        answers, figures = self._measure([a, b])
        cap = self._cap_of(top, figures)
        jobs = []
        for name, job in zip((x, y), answers):
            ref = reference(self.alone, name, cap)
            thr = None if ref is None else ref["iter_time_s"] / job["iter_time_s"]
            jobs.append({"workload": name, **_job_figures(job), "normalized_throughput": thr})
        entry = {"workloads": [x, y], "sharing": sharing, "power_cap_w": cap, "jobs": jobs, **figures}
        entry["flagged"] = check_pair(entry, self.alone, on_gpu=not self.simulated)
        entry["remeasured"] = remeasured
        return entry

    def _busy(self, entry: Mapping[str, Any], x: str, y: str) -> str | None:
        """What made the host busy during a pair's window or its references alone (None: nothing)."""
        refs = [reference(self.alone, name, entry["power_cap_w"]) for name in dict.fromkeys((x, y))]
        for what, e in (("during the pair", entry), *((f"during {r['workload']} alone", r) for r in refs if r)):
            if e.get("disturbed_by"):
                return f"others on the GPU {what}"
            if e.get("host_busy"):
                return f"other processes used {e['others_cpu_cores']:.1f} CPU cores {what}"
        return None

    def _remeasure_alone(self, a: Worker, b: Worker, names: tuple[str, ...], top: float | None) -> None:
        """Measure ``names`` alone again at ``top`` on worker ``a``, ``b`` idle: the pair's new references."""
        b.idle()
        for name in dict.fromkeys(names):
            if a.loaded != name:
                self._load(a, name)
            self._measure_alone(a, name, top)

    def _mps_pairs(self, workers: list[Worker]) -> None:
        why = "--no-mps" if not self.s.mps else why_not_mps(self.backend.kind, control=self.mps_control)
        self.mps_why_not = why
        if why is not None:
            self.say(f"MPS pairs not measured: {why}")
            return
        if not self._fits("MPS pairs"):
            self.mps_why_not = "time budget spent"
            return
        self.mps_ignore = ("nvidia-cuda-mps",)  # the daemon's server is on the GPU, and it is ours
        try:
            with private_daemon(self._worker_env(), self.mps_control) as env:
                try:
                    self._pairs(workers, "mps", env)
                finally:
                    self._close(workers)
        except (OSError, WorkerError) as e:  # the time-sliced figures stand: MPS is said to have failed, and why
            self.pairs = [p for p in self.pairs if p["sharing"] != "mps"]
            self.mps_why_not = f"{'the MPS daemon did not start' if isinstance(e, OSError) else 'under MPS'}: {e}"
            self.say(f"MPS pairs not measured: {self.mps_why_not}")
        finally:
            self.mps_ignore = ()

    # --- measuring ---------------------------------------------------------------------------------------
    def _measure(self, workers: list[Worker]) -> tuple[list[dict], dict]:
        """One window of ``seconds`` with ``workers`` running: their answers and the GPU's figures."""
        before = self._others()
        sampler = GpuSampler(self.backend, self.gpu.uuid, max(0.02, min(0.2, self.s.seconds / 10)))
        load = HostLoad(self.started_pids)
        load.start()
        sampler.start()
        start_j, t0, read0_s = self._energy()
        for w in workers:
            w.send({"cmd": "measure", "seconds": self.s.seconds})
        answers = [w.receive(self.s.seconds + ANSWER_SLACK_S) for w in workers]
        end_j, t1, read1_s = self._energy()
        samples = sampler.stop()
        others_cpu_cores = load.stop()
        after = self._others()
        disturbed = {o.describe(): o for o in [*before, *after]}
        energy_j = None if start_j is None or end_j is None else end_j - start_j
        power = [s.power_w for s in samples if s.power_w is not None]
        figures = {
            "window_s": t1 - t0, "read_s": read0_s + read1_s, "energy_j": energy_j,
            "power_w": energy_j / (t1 - t0) if energy_j is not None and t1 > t0 else mean(power),
            "sm_util_pct": mean([s.util_gpu_pct for s in samples]),
            "mem_util_pct": mean([s.util_mem_pct for s in samples]),
            "memory_used_mib": max((s.memory_used_mib for s in samples), default=None),
            "power_limit_w": samples[-1].power_limit_w if samples else None,
            "disturbed_by": [o.to_dict() for o in disturbed.values()],
            "others_cpu_cores": others_cpu_cores, "host_busy": host_busy(others_cpu_cores, len(workers)),
        }
        return answers, figures

    def _others(self) -> list[Occupant]:
        found = still_alone(self.session, self.job, ignore_names=self.mps_ignore)
        if found and not self.s.force:
            raise GpuBusy(self.gpu, found, started=True)
        return found

    def _energy(self) -> tuple[float | None, float, float]:
        """The GPU's energy counter, the middle of the read on the monotonic clock, and how long the read took.

        A read takes time (a driver call; the simulated board's file lock), and a loaded host may delay one read
        more than the other: timed by its middle, a window is off by at most half the two reads' durations
        (``read_s``), where a time taken after each read is off by their difference, unbounded.
        """
        before = time.monotonic()
        try:
            joules = self.backend.energy_j(self.gpu.uuid)
        except DeviceError as e:
            logger.warning("no energy reading of GPU %s: %s", self.gpu.uuid, e)
            joules = None
        after = time.monotonic()
        return joules, (before + after) / 2, after - before

    def _snapshot(self):
        return next(g for g in self.backend.gpus() if g.uuid == self.gpu.uuid)

    @staticmethod
    def _cap_of(cap: float | None, figures: Mapping[str, Any]) -> float | None:
        """The cap a measurement ran at: the GPU's set limit as read at its end (what was in force, whoever set it),
        else the cap asked for."""
        limit = figures.get("power_limit_w")
        return limit if limit is not None else cap

    def _settle(self) -> None:
        if self.s.settle_s > 0:
            time.sleep(self.s.settle_s)

    def _fits(self, what: str, windows: int = 1) -> bool:
        if time.monotonic() + windows * (self.s.settle_s + self.s.seconds) <= self.deadline:
            return True
        self._skip(what, f"the time budget ({self.s.budget_s:g} s, --budget-s) is spent")
        return False

    def _skip(self, what: str, why: str) -> None:
        self.skipped.append({"what": what, "why": why})
        self.say(f"skipped {what}: {why}")

    # --- workers -----------------------------------------------------------------------------------------
    def _worker_env(self) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
        # the state directory as this process resolved it; the workers import the same ecolaunch as this process
        # (a source checkout included) without PYTHONPATH: they run isolated (ecolaunch.admin.interpreter)
        env.update(CUDA_VISIBLE_DEVICES=self.gpu.uuid, CUDA_DEVICE_ORDER="PCI_BUS_ID",
                   ECOLAUNCH_STATE_DIR=str(Path(self.state_dir).resolve()))
        return env

    def _start(self, workers: list[Worker], label: str, env: Mapping[str, str]) -> Worker:
        worker = Worker(label, "cpu" if self.simulated else "cuda", env)
        workers.append(worker)
        self.started_pids.append(worker.pid)
        return worker

    def _load(self, worker: Worker, name: str) -> None:
        info = worker.load(name, self.s.settle_s)
        self.workloads.setdefault(name, {k: info.get(k) for k in ("what", "device", "energy_source", "stand_in_load")})

    @staticmethod
    def _close(workers: list[Worker]) -> None:
        while workers:
            workers.pop().close()

    # --- the document ------------------------------------------------------------------------------------
    def _capped_points(self) -> list[dict]:
        """The measurements alone below the highest cap: what capped points were asked for."""
        if self.bounds_w is None:
            return []
        return [e for e in self.alone if e["power_cap_w"] is not None
                and e["power_cap_w"] < self.bounds_w[1] - _TOLERANCE_W]

    def _caps_why_not(self) -> str:
        """Why no capped point was measured: the reason caps were not set, else the capped measurements skipped."""
        if self.caps_why_not:
            return self.caps_why_not
        caps = [f"{s['what']}: {s['why']}" for s in self.skipped if s["what"].startswith("cap ") or " alone at " in s["what"]]
        return "no lower cap was measured" + (f" ({'; '.join(caps)})" if caps else "")

    def _document(self, started: float, wall_s: float) -> dict:
        g = self.gpu
        mps_why = self.mps_why_not
        points = self._capped_points()
        return {
            "format": FORMAT, "version": VERSION, "simulated": self.simulated,
            "note": SIMULATED_NOTE if self.simulated else None,
            "backend": self.backend.kind, "host": self.session.host, "user": self.launcher.user,
            "started_at": started, "wall_s": wall_s,
            "gpu": {"uuid": g.uuid, "index": g.index, "name": g.name, "memory_total_mib": g.memory_total_mib,
                    "power_limit_min_w": g.power_limit_min_w, "power_limit_default_w": g.power_limit_default_w,
                    "power_limit_max_w": g.power_limit_max_w, "power_limit_found_w": g.power_limit_w},
            "settings": {**asdict(self.s), "workloads": list(self.s.workloads)},
            "caps": {"measured": bool(points), "points": len(points), "by": self.caps_by,
                     "why_not": None if points else self._caps_why_not(),
                     "bounds_w": list(self.bounds_w) if self.bounds_w else None},
            "mps": {"measured": mps_why is None and any(p["sharing"] == "mps" for p in self.pairs),
                    "why_not": mps_why},
            "forced": bool(self.forced_beside), "occupants": [o.to_dict() for o in self.forced_beside],
            "workloads": self.workloads, "alone": self.alone, "pairs": self.pairs, "skipped": self.skipped,
            "software": {"ecolaunch": __version__, "python": platform.python_version(),
                         "torch": _version("torch"), "mps_control": CONTROL if mps_why is None else None},
        }


def _job_figures(answer: Mapping[str, Any]) -> dict[str, Any]:
    return {k: answer.get(k) for k in ("iters", "wall_s", "iter_time_s", "iter_time_median_s", "iter_time_cv_pct")}


def _w(watts: float | None) -> str:
    return "N/A W" if watts is None else f"{watts:.0f} W"


def _pct(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.0f} %"


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
