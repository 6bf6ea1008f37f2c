"""Traces for the measured world (:mod:`ecolaunch.sim.measured`): every job a Gavel V100 job type, by user.

What lives here: the measured traces' recipes (:data:`RECIPES`) and :func:`measured_trace`,
:func:`measured_machine` and :func:`measured_simulation` (their names and one-line descriptions are registered in
:mod:`ecolaunch.sim.trace_registry`). A job's ``kind`` is its
Gavel type (its truth in the measured world) and its ``user`` who launches it: a user launching a type again
arrives with the history of the first launch, so each trace mixes first launches (profiled inline) and repeats.

**Jobs, arrivals and load (every measured trace).** A trace's jobs are drawn at random, with replacement, from
its source's records: a Gavel VC's jobs (GPU count and job type; run times drawn from Philly's run-time
distribution, as in :mod:`ecolaunch.sim.traces`) or the Alibaba 2023 pods (GPU count, GPU share, lifetime). They
arrive as a Poisson process (exponential gaps), scaled by one factor so that the offered load
``sum(work_s * nproc) / (GPUs * span)`` (span = last arrival - first arrival) is the recipe's. The sources' own
arrival times are not used: they come in bursts (the longest 1 % of the gaps between arrivals hold 65 % of VC
``6214e9``'s span, 53 % of ``0e4a51``'s, 78 % of the pods'), so a window of them at a mean load of 0.9 runs far
above 1 in its bursts and idles between them, and where a seed's window falls decides its queue. At a load well
below 1 a queue forms and drains, and 500 jobs make a policy's effect on node energy larger than its spread over
seeds (``benchmarks/energy.py`` reports the paired intervals). On the 4-GPU workstations a job asks at most 2 GPUs
(clipped: 2 % of VC ``6214e9``'s jobs and 1 % of the pods ask more): under first-come-first-served a job asking
for the whole workstation holds the queue until every GPU drains, and with run times up to 48 h one such job
decides a seed's mean JCT.

- ``workstation-mixed``: a shared 4-GPU workstation under the Alibaba 2023 pod mix (``openb_pod_list_default``,
  pods that lived 2 min to 48 h: their lifetimes; 39 % ask a fraction of a GPU). A pod's
  ``gpu_milli`` picks the job type: a fractional pod (a small fine-tune, an interactive or development run, a
  launch-bound job) takes a type at the same quantile of the types ordered by measured pair loss (the lightest
  for the smallest fractions), a whole-GPU pod any type, uniformly. 8 users, each launching from a working set
  of 4 types. A fractional pod's slowdown bound is what its request promises: a pod asking ``gpu_milli`` m accepts
  running at m/1000 of its solo speed (bound ``100 * (1000/m - 1)`` %); whole-GPU pods keep the admin's 10 %.
  Offered load 0.5 in whole GPUs: a queue forms, and sharing is what shortens it.
- ``power-budget``: Gavel's Philly-derived VC ``6214e9`` jobs (96 % 1-GPU jobs) with Gavel's job types and
  Philly run times, load 0.5, 8 users; run it under an admin power budget (``[power] max_total_w``,
  :data:`POWER_BUDGET_W`), which slows the jobs it holds back, so the queue is longer than the load says (at 0.6
  it barely drains). A job launched for the first time has no curve, so the budget cannot lower it, and 4 boards
  at their default limit would need 1,000 W.
- ``workstation-measured``: the same jobs and arrivals without a budget (the reference of ``power-budget``).
- ``workstation-topology``: an 8-GPU host whose GPUs are NVLink-bridged in pairs (0-1, 2-3, 4-5, 6-7), PCIe within
  a socket (0-3, 4-7) and the socket link across (:func:`measured_machine`), under Philly VC ``0e4a51``'s 1- and
  2-GPU jobs (436 and 226 of its 1,181), load 0.6. A 2-GPU job off an NVLink pair runs at Gavel's measured
  spread-out speed (:meth:`~ecolaunch.sim.measured.MeasuredWorld.link_factor`), and 1-GPU jobs, ending at their
  own times, leave pairs half used: a 2-GPU job often finds two free GPUs but no free pair, and must take the
  split set now or wait for a pair, so where a policy puts the 1-GPU jobs decides what the 2-GPU jobs get. The
  VC's 4- and 8-GPU jobs are left out: no 4 GPUs of this host share NVLink (the best a 4-GPU job gets is a
  socket) and an 8-GPU job takes the host, so neither has that choice, and they hold the queue.
- ``workstation-mixed-models``: ``workstation-measured``'s jobs and arrivals on two V100s and two P100s (PCIe,
  16 GB), the boards both Gavel and Zeus measured: each type runs at its measured speed on each board (Gavel: the
  P100 is 0.54-0.94x a V100 for most types, 1.95-2.31x for the Recommendation types), shares and caps as measured
  there. A job's work is counted at its V100 solo speed; its slowdown against its solo speed on the GPUs it got.
  On a host with mixed models the launcher does not know a job's profile before placement (it is per model), so
  every policy places blind and profiles on the board it got.

Run times are clipped as in :mod:`ecolaunch.sim.traces` (2 min to 48 h). Same name, machine, seed and job count
-> the same trace.
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


#: every measured trace's recipe (the module docstring says why each is as it is)
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
ECOLAUNCH_POLICIES = ("curve", "curve-untold", "gnn", "no-gnn", "pessimistic-curve", "exact-first-curve",
                      "history-pessimistic-curve", "analytic-share", "util-share")


def measured_simulation(name: str, machine: MachineSpec, trace: Trace, policy_name: str, policy=None, *,
                        seed: int = 0):
    """A :class:`~ecolaunch.sim.engine.Simulation` of trace ``name`` in a fresh measured world (its own history
    and seeded noise) under the trace's rules. ``policy_name`` ``"oracle"`` builds the world's oracle (``policy``
    is then ignored); ecolaunch's own policies (:data:`ECOLAUNCH_POLICIES`) run under its closed loop."""
    world = MeasuredWorld(seed=seed)
    if policy_name == "oracle":
        policy = measured_oracle(world, {j.id: j.kind for j in trace.jobs})
    elif "bind_world" in dir(type(policy)):  # a policy told what the machine's history holds (sim/first_curves.py)
        policy.bind_world(world)
    return Simulation(machine, policy, measured_rules(name, Rules()), world=world,
                      closed_loop=policy_name in ECOLAUNCH_POLICIES, omniscient=policy_name == "oracle")


def measured_machine(name: str) -> MachineSpec:
    """The machine a measured trace runs on: 4 V100 PCIe 16 GB, for ``workstation-topology`` 8 of them in NVLink
    pairs, for ``workstation-mixed-models`` 2 V100s and 2 P100s (see the module docstring)."""
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
    """A measured trace for ``machine`` (see the module docstring); ``jobs`` overrides the recipe's job count.

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
