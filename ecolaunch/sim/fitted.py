"""The simulator's fitted parameters, shipped with the package so that no process has to refit them.

Fitting the power-cap shapes (Zeus) and the interference model (Gavel) takes about 0.2 s of numpy per process:
too much for every simulated launch, whose GPUs answer through these models (:func:`measured_reading`). The fit
is deterministic, so its result is stored in ``data/fitted_models.json``; :func:`load` returns it, and a test
checks that it equals a fresh fit. Regenerate after changing a model or its data::

    python -m ecolaunch.sim.fitted
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ecolaunch.job.profile import Profile
from ecolaunch.sim.models import DATA_DIR

logger = logging.getLogger(__name__)

FITTED_PATH = DATA_DIR / "fitted_models.json"
FORMAT = "ecolaunch.sim.fitted"
VERSION = 1


def fit() -> dict[str, Any]:
    """Fit both models from the vendored data (what ``data/fitted_models.json`` holds)."""
    from ecolaunch.sim.interference import fit_gavel
    from ecolaunch.sim.power import PowerCapModel

    power = PowerCapModel.fit()
    inter = fit_gavel().model
    return {
        "format": FORMAT,
        "version": VERSION,
        "power": {"shapes": {g: asdict(s) for g, s in sorted(power.shapes.items())},
                  "active_idle_frac": dict(sorted(power.active_idle_frac.items()))},
        "interference": asdict(inter),
    }


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Any] | None:
    """The shipped parameters, or None when the file is missing or from another version (then callers fit)."""
    try:
        doc = json.loads(FITTED_PATH.read_text())
    except (OSError, ValueError) as e:
        logger.warning("no usable fitted model file %s (%s): fitting the models now", FITTED_PATH, e)
        return None
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        logger.warning("fitted model file %s has another format: fitting the models now", FITTED_PATH)
        return None
    return doc


def measured_reading(model, power_limit_w: float, loads: Sequence) -> Any:
    """A simulated GPU's readings from the measured models (``SimulatedBackend(reading=...)``).

    Each attached process is a job with the profile it was attached with (utilization as its demand, its power);
    :func:`ecolaunch.sim.node.shared_gpu` gives the board's power under its limit. Memory is the attached
    memory; utilization the summed demand, at most 100 %. A process attached without a load only holds memory.
    """
    from ecolaunch.devices.simulated import Reading
    from ecolaunch.sim.node import shared_gpu

    active = [p for p in loads if p.util_gpu_pct is not None or p.power_w is not None]
    profiles = [Profile(sm_util_pct=p.util_gpu_pct, mem_bw_util_pct=p.util_mem_pct, power_w=p.power_w) for p in active]
    cap = power_limit_w if power_limit_w < model.power_limit_max_w else None
    board = shared_gpu(profiles, model, cap)
    return Reading(
        memory_used_mib=sum(p.memory_mib for p in loads),
        util_gpu_pct=min(100.0, sum(p.util_gpu_pct or 0.0 for p in loads)),
        util_mem_pct=min(100.0, sum(p.util_mem_pct or 0.0 for p in loads)),
        power_w=min(power_limit_w, board.power_w) if active else board.power_w,
    )


if __name__ == "__main__":
    FITTED_PATH.write_text(json.dumps(fit(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FITTED_PATH}")
