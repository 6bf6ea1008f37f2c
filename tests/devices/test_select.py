"""open_backend: simulated when ECOLAUNCH_SIMULATE is set, otherwise NVML probed once."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ecolaunch.devices.select import open_backend
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.errors import ConfigError, DriverNotFound
from ecolaunch.statedir import SIM_GPUS_FILE

DATA = Path(__file__).resolve().parents[1] / "data"


def test_simulated_backend_from_a_spec_string(tmp_path):
    backend = open_backend("2xA40", tmp_path, host="ws")
    assert isinstance(backend, SimulatedBackend)
    assert backend.hostname() == "ws"
    assert backend.state_path == tmp_path / SIM_GPUS_FILE
    assert len(backend.gpus()) == 2
    assert (tmp_path / SIM_GPUS_FILE).is_file()
    assert open_backend("2xA40", tmp_path).hostname() == socket.gethostname()


def test_simulated_host_of_a_multi_host_file(tmp_path):
    backend = open_backend(str(DATA / "machine_two_hosts.toml"), tmp_path, host="ws")
    assert [g.name for g in backend.gpus()][2] == "NVIDIA RTX A6000"
    with pytest.raises(ConfigError, match="no host"):
        open_backend(str(DATA / "machine_two_hosts.toml"), tmp_path, host="elsewhere")


def test_bad_spec_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="bad machine spec"):
        open_backend("4xA100", tmp_path)


def test_without_simulation_nvml_is_probed_at_once(tmp_path):
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    except pynvml.NVMLError:
        pass
    with pytest.raises(DriverNotFound) as info:
        open_backend(None, tmp_path)
    assert "ECOLAUNCH_SIMULATE" in info.value.hint
    with pytest.raises(DriverNotFound):
        open_backend("", tmp_path)
