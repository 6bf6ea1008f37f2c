"""The trace registry: every named trace of the simulator, with its world, its machine and a one-line description.

What lives here: :data:`TRACES` (name -> :class:`TraceEntry`, in the order the help and the README list them),
:func:`trace_names` and :func:`lookup` (a name, or the path of a user's JSON or CSV trace file). ``ecolaunch
simulate``, its ``--help``, ``benchmarks/energy.py`` and the README's trace list read it. What does not: the
builders (:mod:`ecolaunch.sim.traces` for the model world, :mod:`ecolaunch.sim.measured_traces` for the measured
one), which do not import it. The two worlds: docs/simulator.md#simulator.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ecolaunch.devices.spec import MachineSpec, parse_spec
from ecolaunch.errors import ConfigError, did_you_mean
from ecolaunch.sim.engine import Simulation, Trace
from ecolaunch.sim.measured_traces import measured_machine, measured_simulation, measured_trace
from ecolaunch.sim.traces import build_trace, load_trace_file

__all__ = ["MEASURED", "MODEL", "TRACES", "TraceEntry", "gpus_label", "lookup", "trace_names"]

MODEL = "model"
MEASURED = "measured"


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One trace: ``name``, its ``world`` (:data:`MODEL` or :data:`MEASURED`) and a one-line ``description``;
    ``path`` is set for a user's trace file (a model-world trace on the caller's machine)."""

    name: str
    world: str
    description: str
    path: Path | None = None

    @property
    def brings_machine(self) -> bool:
        """Whether the trace runs on its own machine (a measured trace: the boards its measurements are of)."""
        return self.world == MEASURED

    def machine(self, gpus: str, hosts: int = 1) -> MachineSpec:
        """The machine the trace runs on: a measured trace's own, else ``gpus`` (a spec or a TOML machine file)
        repeated on ``hosts`` identical hosts."""
        if self.brings_machine:
            return measured_machine(self.name)
        machine = parse_spec(gpus, hostname="node0")
        return machine.replicate(hosts) if hosts > 1 else machine

    def build(self, machine: MachineSpec, *, seed: int = 0, jobs: int | None = None) -> Trace:
        """The trace for ``machine``, seeded; ``jobs`` overrides the trace's job count (both ignored for a file)."""
        if self.path is not None:
            return load_trace_file(self.path, machine)
        if self.brings_machine:
            trace = measured_trace(self.name, machine, seed=seed, jobs=jobs)
        else:
            trace = build_trace(self.name, machine, seed=seed, jobs=jobs)
        return replace(trace, description=f"{self.description}; {trace.description}")

    def simulation(self, machine: MachineSpec, trace: Trace, policy_name: str, policy, *,
                   seed: int = 0, link_speed: float | None = None) -> Simulation:
        """The simulation that runs ``policy`` (registered as ``policy_name``) on this trace: a measured trace's in
        a fresh measured world of seed ``seed`` whose worse-linked sets keep ``link_speed`` of a job's speed (None:
        Gavel's per type; see :func:`~ecolaunch.sim.measured_traces.measured_simulation`), else the model world's
        (which plays no link, so ``link_speed`` must be None)."""
        if self.brings_machine:
            return measured_simulation(self.name, machine, trace, policy_name, policy, seed=seed,
                                       link_speed=link_speed)
        if link_speed is not None:
            raise ConfigError(f"the model world plays no link between GPUs: a link slowdown cannot apply to trace "
                              f"{self.name!r}", hint="pick a measured trace (workstation-topology has split pairs)")
        return Simulation(machine, policy)


def gpus_label(machine: MachineSpec) -> str:
    """The GPUs of ``machine``'s first host as a spec, models in order of first appearance: ``2xV100+2xP100``."""
    counts = Counter(g.name for g in machine.hosts[0].gpus)
    return "+".join(f"{n}x{name}" for name, n in counts.items())


_PHILLY_6214 = "Philly VC 6214e9 arrivals (96% 1-GPU jobs), Gavel job types, Philly run times"
_PHILLY_0E4A = "Philly VC 0e4a51 arrivals (1-8 GPU jobs), Gavel job types, Philly run times"

#: every named trace, model world first
TRACES: Mapping[str, TraceEntry] = {e.name: e for e in (
    TraceEntry("workstation-light", MODEL, f"workstation, offered load 0.4: {_PHILLY_6214}"),
    TraceEntry("workstation-heavy", MODEL, f"workstation, offered load 0.9: {_PHILLY_6214}"),
    TraceEntry("cluster-light", MODEL, f"small cluster, offered load 0.4: {_PHILLY_0E4A}"),
    TraceEntry("cluster-heavy", MODEL, f"small cluster, offered load 0.9: {_PHILLY_0E4A}"),
    TraceEntry("alibaba-share", MODEL, "Alibaba 2023 GPU pods (39% ask a GPU fraction, demand = gpu_milli), "
                                       "offered load 0.9 in whole GPUs"),
    TraceEntry("workstation-mixed", MEASURED, "Alibaba 2023 pod mix (39% fractional GPUs, at most 2 GPUs) on a "
                                              "4-GPU workstation, Poisson arrivals at load 0.5, Gavel types by "
                                              "measured pair loss, 8 users"),
    TraceEntry("power-budget", MEASURED, "Philly VC 6214e9 jobs (at most 2 GPUs), Gavel types, Poisson arrivals at "
                                         "load 0.5, under a 700 W budget on 4 V100s"),
    TraceEntry("workstation-measured", MEASURED, "Philly VC 6214e9 jobs (at most 2 GPUs), Gavel types, Poisson "
                                                 "arrivals at load 0.5 (power-budget without the budget)"),
    TraceEntry("workstation-topology", MEASURED, "Philly VC 0e4a51's 1- and 2-GPU jobs, Gavel types, Poisson "
                                                 "arrivals at load 0.6, on 8 V100s in NVLink pairs, PCIe within a "
                                                 "socket"),
    TraceEntry("workstation-mixed-models", MEASURED, "Philly VC 6214e9 jobs (at most 2 GPUs), Gavel types, Poisson "
                                                     "arrivals at load 0.5, on 2 V100s and 2 P100s"),
)}


def trace_names(world: str | None = None) -> list[str]:
    """The names of :data:`TRACES` (of one ``world`` when given), in registry order."""
    return [name for name, e in TRACES.items() if world is None or e.world == world]


def lookup(name_or_path: str) -> TraceEntry:
    """A registered trace by name, else the trace file at that path (a ``.json`` or ``.csv`` name, or any file).

    Raises:
        ConfigError: neither a registered name nor a trace file.
    """
    entry = TRACES.get(name_or_path)
    if entry is not None:
        return entry
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() in (".json", ".csv") or path.is_file():
        return TraceEntry(str(path), MODEL, f"the trace file {path}", path)
    raise ConfigError(f"unknown trace {name_or_path!r}{did_you_mean(name_or_path, TRACES)}",
                      hint=f"use one of {', '.join(TRACES)}, or the path of a .json or .csv file")
