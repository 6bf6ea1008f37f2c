"""A lab's own job history as training data for the GNN (``ecolaunch policy train``).

What lives here: :func:`history_samples` (the history of one state directory -> :class:`~ecolaunch.learn.train.
LabelledState` samples, with counts of what was used and why the rest was not) and :class:`HistoryData`.
What does not: reading and validating the files (:mod:`ecolaunch.profile.history`), training
(:mod:`ecolaunch.learn.train`). Which records become labels, and which are skipped: docs/gnn.md#from-a-labs-history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.learn.train import LabelledState
from ecolaunch.policy.features import scenario_graph
from ecolaunch.jobmodel.codec import profile_to_json
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.history import History, JobRecord
from ecolaunch.state.graph import GpuNode

#: profiling actions whose run was placed from a profile it already had (no profiling inside the run)
PLACED_FROM_PROFILE = frozenset({"history", "pre"})
#: the most a throughput label may be (the model's range; a measurement a little faster than alone is noise)
MAX_THROUGHPUT_LABEL = 1.02


@dataclass(slots=True)
class HistoryData:
    """The samples, how many of each kind, and why records were left out (reason -> count)."""

    samples: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {"samples": len(self.samples), "cap_points": self.counts["cap_points"], "runs": self.counts["runs"],
                "shared_runs": self.counts["shared_runs"], "skipped": dict(sorted(self.skipped.items()))}


def history_samples(history: History, *, weight: float = 3.0, min_iterations: int = 20,
                    min_overlap: float = 0.9) -> HistoryData:
    """Training samples from ``history`` (docs/gnn.md#from-a-labs-history)."""
    if not weight > 0:
        raise ConfigError(f"history sample weight must be > 0, got {weight!r}")
    recs = history.list()
    by_id = {r.job_id: r for r in recs}
    out = HistoryData()
    seen: set[str] = set()
    for rec in sorted(recs, key=lambda r: r.ended, reverse=True):
        model = _gpu_model(rec, out.skipped)
        if model is None:
            continue
        key = rec.fingerprint or rec.job_id
        if rec.profile is not None and rec.profile.cap_points and key not in seen:
            seen.add(key)
            for graph, thr, power, new_cap in _cap_point_samples(rec.profile, model):
                out.samples.append(LabelledState(graph, (thr,), (power,), weight, "history"))
                out.counts["cap_points"] += new_cap  # measured caps, not samples
        sample = _run_sample(rec, model, by_id, min_iterations, min_overlap, out.skipped)
        if sample is not None:
            graph, thr, power, shared = sample
            labels = tuple(thr if j == rec.job_id else None for j in graph.job_ids)
            out.samples.append(LabelledState(graph, labels, (power,), weight, "history"))
            out.counts["runs"] += 1
            out.counts["shared_runs"] += int(shared)
    return out


def _gpu_model(rec: JobRecord, skipped: Counter) -> GpuModel | None:
    names = {n for n in rec.gpu_names if n}
    if len(names) != 1:
        skipped["no single GPU model recorded"] += 1
        return None
    try:
        return lookup(names.pop())
    except ConfigError:
        skipped["GPU model not in the catalogue"] += 1
        return None


def profile_job(profile: Profile, job_id: str, cap_points: Sequence[Any] | None = None) -> dict[str, Any]:
    """A measured profile as one job of :func:`~ecolaunch.policy.features.scenario_graph` (``cap_points``: the
    measured caps it carries instead of its own)."""
    d = {**profile_to_json(profile), "id": job_id}
    if cap_points is not None:
        d["cap_points"] = list(cap_points)
    return d


def _cap_point_samples(profile: Profile, model: GpuModel):
    points = sorted(profile.cap_points, key=lambda p: p.power_cap_w)
    top, gpu = points[-1], GpuNode.from_model(model)
    for p in points:
        others = [{"power_cap_w": q.power_cap_w, "iter_time_s": q.iter_time_s, "power_w": q.power_w}
                  for q in points if q is not p]
        labels = (min(MAX_THROUGHPUT_LABEL, top.iter_time_s / p.iter_time_s), min(1.0, p.power_w / model.power_limit_max_w))
        cap = min(p.power_cap_w, model.power_limit_max_w)
        yield (scenario_graph(gpu, cap, [profile_job(profile, "self", others)]), *labels, 1)
        if p is not top:  # the job known only uncapped, as in the Zeus sweeps: a measured cap the curve does not anchor
            uncapped = [{"power_cap_w": top.power_cap_w, "iter_time_s": top.iter_time_s, "power_w": top.power_w}]
            yield (scenario_graph(gpu, cap, [profile_job(profile, "self", uncapped)]), *labels, 0)


def _run_sample(rec: JobRecord, model: GpuModel, by_id: Mapping[str, JobRecord], min_iterations: int,
                min_overlap: float, skipped: Counter):
    if rec.profile_action not in PLACED_FROM_PROFILE:
        skipped["run profiled in place or without a profile"] += 1
        return None
    if rec.exit_code != 0 or (rec.iterations or 0) < min_iterations or not rec.iter_time_s:
        skipped["run failed or too short"] += 1
        return None
    if rec.not_learned:
        skipped["run disturbed: far outside its profile"] += 1
        return None
    if len(rec.gpus) != 1 or rec.profile is None or not rec.profile.iter_time_s:
        skipped["multi-GPU run or no solo iteration time"] += 1
        return None
    uuid = rec.gpus[0]
    others = []
    for other_id in rec.colocated_with.get(uuid, []):
        other = by_id.get(other_id)
        overlap = 0.0 if other is None else min(rec.ended, other.ended) - max(rec.started, other.started)
        if other is None or other.profile is None or overlap < min_overlap * max(rec.duration_s, 1e-9):
            skipped["co-runner unknown or sharing only part of the run"] += 1
            return None
        others.append(profile_job(other.profile, other.job_id))
    cap = rec.power_caps_w.get(uuid)
    graph = scenario_graph(GpuNode.from_model(model), None if cap is None else min(cap, model.power_limit_max_w),
                           [profile_job(rec.profile, rec.job_id), *others])
    power = None
    if rec.gpu_energy_j and rec.duration_s > 0:
        power = min(1.0, rec.gpu_energy_j / rec.duration_s / model.power_limit_max_w)
    return graph, min(MAX_THROUGHPUT_LABEL, rec.profile.iter_time_s / rec.iter_time_s), power, bool(others)
