"""Which policy binds a process: the admin's, and what a user's own policy file may add to it.

What lives here: the rule (root's policy, a private state directory's user policy, or the admin's on a shared one)
and :func:`tightened` (what a user's own file may add: only what tightens). The rule and what tightens:
docs/threat-model.md#the-admins-policy-binds-every-member. What does not live here: reading and validating a policy
file (``admin.rules``), the environment (``config.Environment``), the wiring (``runtime.resolve``).
"""

from __future__ import annotations

import dataclasses
import grp
import logging
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ecolaunch.admin.rules import Rules, load_rules
from ecolaunch.config import DEFAULT_POLICY_FILE, ENV_POLICY_FILE, ENV_STATE_DIR, default_state_dir
from ecolaunch.safefs import RefusedFile, read_file

__all__ = ["Binding", "binding_policy", "private_state_dir", "tightened"]

logger = logging.getLogger(__name__)

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: the largest policy file read for the trust check (the same file is then parsed by ``load_rules``)
_MAX_POLICY_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """The policy a process obeys: the rules, the ``[state] dir`` that applies (None: the built-in default), where
    the rules came from, and the user's settings that were ignored (empty: none), each as ``name (where)``."""

    rules: Rules
    policy_state_dir: Path | None
    source: str
    ignored: tuple[str, ...] = ()


def binding_policy(env: Mapping[str, str], euid: int | None = None) -> Binding:
    """The policy that binds this process, and the state directory it implies (docs/threat-model.md#the-admins-policy-binds-every-member)."""
    euid = os.geteuid() if euid is None else euid
    named = env.get(ENV_POLICY_FILE, "").strip()
    if not named:
        admin, _ = load_rules(DEFAULT_POLICY_FILE)
        return Binding(admin, admin.state_dir, str(DEFAULT_POLICY_FILE))
    own, sources = load_rules(Path(named))
    if euid == 0:
        return Binding(own, own.state_dir, named)
    admin, _ = load_rules(DEFAULT_POLICY_FILE)
    base = own.state_dir or admin.state_dir  # a user's file that names no directory still lands in the admin's
    state_dir = default_state_dir(env, base)
    if private_state_dir(state_dir, euid) or _admins_file_for(Path(named), own, state_dir, admin, env):
        return Binding(own, base, named)
    rules, ignored = tightened(admin, own, sources)
    if ignored:
        logger.warning("%s=%s may only tighten the admin's policy on the shared state directory %s; ignored: %s",
                       ENV_POLICY_FILE, named, state_dir, ", ".join(ignored))
    return Binding(rules, base, f"{DEFAULT_POLICY_FILE}, tightened by {named}", tuple(ignored))


def private_state_dir(path: Path, euid: int) -> bool:
    """Whether ``path`` (or, while it does not exist, the nearest directory above it) is this user's alone: owned by
    ``euid``, writable by nobody else (a group-writable one only when its group has no other member)."""
    path = Path(os.path.abspath(path))
    for entry in (path, *path.parents):
        try:
            st = os.stat(entry)
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != euid or st.st_mode & stat.S_IWOTH:
            return False
        return not st.st_mode & stat.S_IWGRP or _alone_in_group(st.st_gid, euid)
    return False


def _alone_in_group(gid: int, uid: int) -> bool:
    """Whether no account but ``uid``'s belongs to group ``gid`` (a user's private group)."""
    import pwd  # lazy: only for a group-writable private directory

    try:
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    members = {n for n in group.gr_mem}
    members.update(p.pw_name for p in pwd.getpwall() if p.pw_gid == gid)
    try:
        mine = pwd.getpwuid(uid).pw_name
    except KeyError:
        return False
    return members <= {mine}


def _admins_file_for(path: Path, rules: Rules, state_dir: Path, admin: Rules, env: Mapping[str, str]) -> bool:
    """Whether ``path`` is a policy the admin wrote for ``state_dir``: a trusted file of root's in a directory only
    root may write, naming ``state_dir`` (or a directory above it) as its ``[state] dir``, where
    ``/etc/ecolaunch/policy.toml`` names no such directory itself (then that file is the admin's word)."""
    if rules.state_dir is None or not _below(state_dir, rules.state_dir):
        return False
    if DEFAULT_POLICY_FILE.exists() and _below(state_dir, default_state_dir({**env, ENV_STATE_DIR: ""},
                                                                               admin.state_dir)):
        return False
    try:
        read_file(path, _MAX_POLICY_BYTES, owners={0}, trusted=True)
        parent = os.stat(path.parent)
    except (RefusedFile, OSError):
        return False
    # a directory only root may write, or a sticky one (nobody renames or replaces root's file in it)
    return parent.st_uid == 0 and (not parent.st_mode & _OTHERS_WRITE or bool(parent.st_mode & stat.S_ISVTX))


def _below(path: Path, top: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(top))


# --- tightening -----------------------------------------------------------------------------------
def _at_most(user: float | None, admin: float | None) -> bool:
    """A limit where None means none: the user's is within the admin's."""
    return (math.inf if user is None else user) <= (math.inf if admin is None else admin)


#: scalar fields a user's file may set only in one direction: ``(field, it is at least as tight)``
_SCALARS = {
    "allow_colocation": lambda u, a: a or not u,
    "backfill": lambda u, a: a or not u,
    "max_jobs_per_gpu": lambda u, a: u <= a,
    "memory_margin_mib": lambda u, a: u >= a,
    "max_slowdown_pct": lambda u, a: u <= a,
    "eta": lambda u, a: u >= a,
    "wait_weight": lambda u, a: u <= a,
    "profiling_max_iterations": _at_most,
    "profiling_max_time_s": _at_most,
    "profiling_max_caps": _at_most,
    "profiling_colleagues": lambda u, a: a or not u,
    "state_group": lambda u, a: a is None or u == a,
}
#: what a user's file may set freely: a job's own default, and where the state lives (a location, not a rule:
#: ``$ECOLAUNCH_STATE_DIR`` says the same)
_FREE = ("share_if_sooner", "state_dir")
#: what only the admin sets: the caps' bounds, the GPUs the agent manages, the power budget
_ADMINS = ("cap_bounds_model", "cap_bounds_index", "agent_gpus", "power_max_total_w")


def tightened(admin: Rules, user: Rules, sources: Mapping[str, str]) -> tuple[Rules, list[str]]:
    """The admin's rules with every setting of the user's file that is at least as tight (``sources``: where each
    of the user's settings came from, as ``load_rules`` returns them); and the settings ignored because they would
    loosen a rule, each as ``name (file:line)``."""
    changes: dict[str, object] = {}
    ignored: list[str] = []

    def set_by_user(name: str) -> str | None:
        where = sources.get(name, "default")
        return None if where == "default" else where

    for name, tighter in _SCALARS.items():
        where = set_by_user(name)
        if where is None or getattr(user, name) == getattr(admin, name):
            continue
        if tighter(getattr(user, name), getattr(admin, name)):
            changes[name] = getattr(user, name)
        else:
            ignored.append(f"{name} = {getattr(user, name)!r} ({where})")
    for name in _FREE:
        if set_by_user(name) is not None:
            changes[name] = getattr(user, name)
    for name in _ADMINS:
        keyed = [k for k in sources if k == name or k.startswith(f"{name}[")]
        if any(sources[k] != "default" for k in keyed) and getattr(user, name) != getattr(admin, name):
            ignored.append(f"{name} ({sources.get(name) or sources[keyed[0]]}: only the admin sets it)")
    limits = dict(admin.user_gpu_limit)
    for key, value in user.user_gpu_limit.items():
        theirs = admin.user_gpu_limit.get(key, admin.user_gpu_limit.get("*"))
        if _at_most(value, theirs):
            limits[key] = value
        else:
            ignored.append(f"user_gpu_limit[{key}] = {value} ({sources.get(f'user_gpu_limit[{key}]', '?')})")
    reserved, reserved_groups = dict(admin.reserved), dict(admin.reserved_groups)
    for key in sorted(set(user.reserved) | set(user.reserved_groups)):
        users, groups = user.reserved.get(key, ()), user.reserved_groups.get(key, ())
        admins = key in admin.reserved or key in admin.reserved_groups
        # on a GPU the admin reserved, the user's file may only name fewer of those who may use it (and never none:
        # an empty reservation would be no reservation)
        if admins and (not (users or groups) or not set(users) <= set(admin.reserved.get(key, ()))
                       or not set(groups) <= set(admin.reserved_groups.get(key, ()))):
            ignored.append(f"reserved[{key}] ({sources.get(f'reserved[{key}]', '?')}: opens a GPU the admin "
                           "reserved)")
            continue
        for table, names in ((reserved, users), (reserved_groups, groups)):
            if names:
                table[key] = names
            else:
                table.pop(key, None)
    merged = dataclasses.replace(admin, **changes, user_gpu_limit=limits, reserved=reserved,
                                 reserved_groups=reserved_groups)
    if set_by_user("default_slowdown_pct") is not None:
        default = min(user.default_slowdown_pct, merged.max_slowdown_pct)
        if default < user.default_slowdown_pct:
            ignored.append(f"default_slowdown_pct = {user.default_slowdown_pct!r} "
                           f"({sources['default_slowdown_pct']}: above the admin's maximum)")
        merged = dataclasses.replace(merged, default_slowdown_pct=default)
    elif merged.default_slowdown_pct > merged.max_slowdown_pct:
        merged = dataclasses.replace(merged, default_slowdown_pct=merged.max_slowdown_pct)
    return merged, ignored
