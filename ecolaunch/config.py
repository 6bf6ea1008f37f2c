"""Resolved configuration: pure data, built once by the CLI from flags > environment > admin policy > defaults.

Nothing below this module reads ``os.environ``; the CLI resolves values here and passes them down. The
environment variable names live here as constants so that help texts, docs and tests share them.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ecolaunch.errors import ConfigError
from ecolaunch.statedir import StateLayout

# --- environment variables read by the CLI -------------------------------------------------------
ENV_SIMULATE = "ECOLAUNCH_SIMULATE"  # simulated GPUs: "4xA100-SXM4-80GB", "2xRTX4090+2xA6000" or a TOML file
ENV_STATE_DIR = "ECOLAUNCH_STATE_DIR"  # where the state graph, lock and history live
ENV_POLICY_FILE = "ECOLAUNCH_POLICY"  # the lab admin's policy file (default /etc/ecolaunch/policy.toml)
# (the variables of the launch's own options are declared with them: ecolaunch.launch.options.LaunchOptions; these
# two are read by other commands as well)
ENV_JSON = "ECOLAUNCH_JSON"
ENV_ALLOWED_SLOWDOWN = "ECOLAUNCH_ALLOWED_SLOWDOWN"
ENV_PLAN_TIMEOUT = "ECOLAUNCH_PLAN_TIMEOUT"  # seconds a multi-node job's launchers wait for each other's plan
ENV_GNN_WEIGHTS = "ECOLAUNCH_GNN_WEIGHTS"  # a GNN weight file; default: the state directory's (StateLayout.gnn_weights) when present

# --- environment variables ecolaunch sets for the workers it launches ----------------------------
ENV_JOB_ID = "ECOLAUNCH_JOB_ID"

DEFAULT_STATE_DIR = Path("/var/tmp/ecolaunch")
DEFAULT_POLICY_FILE = Path("/etc/ecolaunch/policy.toml")
DEFAULT_PLACEMENT_POLICY = "curve"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def yes_no(raw: str) -> bool | None:
    """True or False for a clear yes or no (1/true/yes/on, 0/false/no/off, any case; empty is no), else None."""
    word = raw.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """Read a boolean environment variable; anything but a clear yes/no is a ConfigError."""
    value = yes_no(env.get(name, ""))
    if value is None:
        raise ConfigError(f"{name}={env[name]!r} is not a boolean", hint=f"set {name} to 1 or 0")
    return value


def plan_timeout_s(env: Mapping[str, str]) -> float | None:
    """``$ECOLAUNCH_PLAN_TIMEOUT`` (seconds > 0) or None (the launchers of a multi-node job wait as long as torch's
    rendezvous would); anything else is a ConfigError."""
    raw = env.get(ENV_PLAN_TIMEOUT, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{ENV_PLAN_TIMEOUT}={env[ENV_PLAN_TIMEOUT]!r} is not a number of seconds > 0",
                          hint=f"set {ENV_PLAN_TIMEOUT} to e.g. 120, or unset it (torch's rendezvous timeout)")
    return value


def default_state_dir(env: Mapping[str, str], policy_dir: Path | None = None) -> Path:
    """The state directory: ``$ECOLAUNCH_STATE_DIR``, else the admin policy's ``[state] dir``, else
    ``/var/tmp/ecolaunch``, shared by every user of the host.

    A simulated machine gets its own sub-directory (named after a hash of its spec) so that simulated
    bookings never mix with a real host's.
    """
    if env.get(ENV_STATE_DIR):
        return Path(env[ENV_STATE_DIR]).expanduser()
    base = policy_dir or DEFAULT_STATE_DIR
    spec = env.get(ENV_SIMULATE, "").strip()
    if spec:
        digest = hashlib.sha1(spec.encode()).hexdigest()[:10]
        return base / f"sim-{digest}"
    return base


def _trusted_weights(path: Path) -> bool:
    """Whether the state directory's weight file may steer this user's launches: it and its directory exist, are
    no links, belong to root or to this user, and nobody else may write them (the rule of the cap ledger). A
    colleague's file is not an error, just not used."""
    euid = os.geteuid()
    try:
        for entry, kind in ((path.parent, stat.S_ISDIR), (path, stat.S_ISREG)):
            st = os.lstat(entry)
            if not kind(st.st_mode) or st.st_uid not in (0, euid) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
            if kind is stat.S_ISREG and st.st_nlink != 1:  # the rule of trust (safefs.check_trusted): one link
                return False
    except OSError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Environment:
    """Where ecolaunch finds its machine: resolved from the environment once, by the CLI."""

    state_dir: Path
    simulate: str | None
    policy_file: Path
    #: the GNN weight file the ``gnn`` policy uses (None: the weights shipped in the package)
    gnn_weights: Path | None = None
    #: where ``gnn_weights`` comes from: ``ECOLAUNCH_GNN_WEIGHTS``, ``state directory``, or None (shipped)
    gnn_weights_source: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, policy_state_dir: Path | None = None) -> Environment:
        """Resolve from ``env`` (default ``os.environ``); ``policy_state_dir`` is the admin policy's ``[state] dir``.

        The GNN weights: ``$ECOLAUNCH_GNN_WEIGHTS``, else the state directory's ``gnn/weights.pt`` when
        ``ecolaunch policy train`` wrote one there that this user may trust, else None (the shipped weights).
        """
        env = os.environ if env is None else env
        policy = env.get(ENV_POLICY_FILE)
        state_dir = default_state_dir(env, policy_state_dir)
        weights, source = None, None
        if env.get(ENV_GNN_WEIGHTS, "").strip():
            weights, source = Path(env[ENV_GNN_WEIGHTS]).expanduser(), ENV_GNN_WEIGHTS
        elif _trusted_weights(lab := StateLayout(state_dir).gnn_weights):
            weights, source = lab, "state directory"
        return cls(
            state_dir=state_dir,
            simulate=env.get(ENV_SIMULATE, "").strip() or None,
            policy_file=Path(policy) if policy else DEFAULT_POLICY_FILE,
            gnn_weights=weights,
            gnn_weights_source=source,
        )
