"""Traces for the measured world (:mod:`ecolaunch.sim.measured`): every job a Gavel V100 job type, by user.

What lives here: the measured traces' recipes (:data:`RECIPES`) and :func:`measured_trace`,
:func:`measured_machine` and :func:`measured_simulation`. What does not: their names and one-line descriptions
(:mod:`ecolaunch.sim.trace_registry`), the population data (:mod:`ecolaunch.sim.workloads`). What each trace is,
and why: docs/simulator.md#the-measured-traces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ecolaunch.admin.rules import Rules
from ecolaunch.devices.backend import LinkKind
from ecolaunch.devices.spec import MachineSpec, parse_spec
from ecolaunch.errors import ConfigError
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.sim.measured import BOARD, MeasuredWorld, job_kinds, measured_oracle
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.traces import MAX_RUNTIME_S, MIN_RUNTIME_S, _machine_facts
from ecolaunch.sim.workloads import ASSUMED_MEMORY_MIB, alibaba_pods, gavel_vc, sample_runtimes
from ecolaunch.validate import is_integer

__all__ = ["ALIBABA", "ECOLAUNCH_POLICIES", "POWER_BUDGET_W", "RECIPES", "Recipe", "measured_machine", "measured_rules",
           "measured_simulation", "measured_trace"]

#: the ``power-budget`` trace's budget on 4 V100 PCIe boards (100-250 W each): 70 % of what they can draw
POWER_BUDGET_W = 700.0
USERS = 8
WORKING_SET = 4

ALIBABA = "alibaba"


@dataclass(frozen=True, slots=True)
class Recipe:
    """What a measured trace draws its jobs from: ``source`` (a Gavel VC, or :data:`ALIBABA`: the pod list), the
    offered ``load``, the number of ``jobs``, the GPU counts of the VC records it draws from (``sizes``; None:
    all) and the most GPUs a job asks (``max_gpus``, more is clipped; None: a host's GPUs)."""

    source: str
    load: float
    jobs: int
    sizes: tuple[int, ...] | None = None
    max_gpus: int | None = None


#: every measured trace's recipe (docs/simulator.md#the-measured-traces says why each is as it is)
RECIPES: Mapping[str, Recipe] = {
    "workstation-mixed": Recipe(ALIBABA, 0.5, 500, max_gpus=2),
    "power-budget": Recipe("6214e9", 0.5, 500, max_gpus=2),
    "workstation-measured": Recipe("6214e9", 0.5, 500, max_gpus=2),
    "workstation-topology": Recipe("0e4a51", 0.6, 500, sizes=(1, 2)),
    "workstation-mixed-models": Recipe("6214e9", 0.5, 500, max_gpus=2),
}


def measured_rules(name: str, rules: Rules) -> Rules:
    """``rules`` as the trace runs under them: ``power-budget`` adds its machine-wide budget."""
    if name == "power-budget":
        return replace(rules, power_max_total_w=POWER_BUDGET_W)
    return rules


#: the policies whose jobs run under ecolaunch's own profiler and closed loop (``Simulation(closed_loop=True)``)
ECOLAUNCH_POLICIES = ("curve", "curve-link", "curve-untold", "gnn", "no-gnn", "pessimistic-curve", "exact-first-curve",
                      "history-pessimistic-curve", "analytic-share", "util-share")


#: whether a first launch of a policy that reads the machine's history (:class:`~ecolaunch.sim.first_curves.
#: HistoryFirstCurve`, as the launcher does) starts from a colleague's profile of the same job, as the launcher's does
#: (``Simulation(colleague_profiles=True)``); ``benchmarks/energy.py --no-colleague-profiles`` sets it False: its ablation
COLLEAGUE_PROFILES = True


def measured_simulation(name: str, machine: MachineSpec, trace: Trace, policy_name: str, policy=None, *,
                        seed: int = 0, link_speed: float | None = None):
    """A :class:`~ecolaunch.sim.engine.Simulation` of trace ``name`` in a fresh measured world (its own history
    and seeded noise) under the trace's rules. ``policy_name`` ``"oracle"`` builds the world's oracle (``policy``
    is then ignored); ecolaunch's own policies (:data:`ECOLAUNCH_POLICIES`) run under its closed loop, and those told
    the machine's history start a first launch from a colleague's profile (:data:`COLLEAGUE_PROFILES`).
    ``link_speed``: the share of speed a multi-GPU job keeps on a worse-linked set (:attr:`MeasuredWorld.link_speed`;
    None: Gavel's per type)."""
    world = MeasuredWorld(seed=seed, link_speed=link_speed)
    if policy_name == "oracle":
        policy = measured_oracle(world, {j.id: j.kind for j in trace.jobs})
    elif "bind_world" in dir(type(policy)):  # a policy told what the machine's history holds (sim/first_curves.py)
        policy.bind_world(world)
    closed_loop = policy_name in ECOLAUNCH_POLICIES
    return Simulation(machine, policy, measured_rules(name, Rules()), world=world, closed_loop=closed_loop,
                      omniscient=policy_name == "oracle",
                      colleague_profiles=COLLEAGUE_PROFILES and closed_loop and getattr(policy, "reads_history", False))


def measured_machine(name: str) -> MachineSpec:
    """The machine a measured trace runs on: 4 V100 PCIe 16 GB, for ``workstation-topology`` 8 of them in NVLink
    pairs, for ``workstation-mixed-models`` 2 V100s and 2 P100s (docs/simulator.md#the-measured-traces)."""
    if name == "workstation-mixed-models":
        return parse_spec("2xV100-PCIE-16GB+2xP100-PCIE-16GB", hostname="node0")
    if name != "workstation-topology":
        return parse_spec(f"4x{BOARD}", hostname="node0")
    machine = parse_spec(f"8x{BOARD}", hostname="node0")
    host = machine.hosts[0]
    links = {(i, j): (LinkKind.NVLINK if i // 2 == j // 2 else LinkKind.PCIE_HOST if i // 4 == j // 4
                      else LinkKind.SYSTEM) for i in range(8) for j in range(i + 1, 8)}
    return replace(machine, hosts=(replace(host, links=links),))


def measured_trace(name: str, machine: MachineSpec, *, seed: int = 0, jobs: int | None = None,
                   allowed_slowdown_pct: float = 10.0) -> Trace:
    """A measured trace for ``machine`` (docs/simulator.md#the-measured-traces); ``jobs`` overrides the recipe's
    job count.

    Raises:
        ConfigError: an unknown trace name, or a ``jobs`` that is not an integer >= 1.
    """
    recipe = RECIPES.get(name)
    if recipe is None:
        raise ConfigError(f"unknown measured trace {name!r}", hint=f"use one of {', '.join(RECIPES)}")
    n = recipe.jobs if jobs is None else jobs
    if not is_integer(n) or n < 1:
        raise ConfigError(f"trace {name!r}: jobs={n!r} is not a job count", hint="give an integer >= 1")
    total_gpus, per_host, _ = _machine_facts(machine)
    most = per_host if recipe.max_gpus is None else min(per_host, recipe.max_gpus)
    rng = np.random.default_rng(seed)
    kinds = job_kinds()
    by_loss = sorted(kinds, key=lambda k: (kinds[k].pair_loss, k))
    names = sorted(kinds)
    working = {u: list(rng.choice(names, size=WORKING_SET, replace=False)) for u in range(USERS)}
    raw = []  # (nproc, work, kind, user, bound)
    if recipe.source == ALIBABA:
        pods = [p for p in alibaba_pods() if p.lifetime_s >= MIN_RUNTIME_S]
        for i in rng.integers(len(pods), size=n):
            pod = pods[i]
            user = int(rng.integers(USERS))
            bound = allowed_slowdown_pct
            if pod.gpu_milli < 1000:
                kind = by_loss[min(len(by_loss) - 1, int(pod.gpu_milli / 1000 * len(by_loss)))]
                # a pod promised a fraction f of a GPU accepts running at f of its solo speed
                bound = max(bound, 100.0 * (1000.0 / max(pod.gpu_milli, 1) - 1.0))
            else:
                kind = str(rng.choice(working[user]))
            raw.append((min(max(1, pod.num_gpu), most), min(pod.lifetime_s, MAX_RUNTIME_S), kind, user, bound))
    else:
        records = [r for r in gavel_vc(recipe.source) if recipe.sizes is None or r.nproc in recipe.sizes]
        work = sample_runtimes(rng, n, MIN_RUNTIME_S, MAX_RUNTIME_S)
        for i, run_s in zip(rng.integers(len(records), size=n), work):
            r = records[i]
            raw.append((min(r.nproc, most), float(run_s), r.job_type, int(rng.integers(USERS)),
                        allowed_slowdown_pct))
    # Poisson arrivals (exponential gaps, the first job at 0), scaled by one factor to the offered load
    arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(size=n - 1))))
    load = float(sum(w * k for k, w, *_ in raw))
    span = float(arrivals[-1])
    arrivals = arrivals * (load / (total_gpus * recipe.load * span) if span > 0 else 1.0)
    width = max(5, len(str(n - 1)))
    out = []
    for i, (a, (k, w, kind, user, bound)) in enumerate(zip(arrivals, raw)):
        j = kinds[kind]
        # what the trace carries besides the truth: a label-only profile (policies read the world's readings)
        profile = Profile(iter_time_s=j.iter_time_s, memory_mib=ASSUMED_MEMORY_MIB[kind])
        out.append(TraceJob(id=f"j{i:0{width}d}", arrival_s=float(a), nproc=int(k), work_s=float(w),
                            profile=profile, allowed_slowdown_pct=float(bound),
                            user=f"user{user}", kind=kind))
    return Trace(name, tuple(out), f"{n} jobs on {total_gpus} GPUs, seed {seed}")
