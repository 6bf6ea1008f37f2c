"""Privilege and trust checks of the admin side: who may run the cap agent, and which files root may believe.

What lives here: :func:`require_cap_privilege` (the agent's start-up check: root on real GPUs, anyone on the
simulated backend), :func:`trusted_by_root` (a file root may act on: a regular file owned by root or this user,
writable by nobody else). The state directory's own checks live in ``ecolaunch.state.store``
(:func:`~ecolaunch.state.store.check_state_dir`); the threat model is ``docs/threat-model.md``.
"""

from __future__ import annotations

import os
import stat

from ecolaunch.devices.base import GpuBackend
from ecolaunch.errors import PermissionDenied

__all__ = ["require_cap_privilege", "trusted_by_root"]


def require_cap_privilege(backend: GpuBackend, euid: int | None = None) -> None:
    """Raise PermissionDenied unless this process may set power limits on ``backend``.

    Real GPUs need root (NVML refuses ``nvmlDeviceSetPowerManagementLimit`` otherwise); the simulated backend is
    allowed to anyone, so that tests and demos run the agent without privilege.
    """
    euid = os.geteuid() if euid is None else euid
    if euid == 0 or backend.kind == "simulated":
        return
    raise PermissionDenied(
        f"the cap agent must run as root to set power limits on {backend.kind} GPUs (running as uid {euid})",
        hint="start it with sudo, or install the systemd unit examples/ecolaunch-agent.service (see the admin guide)",
    )


def trusted_by_root(st: os.stat_result, euid: int | None = None) -> bool:
    """Whether a file with this ``stat`` may steer a privileged process: a regular file owned by root or by this
    user, and not writable by group or others."""
    euid = os.geteuid() if euid is None else euid
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_uid in (0, euid)
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )
