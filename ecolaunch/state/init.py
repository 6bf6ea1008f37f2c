"""What ``ecolaunch init-state`` does beyond the shared directories of :mod:`ecolaunch.state.layout`.

What lives here: :func:`open_top` (the state directory opened with ``O_NOFOLLOW``; a link, a non-directory or a
directory root does not own is refused), :func:`parent_warnings` (parents in which another user could swap the
path), :func:`repair_extras` (``history/<user>/``, ``gnn/``, ``calibration/`` and ``caps.json`` pre-created, and
what a member squatted there moved aside). What does not: the shared directories and files every member writes
into (:mod:`ecolaunch.state.layout`), what the files mean, the CLI. The layout, its modes and each repair:
docs/threat-model.md#for-lab-admins-installing-the-agent.
"""

from __future__ import annotations

import errno
import grp
import logging
import os
import pwd
import stat
import time
from pathlib import Path

from ecolaunch.errors import StateError
from ecolaunch.safefs import OWN_DIR_MODE, RECORD_MODE, write_fd
from ecolaunch.state.userdirs import expected_owner, user_dir_name
from ecolaunch.statedir import CALIBRATION_DIR, GNN_DIR, HISTORY_DIR, LEDGER_FILE, StateLayout

__all__ = ["ADMIN_DIRS", "close_to_outsiders", "open_top", "parent_warnings", "repair_extras"]

logger = logging.getLogger(__name__)

#: directories only the admin writes (``ecolaunch calibrate``'s results, ``policy train``'s weights)
ADMIN_DIRS = (GNN_DIR, CALIBRATION_DIR)
ADMIN_DIR_MODE = OWN_DIR_MODE
USER_DIR_MODE = OWN_DIR_MODE
#: the cap ledger's mode (its format is ``ecolaunch.caps.ledger``'s, which this layer may not import: the CLI passes
#: the empty document in)
LEDGER_MODE = RECORD_MODE
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


# --- the top -------------------------------------------------------------------------------------
def open_top(directory: Path, uid: int, done: list[str]) -> int:
    """The state directory's descriptor, opened without following a link; created (``0700``, for its owner to set
    up) when missing. Raises StateError for a link, a non-directory, or a directory another uid than ``uid`` owns."""
    directory = Path(directory)
    created = False
    if not os.path.lexists(directory):
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(directory, 0o700)
            created = True
        except FileExistsError:
            pass  # someone made it meanwhile: checked below like anything found there
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise _refused_top(directory) from e
    st = os.fstat(fd)
    if st.st_uid != uid:
        os.close(fd)
        raise StateError(f"the state directory {str(directory)!r} belongs to uid {st.st_uid}, not to uid {uid}: its "
                         "owner could remove or replace every file in it, so init-state does not take it over",
                         hint=f"check what is in it, then give it to root (chown {uid} {directory}) or move it aside "
                              f"(mv {directory} {directory}.old), and run init-state again")
    if created:
        done.append(f"created {directory}")
    return fd


def _refused_top(directory: Path) -> StateError:
    try:
        st = os.lstat(directory)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            target = f" to {os.readlink(directory)!r}"
        except OSError:
            target = ""
        return StateError(f"the state directory {str(directory)!r} is a symbolic link{target}, made by uid "
                          f"{st.st_uid}; init-state does not follow it",
                          hint=f"remove the link (rm {directory}) and run init-state again, or name the real "
                               "directory with --dir")
    owner = "" if st is None else f", owned by uid {st.st_uid}"
    return StateError(f"the state directory {str(directory)!r} is not a directory{owner}",
                      hint=f"move it aside (mv {directory} {directory}.old) and run init-state again")


def parent_warnings(directory: Path, uid: int = 0) -> list[str]:
    """One sentence per parent of ``directory`` in which someone but root or ``uid`` could rename it away (and
    put another directory in its place later): owned by another uid, or writable by a non-root group or by
    everyone without the sticky bit. The parents of its real path are checked too when a link leads there."""
    path = Path(os.path.abspath(directory))
    parents = list(reversed(path.parents))
    real = Path(os.path.realpath(path.parent))
    parents += [p for p in (*reversed(real.parents), real) if p not in parents]
    out = []
    for parent in parents:
        try:
            lst = os.lstat(parent)
            st = os.stat(parent)
        except OSError:
            continue  # a parent that does not exist yet is created by root
        if stat.S_ISLNK(lst.st_mode) and lst.st_uid not in (0, uid):
            out.append(f"{parent} is a symbolic link made by uid {lst.st_uid}")
        if st.st_uid not in (0, uid):
            out.append(f"{parent} belongs to uid {st.st_uid}")
        elif st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            out.append(f"{parent} is writable by everyone without the sticky bit (mode {stat.S_IMODE(st.st_mode):o})")
        elif st.st_mode & stat.S_IWGRP and st.st_gid != 0 and not st.st_mode & stat.S_ISVTX:
            out.append(f"{parent} is writable by group {_group_name(st.st_gid)} (mode {stat.S_IMODE(st.st_mode):o})")
    return out


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# --- what a member could squat -------------------------------------------------------------------
def repair_extras(top: int, directory: Path, uid: int, gid: int, done: list[str], *,
                  empty_ledger: bytes | None = None) -> None:
    """Pre-create and repair ``history/<user>/``, ``gnn/``, ``calibration/`` and ``caps.json`` under ``top``
    (docs/threat-model.md#for-lab-admins-installing-the-agent); one line per change goes to ``done``. ``empty_ledger``: the document written when there
    is no ledger (``ecolaunch.caps.ledger`` owns its format; None: a missing ledger is left for the agent)."""
    directory = Path(directory)
    history = os.open(HISTORY_DIR, _DIR_FLAGS, dir_fd=top)  # layout.init_state made it a root directory just now
    try:
        _repair_history(history, StateLayout(directory).history, gid, done)
    finally:
        os.close(history)
    for name in ADMIN_DIRS:
        _admin_dir(top, name, directory, uid, gid, done)
    _ledger(top, directory, uid, gid, done, empty_ledger)
    close_to_outsiders(top, directory, done)


def close_to_outsiders(top: int, directory: Path, done: list[str], *, depth: int = 4) -> None:
    """Take every permission for others (``o=``) off what lies in the tree: job files, history records, results,
    the simulated GPUs' files, a state directory laid out before outsiders were shut out. One line per directory
    in which something changed; links and special files are never opened (the rest of this module moves them)."""
    _strip_others(top, directory, done, depth)


def _strip_others(fd: int, where: Path, done: list[str], depth: int) -> None:
    fixed = 0
    for name in sorted(os.listdir(fd)):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            continue  # a link is never followed; a FIFO or a device is never opened
        is_dir = stat.S_ISDIR(st.st_mode)
        flags = _DIR_FLAGS if is_dir else os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            sub = os.open(name, flags, dir_fd=fd)
        except OSError:
            continue  # swapped for a link or removed meanwhile
        try:
            mode = stat.S_IMODE(os.fstat(sub).st_mode)
            if mode & 0o007:
                os.fchmod(sub, mode & ~0o007)
                fixed += 1
            if is_dir and depth > 1:
                _strip_others(sub, where / name, done, depth - 1)
        finally:
            os.close(sub)
    if fixed:
        done.append(f"fixed {fixed} entr{'y' if fixed == 1 else 'ies'} in {where}/: no access for users outside the "
                    "group")


def group_members(gid: int) -> list[tuple[str, int]]:
    """``(history directory name, uid)`` of root and of every account in group ``gid`` (listed in it, or with it
    as their primary group), each uid once."""
    uids = {0}
    try:
        names = grp.getgrgid(gid).gr_mem
    except KeyError:
        names = []
    for name in names:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
    uids.update(p.pw_uid for p in pwd.getpwall() if p.pw_gid == gid)
    return sorted((user_dir_name(u), u) for u in uids)


def _repair_history(fd: int, where: Path, gid: int, done: list[str]) -> None:
    me = os.geteuid()
    for name in sorted(os.listdir(fd)):
        owner = expected_owner(name)
        if owner is None:
            continue  # no account by that name: readers never trust it (``userdirs.UserTree.users``)
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == owner:
            _close_user_dir(fd, name, owner, where, done)
            continue
        if me not in (0, owner):
            continue  # only root may repair another user's directory
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a directory"
        # hidden, so that readers pass it over without a warning; the squatter keeps their own files
        aside = _move_aside(fd, name, hidden=True)
        # made anew at once, its user's: left missing, the squatter could simply take the name again
        _make_dir(fd, name, owner, gid, USER_DIR_MODE)
        done.append(f"moved {where / name} ({kind} of uid {st.st_uid}, but it is {name}'s, uid {owner}) aside to "
                    f"{where / aside}; made a fresh one (mode {USER_DIR_MODE:o}, owner {owner}:{gid})")
    for name, owner in group_members(gid):
        if me in (0, owner) and not _exists(fd, name):
            _make_dir(fd, name, owner, gid, USER_DIR_MODE)
            done.append(f"created {where / name}/ (mode {USER_DIR_MODE:o}, owner {owner}:{gid})")


def _close_user_dir(fd: int, name: str, owner: int, where: Path, done: list[str]) -> None:
    """A user's own history directory: writable by that user alone, and every directory in it theirs."""
    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    try:
        mode = stat.S_IMODE(os.fstat(sub).st_mode)
        if mode & _OTHERS_WRITE and os.geteuid() in (0, owner):
            os.fchmod(sub, mode & ~_OTHERS_WRITE)
            done.append(f"fixed {where / name}: mode {mode:o} -> {mode & ~_OTHERS_WRITE:o}")
        for kind in sorted(os.listdir(sub)):
            st = os.stat(kind, dir_fd=sub, follow_symlinks=False)
            if kind.startswith(".") or st.st_uid == owner or os.geteuid() != 0:
                continue
            aside = _move_aside(sub, kind, hidden=True)
            done.append(f"moved {where / name / kind} (owned by uid {st.st_uid}, in {name}'s directory) aside to "
                        f"{where / name / aside}")
    finally:
        os.close(sub)


def _admin_dir(top: int, name: str, directory: Path, uid: int, gid: int, done: list[str]) -> None:
    try:
        st = os.stat(name, dir_fd=top, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and (not stat.S_ISDIR(st.st_mode) or st.st_uid != uid):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a directory"
        aside = _move_aside(top, name)
        done.append(f"moved {directory / name} ({kind}, owned by uid {st.st_uid}) aside to {directory / aside}")
        st = None
    if st is None:
        _make_dir(top, name, uid, gid, ADMIN_DIR_MODE)
        done.append(f"created {directory / name}/ (mode {ADMIN_DIR_MODE:o}, owner {uid}:{gid})")
        return
    mode = stat.S_IMODE(st.st_mode)
    if mode & _OTHERS_WRITE:
        sub = os.open(name, _DIR_FLAGS, dir_fd=top)
        try:
            os.fchmod(sub, mode & ~_OTHERS_WRITE)
        finally:
            os.close(sub)
        done.append(f"fixed {directory / name}: mode {mode:o} -> {mode & ~_OTHERS_WRITE:o}")


def _ledger(top: int, directory: Path, uid: int, gid: int, done: list[str], empty: bytes | None) -> None:
    """``caps.json``: a regular file of ``uid``'s that nobody else may write, else its content was never trusted
    (the agent ignores it) and it is moved aside. Created empty when missing, so that nobody can take the name."""
    where = StateLayout(directory).ledger
    for _ in range(2):  # a second look when the agent wrote it between our look and our create
        try:
            st = os.stat(LEDGER_FILE, dir_fd=top, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid and not st.st_mode & _OTHERS_WRITE:
                return
            kind = "a regular file" if stat.S_ISREG(st.st_mode) else "not a regular file"
            aside = _move_aside(top, LEDGER_FILE)
            done.append(f"moved {where} ({kind}, owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}, "
                        f"which the cap agent never trusts) aside to {directory / aside}")
        if empty is None:
            return
        try:
            fd = os.open(LEDGER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=top)
        except FileExistsError:
            continue
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, LEDGER_MODE)
            write_fd(fd, empty)
        finally:
            os.close(fd)
        done.append(f"created {where} (mode {LEDGER_MODE:o}, owner {uid}:{gid}: an empty ledger)")
        return
    raise OSError(f"{where} changed while being checked; run the command again")


# --- helpers -------------------------------------------------------------------------------------
def _exists(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _make_dir(parent: int, name: str, owner: int, gid: int, mode: int) -> None:
    """mkdir ``name`` (0700 first, so that nobody enters it before it is given away), then owner and mode by its
    descriptor: a directory swapped in between is never the one changed."""
    os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        if (owner, gid) != (os.fstat(fd).st_uid, os.fstat(fd).st_gid):
            os.fchown(fd, owner, gid)
        os.fchmod(fd, mode)  # after the chown, which clears setgid
    finally:
        os.close(fd)


def _move_aside(parent: int, name: str, *, hidden: bool = False) -> str:
    aside = f"{'.' if hidden else ''}{name}.untrusted-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=parent)
    return aside

