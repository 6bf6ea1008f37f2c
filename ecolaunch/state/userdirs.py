"""Per-user sub-directories of a shared directory: ``<shared>/<user>/<kind>/<name>``, each user's own.

What lives here: :class:`UserTree`, through which the job history is written and read: each user writes only below
a directory they own and nobody else may write, and a reader trusts a file only when the kernel says it belongs to
the user whose directory holds it; every access goes through :mod:`ecolaunch.safefs`. What does not: what the files
mean (``ecolaunch.profile.history``). Modes and why: docs/threat-model.md#who-can-write-what.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ecolaunch.safefs import OWN_DIR_MODE, RECORD_MODE, open_dir, read_at, shared_dir_mode, write_at
from ecolaunch.statedir import HISTORY_JOBS, HISTORY_PROFILES

__all__ = ["Entry", "UserTree", "account_name", "expected_owner", "user_dir_name"]

logger = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
#: names a user directory never takes: the directories of the layout before per-user directories
_RESERVED = frozenset({HISTORY_JOBS, HISTORY_PROFILES})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def account_name(uid: int) -> str:
    """The account name of ``uid`` (its number when it has no account)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def user_dir_name(uid: int) -> str:
    """The directory name of ``uid``: its account name when that is a safe file name, else its number."""
    name = account_name(uid)
    return name if _SAFE_NAME.match(name) and name not in _RESERVED else str(uid)


def expected_owner(name: str) -> int | None:
    """The uid whose directory ``name`` is (:func:`user_dir_name` gives that uid this name), or None when no
    user's directory is called so. Anyone else who owns a directory of this name squats it: its user's files
    can never be written there (``ecolaunch init-state`` moves it aside)."""
    if not _SAFE_NAME.match(name) or name in _RESERVED:
        return None
    if name.isdigit():
        uid = int(name)
    else:
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            return None
    return uid if user_dir_name(uid) == name else None


@dataclass(frozen=True, slots=True)
class Entry:
    """One file of one user: who (directory name and uid), which file, when it was last modified."""

    user: str
    uid: int
    name: str
    mtime: float


class UserTree:
    """``<shared>/<user>/<kind>/`` for every user; this process writes only its own (``os.geteuid()``).

    Args:
        shared: the shared parent (e.g. ``<state dir>/history``); its parent must exist.
    """

    def __init__(self, shared: Path) -> None:
        self.shared = Path(shared)
        self.uid = os.geteuid()
        self.user = user_dir_name(self.uid)

    def __repr__(self) -> str:
        return f"UserTree({str(self.shared)!r})"

    def own_dir(self, kind: str) -> Path:
        return self.shared / self.user / kind

    # --- writing -----------------------------------------------------------------------------------
    def write(self, kind: str, name: str, data: bytes) -> Path:
        """Replace ``<shared>/<own user>/<kind>/<name>`` atomically (mode 0640: ``safefs.RECORD_MODE``), creating the directories.

        Raises RefusedFile when something in the way is a link, not a directory, or not this user's alone, and
        OSError when the file system refuses.
        """
        if not os.path.lexists(self.shared.parent):
            # a state directory nobody has used yet: nothing can have been planted in what does not exist
            self.shared.parent.mkdir(parents=True, exist_ok=True)
        parent = os.open(self.shared.parent, _DIR_FLAGS)
        try:
            root = open_dir(self.shared.name, parent_fd=parent, create_mode=shared_dir_mode(os.fstat(parent).st_mode))
        finally:
            os.close(parent)
        try:
            mine = open_dir(self.user, parent_fd=root, create_mode=OWN_DIR_MODE, owners={self.uid}, private=True)
        finally:
            os.close(root)
        try:
            kind_fd = open_dir(kind, parent_fd=mine, create_mode=OWN_DIR_MODE, owners={self.uid}, private=True)
        finally:
            os.close(mine)
        try:
            write_at(kind_fd, name, data, mode=RECORD_MODE)
        finally:
            os.close(kind_fd)
        return self.own_dir(kind) / name

    def own_problem(self, kinds: tuple[str, ...] = ()) -> str | None:
        """Why this user's directory (or one of its ``kinds``) can never be written by this user, or None: it is
        a link or not a directory, or someone else owns it (a member made it first). A missing one is no problem
        (the first write creates it); neither is one of this user's that is merely left open (it is repaired)."""
        try:
            root = open_dir(self.shared)
        except OSError:
            return None  # nothing there yet, or a shared directory the writer reports on itself
        try:
            return self._problem(root, self.user, self.shared) or self._kinds_problem(root, kinds)
        except OSError:
            return None
        finally:
            os.close(root)

    def _problem(self, parent: int, name: str, where: Path) -> str | None:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return f"{where / name} is not a directory (it belongs to uid {st.st_uid})"
        if st.st_uid != self.uid:
            return f"{where / name} belongs to uid {st.st_uid}, not to you (uid {self.uid})"
        return None

    def _kinds_problem(self, root: int, kinds: tuple[str, ...]) -> str | None:
        try:
            mine = os.open(self.user, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=root)
        except FileNotFoundError:
            return None
        try:
            for kind in kinds:
                problem = self._problem(mine, kind, self.shared / self.user)
                if problem:
                    return problem
            return None
        finally:
            os.close(mine)

    def squatted(self) -> list[tuple[str, int, int]]:
        """``(name, its user's uid, the uid that owns it)`` of every directory named after a user but owned by
        someone else (see :func:`expected_owner`)."""
        try:
            root = open_dir(self.shared)
        except OSError:
            return []
        out = []
        try:
            for name in sorted(os.listdir(root)):
                owner = expected_owner(name)
                if owner is None:
                    continue
                try:
                    st = os.stat(name, dir_fd=root, follow_symlinks=False)
                except OSError:
                    continue
                if st.st_uid != owner or not stat.S_ISDIR(st.st_mode):
                    out.append((name, owner, st.st_uid))
        finally:
            os.close(root)
        return out

    # --- reading -----------------------------------------------------------------------------------
    def read(self, user: str, uid: int, kind: str, name: str, max_bytes: int) -> bytes:
        """The bytes of one user's file; raises FileNotFoundError, RefusedFile or OSError."""
        fd = self._open_kind(user, uid, kind)
        try:
            return read_at(fd, name, max_bytes, owners={uid}, trusted=True)[0]
        finally:
            os.close(fd)

    def read_own(self, kind: str, name: str, max_bytes: int) -> bytes:
        return self.read(self.user, self.uid, kind, name, max_bytes)

    def users(self) -> list[tuple[str, int]]:
        """``(directory name, uid)`` of every user directory whose owner the kernel confirms, own first."""
        try:
            root = open_dir(self.shared)
        except FileNotFoundError:
            return []
        except OSError as e:
            logger.warning("ignoring %s: %s", self.shared, e)
            return []
        out = []
        try:
            for name in sorted(os.listdir(root)):
                if not _SAFE_NAME.match(name) or name in _RESERVED:
                    continue
                try:
                    st = os.stat(name, dir_fd=root, follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    continue
                if user_dir_name(st.st_uid) != name:
                    logger.warning("ignoring %s: it belongs to uid %d, not to user %s", self.shared / name, st.st_uid, name)
                    continue
                out.append((name, st.st_uid))
        finally:
            os.close(root)
        out.sort(key=lambda u: (u[1] != self.uid, u[0]))
        return out

    def entries(self, kind: str, suffix: str = ".json") -> Iterator[Entry]:
        """Every user's files of ``kind`` ending in ``suffix`` (unread); unusable directories are skipped."""
        for user, uid in self.users():
            try:
                fd = self._open_kind(user, uid, kind)
            except FileNotFoundError:
                continue
            except OSError as e:
                logger.warning("ignoring %s: %s", self.shared / user / kind, e)
                continue
            try:
                for name in os.listdir(fd):
                    if name.startswith(".") or not name.endswith(suffix):
                        continue
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        yield Entry(user, uid, name, st.st_mtime)
            finally:
                os.close(fd)

    def _open_kind(self, user: str, uid: int, kind: str) -> int:
        root = open_dir(self.shared)
        try:
            mine = open_dir(user, parent_fd=root, owners={uid}, private=True)
        finally:
            os.close(root)
        try:
            return open_dir(kind, parent_fd=mine, owners={uid}, private=True)
        finally:
            os.close(mine)

