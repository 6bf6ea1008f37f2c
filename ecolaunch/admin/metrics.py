"""The host's metrics for the lab's dashboards: one prometheus-client registry, read afresh at every collection.

:func:`registry` builds it over the state directory's store and this host's GPU backend; ``ecolaunch agent
--textfile`` writes it in node_exporter's textfile-collector format (:func:`write_textfile`), and ``ecolaunch
exporter`` serves it over HTTP. Nothing here prints or exits. The metrics, their labels, and what happens when a part
cannot be read: docs/accounting.md#metrics-for-dashboards.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ecolaunch.devices.backend import GpuBackend, GpuSnapshot
from ecolaunch.errors import EcolaunchError
from ecolaunch.state.graph import StateGraph
from ecolaunch.state.reconcile import ProcessTable, PsutilProcessTable, reconcile
from ecolaunch.safefs import write_file
from ecolaunch.state.store import StateStore

__all__ = ["HostCollector", "families", "registry", "write_textfile"]

logger = logging.getLogger(__name__)

GPU_LABELS = ("gpu", "uuid", "model", "job", "user")
MIB = 1024 * 1024


def families(host: str, gpus: Sequence[GpuSnapshot], graph: StateGraph, success: dict[str, bool]) -> list[Metric]:
    """The metrics of ``host``: its GPUs as read, labelled with the running jobs ``graph`` places on them, its jobs
    and queue, and which parts could be read (``success``: part -> bool)."""
    power = GaugeMetricFamily("ecolaunch_gpu_power_watts", "GPU power draw", labels=GPU_LABELS, unit="watts")
    limit = GaugeMetricFamily("ecolaunch_gpu_power_limit_watts", "GPU power limit (the one set)", labels=GPU_LABELS,
                              unit="watts")
    energy = CounterMetricFamily("ecolaunch_gpu_energy_joules", "GPU energy counter (the driver's, since it was "
                                 "loaded)", labels=GPU_LABELS, unit="joules")
    util = GaugeMetricFamily("ecolaunch_gpu_utilization_ratio", "fraction of time a kernel ran on the GPU",
                             labels=GPU_LABELS, unit="ratio")
    mem_util = GaugeMetricFamily("ecolaunch_gpu_memory_utilization_ratio", "fraction of time GPU memory was read or "
                                 "written", labels=GPU_LABELS, unit="ratio")
    mem_used = GaugeMetricFamily("ecolaunch_gpu_memory_used_bytes", "GPU memory in use", labels=GPU_LABELS,
                                 unit="bytes")
    running = [j for j in graph.running_jobs() if j.host == host]
    for gpu in sorted(gpus, key=lambda g: g.index):
        on = sorted((j for j in running if gpu.uuid in j.gpus), key=lambda j: j.id)
        labels = [str(gpu.index), gpu.uuid, gpu.name, ",".join(j.id for j in on),
                  ",".join(dict.fromkeys(j.user for j in on))]
        for family, value in ((power, gpu.power_w), (limit, gpu.power_limit_w), (energy, gpu.energy_j),
                              (util, None if gpu.util_gpu_pct is None else gpu.util_gpu_pct / 100.0),
                              (mem_util, None if gpu.util_mem_pct is None else gpu.util_mem_pct / 100.0),
                              (mem_used, gpu.memory_used_mib * MIB)):
            if value is not None:
                family.add_metric(labels, float(value))
    jobs = GaugeMetricFamily("ecolaunch_jobs", "ecolaunch jobs of this host by state and user",
                             labels=("state", "user"))
    counts: dict[tuple[str, str], int] = {}
    for job in graph.jobs.values():
        if job.host == host:
            counts[(job.state.value, job.user)] = counts.get((job.state.value, job.user), 0) + 1
    for (state, user), n in sorted(counts.items()):
        jobs.add_metric([state, user], n)
    queue = GaugeMetricFamily("ecolaunch_queue_length", "jobs waiting in this host's queue",
                              value=len(graph.queued_jobs(host)))
    ok = GaugeMetricFamily("ecolaunch_collect_success", "1 when the part could be read", labels=("part",))
    for part, read in sorted(success.items()):
        ok.add_metric([part], float(read))
    return [power, limit, energy, util, mem_util, mem_used, jobs, queue, ok]


class HostCollector:
    """A prometheus-client collector: each :meth:`collect` reads this host's GPUs from ``backend`` and the jobs from
    a lock-free snapshot of ``store`` (it never waits for, nor writes, the state), with dead launchers' jobs left
    out as a reconcile would. Collections are serialized: an HTTP server scrapes from several threads."""

    def __init__(self, store: StateStore, backend: GpuBackend, processes: ProcessTable | None = None) -> None:
        self.store = store
        self.backend = backend
        self.processes = processes or PsutilProcessTable()
        self._lock = threading.Lock()
        self._failing: dict[str, str] = {}

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            host = self.backend.hostname()
            gpus: list[GpuSnapshot] = []
            graph = StateGraph()
            try:
                gpus = self.backend.gpus()
                gpus_read = self._worked("gpus")
            except EcolaunchError as e:
                gpus_read = self._failed("gpus", f"cannot read the GPUs: {e}")
            try:
                graph = self.store.read_unlocked()
                reconcile(graph, host, self.processes, gpus or None)
                state_read = self._worked("state")
            except (EcolaunchError, OSError) as e:
                graph = StateGraph()
                state_read = self._failed("state", f"cannot read the state directory {self.store.directory}: {e}")
            yield from families(host, gpus, graph, {"gpus": gpus_read, "state": state_read})

    def _worked(self, part: str) -> bool:
        if self._failing.pop(part, None) is not None:
            logger.warning("metrics: the %s can be read again", part)
        return True

    def _failed(self, part: str, why: str) -> bool:
        if self._failing.get(part) != why:
            logger.warning("metrics: %s; exporting the rest", why)
        self._failing[part] = why
        return False


def registry(store: StateStore, backend: GpuBackend, processes: ProcessTable | None = None) -> CollectorRegistry:
    """The one registry of this host's metrics (docs/accounting.md#metrics-for-dashboards)."""
    reg = CollectorRegistry()
    reg.register(HostCollector(store, backend, processes))
    return reg


def write_textfile(path: Path, reg: CollectorRegistry) -> None:
    """Write ``reg`` to ``path`` for node_exporter's textfile collector: a temporary file in the same directory
    (a name node_exporter does not read: it reads ``*.prom``), then a rename, so it never reads half a file.
    Raises OSError."""
    write_file(Path(path), generate_latest(reg), mode=0o644)  # outside the state tree: node_exporter reads it
