"""What every command resolves first: the environment, the admin policy, and the state directory it implies."""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Mapping

from ecolaunch.admin.rules import Rules, load_rules
from ecolaunch.config import Environment


def resolve(env: Mapping[str, str] | None = None) -> tuple[Environment, Rules]:
    """The environment and the effective admin policy; the policy's ``[state] dir`` applies unless
    ``ECOLAUNCH_STATE_DIR`` is set."""
    env = os.environ if env is None else env
    first = Environment.from_env(env)
    rules, _ = load_rules(first.policy_file)
    if rules.state_dir is None:
        return first, rules
    return Environment.from_env(env, rules.state_dir), rules


def open_gpus(environment: Environment):
    """The GPU backend for this environment: NVML, or simulated GPUs that answer through the simulator's
    measured models (raises DriverNotFound when neither is available)."""
    from ecolaunch.devices.select import open_backend

    if environment.simulate:
        from ecolaunch.sim.fitted import measured_reading

        return open_backend(environment.simulate, environment.state_dir, reading=measured_reading)
    return open_backend(None, environment.state_dir)


def current_user() -> str:
    """This process's user name, from the kernel's uid and the account database: never from ``LOGNAME``/``USER``,
    which anyone can set (``env LOGNAME=alice ecolaunch ...`` must not get alice's reserved GPUs). A uid without an
    account is named by its number."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def current_groups() -> tuple[str, ...]:
    names = []
    for gid in os.getgroups():
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return tuple(names)


def stderr_logging(prefix: str, verbose: bool):
    """Send ecolaunch's log to stderr as ``<prefix>: LEVEL message`` (WARNING, or INFO with ``verbose``); returns the
    function that puts the previous setup back (the long-running commands: agent, calibrate)."""
    import logging
    import sys

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: %(levelname)s %(message)s"))
    root = logging.getLogger("ecolaunch")
    saved = (root.handlers[:], root.level, root.propagate)
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False

    def restore() -> None:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]

    return restore
