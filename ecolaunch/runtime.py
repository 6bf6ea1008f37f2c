"""The runtime wiring every process does first: the environment, the admin policy and the state directory it
implies (:func:`resolve`), the GPU backend (:func:`open_gpus`), and who is asking (:func:`current_user`,
:func:`current_groups`).

Its own layer, above ``launch`` and ``sim`` and below ``calibrate``: the CLI, the canned workloads of
``calibrate`` and ``benchmarks/gpu_check.py`` open GPUs through it, and simulated GPUs answer through the
simulator's measured models (:func:`ecolaunch.sim.reading.measured_reading`), which ``devices`` may not import.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ecolaunch.admin.binding import binding_policy
from ecolaunch.admin.rules import Rules
from ecolaunch.config import Environment

if TYPE_CHECKING:
    from ecolaunch.launch.pipeline import LaunchContext


def resolve(env: Mapping[str, str] | None = None) -> tuple[Environment, Rules]:
    """The environment and the policy that binds this process (``admin.binding``: the admin's, which a user's
    ``ECOLAUNCH_POLICY`` may only tighten on a shared state directory); the policy's ``[state] dir`` applies unless
    ``ECOLAUNCH_STATE_DIR`` is set."""
    env = os.environ if env is None else env
    binding = binding_policy(env)
    return Environment.from_env(env, binding.policy_state_dir), binding.rules


def open_gpus(environment: Environment):
    """The GPU backend for this environment: NVML, or simulated GPUs that answer through the simulator's
    measured models (raises DriverNotFound when neither is available)."""
    from ecolaunch.devices.select import open_backend  # not at import: status and the hooks stay light (pynvml)

    if environment.simulate:
        from ecolaunch.sim.reading import measured_reading  # only for simulated GPUs: the simulator loads numpy

        return open_backend(environment.simulate, environment.state_dir, reading=measured_reading)
    return open_backend(None, environment.state_dir)


def launch_context(env: Mapping[str, str]) -> LaunchContext:
    """What a launch resolves once, from ``env``: the environment and the binding policy (:func:`resolve`), who
    launches, and how to open the GPUs."""
    from ecolaunch.launch.pipeline import LaunchContext  # lazy: the launcher loads for a launch only

    environment, rules = resolve(env)
    return LaunchContext(environment, rules, current_user(), current_groups(), functools.partial(open_gpus, environment))


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
