"""Picking the GPU backend: the one place that decides between simulated and real GPUs.

The CLI resolves ``ECOLAUNCH_SIMULATE`` and the state directory (:class:`ecolaunch.config.Environment`)
and calls :func:`open_backend`; everything else receives the backend as an argument.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

from ecolaunch.devices.backend import GpuBackend
from ecolaunch.devices.nvml import NvmlBackend
from ecolaunch.devices.simulated import ReadingFn, SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.statedir import StateLayout

__all__ = ["open_backend", "simulated_privilege"]

logger = logging.getLogger(__name__)


def simulated_privilege(sim_dir: Path, euid: int | None = None) -> bool:
    """Whether this process may set simulated power limits: root, or the owner of the (simulated machine's) state
    directory, as the owner of a real workstation is its root. In a state directory shared with colleagues (the
    admin's layout, owned by root) a member is a plain user, as on real GPUs: their launcher records the cap it
    wants and the cap agent applies it, so the agent's ledger (root's) knows every original cap."""
    euid = os.geteuid() if euid is None else euid
    if euid == 0:
        return True
    try:
        return os.stat(sim_dir).st_uid == euid
    except FileNotFoundError:
        return True  # this user creates it, and owns it
    except OSError:
        return False


def open_backend(simulate: str | None, sim_dir: Path, *, host: str | None = None,
                 reading: ReadingFn | None = None) -> GpuBackend:
    """The backend for this process: simulated GPUs when ``simulate`` is set, else NVML.

    Args:
        simulate: the value of ``ECOLAUNCH_SIMULATE`` (a spec string or a TOML file), or None.
        sim_dir: where the simulated GPUs keep their state (``StateLayout(sim_dir).simulated_gpus``).
        reading: how simulated GPUs answer (default ``basic_reading``); the CLI passes the simulator's measured
            models (``ecolaunch.sim.reading.measured_reading``), which this package may not import.
        host: which host of the spec this process runs on. A one-host spec string takes it as its
            name (default: the real hostname); a multi-host TOML file must contain it (default: the
            real hostname, or the only host).

    Raises:
        ConfigError: a bad spec, or a host the spec does not describe.
        DriverNotFound: no simulation asked and no usable NVIDIA driver (NVML is probed here, once).
    """
    if simulate:
        machine = parse_spec(simulate, hostname=host)
        if host is None and len(machine.hosts) == 1:
            spec = machine.hosts[0]
        else:
            spec = machine.host(host or socket.gethostname())
        logger.debug("simulating %d GPU(s) on host %s from %r", len(spec.gpus), spec.name, simulate)
        privileged = simulated_privilege(Path(sim_dir))
        if reading is None:
            return SimulatedBackend(spec, StateLayout(sim_dir).simulated_gpus, privileged=privileged)
        return SimulatedBackend(spec, StateLayout(sim_dir).simulated_gpus, reading=reading, privileged=privileged)
    backend = NvmlBackend()
    count = backend.probe()
    logger.debug("NVML sees %d GPU(s)", count)
    return backend
