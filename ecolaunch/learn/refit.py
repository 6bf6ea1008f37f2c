"""The refit of the simulator's shipped parameters (``ecolaunch/sim/data/fitted_models.json``).

:func:`fit` fits the power-cap shapes (Zeus) and the interference model (Gavel) from the vendored data: what
:func:`ecolaunch.sim.fitted.load` reads back. Regenerate after changing a model or its data::

    python -m ecolaunch.learn.refit
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ecolaunch.sim.fitted import FITTED_PATH, FORMAT, VERSION
from ecolaunch.sim.interference import fit_gavel
from ecolaunch.sim.power import PowerCapModel


def fit() -> dict[str, Any]:
    """Fit both models from the vendored data (what ``data/fitted_models.json`` holds)."""
    power = PowerCapModel.fit()
    inter = fit_gavel().model
    return {
        "format": FORMAT,
        "version": VERSION,
        "power": {"shapes": {g: asdict(s) for g, s in sorted(power.shapes.items())},
                  "active_idle_frac": dict(sorted(power.active_idle_frac.items()))},
        "interference": asdict(inter),
    }


if __name__ == "__main__":
    FITTED_PATH.write_text(json.dumps(fit(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FITTED_PATH}")
