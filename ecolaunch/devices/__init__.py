"""GPU backends behind one protocol (:mod:`ecolaunch.devices.base`): NVML (real) and simulated.

``open_backend`` is the one place that picks a backend; everything else receives one as an argument.
"""

from __future__ import annotations

from ecolaunch.devices.base import GpuBackend, GpuProcess, GpuSnapshot, LinkKind

__all__ = ["GpuBackend", "GpuProcess", "GpuSnapshot", "LinkKind"]
