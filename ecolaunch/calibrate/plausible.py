"""Which calibration windows of two jobs sharing a GPU cannot be true, and why.

What lives here: pure arithmetic on the result document's entries: :func:`check_pair` (a job faster than alone;
time-slicing busier than all the time) and :func:`tolerance` (:data:`MIN_TOLERANCE`, or :data:`MARGIN_Z` standard
errors of the two windows' ratio). What does not: flagging and re-measuring (:mod:`ecolaunch.calibrate.run`),
leaving flagged windows out of training (:mod:`ecolaunch.learn.calibration_data`). The two bounds, the tolerance and
the data behind it: docs/admin.md#windows-that-cannot-be-true.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ecolaunch.jobmodel.capchoice import MARGIN_Z
from ecolaunch.validate import number_or_none

__all__ = ["MARGIN_Z", "MIN_TOLERANCE", "SAME_CAP_W", "check_pair", "reference", "tolerance"]

#: the least excess over a bound counted as impossible (docs/admin.md, "Windows that cannot be true": the pairs
#: Gavel measured never exceed solo speed; jobs time-sliced in EaCO's measurements add up their utilizations)
MIN_TOLERANCE = 0.05
#: caps within this many watts of each other are one cap (a pair's reference alone is measured at its cap)
SAME_CAP_W = 0.5


def reference(alone: Sequence[Any], workload: str, cap_w: float | None) -> Mapping[str, Any] | None:
    """The measurement of ``workload`` alone that a pair at ``cap_w`` is compared with: the latest at that cap (a
    re-measurement replaces an earlier one), or None."""
    if cap_w is None:
        return None
    for e in reversed(alone):
        if isinstance(e, Mapping) and e.get("workload") == workload:
            cap = number_or_none(e.get("power_cap_w"), positive=True)
            if cap is not None and abs(cap - cap_w) <= SAME_CAP_W:
                return e
    return None


def _relative_se(entry: Mapping[str, Any] | None) -> float:
    """The relative standard error of a window's mean iteration time (0 where the window does not say)."""
    if entry is None:
        return 0.0
    cv = number_or_none(entry.get("iter_time_cv_pct"), lo=0.0, hi=1e6)
    iters = number_or_none(entry.get("iters"), positive=True)
    return 0.0 if cv is None or iters is None else cv / 100.0 / math.sqrt(iters)


def tolerance(alone: Mapping[str, Any] | None, shared: Mapping[str, Any]) -> float:
    """How far above 1 a job's normalized throughput (``alone``'s time over ``shared``'s) may read before it counts
    as impossible: :data:`MIN_TOLERANCE`, or :data:`MARGIN_Z` standard errors of the ratio, the larger."""
    return max(MIN_TOLERANCE, MARGIN_Z * math.hypot(_relative_se(alone), _relative_se(shared)))


def check_pair(pair: Mapping[str, Any], alone: Sequence[Any], *, on_gpu: bool) -> str | None:
    """Why the pair entry ``pair`` cannot be true (docs/admin.md#windows-that-cannot-be-true), or None. ``alone``: the document's
    measurements alone, where the references are found (:func:`reference`); ``on_gpu``: the workloads ran on the GPU
    (not a simulated GPU's CPU stand-ins), so time-slicing shares one device's time."""
    jobs = pair.get("jobs")
    if not isinstance(jobs, list):
        return None
    cap = number_or_none(pair.get("power_cap_w"), positive=True)
    busy_sum, tols, terms, problems = 0.0, [], [], []
    for job in jobs:
        if not isinstance(job, Mapping):
            continue
        name = str(job.get("workload"))
        thr = number_or_none(job.get("normalized_throughput"), positive=True)
        if thr is None:
            busy_sum = math.nan  # the sum is unknown without every job's throughput
            continue
        ref = reference(alone, name, cap)
        tol = tolerance(ref, job)
        tols.append(tol)
        if thr > 1.0 + tol:
            problems.append(f"{name} ran {thr:.2f} times its speed alone (at most {1.0 + tol:.2f}: sharing a GPU "
                            "never makes a job faster)")
        util = None if ref is None else number_or_none(ref.get("sm_util_pct"), lo=0.0, hi=100.0)
        if util is None:
            busy_sum = math.nan
        else:
            busy_sum += thr * util / 100.0
            terms.append(f"{thr:.2f} x {util:.0f} %")
    limit = 1.0 + max(tols, default=MIN_TOLERANCE)
    if on_gpu and pair.get("sharing") == "time-slicing" and len(terms) == len(jobs) and busy_sum > limit:
        problems.append(f"time-slicing kept the GPU busy {busy_sum:.2f} of the time ({' + '.join(terms)} busy "
                        f"alone; at most {limit:.2f}: the two never run at once)")
    return "; ".join(problems) or None
