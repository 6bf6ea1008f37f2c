"""Which caps to profile a job at, and the cap grid.

What lives here: :func:`profile_caps` (which caps to measure), :func:`cap_grid` (candidate caps on a grid), and the
profiling constants (the grid step, iterations per cap). What does not: the job's curve read from the measured caps
(:class:`ecolaunch.jobmodel.capcurve.CapCurve`, with the Zeus prior), the cap choice on such a curve
(:mod:`ecolaunch.jobmodel.capchoice`), measuring, setting caps (the job's cap owner, ``ecolaunch.caps.job``),
history. Which caps, and why fractions of the job's own power: docs/profiling.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.capcurve import NON_BINDING_RATIO

DEFAULT_CAP_STEP_W = 25.0  # Zeus's stride; NVML accepts any integer-watt limit within the board's range
DEFAULT_PROFILE_FRACTIONS = (0.85, 0.65)  # of the uncapped power; why: docs/profiling.md
# Iterations per profiled cap. Zeus uses 10 warm-up + 40 measured per cap. We assume (not measured here)
# that after the job's own start-up warm-up a cap change settles within a few iterations (NVML's power
# controller acts in well under a second) and that 15 iterations give a stable mean; the replayed Zeus
# traces are full-epoch averages, so their accuracy figures do not include this sampling noise.
DEFAULT_WARMUP_ITERS_PER_CAP = 5
DEFAULT_MEASURED_ITERS_PER_CAP = 15
ZEUS_WARMUP_ITERS_PER_CAP = 10
ZEUS_MEASURED_ITERS_PER_CAP = 40

_EPS = 1e-9


def cap_grid(min_cap_w: float, max_cap_w: float, step_w: float = DEFAULT_CAP_STEP_W) -> list[float]:
    """Candidate caps: the bounds plus every multiple of ``step_w`` between them, ascending."""
    _check_bounds(min_cap_w, max_cap_w)
    if not step_w > 0:
        raise ConfigError(f"cap step must be positive, got {step_w!r}")
    caps = {float(min_cap_w), float(max_cap_w)}
    k = math.ceil(min_cap_w / step_w - _EPS)
    while k * step_w <= max_cap_w + _EPS:
        caps.add(float(k * step_w))
        k += 1
    return sorted(caps)


def profile_caps(min_cap_w: float, max_cap_w: float, uncapped_power_w: float | None = None, *,
                 fractions: Sequence[float] = DEFAULT_PROFILE_FRACTIONS,
                 step_w: float = DEFAULT_CAP_STEP_W) -> list[float]:
    """Caps to measure, highest first: the max, then ``fractions`` of the job's uncapped power, on the grid.

    Measure the max first and pass the power the job drew there as ``uncapped_power_w``: the fractions apply
    to it (to the max when it is None, or when the job draws more than the max), nearest grid cap, ties
    rounding up. Caps that cannot bind the job (>= NON_BINDING_RATIO x its power, e.g. when it draws less
    than the GPU's lowest cap) are dropped, so such an input-bound job costs one cap.
    """
    grid = cap_grid(min_cap_w, max_cap_w, step_w)
    top = max_cap_w if uncapped_power_w is None else min(max_cap_w, uncapped_power_w)
    chosen: list[float] = [float(max_cap_w)]
    for f in fractions:
        if not 0 < f <= 1:
            raise ConfigError(f"profile fraction must be in (0, 1], got {f!r}")
        target = f * top
        cap = min(grid, key=lambda c: (abs(c - target), -c))
        binds = uncapped_power_w is None or cap < NON_BINDING_RATIO * uncapped_power_w
        if cap not in chosen and binds:
            chosen.append(cap)
    return sorted(chosen, reverse=True)


def _check_bounds(min_cap_w: float, max_cap_w: float) -> None:
    if not (0 < min_cap_w <= max_cap_w and math.isfinite(max_cap_w)):
        raise ConfigError(f"cap bounds must satisfy 0 < min <= max, got min={min_cap_w!r} max={max_cap_w!r}")
