"""The simulator: its measured models, traces, the event loop and metrics, and the measured world.

What lives here: the fitted models (:mod:`.power`, :mod:`.interference`, :mod:`.node`, with :mod:`.models` and
the shipped fit :mod:`.fitted`), the traces (:mod:`.traces`, :mod:`.measured_traces`, :mod:`.trace_registry`), the
event loop (:mod:`.engine`), the measured world (:mod:`.measured`, :mod:`.truth`) and :mod:`.metrics`; the data is
vendored in ``ecolaunch/sim/data`` (its ``SOURCE.md`` cites each file). How the models work and what they are
fitted to: docs/simulator.md#the-models.
"""

from __future__ import annotations

from ecolaunch.sim.interference import (
    Colocation,
    InterferenceModel,
    colocate,
    default_interference_model,
    predict,
)
from ecolaunch.sim.node import EnergyMeter, EnergyReport, GpuLoad, SharedGpu, reproduce_eaco, shared_gpu
from ecolaunch.sim.power import (
    BoardPrediction,
    BoardPowerModel,
    default_power_model,
    energy_optimal_cap,
)

__all__ = [
    "BoardPrediction",
    "Colocation",
    "EnergyMeter",
    "EnergyReport",
    "GpuLoad",
    "InterferenceModel",
    "BoardPowerModel",
    "SharedGpu",
    "colocate",
    "default_interference_model",
    "default_power_model",
    "energy_optimal_cap",
    "predict",
    "reproduce_eaco",
    "shared_gpu",
]
