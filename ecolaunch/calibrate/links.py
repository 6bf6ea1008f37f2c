"""``ecolaunch calibrate --links``: how much a worse link slows a data-parallel step on this host.

What lives here: :func:`choose_pairs` (of one GPU model, the best-linked and the worst-linked pair nobody uses),
:func:`measure_pair` (book both GPUs, run the two ranks of :mod:`ecolaunch.calibrate.linkprobe`, release) and
:func:`calibrate_links` (both pairs and the result document). What does not: the command line
(``ecolaunch.cli.calibrate_cmd``), the per-GPU calibration (:mod:`ecolaunch.calibrate.run`). What the probe
measures and what the result means: docs/admin.md#measuring-the-links-between-gpus.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ecolaunch._version import __version__
from ecolaunch.admin.interpreter import HELPER_CWD, helper_argv, helper_env
from ecolaunch.calibrate.booking import GpuBusy, Occupant, book, still_alone
from ecolaunch.calibrate.linkprobe import DEFAULT_MIB, RENDEZVOUS_TIMEOUT_S, WORLD
from ecolaunch.calibrate.results import FORMAT, LINKS_KIND, VERSION
from ecolaunch.calibrate.worker import START_TIMEOUT_S, WorkerError
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.state.graph import GpuNode, Host

__all__ = ["LinkPairs", "calibrate_links", "choose_pairs", "measure_pair", "penalty"]

#: beyond the probe's own measuring time, how long its two ranks may take (start, rendezvous, warm-up, exit)
PROBE_SLACK_S = START_TIMEOUT_S + RENDEZVOUS_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class LinkPairs:
    """What :func:`choose_pairs` chose: ``pairs`` (best-linked first, then worst-linked; empty when no model has two
    free pairs linked differently) and, when empty, ``why`` in words."""

    pairs: list[tuple[GpuNode, GpuNode]]
    why: str | None = None


def choose_pairs(host: Host, busy: Mapping[str, list[Occupant]], closed: Sequence[str] = ()) -> LinkPairs:
    """The pairs to compare: of the GPU model with the widest spread of links between its free GPUs (those nobody
    uses and the caller may book: not in ``closed``), its best-linked pair and its worst-linked pair, lowest
    indexes first. A link is compared on one model only: another board would change the step itself."""
    free = sorted((g for g in host.gpus.values() if not busy.get(g.uuid) and g.uuid not in closed),
                  key=lambda g: g.index)
    best: tuple[int, list[tuple[GpuNode, GpuNode]]] | None = None
    for name in dict.fromkeys(g.name for g in free):
        pairs = sorted(itertools.combinations([g for g in free if g.name == name], 2),
                       key=lambda p: (host.link(p[0].uuid, p[1].uuid), p[0].index, p[1].index))
        if not pairs:
            continue
        low, high = (host.link(p[0].uuid, p[1].uuid) for p in (pairs[0], pairs[-1]))
        worst = next(p for p in pairs if host.link(p[0].uuid, p[1].uuid) == high)
        if high > low and (best is None or high - low > best[0]):
            best = (high - low, [pairs[0], worst])
    if best is not None:
        return LinkPairs(best[1])
    links = sorted({host.link(a.uuid, b.uuid).name.lower() for a, b in itertools.combinations(host.gpus.values(), 2)
                    if a.name == b.name})
    if not links:
        why = f"host {host.name} has no two GPUs of one model"
    elif len(links) == 1:
        why = f"every pair of GPUs of one model on host {host.name} is linked alike ({links[0]})"
    else:
        why = (f"no two free pairs of one GPU model on host {host.name} are linked differently (some GPUs are in use"
               f"{' or reserved for others' if closed else ''})")
    return LinkPairs([], why)


def measure_pair(session: Session, pair: tuple[GpuNode, GpuNode], env: Mapping[str, str], *, link: str,
                 simulated: bool, launcher: Launcher, seconds: float, force: bool = False,
                 shielded: Callable[[], Any] = contextlib.nullcontext) -> dict[str, Any]:
    """Book both GPUs of ``pair``, run the probe's two ranks on them (one each), release; the pair's figures.

    Raises GpuBusy (someone uses a GPU, or took it meanwhile, and not ``force``) and WorkerError (a rank failed or
    hung; both are stopped)."""
    a, b = pair
    placement, found = book(session, [a.uuid, b.uuid], launcher, force=force)
    try:
        figures = _run_ranks(pair, env, simulated=simulated, seconds=seconds)
        after = [o for o in still_alone(session, placement.job) if o not in found]
        if after and not force:
            raise GpuBusy(a, after, started=True)
    finally:
        with shielded():
            session.release(placement.job.id)
    return {"gpus": [a.index, b.index], "uuids": [a.uuid, b.uuid], "link": link,
            "power_limits_w": [a.power_limit_w, b.power_limit_w], "forced": bool(found),
            "occupants": [o.to_dict() for o in found], **figures}


def calibrate_links(session: Session, pairs: Sequence[tuple[GpuNode, GpuNode]], env: Mapping[str, str], *,
                    simulated: bool, launcher: Launcher, seconds: float, force: bool = False,
                    progress: Callable[[str], None] = lambda line: None,
                    shielded: Callable[[], Any] = contextlib.nullcontext, note: str | None = None) -> dict[str, Any]:
    """Measure ``pairs`` (best-linked first, then worst-linked) one after the other; the result document."""
    started, t0 = time.time(), time.monotonic()
    measured = []
    host = session.snapshot().hosts[session.host]
    for a, b in pairs:
        link = host.link(a.uuid, b.uuid).name.lower()
        progress(f"GPUs {a.index}+{b.index} ({a.name}, {link}): a 2-worker data-parallel step, {seconds:g} s")
        entry = measure_pair(session, (a, b), env, link=link, simulated=simulated, launcher=launcher,
                             seconds=seconds, force=force, shielded=shielded)
        progress(f"GPUs {a.index}+{b.index}: step {entry['step_ms']:.2f} ms, all-reduce of {entry['bucket_mib']} MiB "
                 f"{entry['allreduce_ms']:.2f} ms ({entry['busbw_gb_s']:.1f} GB/s)")
        measured.append(entry)
    best, worst = measured[0], measured[-1]
    return {"format": FORMAT, "version": VERSION, "kind": LINKS_KIND, "simulated": simulated, "note": note,
            "host": session.host, "user": launcher.user, "started_at": started, "wall_s": time.monotonic() - t0,
            "gpu": {"name": pairs[0][0].name, "memory_total_mib": pairs[0][0].memory_total_mib,
                    "power_limit_max_w": pairs[0][0].power_limit_max_w},
            "settings": {"seconds": seconds, "bucket_mib": DEFAULT_MIB, "force": force},
            "pairs": measured, "penalty": penalty(best, worst),
            "software": {"ecolaunch": __version__}}


def penalty(best: Mapping[str, Any], worst: Mapping[str, Any]) -> dict[str, float]:
    """How much slower the worse-linked pair ran than the best-linked: the step's time and the all-reduce's (%),
    with the step's standard error (% points, both pairs' errors)."""
    ratio = worst["step_ms"] / best["step_ms"]
    se = ratio * math.hypot(best["step_se_pct"], worst["step_se_pct"])
    return {"step_slowdown_pct": 100.0 * (ratio - 1.0), "step_slowdown_se_pct": se,
            "allreduce_slowdown_pct": 100.0 * (worst["allreduce_ms"] / best["allreduce_ms"] - 1.0),
            "speed_kept": 1.0 / ratio}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(pair: tuple[GpuNode, GpuNode], env: Mapping[str, str], *, simulated: bool,
               seconds: float) -> dict[str, Any]:
    """Start the probe's ranks on ``pair`` (both see both GPUs, in the pair's order, as torchrun's workers would see
    theirs), wait for them, and return rank 0's figures."""
    rank_env = helper_env(env, CUDA_VISIBLE_DEVICES=",".join(g.uuid for g in pair), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    port = _free_port()
    errs: list[IO[bytes]] = []
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(WORLD):
            errs.append(tempfile.TemporaryFile())
            argv = helper_argv("ecolaunch.calibrate.linkprobe", "--rank", str(rank), "--port", str(port),
                               "--device", "cpu" if simulated else "cuda", "--seconds", f"{seconds:g}",
                               "--parent", str(os.getpid()))
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                                          stderr=errs[-1], env=rank_env, cwd=HELPER_CWD, close_fds=True))
        deadline = time.monotonic() + seconds + PROBE_SLACK_S
        # both at once: a rank that fails ends the probe now, not when the other gives up waiting for it
        while None in (codes := [p.poll() for p in procs]) and not any(codes):
            if time.monotonic() > deadline:
                raise WorkerError(f"the link probe on GPUs {pair[0].index}+{pair[1].index} did not finish within "
                                  f"{seconds + PROBE_SLACK_S:.0f} s" + _tail(errs))
            time.sleep(0.05)
        failed = [r for r, p in enumerate(procs) if p.returncode]
        if failed:
            raise WorkerError(f"the link probe's rank {failed[0]} on GPUs {pair[0].index}+{pair[1].index} exited "
                              f"{procs[failed[0]].returncode}" + _tail(errs[failed[0]:failed[0] + 1]))
        out = procs[0].stdout.read() if procs[0].stdout is not None else b""
        try:
            return json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError) as e:
            raise WorkerError(f"the link probe's rank 0 printed no figures ({e})" + _tail(errs[:1])) from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
        for f in errs:
            f.close()


def _tail(errs: Sequence[IO[bytes]], lines: int = 12) -> str:
    text = []
    for f in errs:
        f.seek(0)
        text += f.read().decode(errors="replace").strip().splitlines()[-lines:]
    return (":\n" + "\n".join(text)) if text else ""
