"""File access under a directory that other users can write: never follow a link, never open a special file.

What lives here: the few primitives every reader and writer of the shared state directory uses when a
colleague could have placed something in its way (the history, the hook channel, the simulated GPUs, the
admin's layout command):

* :func:`open_dir` opens one directory *relative to its parent's descriptor* with ``O_NOFOLLOW`` (a planted
  symbolic link is refused, not followed), optionally creates it, and checks who owns it and who may write it;
* :func:`read_at` reads one regular file relative to a directory descriptor (``O_NOFOLLOW | O_NONBLOCK``, so
  a FIFO never blocks and a link is never followed), refusing anything larger than a bound;
* :func:`write_at` replaces one file atomically relative to a directory descriptor: a temporary file with an
  unpredictable name created with ``O_EXCL | O_NOFOLLOW``, its mode set through the descriptor, fsync, a
  rename between the same directory descriptor, fsync of the directory.

Refusals raise :class:`RefusedFile` (a kind of ``OSError``, so callers that degrade on I/O errors degrade on it
too) naming what was wrong. What does not live here: the state store's own files (``ecolaunch.state.store``)
and the layout the admin creates (``ecolaunch.state.layout``). It sits beside ``errors`` and ``clock``
because every layer that touches the shared directory (``state``, ``devices``, ``profile``) uses it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Collection, Iterator

__all__ = ["RefusedFile", "check_owned_dir", "dir_fd", "open_dir", "read_at", "shared_dir_mode", "write_at",
           "write_fd"]

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


def read_at(parent_fd: int | None, name: str | os.PathLike[str], max_bytes: int, *,
            owners: Collection[int] | None = None, private: bool = False) -> tuple[bytes, os.stat_result]:
    """Read a regular file (relative to ``parent_fd``) without following a link or blocking on a FIFO.

    Raises FileNotFoundError, RefusedFile (a link, not a regular file, more than ``max_bytes``, owned by a uid
    not in ``owners``, or — with ``private`` — writable by group or others), or another OSError.
    """
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RefusedFile("a symbolic link (not followed)", name) from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile("not a regular file", name)
        if owners is not None and st.st_uid not in owners:
            raise RefusedFile(f"owned by uid {st.st_uid}", name)
        if private and st.st_mode & _OTHERS_WRITE:
            raise RefusedFile(f"writable by others (mode {stat.S_IMODE(st.st_mode):o})", name)
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


def write_fd(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked), then fsync it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def write_at(parent_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
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


def shared_dir_mode(parent_mode: int) -> int:
    """The mode of a directory every user of a shared parent writes into (``hooks/``, ``history/``, ``jobs/``):
    sticky always, so that nobody renames another user's entries; writable like its parent; setgid when the
    parent is group-shared."""
    if parent_mode & stat.S_IWOTH:
        return 0o1777
    if parent_mode & stat.S_IWGRP:
        return 0o3775
    return 0o1755
