"""Job traces for the simulator: the standard traces, and traces read from a user's JSON or CSV file.

What lives here: the standard traces' recipes, :func:`build_trace` (a standard trace for a machine, seeded),
:func:`load_trace_file` (a user's file; its docstring is the file format) and :func:`offered_load`. What does not:
their names and descriptions (:mod:`ecolaunch.sim.trace_registry`, which also resolves ``--trace NAME|FILE``), the
workload profiles and population data (:mod:`ecolaunch.sim.workloads`), the event loop
(:mod:`ecolaunch.sim.engine`). What each standard trace is: docs/simulator.md#the-standard-traces.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ecolaunch.devices.spec import MachineSpec
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.sim.engine import Trace, TraceJob
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.workloads import alibaba_pods, gavel_vc, sample_runtimes, workload_profile, workload_profiles
from ecolaunch.validate import is_integer, is_number, is_real, number_or_none

logger = logging.getLogger(__name__)

MIN_RUNTIME_S = 120.0
MAX_RUNTIME_S = 48 * 3600.0
DEFAULT_ALLOWED_SLOWDOWN_PCT = 10.0
LIGHT_LOAD = 0.4
HEAVY_LOAD = 0.9


@dataclass(frozen=True, slots=True)
class _Recipe:
    source: str  # a Gavel VC name, or "alibaba"
    load: float
    jobs: int


_RECIPES: Mapping[str, _Recipe] = {
    "workstation-light": _Recipe("6214e9", LIGHT_LOAD, 300),
    "workstation-heavy": _Recipe("6214e9", HEAVY_LOAD, 300),
    "cluster-light": _Recipe("0e4a51", LIGHT_LOAD, 1000),
    "cluster-heavy": _Recipe("0e4a51", HEAVY_LOAD, 1000),
    "alibaba-share": _Recipe("alibaba", HEAVY_LOAD, 1000),
}


def build_trace(name: str, machine: MachineSpec, *, seed: int = 0, jobs: int | None = None,
                load: float | None = None, allowed_slowdown_pct: float = DEFAULT_ALLOWED_SLOWDOWN_PCT) -> Trace:
    """A standard trace (docs/simulator.md#the-standard-traces) for ``machine``.

    Args:
        name: a standard trace (a model-world name of :data:`ecolaunch.sim.trace_registry.TRACES`).
        machine: the simulated machine; sets the GPU total for the load, the size clip and the board.
        seed: selects the window and the run times; same arguments -> the same trace.
        jobs: number of jobs (default per trace: 300 workstation, 1,000 cluster and alibaba-share).
        load: target offered load instead of the trace's (0.4 light, 0.9 heavy).
        allowed_slowdown_pct: every job's slowdown bound.

    Raises:
        ConfigError: unknown name, or a bad ``jobs`` / ``load`` / ``allowed_slowdown_pct``.
    """
    recipe = _RECIPES.get(name)
    if recipe is None:
        raise ConfigError(f"unknown trace {name!r}", hint=f"use one of {', '.join(_RECIPES)}")
    n = recipe.jobs if jobs is None else jobs
    if not is_integer(n) or n < 1:
        raise ConfigError(f"trace {name!r}: jobs={n!r} is not a job count", hint="give an integer >= 1")
    target = recipe.load if load is None else load
    if not is_number(target) or target <= 0:
        raise ConfigError(f"trace {name!r}: load={target!r} is not an offered load", hint="give a number > 0")
    _check_slowdown(allowed_slowdown_pct, f"trace {name!r}")
    total_gpus, per_host, board = _machine_facts(machine)
    rng = np.random.default_rng(seed)
    if recipe.source == "alibaba":
        raw = _alibaba_jobs(rng, n, per_host, board)
    else:
        raw = _gavel_jobs(recipe.source, rng, n, per_host, board)
    arrivals = np.array([r[0] for r in raw])
    work = np.array([r[2] for r in raw])
    nproc = np.array([r[1] for r in raw])
    span = float(arrivals[-1] - arrivals[0])
    if span > 0:
        arrivals = (arrivals - arrivals[0]) * (float(work @ nproc) / (total_gpus * float(target) * span))
    else:
        arrivals = arrivals - arrivals[0]
        logger.warning("trace %s: all %d jobs arrive at once; offered load not set", name, n)
    width = max(5, len(str(n - 1)))
    out = tuple(
        TraceJob(id=f"j{i:0{width}d}", arrival_s=float(a), nproc=int(k), work_s=float(w), profile=p,
                 allowed_slowdown_pct=float(allowed_slowdown_pct), kind=kind)
        for i, (a, (_, k, w, p, kind)) in enumerate(zip(arrivals, raw))
    )
    return Trace(name, out, f"{n} jobs on {total_gpus} GPUs, seed {seed}")


def _window(length: int, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of ``n`` consecutive records from a seeded start, and how many times each wrapped around."""
    k = int(rng.integers(length)) + np.arange(n)
    return k % length, k // length


def _gavel_jobs(vc: str, rng: np.random.Generator, n: int, per_host: int, board: GpuModel) -> list[tuple]:
    records = gavel_vc(vc)
    idx, wraps = _window(len(records), rng, n)
    first, last = records[0].arrival_s, records[-1].arrival_s
    period = (last - first) * len(records) / max(1, len(records) - 1)  # span + one mean gap
    work = sample_runtimes(rng, n, MIN_RUNTIME_S, MAX_RUNTIME_S)
    profiles = workload_profiles(board)
    out = []
    for i, w, run_s in zip(idx, wraps, work):
        r = records[i]
        out.append((r.arrival_s + w * period, min(r.nproc, per_host), float(run_s), profiles[r.job_type], r.job_type))
    return out


def _alibaba_jobs(rng: np.random.Generator, n: int, per_host: int, board: GpuModel) -> list[tuple]:
    pods = [p for p in alibaba_pods() if p.lifetime_s >= MIN_RUNTIME_S]
    idx, wraps = _window(len(pods), rng, n)
    period = (pods[-1].creation_s - pods[0].creation_s) * len(pods) / max(1, len(pods) - 1)
    types = gavel_vc("0e4a51")
    borrowed = rng.integers(len(types), size=n)
    profiles = workload_profiles(board)
    out = []
    for i, w, b in zip(idx, wraps, borrowed):
        pod, job_type = pods[i], types[b].job_type
        base = profiles[job_type]
        profile = Profile(iter_time_s=base.iter_time_s, sm_util_pct=pod.gpu_milli / 10.0,
                             memory_mib=base.memory_mib)
        out.append((pod.creation_s + w * period, min(pod.num_gpu, per_host), min(pod.lifetime_s, MAX_RUNTIME_S),
                    profile, f"alibaba {pod.gpu_milli}m ({job_type})"))
    return out


def _machine_facts(machine: MachineSpec) -> tuple[int, int, GpuModel]:
    """Total GPUs, the most GPUs on one host, and the most common board (first in order on a tie)."""
    hosts = getattr(machine, "hosts", None)
    if not hosts or not any(h.gpus for h in hosts):
        raise ConfigError(f"machine {machine!r} has no GPUs", hint="pass a machine spec such as 8xA100-SXM4-80GB")
    gpus = [g for h in hosts for g in h.gpus]
    board = Counter(gpus).most_common(1)[0][0]
    return len(gpus), max(len(h.gpus) for h in hosts), board


def offered_load(trace: Trace, machine: MachineSpec | int) -> float | None:
    """``sum(work_s * nproc) / (GPUs * span)``, span = last arrival - first arrival; None for a zero span.

    ``machine`` is a machine spec or a GPU count.
    """
    gpus = machine if isinstance(machine, int) else _machine_facts(machine)[0]
    if not trace.jobs:
        return None
    arrivals = [j.arrival_s for j in trace.jobs]
    span = max(arrivals) - min(arrivals)
    if span <= 0 or gpus <= 0:
        return None
    return sum(j.work_s * j.nproc for j in trace.jobs) / (gpus * span)


# --- trace files ------------------------------------------------------------------------------------------

_PROFILE_FIELDS = ("iter_time_s", "sm_util_pct", "mem_bw_util_pct", "memory_mib", "power_w")
_FIELDS = ("id", "arrival_s", "nproc", "work_s", "workload", *_PROFILE_FIELDS, "allowed_slowdown_pct",
           "user", "kind")
_FORMAT_HINT = ("a trace file is JSON {\"jobs\": [{\"id\", \"arrival_s\", \"nproc\", \"work_s\", \"workload\" or "
                "profile fields, \"allowed_slowdown_pct\"}, ...]} or a CSV with those columns")


def load_trace_file(path: str | Path, machine: MachineSpec) -> Trace:
    """Read a user's trace; workload profiles are scaled to ``machine``'s board.

    The format. JSON: ``{"name": ..., "description": ..., "jobs": [JOB, ...]}`` or a bare list of JOBs; CSV: a
    header row naming the fields, one job per row, empty cell = not given. Fields:

    - ``id``: unique job id (default ``job<row>``, rows counted from 0);
    - ``arrival_s`` (required): seconds from the trace's start, >= 0;
    - ``nproc``: GPUs, an integer >= 1 (default 1), at most the GPUs of the machine's largest host;
    - ``work_s`` (required): the solo, uncapped run time in seconds, > 0;
    - ``workload``: a catalogue name (:func:`~ecolaunch.sim.workloads.workload_names`) supplying the profile;
    - ``iter_time_s``, ``sm_util_pct``, ``mem_bw_util_pct``, ``memory_mib``, ``power_w``: profile fields, which
      override the workload's (neither a workload nor a profile field = an unprofiled job);
    - ``allowed_slowdown_pct``: default 10;
    - ``user``, ``kind``: labels (default ``sim`` and the workload name).

    Example (CSV)::

        id,arrival_s,nproc,work_s,workload,sm_util_pct,memory_mib
        a,0,2,3600,ResNet-50 (batch size 64),,
        b,60,1,1800,,35,6000

    Any other field is a ConfigError naming it; so is a bad value, naming the field, the job and the value.

    Raises:
        ConfigError: the file cannot be read or parsed, or a job has an unknown field or a bad value (the
            message names the file, the job and the field).
    """
    path = Path(path)
    label = f"trace file {str(path)!r}"
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise ConfigError(f"cannot read {label}: {e.strerror or e}", hint=_FORMAT_HINT) from None
    name, description = path.stem, f"jobs from {path.name}"
    if path.suffix.lower() == ".csv":
        rows: list[Any] = []
        for i, row in enumerate(csv.DictReader(text.splitlines())):
            if None in row:
                raise ConfigError(f"{label}, job {i}: the row has more cells than the header has columns",
                                  hint=_FORMAT_HINT)
            rows.append({k.strip(): v.strip() for k, v in row.items() if v is not None and v.strip() != ""})
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{label} is not valid JSON: {e}", hint=_FORMAT_HINT) from None
        if isinstance(doc, dict):
            unknown = set(doc) - {"name", "description", "jobs"}
            if unknown:
                raise ConfigError(f"{label}: unknown top-level field(s) {', '.join(sorted(unknown))}",
                                  hint="the top level takes name, description and jobs")
            name, description = str(doc.get("name") or name), str(doc.get("description") or description)
            rows = doc.get("jobs")
        else:
            rows = doc
        if not isinstance(rows, list):
            raise ConfigError(f"{label}: jobs is not a list", hint=_FORMAT_HINT)
    if not rows:
        raise ConfigError(f"{label} has no jobs", hint=_FORMAT_HINT)
    _, per_host, board = _machine_facts(machine)
    jobs, seen = [], set()
    for i, row in enumerate(rows):
        job = _parse_job(row, i, label, per_host, board)
        if job.id in seen:
            raise ConfigError(f"{label}: job {i} repeats id {job.id!r}", hint="give every job its own id")
        seen.add(job.id)
        jobs.append(job)
    return Trace(name, tuple(jobs), description)


def _parse_job(row: Any, i: int, label: str, per_host: int, board: GpuModel) -> TraceJob:
    where = f"{label}, job {i}"
    if not isinstance(row, dict):
        raise ConfigError(f"{where} is not an object of fields", hint=_FORMAT_HINT)
    unknown = sorted(set(row) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}",
                          hint=f"a job takes {', '.join(_FIELDS)}")
    jid = str(row.get("id", f"job{i}")).strip()
    where = f"{label}, job {i} ({jid!r})"
    for required in ("arrival_s", "work_s"):
        if required not in row:
            raise ConfigError(f"{where}: field {required!r} is missing", hint=_FORMAT_HINT)
    arrival = _number(row, "arrival_s", where, minimum=0.0)
    work = _number(row, "work_s", where, minimum=0.0, positive=True)
    nproc = _integer(row, "nproc", where, default=1)
    if nproc > per_host:
        raise ConfigError(f"{where}: field 'nproc' = {nproc} exceeds the {per_host} GPUs of the machine's "
                          "largest host", hint="lower nproc or simulate a machine with more GPUs per host")
    workload = row.get("workload")
    base = Profile()
    if workload not in (None, ""):
        try:
            base = workload_profile(str(workload), board)
        except ConfigError as e:
            raise ConfigError(f"{where}: field 'workload' = {workload!r} is not a known workload",
                              hint=e.hint) from None
    fields = {f: getattr(base, f) for f in _PROFILE_FIELDS}
    for f in _PROFILE_FIELDS:
        if f in row:
            fields[f] = (_integer(row, f, where, minimum=1) if f == "memory_mib" else
                         _number(row, f, where, minimum=0.0, maximum=100.0 if f.endswith("_pct") else None,
                                 positive=f in ("iter_time_s", "power_w")))
    slowdown = _number(row, "allowed_slowdown_pct", where, minimum=0.0) if "allowed_slowdown_pct" in row \
        else DEFAULT_ALLOWED_SLOWDOWN_PCT
    return TraceJob(id=jid, arrival_s=arrival, nproc=nproc, work_s=work, profile=Profile(**fields),
                    allowed_slowdown_pct=slowdown, user=str(row.get("user", "sim")),
                    kind=str(row.get("kind", workload or "")))


def _number(row: Mapping[str, Any], field: str, where: str, *, minimum: float | None = None,
            maximum: float | None = None, positive: bool = False) -> float:
    """A number field; a string (a CSV cell, or a JSON string) is parsed first."""
    value = row[field]
    try:
        parsed = float(value) if isinstance(value, str) else value
    except ValueError:
        parsed = None
    if not is_real(parsed):
        raise ConfigError(f"{where}: field {field!r} = {value!r} is not a number", hint=_FORMAT_HINT)
    out = number_or_none(parsed, lo=minimum, hi=maximum, positive=positive)
    if out is None:
        bound = ("> 0" if positive else f">= {minimum:g}") if minimum is not None else "finite"
        bound += f" and <= {maximum:g}" if maximum is not None else ""
        raise ConfigError(f"{where}: field {field!r} = {value!r} is out of range", hint=f"{field} must be {bound}")
    return out


def _integer(row: Mapping[str, Any], field: str, where: str, *, default: int | None = None, minimum: int = 1) -> int:
    if field not in row:
        return default  # type: ignore[return-value]
    value = row[field]
    try:
        out = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        out = math.nan
    if not math.isfinite(out) or out != int(out) or out < minimum:
        raise ConfigError(f"{where}: field {field!r} = {value!r} is not an integer >= {minimum}", hint=_FORMAT_HINT)
    return int(out)


def _check_slowdown(value: Any, where: str) -> None:
    if not is_number(value) or value < 0:
        raise ConfigError(f"{where}: allowed_slowdown_pct={value!r} is not a percentage >= 0",
                          hint="give a number such as 10")


__all__ = ["DEFAULT_ALLOWED_SLOWDOWN_PCT", "HEAVY_LOAD", "LIGHT_LOAD", "MAX_RUNTIME_S", "MIN_RUNTIME_S",
           "build_trace", "load_trace_file", "offered_load"]

