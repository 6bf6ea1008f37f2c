"""Traces for the measured world (:mod:`ecolaunch.sim.measured`): every job a Gavel V100 job type, by user.

What lives here: the measured traces' recipes and :func:`measured_trace`, :func:`measured_machine` and
:func:`measured_simulation` (their names and one-line descriptions are registered in
:mod:`ecolaunch.sim.trace_registry`). A job's ``kind`` is its
Gavel type (its truth in the measured world) and its ``user`` who launches it: a user launching a type again
arrives with the history of the first launch, so each trace mixes first launches (profiled inline) and repeats.

- ``workstation-mixed``: a shared 4-GPU workstation under the Alibaba 2023 pod mix (``openb_pod_list_default``,
  pods that lived 2 min to 48 h: their creation times and lifetimes; 39 % ask a fraction of a GPU). A pod's
  ``gpu_milli`` picks the job type: a fractional pod (a small fine-tune, an interactive or development run, a
  launch-bound job) takes a type at the same quantile of the types ordered by measured pair loss (the lightest
  for the smallest fractions), a whole-GPU pod any type, uniformly. 8 users, each launching from a working set
  of 4 types. A fractional pod's slowdown bound is what its request promises: a pod asking ``gpu_milli`` m accepts
  running at m/1000 of its solo speed (bound ``100 * (1000/m - 1)`` %); whole-GPU pods keep the admin's 10 %.
  Offered load 1.0 in whole GPUs: the queue is where sharing pays.
- ``power-budget``: Gavel's Philly-derived VC ``6214e9`` arrivals (96 % 1-GPU jobs) with Gavel's job types and
  Philly run times (as ``workstation-heavy`` in :mod:`ecolaunch.sim.traces`), load 0.9, 8 users; run it under an
  admin power budget (``[power] max_total_w``, :data:`POWER_BUDGET_W`). GPU counts are clipped to 2 (4 % of the
  jobs ask more): a job launched for the first time has no curve, so the budget cannot lower it, and 4 boards at
  their default limit would need 1,000 W.
- ``workstation-measured``: the same arrivals without a budget (the reference of ``power-budget``).
- ``workstation-topology``: an 8-GPU host whose GPUs are NVLink-bridged in pairs (0-1, 2-3, 4-5, 6-7), PCIe within
  a socket (0-3, 4-7) and the socket link across (:func:`measured_machine`), under Philly VC ``0e4a51``'s arrivals
  (37 % 1-GPU, 19 % 2, 38 % 4, 6 % 8 GPUs), load 0.9: a multi-GPU job off NVLink runs at Gavel's measured
  spread-out speed (:meth:`~ecolaunch.sim.measured.MeasuredWorld.link_factor`), so where 1-GPU jobs go decides
  what the 2-GPU jobs get.
- ``workstation-mixed-models``: ``workstation-measured``'s arrivals on two V100s and two P100s (PCIe, 16 GB), the
  boards both Gavel and Zeus measured: each type runs at its measured speed on each board (Gavel: the P100 is
  0.54-0.94x a V100 for most types, 1.95-2.31x for the Recommendation types), shares and caps as measured there. A
  job's work is counted at its V100 solo speed; its slowdown against its solo speed on the GPUs it got. On a host
  with mixed models the launcher does not know a job's profile before placement (it is per model), so every
  policy places blind and profiles on the board it got.

Run times, arrival scaling and clipping follow :mod:`ecolaunch.sim.traces` (2 min to 48 h, one factor on arrival
times to reach the offered load). Same name, machine and seed -> the same trace.
"""

from __future__ import annotations

import math

import numpy as np

from ecolaunch.admin.rules import Rules
from ecolaunch.devices.base import LinkKind
from ecolaunch.devices.spec import MachineSpec, parse_spec
from ecolaunch.errors import ConfigError
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.sim.measured import BOARD, MeasuredWorld, job_kinds, measured_oracle
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.traces import MAX_RUNTIME_S, MIN_RUNTIME_S, _machine_facts, _window
from ecolaunch.sim.workloads import ASSUMED_MEMORY_MIB, alibaba_pods, gavel_vc, sample_runtimes
from ecolaunch.validate import is_integer

__all__ = ["ECOLAUNCH_POLICIES", "POWER_BUDGET_W", "measured_machine", "measured_rules",
           "measured_simulation", "measured_trace"]

#: the ``power-budget`` trace's budget on 4 V100 PCIe boards (100-250 W each): 70 % of what they can draw
POWER_BUDGET_W = 700.0
USERS = 8
WORKING_SET = 4

_LOADS = {"workstation-mixed": 1.0, "power-budget": 0.9, "workstation-measured": 0.9, "workstation-topology": 0.9,
          "workstation-mixed-models": 0.9}
_JOBS = {"workstation-mixed": 400, "power-budget": 300, "workstation-measured": 300, "workstation-topology": 300,
         "workstation-mixed-models": 300}


def measured_rules(name: str, rules: Rules) -> Rules:
    """``rules`` as the trace runs under them: ``power-budget`` adds its machine-wide budget."""
    if name == "power-budget":
        from dataclasses import replace

        return replace(rules, power_max_total_w=POWER_BUDGET_W)
    return rules


#: the policies whose jobs run under ecolaunch's own profiler and closed loop (``Simulation(closed_loop=True)``)
ECOLAUNCH_POLICIES = ("curve", "gnn", "no-gnn")


def measured_simulation(name: str, machine: MachineSpec, trace: Trace, policy_name: str, policy=None, *,
                        seed: int = 0):
    """A :class:`~ecolaunch.sim.engine.Simulation` of trace ``name`` in a fresh measured world (its own history
    and seeded noise) under the trace's rules. ``policy_name`` ``"oracle"`` builds the world's oracle (``policy``
    is then ignored); ecolaunch's own policies (:data:`ECOLAUNCH_POLICIES`) run under its closed loop."""
    world = MeasuredWorld(seed=seed)
    if policy_name == "oracle":
        policy = measured_oracle(world, {j.id: j.kind for j in trace.jobs})
    return Simulation(machine, policy, measured_rules(name, Rules()), world=world,
                      closed_loop=policy_name in ECOLAUNCH_POLICIES, omniscient=policy_name == "oracle")


def measured_machine(name: str) -> MachineSpec:
    """The machine a measured trace runs on: 4 V100 PCIe 16 GB, for ``workstation-topology`` 8 of them in NVLink
    pairs, for ``workstation-mixed-models`` 2 V100s and 2 P100s (see the module docstring)."""
    from dataclasses import replace


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
    """A measured trace for ``machine`` (see the module docstring)."""
    if name not in _JOBS:
        raise ConfigError(f"unknown measured trace {name!r}", hint=f"use one of {', '.join(_JOBS)}")
    n = _JOBS[name] if jobs is None else jobs
    if not is_integer(n) or n < 1:
        raise ConfigError(f"trace {name!r}: jobs={n!r} is not a job count", hint="give an integer >= 1")
    total_gpus, per_host, _ = _machine_facts(machine)
    rng = np.random.default_rng(seed)
    kinds = job_kinds()
    by_loss = sorted(kinds, key=lambda k: (kinds[k].pair_loss, k))
    names = sorted(kinds)
    working = {u: list(rng.choice(names, size=WORKING_SET, replace=False)) for u in range(USERS)}
    raw = []  # (arrival, nproc, work, kind, user, bound)
    if name == "workstation-mixed":
        pods = [p for p in alibaba_pods() if p.lifetime_s >= MIN_RUNTIME_S]
        idx, wraps = _window(len(pods), rng, n)
        period = (pods[-1].creation_s - pods[0].creation_s) * len(pods) / max(1, len(pods) - 1)
        for i, w in zip(idx, wraps):
            pod = pods[i]
            user = int(rng.integers(USERS))
            bound = allowed_slowdown_pct
            if pod.gpu_milli < 1000:
                kind = by_loss[min(len(by_loss) - 1, int(pod.gpu_milli / 1000 * len(by_loss)))]
                # a pod promised a fraction f of a GPU accepts running at f of its solo speed
                bound = max(bound, 100.0 * (1000.0 / max(pod.gpu_milli, 1) - 1.0))
            else:
                kind = str(rng.choice(working[user]))
            raw.append((pod.creation_s + w * period, min(max(1, pod.num_gpu), per_host),
                        min(pod.lifetime_s, MAX_RUNTIME_S), kind, user, bound))
    else:
        records = gavel_vc("0e4a51" if name == "workstation-topology" else "6214e9")
        idx, wraps = _window(len(records), rng, n)
        period = (records[-1].arrival_s - records[0].arrival_s) * len(records) / max(1, len(records) - 1)
        work = sample_runtimes(rng, n, MIN_RUNTIME_S, MAX_RUNTIME_S)
        for i, w, run_s in zip(idx, wraps, work):
            r = records[i]
            user = int(rng.integers(USERS))
            nproc = min(r.nproc, per_host, 2 if name == "power-budget" else per_host)
            raw.append((r.arrival_s + w * period, nproc, float(run_s), r.job_type, user,
                        allowed_slowdown_pct))
    arrivals = np.array([r[0] for r in raw])
    load = float(np.dot([r[2] for r in raw], [r[1] for r in raw]))
    span = float(arrivals.max() - arrivals.min())
    arrivals = (arrivals - arrivals.min()) * (load / (total_gpus * _LOADS[name] * span) if span > 0 else 1.0)
    width = max(5, len(str(n - 1)))
    out = []
    for i, (a, (_, k, w, kind, user, bound)) in enumerate(zip(arrivals, raw)):
        j = kinds[kind]
        # what the trace carries besides the truth: a label-only profile (policies read the world's readings)
        profile = Profile(iter_time_s=j.iter_time_s, memory_mib=ASSUMED_MEMORY_MIB[kind])
        out.append(TraceJob(id=f"j{i:0{width}d}", arrival_s=float(a), nproc=int(k), work_s=float(w),
                            profile=profile, allowed_slowdown_pct=float(bound),
                            user=f"user{user}", kind=kind))
    out.sort(key=lambda t: (t.arrival_s, t.id))
    if not math.isfinite(out[-1].arrival_s):
        raise ConfigError(f"trace {name!r}: arrival times overflowed")
    return Trace(name, tuple(out), f"{n} jobs on {total_gpus} GPUs, seed {seed}")
