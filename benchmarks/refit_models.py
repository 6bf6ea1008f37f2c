"""Refit the simulator's shipped parameters and write them (the command that produced
``ecolaunch/sim/data/fitted_models.json``).

:func:`fit` fits the power-cap shapes (Zeus) and the interference model (Gavel) from the vendored data: what
:func:`ecolaunch.sim.fitted.load` reads back. Regenerate after changing a model or its data (a test,
``tests/sim/test_fitted.py``, fails until the file equals a fresh fit); the fit's errors are ``model_fit.py``'s::

    python benchmarks/refit_models.py
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ecolaunch.sim.fitted import FITTED_PATH, FORMAT, VERSION  # noqa: E402
from ecolaunch.sim.interference import fit_gavel  # noqa: E402
from ecolaunch.sim.power import BoardPowerModel  # noqa: E402


def fit() -> dict[str, Any]:
    """Fit both models from the vendored data (what ``data/fitted_models.json`` holds)."""
    power = BoardPowerModel.fit()
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
