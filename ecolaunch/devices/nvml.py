"""The NVML backend: real NVIDIA GPUs through nvidia-ml-py (the only module that touches ``pynvml``).

What lives here: :class:`NvmlBackend`, initialised lazily (never in the constructor), its units converted at the
boundary (mW → W, mJ → J, bytes → MiB), and :data:`_ERRORS`, the one translation of NVML errors into the ecolaunch
tree (``from`` the NVML error): no ``pynvml.NVMLError`` leaves this module. The ``nvml`` constructor argument takes any
object with pynvml's functions, constants and exception classes, so tests pass a fake one. Set and enforced limits:
docs/top.md#set-and-enforced-limits. What lives elsewhere: the protocol (:mod:`ecolaunch.devices.backend`), picking a
backend (:mod:`ecolaunch.devices.select`).
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable
from typing import Any

from ecolaunch.config import ENV_SIMULATE
from ecolaunch.devices.backend import GpuProcess, GpuSnapshot, LinkKind, pair_key
from ecolaunch.errors import DeviceError, DriverNotFound, EcolaunchError, PermissionDenied
from ecolaunch.validate import is_real

__all__ = ["NvmlBackend"]

logger = logging.getLogger(__name__)

_MIB = 1024 * 1024
_DRIVER_HINT = (f"install the NVIDIA driver (it ships libnvidia-ml.so.1), or set "
                f"{ENV_SIMULATE}=4xA100-SXM4-80GB to simulate GPUs")
_PRIVILEGE_HINT = "run as root, or let the ecolaunch cap agent apply power limits"
_GENERIC_HINT = "check the GPU with nvidia-smi; the driver may need a reload or the GPU a reset"

#: NVML error class -> (ecolaunch error class, message, hint); ``None`` means "the device cannot give
#: this reading": an optional read returns None, a required one raises DeviceError. Anything not listed
#: becomes a DeviceError. Messages take ``{what}`` (the failed operation) and ``{error}`` (NVML's text).
_ERRORS: dict[str, tuple[type[EcolaunchError], str, str] | None] = {
    "NVMLError_LibraryNotFound": (
        DriverNotFound, "NVIDIA driver not found: the NVML library cannot be loaded ({error})", _DRIVER_HINT),
    "NVMLError_DriverNotLoaded": (
        DriverNotFound, "NVIDIA driver not loaded: NVML cannot talk to the kernel module ({error})",
        "load the NVIDIA kernel module (or reboot after a driver install), or set "
        f"{ENV_SIMULATE}=4xA100-SXM4-80GB to simulate GPUs"),
    "NVMLError_NoPermission": (PermissionDenied, "{what}: permission denied ({error})", _PRIVILEGE_HINT),
    "NVMLError_NotSupported": None,
    "NVMLError_FunctionNotFound": None,  # an older driver without this call: same as not supported
}

_TOPOLOGY_LEVELS = (  # nvmlDeviceGetTopologyCommonAncestor level -> LinkKind
    ("NVML_TOPOLOGY_INTERNAL", 0, LinkKind.PCIE_SWITCH),
    ("NVML_TOPOLOGY_SINGLE", 10, LinkKind.PCIE_SWITCH),
    ("NVML_TOPOLOGY_MULTIPLE", 20, LinkKind.PCIE_SWITCH),
    ("NVML_TOPOLOGY_HOSTBRIDGE", 30, LinkKind.PCIE_HOST),
    ("NVML_TOPOLOGY_NODE", 40, LinkKind.PCIE_HOST),
    ("NVML_TOPOLOGY_SYSTEM", 50, LinkKind.SYSTEM),
)
_BUS_ID = re.compile(r"^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)\.([0-9a-f]+)$")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bus_id(value: Any) -> str:
    """A PCI bus id in one canonical form (NVML pads the domain to 4 or 8 digits depending on the call)."""
    text = _text(value).strip().lower().rstrip("\x00")
    m = _BUS_ID.match(text)
    if not m:
        return text
    domain, bus, device, function = (int(g, 16) for g in m.groups())
    return f"{domain:08x}:{bus:02x}:{device:02x}.{function:x}"


def _mib(n_bytes: Any) -> int:
    return 0 if n_bytes is None else int(n_bytes) // _MIB


class NvmlBackend:
    """The GPUs of this host through NVML. Implements :class:`~ecolaunch.devices.backend.GpuBackend`.

    Args:
        nvml: the pynvml module (default: imported on first use) or a test double with its API.
    """

    kind = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        self._lib = nvml
        self._handles: list[Any] | None = None
        self._by_uuid: dict[str, Any] | None = None

    # --- GpuBackend --------------------------------------------------------------------------------

    def hostname(self) -> str:
        return socket.gethostname()

    def probe(self) -> int:
        """Initialise NVML now and return the GPU count; DriverNotFound when there is no usable driver/GPU."""
        return len(self._ensure_init())

    def gpus(self) -> list[GpuSnapshot]:
        return [self._snapshot(i, h) for i, h in enumerate(self._ensure_init())]

    def topology(self) -> dict[tuple[str, str], LinkKind]:
        handles = self._ensure_init()
        lib = self._lib
        uuids = [_text(self._call("read the GPU UUID", lib.nvmlDeviceGetUUID, h)) for h in handles]
        bus_ids = []
        for h in handles:
            pci = self._call("read the GPU's PCI info", lib.nvmlDeviceGetPciInfo, h, optional=True)
            bus_ids.append(None if pci is None else _bus_id(pci.busId))
        peers = [self._nvlink_peers(h) for h in handles]
        links = {}
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                remote_i, switch_i = peers[i]
                remote_j, switch_j = peers[j]
                nvlink = ((bus_ids[j] is not None and bus_ids[j] in remote_i)
                          or (bus_ids[i] is not None and bus_ids[i] in remote_j)
                          or (switch_i and switch_j))
                kind = LinkKind.NVLINK if nvlink else self._pcie_link(handles[i], handles[j])
                links[pair_key(uuids[i], uuids[j])] = kind
        return links

    @property
    def privileged(self) -> bool:
        return os.geteuid() == 0

    def attach(self, uuid: str, pid: int, memory_mib: int, *, util_gpu_pct: float | None = None,
               util_mem_pct: float | None = None, power_w: float | None = None) -> bool:
        return False  # the driver sees the process itself

    def detach(self, pid: int) -> int:
        return 0

    def set_power_limit(self, uuid: str, power_w: float) -> None:
        handle = self._handle(uuid)
        lib = self._lib
        if not is_real(power_w):
            raise DeviceError(f"power limit {power_w!r} for GPU {uuid} is not a number of watts",
                              hint="give the power limit in watts")
        constraints = self._call("read the power limit range", lib.nvmlDeviceGetPowerManagementLimitConstraints,
                                 handle, optional=True)
        if constraints is not None:
            lo, hi = constraints[0] / 1000.0, constraints[1] / 1000.0
            if not lo <= power_w <= hi:
                raise DeviceError(f"power limit {power_w!r} W for GPU {uuid} is outside its range [{lo:g}, {hi:g}] W",
                                  hint=f"choose a power limit between {lo:g} and {hi:g} W")
        self._call(f"set the power limit of GPU {uuid} to {power_w:g} W",
                   lib.nvmlDeviceSetPowerManagementLimit, handle, int(round(power_w * 1000)))
        logger.debug("GPU %s power limit set to %.1f W", uuid, power_w)

    def energy_j(self, uuid: str) -> float | None:
        mj = self._call("read the energy counter", self._lib.nvmlDeviceGetTotalEnergyConsumption,
                        self._handle(uuid), optional=True)
        return None if mj is None else mj / 1000.0

    def close(self) -> None:
        if self._handles is None:
            return
        self._handles = self._by_uuid = None
        try:
            self._lib.nvmlShutdown()
        except self._lib.NVMLError as e:
            logger.debug("nvmlShutdown failed: %s", e)

    # --- internals ---------------------------------------------------------------------------------

    def _ensure_init(self) -> list[Any]:
        if self._handles is not None:
            return self._handles
        if self._lib is None:
            try:
                import pynvml
            except ImportError as e:
                raise DriverNotFound("cannot use NVIDIA GPUs: the nvidia-ml-py package is not installed",
                                     hint=f"pip install nvidia-ml-py, or set {ENV_SIMULATE} to simulate GPUs") from e
            self._lib = pynvml
        lib = self._lib
        self._call("initialise NVML", lib.nvmlInit)
        count = self._call("count the GPUs", lib.nvmlDeviceGetCount)
        if not count:
            try:
                lib.nvmlShutdown()
            except lib.NVMLError as e:
                logger.debug("nvmlShutdown failed: %s", e)
            raise DriverNotFound("NVML found no NVIDIA GPU on this host", hint=_DRIVER_HINT)
        self._handles = [self._call(f"open GPU {i}", lib.nvmlDeviceGetHandleByIndex, i) for i in range(count)]
        return self._handles

    def _handle(self, uuid: str) -> Any:
        handles = self._ensure_init()
        if self._by_uuid is None:
            self._by_uuid = {_text(self._call("read the GPU UUID", self._lib.nvmlDeviceGetUUID, h)): h
                             for h in handles}
        try:
            return self._by_uuid[uuid]
        except KeyError:
            raise DeviceError(f"no GPU with UUID {uuid!r} on this host",
                              hint="use a UUID listed by nvidia-smi -L") from None

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, optional: bool = False) -> Any:
        """Call NVML; translate its error through :data:`_ERRORS` (None for an unsupported optional read)."""
        lib = self._lib
        try:
            return fn(*args)
        except lib.NVMLError as e:
            error = self._translate(what, e)
            if error is None:
                if optional:
                    return None
                error = DeviceError(f"{what}: not supported by this GPU or driver ({e})", hint=_GENERIC_HINT)
            raise error from e

    def _translate(self, what: str, e: Exception) -> EcolaunchError | None:
        for name, entry in _ERRORS.items():
            cls = getattr(self._lib, name, None)
            if cls is not None and isinstance(e, cls):
                if entry is None:
                    return None
                kind, message, hint = entry
                return kind(message.format(what=what, error=e), hint=hint)
        return DeviceError(f"{what} failed: {e}", hint=_GENERIC_HINT)

    def _snapshot(self, index: int, h: Any) -> GpuSnapshot:
        lib = self._lib
        uuid = _text(self._call("read the GPU UUID", lib.nvmlDeviceGetUUID, h))
        what = f"read GPU {index} ({uuid})"
        mem = self._call(f"{what} memory", lib.nvmlDeviceGetMemoryInfo, h)
        util = self._call(f"{what} utilization", lib.nvmlDeviceGetUtilizationRates, h, optional=True)
        power_mw = self._call(f"{what} power", lib.nvmlDeviceGetPowerUsage, h, optional=True)
        limits = self._call(f"{what} power limit range", lib.nvmlDeviceGetPowerManagementLimitConstraints,
                            h, optional=True)
        default_mw = self._call(f"{what} default power limit", lib.nvmlDeviceGetPowerManagementDefaultLimit,
                                h, optional=True)
        set_mw = self._call(f"{what} power management limit", lib.nvmlDeviceGetPowerManagementLimit,
                            h, optional=True)
        enforced_mw = self._call(f"{what} enforced power limit", lib.nvmlDeviceGetEnforcedPowerLimit,
                                 h, optional=True)
        if set_mw is None:
            # A device that cannot report the management limit: the enforced one is the best estimate of what
            # was set (it lags a change on an idle GPU, but it is never a value nobody set).
            set_mw = enforced_mw
        energy_mj = self._call(f"{what} energy", lib.nvmlDeviceGetTotalEnergyConsumption, h, optional=True)

        def watts(mw: Any) -> float | None:
            return None if mw is None else mw / 1000.0

        return GpuSnapshot(
            uuid=uuid, index=index, name=_text(self._call(f"{what} name", lib.nvmlDeviceGetName, h)),
            memory_total_mib=_mib(mem.total), memory_used_mib=_mib(mem.used),
            util_gpu_pct=None if util is None else float(util.gpu),
            util_mem_pct=None if util is None else float(util.memory),
            power_w=watts(power_mw),
            power_limit_min_w=None if limits is None else watts(limits[0]),
            power_limit_default_w=watts(default_mw),
            power_limit_max_w=None if limits is None else watts(limits[1]),
            power_limit_w=watts(set_mw),
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
            processes=self._processes(what, h),
            power_limit_enforced_w=watts(enforced_mw),
        )

    def _processes(self, what: str, h: Any) -> tuple[GpuProcess, ...]:
        """Compute and graphics processes, merged by pid; memory NVML cannot report counts as 0."""
        lib = self._lib
        memory: dict[int, int] = {}
        for fn in (lib.nvmlDeviceGetComputeRunningProcesses, lib.nvmlDeviceGetGraphicsRunningProcesses):
            for proc in self._call(f"{what} processes", fn, h, optional=True) or ():
                used = getattr(proc, "usedGpuMemory", None)
                mib = 0 if used is None or used >= 2**63 else _mib(used)  # NVML_VALUE_NOT_AVAILABLE
                memory[int(proc.pid)] = max(memory.get(int(proc.pid), 0), mib)
        return tuple(GpuProcess(pid, mib) for pid, mib in sorted(memory.items()))

    def _nvlink_peers(self, h: Any) -> tuple[set[str], bool]:
        """PCI bus ids at the far end of this GPU's active NVLinks, and whether any ends at an NVSwitch."""
        lib = self._lib
        remote: set[str] = set()
        on_switch = False
        enabled = getattr(lib, "NVML_FEATURE_ENABLED", 1)
        switch_type = getattr(lib, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        remote_type = getattr(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
        for link in range(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if lib.nvmlDeviceGetNvLinkState(h, link) != enabled:
                    continue
                if remote_type is not None and remote_type(h, link) == switch_type:
                    on_switch = True
                    continue
                remote.add(_bus_id(lib.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId))
            except lib.NVMLError as e:
                # No NVLink at all (NotSupported) ends the scan; a link index past the GPU's last link
                # gives InvalidArgument, which only skips that index.
                if self._translate("read NVLink state", e) is None:
                    break
        return remote, on_switch

    def _pcie_link(self, a: Any, b: Any) -> LinkKind:
        lib = self._lib
        level = self._call("read the PCIe topology", lib.nvmlDeviceGetTopologyCommonAncestor, a, b, optional=True)
        if level is None:
            return LinkKind.SYSTEM  # unknown: assume the slowest path
        for name, default, kind in _TOPOLOGY_LEVELS:
            if level == getattr(lib, name, default):
                return kind
        return LinkKind.SYSTEM
