"""The shared state directory's layout, created once by the lab admin: :func:`init_state`.

``ecolaunch init-state`` (run as root) calls it, so that the state directory, ``jobs/``, ``hooks/``, ``history/``,
``state.lock`` and ``state.json`` exist with the right owner and mode (:data:`DIR_MODE`, :data:`FILE_MODE`) before
any user runs; run again, it repairs them, through descriptors opened with ``O_NOFOLLOW``. What does not live here:
``gnn/``, ``calibration/``, ``caps.json`` and users' history directories (:mod:`ecolaunch.state.init`). The layout,
its modes and why: docs/threat-model.md#for-lab-admins-installing-the-agent.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path

from ecolaunch.safefs import SHARED_DIR_MODE, SHARED_FILE_MODE
from ecolaunch.state.graph import StateGraph
from ecolaunch.state.init import open_top, repair_extras
from ecolaunch.statedir import HISTORY_DIR, HOOKS_DIR, JOBS_DIR, LOCK_FILE, STATE_FILE

__all__ = ["SHARED_DIRS", "SHARED_FILES", "init_state"]

logger = logging.getLogger(__name__)

DIR_MODE = SHARED_DIR_MODE
FILE_MODE = SHARED_FILE_MODE
SHARED_DIRS = (JOBS_DIR, HOOKS_DIR, HISTORY_DIR)
SHARED_FILES = (LOCK_FILE, STATE_FILE)


def init_state(directory: Path, gid: int, *, uid: int = 0, empty_ledger: bytes | None = None) -> list[str]:
    """Create or repair the layout under ``directory`` for group ``gid`` (owner ``uid``, root by default), and
    what :func:`ecolaunch.state.init.repair_extras` pre-creates (``empty_ledger``: the ledger written when none).

    Returns one line per change, for the CLI to print (nothing when all was already right). Raises StateError when
    ``directory`` is a link or not ``uid``'s (:func:`ecolaunch.state.init.open_top`), OSError when the file system
    refuses (e.g. not run as root).
    """
    directory = Path(directory)
    done: list[str] = []
    top = open_top(directory, uid, done)
    try:
        _own(top, uid, gid, DIR_MODE, str(directory), done)
        for name in SHARED_DIRS:
            fd = _entry(top, name, directory, done, is_dir=True)
            try:
                _own(fd, uid, gid, DIR_MODE, str(directory / name), done)
            finally:
                os.close(fd)
        for name in SHARED_FILES:
            fd = _entry(top, name, directory, done, is_dir=False)
            try:
                _own(fd, uid, gid, FILE_MODE, str(directory / name), done)
            finally:
                os.close(fd)
        repair_extras(top, directory, uid, gid, done, empty_ledger=empty_ledger)
    finally:
        os.close(top)
    return done


def _entry(top: int, name: str, directory: Path, done: list[str], *, is_dir: bool) -> int:
    """An open descriptor of ``name`` under ``top``, of the right kind: created when missing, anything else moved aside."""
    try:
        st = os.stat(name, dir_fd=top, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    wanted = stat.S_ISDIR if is_dir else stat.S_ISREG
    if st is not None and not wanted(st.st_mode):
        aside = f"{name}.untrusted-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        os.rename(name, aside, src_dir_fd=top, dst_dir_fd=top)
        done.append(f"moved {directory / name} (not a {'directory' if is_dir else 'regular file'}, owned by uid "
                    f"{st.st_uid}) aside to {directory / aside}")
        st = None
    if is_dir:
        if st is None:
            os.mkdir(name, 0o700, dir_fd=top)
            done.append(f"created {directory / name}/")
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if st is None:
        fd = os.open(name, os.O_RDWR | flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=top)
        if name == STATE_FILE:  # a valid empty state, so that the first user's launch has nothing to repair
            os.write(fd, json.dumps(StateGraph().to_dict(include_jobs=False), separators=(",", ":"), sort_keys=True).encode())
        done.append(f"created {directory / name}")
        return fd
    flags |= os.O_RDONLY
    fd = os.open(name, flags, dir_fd=top)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between the stat and the open
        os.close(fd)
        raise OSError(f"{directory / name} changed while being checked; run the command again")
    return fd


def _own(fd: int, uid: int, gid: int, mode: int, where: str, done: list[str]) -> None:
    st = os.fstat(fd)
    changes = []
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.fchown(fd, uid, gid)
        changes.append(f"owner {st.st_uid}:{st.st_gid} -> {uid}:{gid}")
    if stat.S_IMODE(os.fstat(fd).st_mode) != mode:  # chown clears setgid: read the mode again
        os.fchmod(fd, mode)
        changes.append(f"mode {stat.S_IMODE(st.st_mode):o} -> {mode:o}")
    if not changes:
        return
    if done and done[-1].startswith("created ") and done[-1].rstrip("/") == f"created {where}":
        done[-1] += f" (mode {mode:o}, owner {uid}:{gid})"  # just created: say how, not what changed
    else:
        done.append(f"fixed {where}: {', '.join(changes)}")
