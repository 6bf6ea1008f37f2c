"""The NVML backend through a fake pynvml: the error table, unit conversions, topology, lazy init.

The fake carries pynvml's own exception classes and constants, so the error table is tested against the
real class hierarchy; only the device calls are scripted. One test uses the real pynvml of this machine.
"""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from ecolaunch.devices.backend import GpuProcess, LinkKind, pair_key
from ecolaunch.devices.nvml import NvmlBackend
from ecolaunch.errors import DeviceError, DriverNotFound, EcolaunchError, PermissionDenied

GIB = 1024**3
BUS = ["00000000:07:00.0", "00000000:08:00.0", "00000000:47:00.0", "00000000:48:00.0"]


class FakeNvml:
    """pynvml's API over four scripted GPUs: 0-1 joined by NVLink, 2-3 behind one PCIe switch."""

    def __init__(self, count: int = 4) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(pynvml, name))
        self.count = count
        self.fail: dict[str, BaseException] = {}
        self.calls: list[str] = []
        self.limit_mw = [300_000] * count  # the management limit: what was set
        self.enforced_mw = [300_000] * count  # the limit in force
        #: True plays the idle H200: a newly set limit is read back at once but not enforced yet
        self.enforce_lag = False
        self.energy_mj = [1_234_567] * count

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    def nvmlInit(self):
        self._enter("nvmlInit")

    def nvmlShutdown(self):
        self._enter("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount")
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        self._enter("nvmlDeviceGetHandleByIndex")
        return i

    def nvmlDeviceGetUUID(self, h):
        self._enter("nvmlDeviceGetUUID")
        uuid = f"GPU-0000000{h}-1111-2222-3333-444444444444"
        return uuid.encode() if h == 1 else uuid  # older pynvml returns bytes

    def nvmlDeviceGetName(self, h):
        self._enter("nvmlDeviceGetName")
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMemoryInfo(self, h):
        self._enter("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=80 * GIB, used=3 * GIB + 5, free=77 * GIB)

    def nvmlDeviceGetUtilizationRates(self, h):
        self._enter("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=37, memory=12)

    def nvmlDeviceGetPowerUsage(self, h):
        self._enter("nvmlDeviceGetPowerUsage")
        return 123_456

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        self._enter("nvmlDeviceGetPowerManagementLimitConstraints")
        return [100_000, 400_000]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        self._enter("nvmlDeviceGetPowerManagementDefaultLimit")
        return 400_000

    def nvmlDeviceGetPowerManagementLimit(self, h):
        self._enter("nvmlDeviceGetPowerManagementLimit")
        return self.limit_mw[h]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        self._enter("nvmlDeviceGetEnforcedPowerLimit")
        return self.enforced_mw[h]

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        self._enter("nvmlDeviceSetPowerManagementLimit")
        self.limit_mw[h] = mw
        if not self.enforce_lag:
            self.enforced_mw[h] = mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._enter("nvmlDeviceGetTotalEnergyConsumption")
        self.energy_mj[h] += 500
        return self.energy_mj[h]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=42, usedGpuMemory=2 * GIB), SimpleNamespace(pid=7, usedGpuMemory=None)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        self._enter("nvmlDeviceGetGraphicsRunningProcesses")
        return [SimpleNamespace(pid=42, usedGpuMemory=1 * GIB), SimpleNamespace(pid=9, usedGpuMemory=512 * 1024**2)]

    def nvmlDeviceGetPciInfo(self, h):
        self._enter("nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=BUS[h].encode())

    def nvmlDeviceGetNvLinkState(self, h, link):
        self._enter("nvmlDeviceGetNvLinkState")
        if h >= 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= 4:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if link < 2 else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType")
        return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo")
        peer = BUS[1 - h].replace("00000000:", "0000:")  # NVML pads the domain differently here
        return SimpleNamespace(busId=peer.upper().encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        self._enter("nvmlDeviceGetTopologyCommonAncestor")
        if {a, b} == {2, 3}:
            return pynvml.NVML_TOPOLOGY_SINGLE
        if {a, b} in ({0, 2}, {1, 2}):
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
        return pynvml.NVML_TOPOLOGY_SYSTEM


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _uuid(i: int) -> str:
    return f"GPU-0000000{i}-1111-2222-3333-444444444444"


def test_constructor_touches_nothing():
    fake = FakeNvml()
    NvmlBackend(fake)
    assert fake.calls == []


def test_snapshot_converts_units():
    fake = FakeNvml()
    gpus = NvmlBackend(fake).gpus()
    assert fake.calls.count("nvmlInit") == 1
    assert [g.uuid for g in gpus] == [_uuid(i) for i in range(4)]
    g = gpus[1]
    assert g.index == 1 and g.name == "NVIDIA A100-SXM4-80GB"
    assert (g.memory_total_mib, g.memory_used_mib) == (81920, 3072)
    assert (g.util_gpu_pct, g.util_mem_pct) == (37.0, 12.0)
    assert g.power_w == pytest.approx(123.456)
    assert (g.power_limit_min_w, g.power_limit_default_w, g.power_limit_max_w, g.power_limit_w) == (100, 400, 400, 300)
    assert g.power_limit_enforced_w == 300
    assert g.energy_j == pytest.approx(1235.067)
    # compute and graphics merged by pid (largest use), memory NVML cannot report counts as 0
    assert g.processes == (GpuProcess(7, 0), GpuProcess(9, 512), GpuProcess(42, 2048))


def test_init_once_and_close_shuts_down():
    fake = FakeNvml()
    backend = NvmlBackend(fake)
    backend.gpus()
    backend.gpus()
    assert fake.calls.count("nvmlInit") == 1
    backend.close()
    backend.close()
    assert fake.calls.count("nvmlShutdown") == 1
    backend.gpus()
    assert fake.calls.count("nvmlInit") == 2


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_missing_driver_is_driver_not_found_with_a_hint(code):
    fake = FakeNvml()
    fake.fail["nvmlInit"] = _err(code)
    with pytest.raises(DriverNotFound) as info:
        NvmlBackend(fake).gpus()
    assert "NVIDIA driver not" in str(info.value)
    assert "ECOLAUNCH_SIMULATE=4xA100-SXM4-80GB" in info.value.hint
    assert isinstance(info.value.__cause__, pynvml.NVMLError)


def test_no_gpu_is_driver_not_found():
    fake = FakeNvml(count=0)
    with pytest.raises(DriverNotFound, match="no NVIDIA GPU"):
        NvmlBackend(fake).probe()


def _expected(cls: type) -> type[EcolaunchError]:
    if issubclass(cls, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded)):
        return DriverNotFound
    if issubclass(cls, pynvml.NVMLError_NoPermission):
        return PermissionDenied
    return DeviceError


NVML_ERRORS = sorted({cls for name, cls in vars(pynvml).items()
                      if name.startswith("NVMLError_") and isinstance(cls, type)}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", NVML_ERRORS, ids=lambda c: c.__name__)
def test_every_nvml_error_is_translated(cls):
    fake = FakeNvml()
    code = next(v for v, c in pynvml.NVMLError._valClassMapping.items() if c is cls)
    fake.fail["nvmlDeviceGetMemoryInfo"] = _err(code)  # a required read
    with pytest.raises(EcolaunchError) as info:
        NvmlBackend(fake).gpus()
    assert type(info.value) is _expected(cls)
    assert not isinstance(info.value, pynvml.NVMLError)
    assert isinstance(info.value.__cause__, cls)
    assert info.value.hint


@pytest.mark.parametrize("fn", [
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
])
@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND])
def test_unsupported_optional_reading_is_none(fn, code):
    fake = FakeNvml()
    fake.fail[fn] = _err(code)
    g = NvmlBackend(fake).gpus()[0]
    values = {
        "nvmlDeviceGetUtilizationRates": (g.util_gpu_pct, g.util_mem_pct),
        "nvmlDeviceGetPowerUsage": (g.power_w,),
        "nvmlDeviceGetPowerManagementLimitConstraints": (g.power_limit_min_w, g.power_limit_max_w),
        "nvmlDeviceGetPowerManagementDefaultLimit": (g.power_limit_default_w,),
        "nvmlDeviceGetEnforcedPowerLimit": (g.power_limit_enforced_w,),
        "nvmlDeviceGetTotalEnergyConsumption": (g.energy_j,),
    }[fn]
    assert values == (None,) * len(values)
    if fn == "nvmlDeviceGetEnforcedPowerLimit":
        assert g.power_limit_w == 300  # the set limit does not depend on the enforced one


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND])
def test_unreadable_management_limit_falls_back_to_the_enforced_one(code):
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetPowerManagementLimit"] = _err(code)
    fake.limit_mw[0], fake.enforced_mw[0] = 250_000, 350_000  # tell the two readings apart
    g = NvmlBackend(fake).gpus()[0]
    assert (g.power_limit_w, g.power_limit_enforced_w) == (350, 350)
    fake.fail["nvmlDeviceGetEnforcedPowerLimit"] = _err(code)
    g = NvmlBackend(fake).gpus()[0]
    assert (g.power_limit_w, g.power_limit_enforced_w) == (None, None)


def test_set_limit_is_read_back_before_it_is_enforced():
    """The idle H200: right after setting 450 W the enforced limit still read 700 W, the management limit 450 W."""
    fake = FakeNvml()
    fake.enforce_lag = True
    backend = NvmlBackend(fake)
    backend.set_power_limit(_uuid(2), 150)
    g = backend.gpus()[2]
    assert (g.power_limit_w, g.power_limit_enforced_w) == (150, 300)  # the old value is still in force
    fake.enforced_mw[2] = fake.limit_mw[2]  # the driver catches up
    g = backend.gpus()[2]
    assert (g.power_limit_w, g.power_limit_enforced_w) == (150, 150)


def test_unsupported_process_list_leaves_the_other_list():
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetComputeRunningProcesses"] = _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert NvmlBackend(fake).gpus()[0].processes == (GpuProcess(9, 512), GpuProcess(42, 1024))


def test_unsupported_required_reading_is_a_device_error():
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetUUID"] = _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
    with pytest.raises(DeviceError, match="not supported"):
        NvmlBackend(fake).gpus()


def test_set_power_limit_converts_to_milliwatts():
    fake = FakeNvml()
    backend = NvmlBackend(fake)
    backend.set_power_limit(_uuid(1), 250.5)
    assert fake.limit_mw[1] == 250_500
    g = backend.gpus()[1]
    assert (g.power_limit_w, g.power_limit_enforced_w) == (250.5, 250.5)


@pytest.mark.parametrize("value", [99.9, 400.1, "300"])
def test_set_power_limit_out_of_range_never_reaches_nvml(value):
    fake = FakeNvml()
    with pytest.raises(DeviceError) as info:
        NvmlBackend(fake).set_power_limit(_uuid(0), value)
    assert repr(value) in str(info.value)
    assert "nvmlDeviceSetPowerManagementLimit" not in fake.calls


def test_set_power_limit_without_root_is_permission_denied():
    fake = FakeNvml()
    fake.fail["nvmlDeviceSetPowerManagementLimit"] = _err(pynvml.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(PermissionDenied) as info:
        NvmlBackend(fake).set_power_limit(_uuid(0), 200)
    assert _uuid(0) in str(info.value) and "200 W" in str(info.value)
    assert "root" in info.value.hint


def test_energy_in_joules_and_unknown_uuid():
    fake = FakeNvml()
    backend = NvmlBackend(fake)
    assert backend.energy_j(_uuid(2)) == pytest.approx(1235.067)
    fake.fail["nvmlDeviceGetTotalEnergyConsumption"] = _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert backend.energy_j(_uuid(2)) is None
    with pytest.raises(DeviceError, match="no GPU with UUID"):
        backend.energy_j("GPU-nope")


def test_topology_from_nvlink_and_pcie():
    topology = NvmlBackend(FakeNvml()).topology()
    assert topology == {
        pair_key(_uuid(0), _uuid(1)): LinkKind.NVLINK,
        pair_key(_uuid(2), _uuid(3)): LinkKind.PCIE_SWITCH,
        pair_key(_uuid(0), _uuid(2)): LinkKind.PCIE_HOST,
        pair_key(_uuid(1), _uuid(2)): LinkKind.PCIE_HOST,
        pair_key(_uuid(0), _uuid(3)): LinkKind.SYSTEM,
        pair_key(_uuid(1), _uuid(3)): LinkKind.SYSTEM,
    }


def test_topology_through_nvswitch_and_without_ancestor():
    fake = FakeNvml(count=2)
    fake.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    assert set(NvmlBackend(fake).topology().values()) == {LinkKind.NVLINK}
    fake = FakeNvml(count=4)
    fake.fail["nvmlDeviceGetTopologyCommonAncestor"] = _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
    topology = NvmlBackend(fake).topology()
    assert topology[pair_key(_uuid(2), _uuid(3))] == LinkKind.SYSTEM  # unknown: the slowest path
    assert topology[pair_key(_uuid(0), _uuid(1))] == LinkKind.NVLINK


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_driver_present(), reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_driver_raises_driver_not_found():
    backend = NvmlBackend()
    with pytest.raises(DriverNotFound) as info:
        backend.gpus()
    assert "ECOLAUNCH_SIMULATE" in info.value.hint
    assert isinstance(info.value.__cause__, pynvml.NVMLError)
