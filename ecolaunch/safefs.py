"""File access under a directory that other users can write: never follow a link, never open a special file.

What lives here: the primitives every reader and writer of the shared state directory uses: :func:`open_dir`
(one directory relative to its parent's descriptor, ``O_NOFOLLOW``), :func:`read_at` / :func:`read_file` (one
regular file, bounded; with ``trusted``, the rule of trust: :func:`check_trusted`), :func:`open_lock`,
:func:`write_at` / :func:`write_file` (atomic replacement) and :func:`write_in_place`, the modes of the shared tree
(:data:`SHARED_DIR_MODE` and its kin), and :class:`RefusedFile` (an ``OSError``). It sits in the base beside
``errors`` and ``clock`` because every layer that touches the shared directory uses it. The rule of trust and what
each primitive closes: docs/threat-model.md#who-can-write-what.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Collection, Iterator

__all__ = ["OWN_DIR_MODE", "RECORD_MODE", "SHARED_DIR_MODE", "SHARED_FILE_MODE", "RefusedFile", "check_owned_dir",
           "check_trusted", "dir_fd", "open_dir", "open_lock", "read_at", "read_file", "shared_dir_mode", "write_at",
           "write_fd", "write_file", "write_in_place"]

#: a directory every member writes into (the state directory, ``jobs/``, ``hooks/``, ``history/``): setgid (files
#: get the group), sticky (nobody renames another's entries), nothing for outsiders
SHARED_DIR_MODE = 0o3770
#: a directory one user (or the admin) alone writes and the group reads (``history/<user>/``, ``gnn/``)
OWN_DIR_MODE = 0o750
#: a file its owner alone writes and the group reads: job files, history records, the cap ledger, results
RECORD_MODE = 0o640
#: a file every member writes: ``state.lock``, ``state.json``, the simulated GPUs' state and lock. Never trusted
SHARED_FILE_MODE = 0o660

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class RefusedFile(OSError):
    """A path that must not be used: a symbolic link, not a regular file or directory, too large, or owned or
    writable by someone who could have planted it. ``str(e)`` says which."""

    def __init__(self, why: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(errno.EPERM, why)
        self.why = why
        self.where = None if path is None else os.fspath(path)

    def __str__(self) -> str:
        return self.why if self.where is None else f"{self.where}: {self.why}"


def open_dir(name: str | os.PathLike[str], *, parent_fd: int | None = None, create_mode: int | None = None,
             owners: Collection[int] | None = None, private: bool = False) -> int:
    """Open a directory without following a link at its last component; returns its descriptor.

    Args:
        name: the directory, relative to ``parent_fd`` when given (then a single name, no separators).
        parent_fd: the descriptor of its parent (None: ``name`` is a path, opened as given).
        create_mode: create it with this mode when missing (the mode is set with ``fchmod``, so the umask and
            the parent's setgid rule do not change it); None: a missing directory raises FileNotFoundError.
        owners: the uids that may own it (None: anyone).
        private: nobody but its owner may write it (no group or other write bit).

    A directory that anyone but its owner may write must have the sticky bit, else it is refused: in it, anyone
    could rename or replace what another user put there. A directory of this user's that fails these checks is
    repaired instead (sticky bit added; group and other write removed from a private one).
    """
    if parent_fd is not None and os.sep in os.fspath(name):
        raise ValueError(f"{name!r} must be one name under its parent's descriptor")
    created = False
    try:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            if create_mode is None:
                raise
            try:
                os.mkdir(name, 0o700, dir_fd=parent_fd)
                created = True
            except FileExistsError:
                pass  # a concurrent creator won: its directory is checked like any other
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RefusedFile("a symbolic link or not a directory (not followed)", name) from e
        raise
    if created:
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                os.fchmod(fd, create_mode)  # type: ignore[arg-type]
        except BaseException:
            os.close(fd)
            raise
    return _checked_dir(fd, name, owners, private)


def _checked_dir(fd: int, name: str | os.PathLike[str], owners: Collection[int] | None, private: bool) -> int:
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_mode & _OTHERS_WRITE and (private or not st.st_mode & stat.S_ISVTX):
            # our own directory, left open by an older layout: close it rather than refuse it
            mode = stat.S_IMODE(st.st_mode)
            os.fchmod(fd, mode & ~_OTHERS_WRITE if private else mode | stat.S_ISVTX)
            st = os.fstat(fd)
        check_owned_dir(st, name, owners, private)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_owned_dir(st: os.stat_result, name: str | os.PathLike[str], owners: Collection[int] | None = None,
                    private: bool = False) -> None:
    """Raise RefusedFile unless ``st`` is a directory owned by one of ``owners`` that nobody else may tamper with."""
    if not stat.S_ISDIR(st.st_mode):
        raise RefusedFile("not a directory", name)
    if owners is not None and st.st_uid not in owners:
        raise RefusedFile(f"owned by uid {st.st_uid}, not by {' or '.join(f'uid {u}' for u in sorted(set(owners)))}", name)
    if st.st_mode & _OTHERS_WRITE:
        if private:
            raise RefusedFile(f"writable by others (mode {stat.S_IMODE(st.st_mode):o})", name)
        if not st.st_mode & stat.S_ISVTX:
            raise RefusedFile(f"writable by others without the sticky bit (mode {stat.S_IMODE(st.st_mode):o})", name)


@contextlib.contextmanager
def dir_fd(*args, **kwargs) -> Iterator[int]:
    """:func:`open_dir` as a context manager that closes the descriptor."""
    fd = open_dir(*args, **kwargs)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_regular(name: str | os.PathLike[str], tries: tuple[int, ...], parent_fd: int | None = None) -> int:
    """Open a regular file with the first of ``tries`` (open flags, all with ``O_NOFOLLOW | O_NONBLOCK``) that the
    kernel permits (a later one only after PermissionError); a link or a special file is RefusedFile."""
    for i, flags in enumerate(tries):
        try:
            fd = os.open(name, flags, 0o600, dir_fd=parent_fd)
            break
        except PermissionError:
            if i == len(tries) - 1:
                raise
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise RefusedFile("a symbolic link (not followed)", name) from e
            raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RefusedFile("not a regular file", name)
    return fd


def check_trusted(st: os.stat_result, name: str | os.PathLike[str] | None = None) -> None:
    """Raise RefusedFile unless ``st`` may be believed because of its owner: a regular file with exactly one link,
    writable by nobody but its owner (the rule of trust, docs/threat-model.md)."""
    if not stat.S_ISREG(st.st_mode):
        raise RefusedFile("not a regular file", name)
    if st.st_nlink != 1:
        raise RefusedFile(f"{st.st_nlink} hard links (a trusted file has one)", name)
    if st.st_mode & _OTHERS_WRITE:
        raise RefusedFile(f"writable by others (mode {stat.S_IMODE(st.st_mode):o})", name)


def read_at(parent_fd: int | None, name: str | os.PathLike[str], max_bytes: int, *,
            owners: Collection[int] | None = None, trusted: bool = False) -> tuple[bytes, os.stat_result]:
    """Read a regular file (relative to ``parent_fd``) without following a link or blocking on a FIFO.

    Raises FileNotFoundError, RefusedFile (a link, not a regular file, more than ``max_bytes``, owned by a uid
    not in ``owners``, or — with ``trusted`` — failing :func:`check_trusted`), or another OSError.
    """
    fd = _open_regular(name, (_READ_FLAGS,), parent_fd)
    try:
        st = os.fstat(fd)
        if owners is not None and st.st_uid not in owners:
            raise RefusedFile(f"owned by uid {st.st_uid}", name)
        if trusted:
            check_trusted(st, name)
        if st.st_size > max_bytes:
            raise RefusedFile(f"{st.st_size} bytes, over the {max_bytes}-byte limit", name)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks), st
            total += len(chunk)
            if total > max_bytes:
                raise RefusedFile(f"over the {max_bytes}-byte limit", name)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_file(path: str | os.PathLike[str], max_bytes: int, *, owners: Collection[int] | None = None,
              trusted: bool = False) -> tuple[bytes, os.stat_result]:
    """:func:`read_at` for a path (its last component is never followed); returns the bytes and the open file's
    ``stat`` (owner and mode of what was read)."""
    return read_at(None, os.fspath(path), max_bytes, owners=owners, trusted=trusted)


def open_lock(path: str | os.PathLike[str], mode: int = SHARED_FILE_MODE) -> int:
    """Open (creating it with ``mode``) a lock file that every member of the group shares; returns its descriptor.

    Never through a link, never a FIFO or a device (a non-blocking open, then ``fstat``). Opened read-only where this
    user may not write it (``flock`` needs no write access); its owner puts ``mode`` back whatever the umask or an
    older layout left. Raises RefusedFile or another OSError.
    """
    fd = _open_regular(path, (os.O_RDWR | os.O_CREAT | _READ_FLAGS, _READ_FLAGS))  # O_RDONLY is 0
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
            with contextlib.suppress(OSError):
                os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_fd(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked), then fsync it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def write_at(parent_fd: int, name: str, data: bytes, mode: int = RECORD_MODE) -> None:
    """Replace ``name`` under ``parent_fd`` with ``data`` atomically; a link at ``name`` is replaced, never followed.

    The temporary file's name is unpredictable and it is created with ``O_EXCL | O_NOFOLLOW``, so nothing a
    colleague planted in the directory is ever opened. Readers see the old file or the new one, even across a crash.
    """
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent_fd)
    try:
        try:
            os.fchmod(fd, mode)
            write_fd(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent_fd)
        raise
    with contextlib.suppress(OSError):  # makes the rename itself durable (ext4/xfs need it after a rename)
        os.fsync(parent_fd)


def write_file(path: str | os.PathLike[str], data: bytes, mode: int = RECORD_MODE) -> None:
    """:func:`write_at` for a path: the parent directory is opened as given, the file replaced atomically in it."""
    path = os.fspath(path)
    parent = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_at(parent, os.path.basename(path), data, mode)
    finally:
        os.close(parent)


def write_in_place(path: str | os.PathLike[str], data: bytes) -> None:
    """Rewrite a regular file in place (never through a link, never a special file): the way a member writes a
    shared file in a sticky directory, where only its owner may rename over it. A write torn by a crash reads as
    corrupt to the next reader, so only a file that is rebuilt when corrupt may be written so."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RefusedFile("not a regular file", path)
        write_fd(fd, data)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def shared_dir_mode(parent_mode: int) -> int:
    """The mode of a directory every user of a shared parent writes into (``hooks/``, ``history/``, ``jobs/``):
    sticky always, so that nobody renames another user's entries; writable like its parent; setgid when the
    parent is group-shared; nothing for outsiders unless the parent is open to all."""
    if parent_mode & stat.S_IWOTH:
        return 0o1777
    if parent_mode & stat.S_IWGRP:
        return SHARED_DIR_MODE
    return 0o1750
