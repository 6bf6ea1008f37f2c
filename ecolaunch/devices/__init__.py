"""GPU backends behind one protocol (:mod:`ecolaunch.devices.backend`): NVML (real) and simulated.

``open_backend`` is the one place that picks a backend; everything else receives one as an argument.
"""

from __future__ import annotations

from ecolaunch.devices.backend import GpuBackend, GpuProcess, GpuSnapshot, LinkKind

__all__ = ["GpuBackend", "GpuProcess", "GpuSnapshot", "LinkKind"]
