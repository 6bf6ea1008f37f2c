"""The simulated GPU backend: the GPUs of one host of a machine spec, shared by every process on the machine.

What lives here: :class:`SimulatedBackend` (each GPU's mutable state in one small JSON file under a lock;
:meth:`SimulatedBackend.attach` / :meth:`SimulatedBackend.detach` for the processes that use a GPU) and
:func:`basic_reading`, the readings it reports. How processes share it and what it does not model:
docs/simulator.md#how-processes-share-simulated-gpus; who may write its files: docs/threat-model.md#who-can-write-what.
What lives elsewhere: the spec and catalogue (:mod:`ecolaunch.devices.spec`, :mod:`ecolaunch.devices.catalogue`);
which job owns a GPU (``ecolaunch.state``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ecolaunch.devices.backend import GpuProcess, GpuSnapshot, LinkKind, pair_key
from ecolaunch.devices.spec import HostSpec
from ecolaunch.errors import DeviceError, PermissionDenied
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.safefs import SHARED_FILE_MODE, open_lock, read_file, write_file, write_in_place
from ecolaunch.validate import is_integer, is_real

__all__ = ["ProcessLoad", "Reading", "SimulatedBackend", "basic_reading"]

logger = logging.getLogger(__name__)

_FORMAT = "ecolaunch-simulated-gpus"
_VERSION = 1
MAX_STATE_BYTES = 8 * 1024 * 1024
# psutil reports start times in clock ticks (10 ms); the same process always gives the same value.
_START_TIME_TOLERANCE_S = 0.01


@dataclass(frozen=True, slots=True)
class ProcessLoad:
    """What one attached process asks of a GPU; ``None`` when the attacher did not say."""

    pid: int
    memory_mib: int
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    power_w: float | None = None


@dataclass(frozen=True, slots=True)
class Reading:
    """What a simulated GPU reports at one instant."""

    memory_used_mib: int
    util_gpu_pct: float
    util_mem_pct: float
    power_w: float


def basic_reading(model: GpuModel, power_limit_w: float, loads: Sequence[ProcessLoad]) -> Reading:
    """The readings of one simulated GPU from the processes attached to it: a deliberately simple model.

    memory = sum of attached memory; utilization = min(100, sum of attached utilizations); power =
    idle + sum of each process's (power_w - idle), clipped to the enforced limit. A process attached
    without a utilization or power adds nothing to them (it still holds its memory).

    The CLI replaces it with the simulator's measured models (``ecolaunch.sim.reading.measured_reading``: power
    caps from Zeus, co-location interference from Gavel) through the ``reading`` argument of
    :class:`SimulatedBackend`; this one serves the device layer's own tests, which must not depend on ``sim``.
    """
    extra_w = sum(max(0.0, p.power_w - model.idle_power_w) for p in loads if p.power_w is not None)
    return Reading(
        memory_used_mib=sum(p.memory_mib for p in loads),
        util_gpu_pct=min(100.0, sum((p.util_gpu_pct or 0.0 for p in loads), 0.0)),
        util_mem_pct=min(100.0, sum((p.util_mem_pct or 0.0 for p in loads), 0.0)),
        power_w=min(power_limit_w, model.idle_power_w + extra_w),
    )


ReadingFn = Callable[[GpuModel, float, Sequence[ProcessLoad]], Reading]


class SimulatedBackend:
    """The GPUs of one simulated host, implementing :class:`~ecolaunch.devices.backend.GpuBackend`.

    Args:
        spec: the host to simulate (from :func:`ecolaunch.devices.spec.parse_spec`).
        state_path: the JSON file holding the GPUs' state; its directory is created on first use.
        privileged: whether :meth:`set_power_limit` is allowed (a real driver requires root).
        clock: seconds on a monotonic scale shared by this host's processes (``time.monotonic``, not the wall clock,
            which an admin may set back or forward); the energy counter integrates power over it.
        reading: the device model (see :func:`basic_reading`).
    """

    kind = "simulated"

    def __init__(self, spec: HostSpec, state_path: Path, *, privileged: bool = True,
                 clock: Callable[[], float] = time.monotonic, reading: ReadingFn = basic_reading) -> None:
        self._spec = spec
        self._path = Path(state_path)
        self._lock_path = self._path.with_name(self._path.name + ".lock")
        self._privileged = privileged
        self._clock = clock
        self._reading = reading
        self._models = dict(zip(spec.uuids, spec.gpus))

    @property
    def spec(self) -> HostSpec:
        return self._spec

    @property
    def state_path(self) -> Path:
        return self._path

    @property
    def privileged(self) -> bool:
        """Whether :meth:`set_power_limit` is allowed (root on a real machine; see ``select.simulated_privilege``)."""
        return self._privileged

    # --- GpuBackend --------------------------------------------------------------------------------

    def hostname(self) -> str:
        return self._spec.name

    def gpus(self) -> list[GpuSnapshot]:
        with self._transaction() as (state, now):
            return [self._snapshot(i, uuid, state[uuid], now) for i, uuid in enumerate(self._spec.uuids)]

    def topology(self) -> dict[tuple[str, str], LinkKind]:
        uuids = self._spec.uuids
        return {pair_key(uuids[i], uuids[j]): kind for (i, j), kind in self._spec.links.items()}

    def set_power_limit(self, uuid: str, power_w: float) -> None:
        model = self._model(uuid)
        if not self._privileged:
            raise PermissionDenied(
                f"setting the power limit of simulated GPU {uuid} needs privilege (simulated non-root user)",
                hint="run as root, or let the ecolaunch cap agent apply power limits",
            )
        lo, hi = model.power_limit_min_w, model.power_limit_max_w
        if not is_real(power_w) or not lo <= power_w <= hi:
            raise DeviceError(
                f"power limit {power_w!r} W for GPU {uuid} ({model.name}) is outside its range [{lo:g}, {hi:g}] W",
                hint=f"choose a power limit between {lo:g} and {hi:g} W",
            )
        with self._transaction() as (state, now):
            entry = state[uuid]
            self._advance(uuid, entry, now)
            entry["power_limit_w"] = float(power_w)
            state.dirty = True
        logger.debug("simulated GPU %s power limit set to %.1f W", uuid, power_w)

    def energy_j(self, uuid: str) -> float | None:
        self._model(uuid)
        with self._transaction() as (state, now):
            entry = state[uuid]
            return entry["energy_j"] + self._power(uuid, entry) * max(0.0, now - entry["updated_s"])

    def close(self) -> None:
        """Nothing to release: every call opens and closes the state file itself."""

    # --- simulation-only API -----------------------------------------------------------------------

    def attach(self, uuid: str, pid: int, memory_mib: int, *, util_gpu_pct: float | None = None,
               util_mem_pct: float | None = None, power_w: float | None = None) -> bool:
        """Record that process ``pid`` now uses GPU ``uuid`` (attaching it again replaces its load); True.

        Raises:
            DeviceError: unknown GPU, a dead pid, a bad value, or not enough free memory on the GPU.
        """
        model = self._model(uuid)
        load = _validated_load(pid, memory_mib, util_gpu_pct, util_mem_pct, power_w)
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.Error as e:
            raise DeviceError(f"cannot attach process {pid} to GPU {uuid}: no such process",
                              hint="attach a running process") from e
        with self._transaction() as (state, now):
            entry = state[uuid]
            others = [p for p in entry["processes"] if p["pid"] != pid]
            used = sum(p["memory_mib"] for p in others)
            if used + memory_mib > model.memory_mib:
                raise DeviceError(
                    f"out of memory on simulated GPU {uuid}: process {pid} asks {memory_mib} MiB, "
                    f"{model.memory_mib - used} MiB of {model.memory_mib} MiB free",
                    hint="place the job on a GPU with enough free memory",
                )
            self._advance(uuid, entry, now)
            record = {"pid": pid, "create_time": create_time, "memory_mib": load.memory_mib,
                      "util_gpu_pct": load.util_gpu_pct, "util_mem_pct": load.util_mem_pct,
                      "power_w": load.power_w}
            entry["processes"] = [*others, record]
            state.dirty = True
        logger.debug("simulated GPU %s: attached pid %d (%d MiB)", uuid, pid, memory_mib)
        return True

    def detach(self, pid: int) -> int:
        """Remove process ``pid`` from every GPU; returns on how many GPUs it was attached."""
        removed = 0
        with self._transaction() as (state, now):
            for uuid in self._spec.uuids:
                entry = state[uuid]
                kept = [p for p in entry["processes"] if p["pid"] != pid]
                if len(kept) != len(entry["processes"]):
                    self._advance(uuid, entry, now)
                    entry["processes"] = kept
                    removed += 1
                    state.dirty = True
        return removed

    # --- internals ---------------------------------------------------------------------------------

    def _model(self, uuid: str) -> GpuModel:
        try:
            return self._models[uuid]
        except KeyError:
            raise DeviceError(f"no simulated GPU {uuid!r} on host {self._spec.name!r}",
                              hint="use a UUID listed by gpus()") from None

    def _loads(self, entry: dict[str, Any]) -> list[ProcessLoad]:
        return [ProcessLoad(p["pid"], p["memory_mib"], p["util_gpu_pct"], p["util_mem_pct"], p["power_w"])
                for p in entry["processes"]]

    def _power(self, uuid: str, entry: dict[str, Any]) -> float:
        return self._reading(self._models[uuid], entry["power_limit_w"], self._loads(entry)).power_w

    def _advance(self, uuid: str, entry: dict[str, Any], now: float) -> None:
        """Integrate the power drawn since the last change into the energy counter (before a change)."""
        entry["energy_j"] += self._power(uuid, entry) * max(0.0, now - entry["updated_s"])
        entry["updated_s"] = max(now, entry["updated_s"])

    def _snapshot(self, index: int, uuid: str, entry: dict[str, Any], now: float) -> GpuSnapshot:
        model = self._models[uuid]
        r = self._reading(model, entry["power_limit_w"], self._loads(entry))
        return GpuSnapshot(
            uuid=uuid, index=index, name=model.full_name,
            memory_total_mib=model.memory_mib, memory_used_mib=r.memory_used_mib,
            util_gpu_pct=r.util_gpu_pct, util_mem_pct=r.util_mem_pct, power_w=r.power_w,
            power_limit_min_w=model.power_limit_min_w, power_limit_default_w=model.power_limit_default_w,
            power_limit_max_w=model.power_limit_max_w, power_limit_w=entry["power_limit_w"],
            energy_j=entry["energy_j"] + r.power_w * max(0.0, now - entry["updated_s"]),
            processes=tuple(GpuProcess(p["pid"], p["memory_mib"]) for p in entry["processes"]),
            power_limit_enforced_w=entry["power_limit_w"],  # no enforcement lag is modelled: in force once set
        )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[tuple[_State, float]]:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_lock(self._lock_path)  # every member of the state directory's group shares these GPUs
        except OSError as e:
            why = getattr(e, "why", None) or e.strerror or e
            raise DeviceError(f"cannot use the simulated GPU state in {str(self._path.parent)!r}: {why}",
                              hint="set ECOLAUNCH_STATE_DIR to a writable directory") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel even if this process is killed
            now = self._clock()
            state = self._load(now)
            self._drop_dead(state, now)
            yield state, now
            if state.dirty:
                self._write(state)
        finally:
            os.close(fd)

    def _fresh_entry(self, uuid: str, now: float) -> dict[str, Any]:
        return {"power_limit_w": self._models[uuid].power_limit_default_w, "energy_j": 0.0,
                "updated_s": now, "processes": []}

    def _load(self, now: float) -> _State:
        state = _State()
        raw: Any = None
        try:
            raw = json.loads(read_file(self._path, MAX_STATE_BYTES)[0].decode("utf-8"))
            gpus = _parse_state(raw, self._spec.name)
        except FileNotFoundError:
            logger.debug("simulated GPU state %s does not exist yet; creating it", self._path)
            gpus = {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            logger.warning("simulated GPU state %s is unreadable or corrupt (%s); rebuilding it", self._path, e)
            gpus = {}
        for uuid, model in self._models.items():
            entry = gpus.get(uuid)
            if entry is None:
                entry = self._fresh_entry(uuid, now)
                state.dirty = True
            elif not model.power_limit_min_w <= entry["power_limit_w"] <= model.power_limit_max_w:
                logger.warning("simulated GPU %s had power limit %.1f W outside [%g, %g] W; reset to default",
                               uuid, entry["power_limit_w"], model.power_limit_min_w, model.power_limit_max_w)
                entry["power_limit_w"] = model.power_limit_default_w
                state.dirty = True
            if entry["updated_s"] > now:  # the clock went back (a reboot): count on from now, never stall
                entry["updated_s"] = now
                state.dirty = True
            state[uuid] = entry
        if set(gpus) - set(self._models):
            state.dirty = True  # GPUs the spec no longer has
        return state

    def _drop_dead(self, state: _State, now: float) -> None:
        for uuid in self._spec.uuids:
            entry = state[uuid]
            alive = [p for p in entry["processes"] if _alive(p["pid"], p["create_time"])]
            if len(alive) != len(entry["processes"]):
                dead = sorted({p["pid"] for p in entry["processes"]} - {p["pid"] for p in alive})
                logger.debug("simulated GPU %s: dropping exited process(es) %s", uuid, dead)
                self._advance(uuid, entry, now)
                entry["processes"] = alive
                state.dirty = True

    def _write(self, state: _State) -> None:
        doc = {"format": _FORMAT, "version": _VERSION, "host": self._spec.name, "gpus": dict(state)}
        data = json.dumps(doc, indent=1, sort_keys=True).encode("utf-8")
        try:
            try:
                # every user of a group-shared state directory shares these GPUs (setgid gives the file its group)
                write_file(self._path, data, mode=SHARED_FILE_MODE)
            except PermissionError:
                # a sticky directory: only the file's owner may rename over it. Others rewrite it in place, under
                # the lock (a write torn by a crash reads as corrupt and is rebuilt: the simulation restarts)
                write_in_place(self._path, data)
        except OSError as e:
            why = getattr(e, "why", None) or e.strerror or e
            raise DeviceError(f"cannot write the simulated GPU state {str(self._path)!r}: {why}",
                              hint="set ECOLAUNCH_STATE_DIR to a writable directory") from e


class _State(dict):
    """The GPU entries of one transaction by UUID, plus whether they must be written back."""

    dirty: bool = False


def _validated_load(pid: int, memory_mib: int, util_gpu_pct: float | None, util_mem_pct: float | None,
                    power_w: float | None) -> ProcessLoad:
    problems = []
    if not (is_integer(pid) and pid > 0):
        problems.append(f"pid={pid!r} is not a process id")
    if not (is_integer(memory_mib) and memory_mib >= 0):
        problems.append(f"memory_mib={memory_mib!r} is not a whole number >= 0")
    for name, value in (("util_gpu_pct", util_gpu_pct), ("util_mem_pct", util_mem_pct)):
        if value is not None and not (is_real(value) and 0 <= value <= 100):
            problems.append(f"{name}={value!r} is not a percentage in [0, 100]")
    if power_w is not None and not (is_real(power_w) and power_w >= 0):
        problems.append(f"power_w={power_w!r} is not a power >= 0 W")
    if problems:
        raise DeviceError("cannot attach: " + "; ".join(problems), hint="pass valid load values to attach()")
    return ProcessLoad(pid, memory_mib,
                       None if util_gpu_pct is None else float(util_gpu_pct),
                       None if util_mem_pct is None else float(util_mem_pct),
                       None if power_w is None else float(power_w))


def _alive(pid: int, create_time: float) -> bool:
    """Whether ``pid`` still runs and is the same process (not a reused pid, not a zombie)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(proc.create_time() - create_time) < _START_TIME_TOLERANCE_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's live process: we may not inspect it, but it exists


def _parse_state(raw: Any, host: str) -> dict[str, dict[str, Any]]:
    """Validate a loaded state document; raises ValueError/TypeError/KeyError when it is not ours."""
    if not isinstance(raw, dict) or raw.get("format") != _FORMAT or raw.get("version") != _VERSION:
        raise ValueError("not an ecolaunch simulated-GPU state document of version %d" % _VERSION)
    if raw.get("host") != host:
        raise ValueError(f"it describes host {raw.get('host')!r}, not {host!r}")
    gpus = {}
    for uuid, entry in raw["gpus"].items():
        procs = []
        for p in entry["processes"]:
            procs.append({"pid": int(p["pid"]), "create_time": float(p["create_time"]),
                          "memory_mib": int(p["memory_mib"]),
                          **{k: None if p[k] is None else float(p[k])
                             for k in ("util_gpu_pct", "util_mem_pct", "power_w")}})
        numbers = {k: float(entry[k]) for k in ("power_limit_w", "energy_j", "updated_s")}
        if not all(math.isfinite(v) for v in numbers.values()) or numbers["energy_j"] < 0:
            raise ValueError(f"GPU {uuid} has a non-finite or negative reading")
        gpus[str(uuid)] = {**numbers, "processes": procs}
    return gpus
