"""A machine's calibration results as training data for the GNN (``ecolaunch policy train``).

What lives here: :func:`calibration_samples` (the calibration files of one state directory ->
:class:`~ecolaunch.learn.train.LabelledState` samples, with counts of what was used and why the rest was not),
:func:`document_samples` (one result document) and :class:`CalibrationData`. What does not: measuring and the
file format (:mod:`ecolaunch.calibrate`), training (:mod:`ecolaunch.learn.train`). Which measurements become
labels, and which are left out: docs/gnn.md#from-calibration-results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecolaunch.calibrate.plausible import check_pair
from ecolaunch.calibrate.results import is_links, read_results
from ecolaunch.errors import ConfigError
from ecolaunch.learn.train import LabelledState
from ecolaunch.policy.features import scenario_graph
from ecolaunch.learn.history_data import MAX_THROUGHPUT_LABEL, profile_job
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.state.graph import WHATIF_UUID, GpuNode
from ecolaunch.validate import number_or_none

__all__ = ["FLAGGED", "SIMULATED_SOURCE", "SOURCE", "CalibrationData", "calibration_samples", "document_samples"]

#: the ``LabelledState.source`` of a measured calibration sample: ``train()``'s source for measurements other than
#: Gavel, Zeus and the history (they count as measurements, e.g. for the uncertainty head)
SOURCE = "extra"
#: the source of a sample from simulated GPUs: not a measurement
SIMULATED_SOURCE = "simulated-calibration"
#: the reason a pair that cannot be true is left out (``policy train`` prints the count)
FLAGGED = "pair flagged: its figures cannot be true"
_SAME_CAP_W = 0.5


@dataclass(slots=True)
class CalibrationData:
    """The samples, how many of each kind, the files used, and why measurements were left out (reason -> count)."""

    samples: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    files: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"samples": len(self.samples), "files": list(self.files), "cap_points": self.counts["cap_points"],
                "pairs": self.counts["pairs"], "skipped": dict(sorted(self.skipped.items()))}


def calibration_samples(state_dir: Path, *, simulated: bool, weight: float = 3.0) -> CalibrationData:
    """Training samples from every calibration file of ``state_dir`` made on the same kind of GPUs as
    ``simulated`` says this training is for (docs/gnn.md#from-calibration-results)."""
    out = CalibrationData()
    for stored in read_results(state_dir):
        if stored.doc is None:
            out.skipped["file unreadable or not trusted"] += 1
            continue
        if is_links(stored.doc):  # a link probe's: nothing of one GPU's workloads to learn
            continue
        if stored.doc["simulated"] != simulated:
            out.skipped["made on simulated GPUs" if stored.doc["simulated"] else "made on real GPUs"] += 1
            continue
        document_samples(stored.doc, weight=weight, into=out)
        out.files.append(str(stored.path))
    return out


def document_samples(doc: Mapping[str, Any], *, weight: float = 3.0, into: CalibrationData | None = None
                     ) -> CalibrationData:
    """The samples of one calibration document (validated by :func:`ecolaunch.calibrate.results.validate`)."""
    if not weight > 0:
        raise ConfigError(f"calibration sample weight must be > 0, got {weight!r}")
    out = CalibrationData() if into is None else into
    source = SIMULATED_SOURCE if doc.get("simulated") else SOURCE
    board = _board(doc.get("gpu") or {})
    if board is None:
        out.skipped["no power limit range"] += 1
        return out
    curves = _curves(doc.get("alone") or [], out.skipped)
    profiles = {name: _profile(points) for name, points in curves.items()}
    for name, points in curves.items():
        for graph, thr, power in _alone_samples(board, profiles[name], points):
            out.samples.append(LabelledState(graph, (thr,), (power,), weight, source))
            out.counts["cap_points"] += 1
    alone = doc.get("alone") or []
    for pair in doc.get("pairs") or []:
        sample = _pair_sample(board, pair, profiles, out.skipped, alone, on_gpu=not doc.get("simulated"))
        if sample is not None:
            graph, thr, power = sample
            out.samples.append(LabelledState(graph, thr, (power,), weight, source))
            out.counts["pairs"] += 1
    return out


def _flagged(pair: Mapping[str, Any], alone: Sequence[Any], *, on_gpu: bool) -> bool:
    """Whether the calibrator flagged ``pair``, or (a file from before it checked: no ``flagged`` key) the check
    finds it cannot be true."""
    if "flagged" in pair:
        return bool(pair["flagged"])
    return check_pair(pair, alone, on_gpu=on_gpu) is not None


def _board(gpu: Mapping[str, Any]) -> GpuNode | None:
    """The calibrated GPU as the file describes it (what the driver reported), as a what-if graph's GPU."""
    top = number_or_none(gpu.get("power_limit_max_w"), positive=True)
    low = number_or_none(gpu.get("power_limit_min_w"), positive=True)
    memory = number_or_none(gpu.get("memory_total_mib"), positive=True)
    if top is None or memory is None or not isinstance(gpu.get("name"), str):
        return None
    default = number_or_none(gpu.get("power_limit_default_w"), positive=True)
    return GpuNode(uuid=WHATIF_UUID, index=0, name=gpu["name"], memory_total_mib=int(memory), power_limit_min_w=low,
                   power_limit_default_w=default, power_limit_max_w=top)


def _curves(alone: Sequence[Any], skipped: Counter) -> dict[str, list[dict[str, Any]]]:
    """Per workload, its usable measurements alone, highest cap first (one per cap: the last measured)."""
    curves: dict[str, dict[float, dict[str, Any]]] = {}
    for e in alone:
        if not isinstance(e, Mapping) or not isinstance(e.get("workload"), str):
            skipped["malformed entry"] += 1
            continue
        if e.get("disturbed_by"):
            skipped["measured beside someone else's work"] += 1
            continue
        cap, it, power = (number_or_none(e.get(k), positive=True) for k in ("power_cap_w", "iter_time_s", "power_w"))
        if cap is None or it is None or power is None:
            skipped["no cap, iteration time or power"] += 1
            continue
        curves.setdefault(e["workload"], {})[round(cap, 1)] = dict(e)
    return {name: [by_cap[c] for c in sorted(by_cap, reverse=True)] for name, by_cap in curves.items()}


def _profile(points: Sequence[Mapping[str, Any]]) -> Profile:
    """The workload as a profiled job: its measurement at the highest cap, with every measured cap."""
    top = points[0]
    caps = tuple(CapPoint(float(p["power_cap_w"]), float(p["iter_time_s"]), float(p["power_w"]),
                          int(p.get("iters") or 0), _bounded(p.get("iter_time_cv_pct"), 1000.0)) for p in points)
    memory = number_or_none(top.get("memory_used_mib"), positive=True)
    return Profile(float(top["iter_time_s"]), _bounded(top.get("sm_util_pct"), 100.0),
                   _bounded(top.get("mem_util_pct"), 100.0),
                   None if memory is None else int(memory), float(top["power_w"]), caps)


def _alone_samples(board: GpuNode, profile: Profile, points: Sequence[Mapping[str, Any]]):
    top = points[0]
    for p in points:
        others = [{"power_cap_w": q["power_cap_w"], "iter_time_s": q["iter_time_s"], "power_w": q["power_w"]}
                  for q in points if q is not p]
        graph = scenario_graph(board, min(float(p["power_cap_w"]), board.power_limit_max_w),
                               [profile_job(profile, "self", others)])
        yield (graph, min(MAX_THROUGHPUT_LABEL, float(top["iter_time_s"]) / float(p["iter_time_s"])),
               min(1.0, float(p["power_w"]) / board.power_limit_max_w))


def _pair_sample(board: GpuNode, pair: Any, profiles: Mapping[str, Profile], skipped: Counter, alone: Sequence[Any],
                 *, on_gpu: bool):
    if not isinstance(pair, Mapping) or not isinstance(pair.get("jobs"), list) or len(pair["jobs"]) != 2:
        skipped["malformed entry"] += 1
        return None
    if pair.get("sharing") != "time-slicing":
        skipped["pair under MPS (launches share by time-slicing)"] += 1
        return None
    if pair.get("disturbed_by"):
        skipped["measured beside someone else's work"] += 1
        return None
    if _flagged(pair, alone, on_gpu=on_gpu):
        skipped[FLAGGED] += 1
        return None
    names = [j.get("workload") if isinstance(j, Mapping) else None for j in pair["jobs"]]
    if any(n not in profiles for n in names):
        skipped["pair of a workload not measured alone"] += 1
        return None
    thr = tuple(number_or_none(j.get("normalized_throughput"), positive=True) for j in pair["jobs"])
    cap = number_or_none(pair.get("power_cap_w"), positive=True)
    power = number_or_none(pair.get("power_w"), positive=True)
    if all(t is None for t in thr) and power is None:
        skipped["pair without throughput or power"] += 1
        return None
    uncapped = cap is None or cap >= board.power_limit_max_w - _SAME_CAP_W
    jobs = [profile_job(profiles[n], f"{side}:{n}") for side, n in zip("ab", names)]
    graph = scenario_graph(board, None if uncapped else cap, jobs)
    labels = tuple(None if t is None else min(MAX_THROUGHPUT_LABEL, t) for t in thr)
    return graph, labels, None if power is None else min(1.0, power / board.power_limit_max_w)


def _bounded(value: Any, hi: float) -> float | None:
    """A number >= 0 clipped to ``hi`` (utilization: 100 %, a spread: 1000 %), or None."""
    value = number_or_none(value, lo=0.0, hi=1e9)
    return None if value is None else min(hi, value)
