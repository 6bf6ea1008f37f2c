"""The simulator's measured models (and, in later modules, traces, the engine and metrics).

Every model here is fitted to third-party measurements vendored in ``ecolaunch/sim/data`` (see its
``SOURCE.md``); fits run once per process, on first use, in plain numpy:

- :mod:`ecolaunch.sim.power`: power cap -> iteration time and board power (Zeus, NSDI '23), active-idle power;
  boards Zeus did not sweep (A100, H100, H200, Ada, ...) borrow a normalized shape and say ``extrapolated``;
- :mod:`ecolaunch.sim.interference`: normalized throughput of jobs sharing one GPU from their solo profiles,
  calibrated on Gavel's measured pairs (OSDI '20);
- :mod:`ecolaunch.sim.node`: a shared GPU's power, node / GPU-only / job-attributed energy, and the
  reproduction of EaCO's Tables 1-4 (arXiv 2412.08294);
- :mod:`ecolaunch.sim.models`: the job profile, the cached data loaders and the small least-squares fitter.

Fit errors: ``python benchmarks/model_fit.py``; the EaCO table: ``python benchmarks/eaco_reproduction.py``.
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
    CapPrediction,
    PowerCapModel,
    default_power_model,
    energy_optimal_cap,
)

__all__ = [
    "CapPrediction",
    "Colocation",
    "EnergyMeter",
    "EnergyReport",
    "GpuLoad",
    "InterferenceModel",
    "PowerCapModel",
    "SharedGpu",
    "colocate",
    "default_interference_model",
    "default_power_model",
    "energy_optimal_cap",
    "predict",
    "reproduce_eaco",
    "shared_gpu",
]
