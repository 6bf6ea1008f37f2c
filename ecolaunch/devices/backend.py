"""The GPU backend protocol and the frozen snapshots it returns.

What lives here: the :class:`GpuBackend` protocol (list one host's GPUs as :class:`GpuSnapshot` records in one
batched read, tell how each pair is connected, :class:`LinkKind`, set power limits, read energy counters) and its
records. GPUs are identified by NVML UUID; ``index`` is the NVML index. Units are in the names (``*_mib``, ``*_w``,
``*_j``, ``*_pct`` 0-100); a reading a device cannot give is ``None``, never NaN or a string. What lives elsewhere:
which job owns which GPU (``ecolaunch.state``), and any decision (``ecolaunch.policy``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


class LinkKind(enum.IntEnum):
    """How two GPUs of one host talk, fastest first (the order of ``nvidia-smi topo -m``).

    NVLINK      direct NVLink/NVSwitch connection
    PCIE_SWITCH behind the same PCIe switch (PIX/PXB)
    PCIE_HOST   through the same CPU's host bridge (PHB/NODE)
    SYSTEM      across CPU sockets (SYS)
    """

    NVLINK = 0
    PCIE_SWITCH = 1
    PCIE_HOST = 2
    SYSTEM = 3


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a GPU, as the driver sees it."""

    pid: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """One GPU at one instant.

    Power limits: ``power_limit_min_w``/``power_limit_default_w``/``power_limit_max_w`` are the board's range;
    ``power_limit_w`` is the limit that was **set** (NVML's management limit), which ecolaunch compares against
    and restores; ``power_limit_enforced_w`` is the limit **in force** (NVML's enforced limit). They usually agree,
    but a driver may enforce a newly set limit late: on an idle H200 the enforced limit still read the old value
    right after a change while the management limit read the new one at once.
    """

    uuid: str
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int
    util_gpu_pct: float | None
    util_mem_pct: float | None
    power_w: float | None
    power_limit_min_w: float | None
    power_limit_default_w: float | None
    power_limit_max_w: float | None
    power_limit_w: float | None
    energy_j: float | None
    processes: tuple[GpuProcess, ...] = field(default=())
    #: the limit in force; last, with a default, so positional constructions keep working
    power_limit_enforced_w: float | None = None

    @property
    def memory_free_mib(self) -> int:
        return max(0, self.memory_total_mib - self.memory_used_mib)


@runtime_checkable
class GpuBackend(Protocol):
    """What ecolaunch needs from a GPU driver. Implementations: ``NvmlBackend``, ``SimulatedBackend``.

    Every method raises only :class:`ecolaunch.errors.DeviceError` subclasses.
    """

    #: short name shown to users: "nvml" or "simulated"
    kind: str

    @property
    def privileged(self) -> bool:
        """Whether this process may set power limits here: on real GPUs, running as root (the driver refuses anyone
        else); on simulated ones, what the backend was opened with (``devices.select.simulated_privilege``)."""
        ...

    def attach(self, uuid: str, pid: int, memory_mib: int, *, util_gpu_pct: float | None = None,
               util_mem_pct: float | None = None, power_w: float | None = None) -> bool:
        """Tell the backend that process ``pid`` now uses GPU ``uuid`` with this load. A simulated GPU has no real
        processes to see, so it shows the load in its snapshots from now on and this returns True; a real driver
        sees the process itself: nothing to do, False."""
        ...

    def detach(self, pid: int) -> int:
        """Forget what :meth:`attach` recorded for process ``pid``; on how many GPUs it was attached (0 on a real
        driver)."""
        ...

    def hostname(self) -> str:
        """The host these GPUs belong to."""
        ...

    def gpus(self) -> list[GpuSnapshot]:
        """A snapshot of every GPU, ordered by index."""
        ...

    def topology(self) -> dict[tuple[str, str], LinkKind]:
        """The link between each unordered pair of GPUs, keyed by ``(uuid_a, uuid_b)`` with ``uuid_a < uuid_b``."""
        ...

    def set_power_limit(self, uuid: str, power_w: float) -> None:
        """Set a power limit in watts (read back as ``power_limit_w`` at once; the driver may enforce it later);
        raises PermissionDenied without the privilege."""
        ...

    def energy_j(self, uuid: str) -> float | None:
        """The GPU's total energy counter in joules (monotonic), or None when the device has none."""
        ...

    def close(self) -> None:
        """Release driver handles."""
        ...


def pair_key(a: str, b: str) -> tuple[str, str]:
    """The canonical key of an unordered GPU pair in a topology mapping."""
    return (a, b) if a < b else (b, a)
