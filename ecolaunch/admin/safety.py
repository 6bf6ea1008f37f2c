"""Privilege and trust checks of the admin side: who may run the cap agent, and which files root may believe.

What lives here: :func:`require_cap_privilege`, :func:`require_launcher_privilege`, :func:`trusted_by_root`,
:func:`identity_of_uid` (the user and groups the kernel's account database gives a uid, never a name a file or the
environment claims), :func:`warn_unsafe_interpreter`. What does not: the state directory's own checks
(:func:`ecolaunch.state.store.check_state_dir`). The threat model: docs/threat-model.md.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd

from ecolaunch.devices.backend import GpuBackend
from ecolaunch.errors import PermissionDenied, with_hint
from ecolaunch.safefs import RefusedFile, check_trusted

logger = logging.getLogger(__name__)

__all__ = ["identity_of_uid", "require_cap_privilege", "require_launcher_privilege", "trusted_by_root",
           "warn_unsafe_interpreter"]


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


def require_launcher_privilege(backend: GpuBackend) -> None:
    """Raise PermissionDenied unless this launcher may set power limits itself (``backend.privileged``: root on
    real GPUs; on simulated ones, what the backend was opened with: see ``devices.select.simulated_privilege``).

    Checked before anything is written: an unprivileged launcher that wrote the cap ledger (``caps.json``) would
    leave a file the root agent rightly ignores, and originals nobody restores.
    """
    if not backend.privileged:
        raise PermissionDenied(
            f"setting power limits on {backend.kind} GPUs needs root (running as uid {os.geteuid()})",
            hint="let the cap agent (ecolaunch agent, as root) apply the caps this launcher records",
        )


def trusted_by_root(st: os.stat_result, euid: int | None = None) -> bool:
    """Whether a file with this ``stat`` may steer a privileged process: owned by root or by this user, and
    trusted (``safefs.check_trusted``: a regular file with one link, writable by its owner alone)."""
    euid = os.geteuid() if euid is None else euid
    try:
        check_trusted(st)
    except RefusedFile:
        return False
    return st.st_uid in (0, euid)


def identity_of_uid(uid: int) -> tuple[str, tuple[str, ...]]:
    """The user name and group names of ``uid`` from the account database (``pwd``/``grp``).

    Never the name a job file or the environment claims: a uid without an account is named by its number, which no
    reservation lists.
    """
    try:
        pw = pwd.getpwuid(uid)
    except (KeyError, OverflowError):
        return str(uid), ()
    try:
        gids = os.getgrouplist(pw.pw_name, pw.pw_gid)
    except OSError:
        gids = [pw.pw_gid]
    names = []
    for gid in gids:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return pw.pw_name, tuple(names)


def warn_unsafe_interpreter(euid: int | None = None) -> bool:
    """Log one warning, with the fix, when this process runs as root from an interpreter or package a non-root
    user can write (:func:`ecolaunch.admin.interpreter.interpreter_warning`); returns whether it did. Called once
    at the start of the long-running root commands (the agent, ``calibrate``)."""
    # lazy: interpreter loads argparse; only root commands call this, while every session (status too) loads safety
    from ecolaunch.admin.interpreter import interpreter_warning

    warning = interpreter_warning(euid)
    if warning is not None:
        logger.warning("%s", with_hint(*warning))
    return warning is not None
