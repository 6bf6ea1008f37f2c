"""How a simulated GPU answers: its readings from the simulator's measured models.

:func:`measured_reading` is the ``reading`` hook of :class:`~ecolaunch.devices.simulated.SimulatedBackend`; the
runtime wiring (:func:`ecolaunch.runtime.open_gpus`) passes it, since ``devices`` may not import the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecolaunch.devices.simulated import Reading
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.node import shared_gpu


def measured_reading(model, power_limit_w: float, loads: Sequence) -> Reading:
    """A simulated GPU's readings from the measured models (``SimulatedBackend(reading=...)``).

    Each attached process is a job with the profile it was attached with (utilization as its demand, its power);
    :func:`ecolaunch.sim.node.shared_gpu` gives the board's power under its limit. Memory is the attached
    memory; utilization the summed demand, at most 100 %. A process attached without a load only holds memory.
    """
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
