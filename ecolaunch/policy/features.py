"""The GNN's input: a machine state (jobs, GPUs, interconnect groups, hosts) as a heterogeneous graph.

What lives here: :class:`HeteroGraph` (plain tensors, no torch_geometric); :func:`encode_state` /
:class:`StateEncoding`, the one path from a :class:`~ecolaunch.state.graph.StateGraph` (plus, for a decision,
candidate placements of a new job) to graphs, used by the launcher, the simulator and training alike;
:func:`batch`; :func:`scenario_graph` (the one-GPU what-if of ``ecolaunch predict``). Models: :mod:`.model`
(training, torch_geometric) and :mod:`.infer` (launch path, plain torch). Every feature and edge:
docs/gnn.md#the-graphs-features.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ecolaunch.devices.backend import LinkKind
from ecolaunch.devices.catalogue import ARCHITECTURES, architecture, lookup
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.codec import profile_from_json
from ecolaunch.jobmodel.capcurve import fit_curve, profile_curve
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.state.graph import GpuNode, Host, Job, JobState, StateGraph
from ecolaunch.validate import number_or_none

CAP_REFERENCE_FRACS = (0.6, 0.8)
#: used to scale a job's power when neither NVML nor the catalogue knows the board's max limit (an assumption)
FALLBACK_MAX_POWER_W = 300.0
_UNKNOWN = Profile()  # a job nothing is known of
JOB_FEATURES = ("iter_time", "iter_time_missing", "sm_util", "sm_util_missing", "mem_bw_util",
                "mem_bw_util_missing", "demand", "memory", "memory_missing", "power", "power_missing",
                "allowed_slowdown", "gpus", "cap60_slowdown", "cap60_power", "cap60_missing",
                "cap80_slowdown", "cap80_power", "cap80_missing", "alone_speed", "alone_power", "alone_power_missing",
                "anchored", "uncapped")
GPU_FEATURES = ("memory", "memory_used", "overcommitted", "max_power", "max_power_missing", "min_power",
                "min_power_missing", "cap", "idle_power", "idle_power_missing", "jobs", "demand_sum", "foreign",
                *ARCHITECTURES)
GROUP_FEATURES = ("nvlink_island", "pcie_switch", "single_gpu", "size")
HOST_FEATURES = ("gpus", "groups_per_gpu")
FEATURES = {"job": JOB_FEATURES, "gpu": GPU_FEATURES, "group": GROUP_FEATURES, "host": HOST_FEATURES}
NODE_TYPES = tuple(FEATURES)
EDGE_TYPES = (("job", "runs_on", "gpu"), ("gpu", "hosts", "job"), ("gpu", "link", "gpu"),
              ("gpu", "in", "group"), ("group", "has", "gpu"), ("group", "in", "host"),
              ("host", "has", "group"), ("host", "peer", "host"))
#: link kinds that get a gpu-link-gpu edge, and the model's relation name for each
LINK_RELATIONS = {LinkKind.NVLINK: "nvlink", LinkKind.PCIE_SWITCH: "pcie_switch", LinkKind.PCIE_HOST: "pcie_host"}

_G = {name: i for i, name in enumerate(GPU_FEATURES)}


@dataclass(frozen=True, slots=True)
class HeteroGraph:
    """One or more machine states as plain tensors (rows of a batch are contiguous per graph)."""

    x: dict[str, Tensor]  # node type -> [N, F] float32
    edges: dict[tuple[str, str, str], Tensor]  # EDGE_TYPES -> [2, E] int64 (source row, destination row)
    link_kind: Tensor  # [E] LinkKind value of each gpu-link-gpu edge
    gpu_max_power_w: Tensor  # [N_gpu] float32
    gpu_cap_w: Tensor  # [N_gpu] float32
    gpu_memory_fits: Tensor  # [N_gpu] bool: summed memory <= total
    job_ptr: Tensor  # [graphs + 1] job rows of graph i are job_ptr[i]:job_ptr[i+1]
    gpu_ptr: Tensor  # [graphs + 1]
    job_ids: tuple[str, ...]
    gpu_uuids: tuple[str, ...]

    @property
    def num_graphs(self) -> int:
        return self.job_ptr.numel() - 1


@dataclass(frozen=True, slots=True)
class CandidatePlacement:
    """A candidate: the GPUs the new job would get and the cap per GPU (None or absent: leave it)."""

    gpus: tuple[str, ...]
    power_caps_w: Mapping[str, float | None] = field(default_factory=dict)


def batch(graphs: Sequence[HeteroGraph]) -> HeteroGraph:
    """Concatenate graphs into one (node rows stacked per type, edge indices offset)."""
    if len(graphs) == 1:
        return graphs[0]
    offs = {t: torch.tensor([0] + [g.x[t].shape[0] for g in graphs[:-1]]).cumsum(0) for t in NODE_TYPES}

    def cat(name: str) -> Tensor:
        return torch.cat([getattr(g, name) for g in graphs])

    def ptr(name: str) -> Tensor:
        sizes = torch.cat([getattr(g, name).diff() for g in graphs])
        return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])

    return HeteroGraph(
        x={t: torch.cat([g.x[t] for g in graphs]) for t in NODE_TYPES},
        edges={et: torch.cat([g.edges[et] + torch.stack([offs[et[0]][i], offs[et[2]][i]]).unsqueeze(1)
                              for i, g in enumerate(graphs)], 1) for et in EDGE_TYPES},
        link_kind=cat("link_kind"), gpu_max_power_w=cat("gpu_max_power_w"), gpu_cap_w=cat("gpu_cap_w"),
        gpu_memory_fits=cat("gpu_memory_fits"), job_ptr=ptr("job_ptr"), gpu_ptr=ptr("gpu_ptr"),
        job_ids=tuple(i for g in graphs for i in g.job_ids), gpu_uuids=tuple(u for g in graphs for u in g.gpu_uuids),
    )


# --- reading profiles and boards ------------------------------------------------------------------------------
def _cap_features(profile: Profile, max_w: float) -> list[float]:
    """The cap60/cap80 columns: the job's curve at those caps where they lie within its measured caps."""
    curve = profile_curve(profile, max_w)
    out: list[float] = []
    for cap in (frac * max_w for frac in CAP_REFERENCE_FRACS):
        if curve is None or not curve.anchored(cap):
            out += [0.0, 0.0, 1.0]
            continue
        at, top = curve.at(cap), curve.at(max_w)
        out += [min(3.0, max(0.0, at.iter_time_s / top.iter_time_s - 1.0)), at.power_w / max_w, 0.0]
    return out


def alone_at_cap(profile: Profile | None, cap_w: float, max_w: float) -> list[float]:
    """The ``alone_*``, ``anchored`` and ``uncapped`` columns: the job alone at ``cap_w`` on a board whose max
    limit is ``max_w`` (docs/gnn.md#the-graphs-features)."""
    uncapped = cap_w >= max_w - 1e-6
    # its measured curve, else its uncapped power alone with the prior's ratios (a placeholder time: only ratios
    # are read); nothing measured: a job drawing the max limit (the cautious choice for a cap)
    curve = profile_curve(profile, max_w, unknown_time_s=1.0)
    known = curve is not None
    if curve is None:
        curve = fit_curve([CapPoint(max_w, 1.0, max_w)])
    speed = 1.0 if uncapped else min(1.0, curve.speed(cap_w, max_w))
    watts = curve.at(min(cap_w, max_w)).power_w if known else 0.0
    return [speed, min(2.0, watts / max_w), float(not known), float(known and curve.anchored(min(cap_w, max_w))),
            float(uncapped)]


def job_row(profile: Profile | None, *, memory_mib: float | None, allowed_slowdown_pct: float | None, n_gpus: int,
            gpu_memory_mib: float, gpu_max_power_w: float, cap_w: float | None = None) -> list[float]:
    """The :data:`JOB_FEATURES` of one job on GPUs with this (smallest) memory and (mean) max power limit, at the
    (lowest) cap ``cap_w`` of its GPUs (None: uncapped)."""
    profile = profile or _UNKNOWN
    t, sm, bw, power = profile.iter_time_s, profile.sm_util_pct, profile.mem_bw_util_pct, profile.power_w
    mem = memory_mib if memory_mib is not None else profile.memory_mib
    slow = number_or_none(allowed_slowdown_pct)
    return [
        math.log10(t / 0.1) if t and t > 0 else 0.0, float(not (t and t > 0)),
        (sm or 0.0) / 100.0, float(sm is None), (bw or 0.0) / 100.0, float(bw is None), profile.demand,
        min(4.0, (mem or 0.0) / max(gpu_memory_mib, 1.0)), float(mem is None),
        min(2.0, (power or 0.0) / gpu_max_power_w), float(power is None),
        (slow if slow is not None else 10.0) / 100.0, math.log2(max(n_gpus, 1)) / 3.0,
        *_cap_features(profile, gpu_max_power_w),
        *alone_at_cap(profile, gpu_max_power_w if cap_w is None else cap_w, gpu_max_power_w),
    ]


@functools.lru_cache(maxsize=256)
def board_facts(name: str) -> tuple[int | None, float | None, float | None]:
    """(architecture index or None, catalogue idle power_w or None, catalogue max power_w or None) of a board."""
    try:
        model = lookup(name)
    except ConfigError:
        model = None
    arch_name = architecture(name)
    arch = ARCHITECTURES.index(arch_name) if arch_name in ARCHITECTURES else None
    return arch, (model.idle_power_w if model else None), (model.power_limit_max_w if model else None)


def _gpu_row(node: GpuNode, cap_w: float, used_mib: float, n_jobs: int, demand_sum: float) -> list[float]:
    arch, idle_w, cat_max_w = board_facts(node.name)
    max_known = (node.power_limit_max_w or cat_max_w) is not None
    max_w = node.power_limit_max_w or cat_max_w or FALLBACK_MAX_POWER_W
    onehot = [float(arch == i) for i in range(len(ARCHITECTURES))]
    total = max(node.memory_total_mib, 1)
    return [
        math.log2(total / 16384.0) / 2.0, min(2.0, used_mib / total), float(used_mib > total),
        max_w / 500.0, float(not max_known),
        (node.power_limit_min_w or 0.0) / max_w, float(node.power_limit_min_w is None),
        min(1.5, cap_w / max_w), (idle_w or 0.0) / max_w, float(idle_w is None),
        n_jobs / 4.0, demand_sum, float(bool(node.foreign_pids) or node.foreign_memory_mib > 0), *onehot,
    ]


# --- encoding a state ----------------------------------------------------------------------------------------
class StateEncoding:
    """A state's graph (:meth:`graph`), built once per decision and cheap to extend with candidates."""

    __slots__ = ("base", "gpu_index", "gpu_mem_used", "_mem", "_max_w", "_cap_w")

    def __init__(self, base: HeteroGraph, gpu_mem_total: Tensor, gpu_mem_used: Tensor) -> None:
        self.base, self.gpu_mem_used = base, gpu_mem_used
        self.gpu_index = {u: i for i, u in enumerate(base.gpu_uuids)}
        self._mem, self._max_w = gpu_mem_total.tolist(), base.gpu_max_power_w.tolist()
        self._cap_w = base.gpu_cap_w.tolist()

    def graph(self) -> HeteroGraph:
        """The state as it is (no new job)."""
        return self.base

    def candidates(self, job: Any, placements: Sequence[CandidatePlacement | tuple]) -> HeteroGraph:
        """One graph per placement of the new ``job`` (a :class:`~ecolaunch.policy.base.JobRequest` or any object
        with ``id``, ``profile``, ``memory_mib``, ``allowed_slowdown_pct``), batched: the new job is the last job
        row of each graph. Raises ConfigError for a GPU UUID not in the state or named twice."""
        base = self.base
        places = [p if isinstance(p, CandidatePlacement) else CandidatePlacement(tuple(p[0]), dict(p[1] or {}))
                  for p in placements]
        c_n, ng, nj = len(places), len(base.gpu_uuids), len(base.job_ids)
        profile = getattr(job, "profile", None)
        memory = number_or_none(getattr(job, "memory_mib", None))
        memory = memory if memory is not None else (profile.memory_mib if profile else None)
        flat_c, flat_g, caps, rows = [], [], [], []
        row_cache: dict[tuple[float, float, int], list[float]] = {}
        for c, p in enumerate(places):
            try:
                idx = [self.gpu_index[u] for u in p.gpus]
            except KeyError as e:
                raise ConfigError(f"GPU {e.args[0]!r} is not in the encoded state",
                                  hint="place the job on GPUs of the hosts passed to encode_state") from None
            if len(set(idx)) != len(idx) or not idx:
                raise ConfigError(f"placement {p.gpus!r} names a GPU twice or none", hint="list each GPU once")
            flat_c += [c] * len(idx)
            flat_g += idx
            given = [number_or_none(p.power_caps_w.get(u)) for u in p.gpus]
            caps += given
            cap = min(w if w is not None else self._cap_w[i] for w, i in zip(given, idx))
            key = (min(self._mem[i] for i in idx), sum(self._max_w[i] for i in idx) / len(idx), len(idx), cap)
            if key not in row_cache:  # the new job's row depends only on its GPUs' memory, max power, count, cap
                row_cache[key] = job_row(profile, memory_mib=memory, n_gpus=key[2], gpu_memory_mib=key[0],
                                         allowed_slowdown_pct=getattr(job, "allowed_slowdown_pct", None),
                                         gpu_max_power_w=key[1], cap_w=cap)
            rows.append(row_cache[key])
        cc = torch.tensor(flat_c, dtype=torch.long)
        at = cc * ng + torch.tensor(flat_g, dtype=torch.long)  # the candidate GPUs' rows in the batch
        gpu_x, max_w = base.x["gpu"].repeat(c_n, 1), base.gpu_max_power_w.repeat(c_n)
        used, total = self.gpu_mem_used.repeat(c_n), torch.tensor(self._mem).repeat(c_n)
        used[at] += memory or 0.0
        gpu_x[:, _G["memory_used"]] = (used / total).clamp(max=2.0)
        gpu_x[:, _G["overcommitted"]] = (used > total).float()
        gpu_x[at, _G["jobs"]] += 0.25
        gpu_x[at, _G["demand_sum"]] += (profile or _UNKNOWN).demand
        cap_w = base.gpu_cap_w.repeat(c_n)
        given = torch.tensor([w is not None for w in caps], dtype=torch.bool)
        if bool(given.any()):
            cap_w[at[given]] = torch.tensor([w for w in caps if w is not None], dtype=torch.float32)
            gpu_x[:, _G["cap"]] = (cap_w / max_w).clamp(max=1.5)
        fj = len(JOB_FEATURES)
        job_x = torch.cat([base.x["job"].unsqueeze(0).expand(c_n, nj, fj),
                           torch.tensor(rows, dtype=torch.float32).reshape(c_n, 1, fj)], 1).reshape(-1, fj)
        per = {"job": nj + 1, "gpu": ng, "group": base.x["group"].shape[0], "host": base.x["host"].shape[0]}
        steps = torch.arange(c_n)
        edges = {et: (e.unsqueeze(1) + torch.stack([steps * per[et[0]], steps * per[et[2]]]).unsqueeze(2))
                 .reshape(2, -1) for et, e in base.edges.items()}
        new_job = cc * (nj + 1) + nj
        edges[("job", "runs_on", "gpu")] = torch.cat([edges[("job", "runs_on", "gpu")], torch.stack([new_job, at])], 1)
        edges[("gpu", "hosts", "job")] = torch.cat([edges[("gpu", "hosts", "job")], torch.stack([at, new_job])], 1)
        return HeteroGraph(
            x={"job": job_x, "gpu": gpu_x, "group": base.x["group"].repeat(c_n, 1),
               "host": base.x["host"].repeat(c_n, 1)},
            edges=edges, link_kind=base.link_kind.repeat(c_n), gpu_max_power_w=max_w, gpu_cap_w=cap_w,
            gpu_memory_fits=used <= total, job_ptr=torch.arange(c_n + 1) * (nj + 1),
            gpu_ptr=torch.arange(c_n + 1) * ng,
            job_ids=(*base.job_ids, str(job.id)) * c_n, gpu_uuids=base.gpu_uuids * c_n,
        )


def encode_state(state: StateGraph, hosts: Sequence[str] | None = None) -> StateEncoding:
    """Encode the running jobs and the GPUs of ``hosts`` (default: every host, by name)."""
    names = sorted(state.hosts) if hosts is None else [h for h in hosts if h in state.hosts]
    placed = [(h, g) for h, name in enumerate(names)
              for g in sorted(state.hosts[name].gpus.values(), key=lambda g: g.index)]
    gpu_host, nodes = [h for h, _ in placed], [g for _, g in placed]
    index = {g.uuid: i for i, g in enumerate(nodes)}  # GPU rows: hosts by name, then NVML index
    jobs: list[tuple[Job, list[int]]] = [
        (j, on) for j in sorted(state.jobs.values(), key=lambda j: (j.seq, j.id))
        if j.state is JobState.RUNNING and (on := [index[u] for u in j.gpus if u in index])]
    n_jobs, demand, job_mem = [0] * len(nodes), [0.0] * len(nodes), [0.0] * len(nodes)
    for j, on in jobs:
        for i in on:
            n_jobs[i] += 1
            demand[i] += (j.profile or _UNKNOWN).demand
            job_mem[i] += j.memory_mib
    max_w = [g.power_limit_max_w or board_facts(g.name)[2] or FALLBACK_MAX_POWER_W for g in nodes]
    cap_w = [g.power_limit_w or g.power_limit_default_w or m for g, m in zip(nodes, max_w)]
    used = [max(float(g.memory_used_mib), job_mem[i] + g.foreign_memory_mib) for i, g in enumerate(nodes)]
    gpu_x = [_gpu_row(g, cap_w[i], used[i], n_jobs[i], demand[i]) for i, g in enumerate(nodes)]
    job_x = [job_row(j.profile, memory_mib=float(j.memory_mib) if j.memory_mib else None,
                     allowed_slowdown_pct=j.request.get("allowed_slowdown_pct"), n_gpus=len(on),
                     gpu_memory_mib=min(nodes[i].memory_total_mib for i in on),
                     gpu_max_power_w=sum(max_w[i] for i in on) / len(on), cap_w=min(cap_w[i] for i in on))
             for j, on in jobs]
    runs = [(k, i) for k, (_, on) in enumerate(jobs) for i in on]
    groups, group_x, host_x, links, kinds, group_host = _topology(state, names, nodes, gpu_host)
    up = {("job", "runs_on", "gpu"): runs, ("gpu", "in", "group"): list(enumerate(groups)),
          ("group", "in", "host"): list(enumerate(group_host)), ("gpu", "link", "gpu"): links,
          ("host", "peer", "host"): [(a, b) for a in range(len(names)) for b in range(len(names)) if a != b]}
    edges = {et: _pairs(pairs) for et, pairs in up.items()}
    for (src, rel, dst), rev in ((("job", "runs_on", "gpu"), "hosts"), (("gpu", "in", "group"), "has"),
                                 (("group", "in", "host"), "has")):
        edges[(dst, rev, src)] = edges[(src, rel, dst)].flip(0)
    mem_total, mem_used = torch.tensor([float(g.memory_total_mib) for g in nodes]), torch.tensor(used)
    base = HeteroGraph(
        x={"job": _rows(job_x, JOB_FEATURES), "gpu": _rows(gpu_x, GPU_FEATURES),
           "group": _rows(group_x, GROUP_FEATURES), "host": _rows(host_x, HOST_FEATURES)},
        edges=edges, link_kind=torch.tensor(kinds, dtype=torch.long),
        gpu_max_power_w=torch.tensor(max_w, dtype=torch.float32), gpu_cap_w=torch.tensor(cap_w, dtype=torch.float32),
        gpu_memory_fits=mem_used <= mem_total, job_ptr=torch.tensor([0, len(jobs)]),
        gpu_ptr=torch.tensor([0, len(nodes)]),
        job_ids=tuple(j.id for j, _ in jobs), gpu_uuids=tuple(g.uuid for g in nodes),
    )
    return StateEncoding(base, mem_total, mem_used)


def _topology(state: StateGraph, names: Sequence[str], nodes: Sequence[GpuNode], gpu_host: Sequence[int]):
    """Groups (components of NVLink / PCIe-switch links), their features, host features and link edges."""
    groups, group_x, group_host, host_x, links, kinds = [0] * len(nodes), [], [], [], [], []
    start = 0
    for h, name in enumerate(names):
        uuids = [g.uuid for g, gh in zip(nodes, gpu_host) if gh == h]
        n = len(uuids)
        kind = {(a, b): state.hosts[name].link(uuids[a], uuids[b]) for a in range(n) for b in range(a + 1, n)}
        root = list(range(n))

        def find(a: int) -> int:
            while root[a] != a:  # noqa: B023 (called within this iteration)
                a = root[a]  # noqa: B023 (called within this iteration)
            return a

        members: dict[int, list[int]] = {}
        for (a, b), k in kind.items():
            if k <= LinkKind.PCIE_SWITCH:
                root[find(b)] = find(a)
            if k in LINK_RELATIONS:
                links += [(start + a, start + b), (start + b, start + a)]
                kinds += [int(k), int(k)]
        for a in range(n):
            members.setdefault(find(a), []).append(a)
        for m in members.values():
            for a in m:
                groups[start + a] = len(group_x)
            nv = len(m) > 1 and all(kind[(a, b)] == LinkKind.NVLINK for i, a in enumerate(m) for b in m[i + 1:])
            group_x.append([float(nv), float(len(m) > 1 and not nv), float(len(m) == 1), math.log2(len(m)) / 3.0])
            group_host.append(h)
        host_x.append([math.log2(1 + n) / 3.0, len(members) / max(n, 1)])
        start += n
    return groups, group_x, host_x, links, kinds, group_host


def _pairs(pairs: Sequence[tuple[int, int]]) -> Tensor:
    return torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).t().contiguous()


def _rows(rows: Sequence[Sequence[float]], names: Sequence[str]) -> Tensor:
    return torch.tensor(rows, dtype=torch.float32).reshape(-1, len(names))


def build_graph(state: StateGraph, job: Any = None, placement: CandidatePlacement | tuple | None = None,
                hosts: Sequence[str] | None = None) -> HeteroGraph:
    """One graph: the state, plus the new ``job`` on ``placement`` when given (see :meth:`StateEncoding.candidates`)."""
    enc = encode_state(state, hosts)
    return enc.graph() if job is None else enc.candidates(job, [placement])


def scenario_graph(gpu: GpuNode, power_cap_w: float | None, jobs: Sequence[Mapping[str, Any]]) -> HeteroGraph:
    """The what-if of ``ecolaunch predict``: ``jobs`` (profiles in their JSON form, :mod:`ecolaunch.jobmodel.codec`,
    with an ``id`` and optionally an ``allowed_slowdown_pct``) all on one GPU ``gpu`` (:meth:`GpuNode.from_model`
    of a catalogue board, or a calibrated GPU as its file describes it) at ``power_cap_w`` (None: uncapped, i.e. the
    max limit). Raises ConfigError naming a job's bad field."""
    ids = [str(j.get("id", f"job{seq}")) for seq, j in enumerate(jobs)]
    profiles = [profile_from_json(j, where=f"job {jid}") for jid, j in zip(ids, jobs)]
    node = dataclasses.replace(gpu, power_limit_w=gpu.power_limit_max_w if power_cap_w is None else float(power_cap_w),
                               memory_used_mib=int(sum(p.memory_mib or 0 for p in profiles)))
    state = StateGraph(hosts={"whatif": Host(name="whatif", gpus={node.uuid: node})})
    for seq, (jid, j, profile) in enumerate(zip(ids, jobs, profiles)):
        state.jobs[jid] = Job.queued(jid, user="whatif", host="whatif", nproc=1, seq=seq, submitted_at=0.0,
                                     request={"allowed_slowdown_pct": j.get("allowed_slowdown_pct")})
        state.book(jid, [node.uuid], {}, {}, profile, 0.0)
    return encode_state(state).graph()
