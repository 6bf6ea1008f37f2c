"""The simulator's fitted parameters, shipped with the package so that no process has to refit them.

Fitting the power-cap shapes (Zeus) and the interference model (Gavel) per process is too slow for every simulated
launch, whose GPUs answer through these models (:mod:`ecolaunch.sim.reading`; docs/simulator.md#simulated-gpus).
The fit is deterministic, so its result is stored in ``data/fitted_models.json``; :func:`load` returns it to
:mod:`ecolaunch.sim.power` and :mod:`ecolaunch.sim.interference`. The fit itself runs offline
(``benchmarks/refit_models.py`` writes the file); a test checks that the file equals a fresh fit. A leaf: it
imports only the data directory.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from ecolaunch.sim.models import DATA_DIR

logger = logging.getLogger(__name__)

FITTED_PATH = DATA_DIR / "fitted_models.json"
FORMAT = "ecolaunch.sim.fitted"
VERSION = 1


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
