"""The hook channel: how a worker's ``ecolaunch.step()`` reaches the launcher. Local files, no server.

Worker side: :class:`StepWriter`, :func:`write_hints`, :func:`open_private_dir` (it must never raise into a
training loop: the hooks module catches ``OSError`` from here and switches itself off). Launcher side:
:func:`create_hook_dir`, :func:`read_steps`, :func:`read_hints`, :func:`iteration_times`, and :class:`StepReader`,
which reads only what was appended since its last poll. What does not live here: the hooks themselves
(:mod:`ecolaunch.profile.hooks`). The environment, the files and their safety: docs/python-api.md.
"""

from __future__ import annotations

import collections

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import stat
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from ecolaunch.errors import ConfigError
from ecolaunch.safefs import RefusedFile, open_dir, shared_dir_mode, write_at
from ecolaunch.validate import integer

logger = logging.getLogger(__name__)

ENV_HOOK_DIR = "ECOLAUNCH_HOOK_DIR"
ENV_PROFILING = "ECOLAUNCH_PROFILING"
ENV_RANK = "RANK"
ENV_PROFILE_STEPS = "ECOLAUNCH_PROFILE_STEPS"

STAMP = struct.Struct("<d")
#: the most a launcher reads of a hook directory's files at once (a worker's file is its user's word)
MAX_HINTS_BYTES = 64 * 1024
MAX_STEPS_BYTES = 256 * 1024 * 1024
MAX_POLL_BYTES = 16 * 1024 * 1024  # per file and poll: the rest is read at the next poll
TAIL_STAMPS = 4096  # per rank: how many of the latest stamps the launcher keeps for the closed loop
_STEPS = re.compile(r"^steps-(\d+)\.bin$")
_WAITS = re.compile(r"^waits-(\d+)\.bin$")
_HINTS = re.compile(r"^hints-(\d+)\.json$")


def steps_path(directory: Path | str, rank: int) -> Path:
    return Path(directory) / f"steps-{rank}.bin"


def hints_path(directory: Path | str, rank: int) -> Path:
    return Path(directory) / f"hints-{rank}.json"


def waits_path(directory: Path | str, rank: int) -> Path:
    return Path(directory) / f"waits-{rank}.bin"


class StepWriter:
    """Appends one stamp per :meth:`stamp`; opens ``steps-<rank>.bin`` lazily on the first stamp."""

    __slots__ = ("_path", "_clock", "_fd")

    def __init__(self, directory: Path | str, rank: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = os.fspath(steps_path(directory, rank))
        self._clock = clock
        self._fd: int | None = None

    @property
    def path(self) -> str:
        return self._path

    def stamp(self) -> None:
        """Record "one step ended now". Raises OSError if the file cannot be opened or written (or the hook
        directory is not this user's alone: see :func:`open_private_dir`)."""
        self.append(self._clock())

    def append(self, value: float) -> None:
        """Append one float64 record (what :meth:`stamp` writes, or a :class:`WaitWriter`'s seconds)."""
        fd = self._fd
        if fd is None:
            folder, name = os.path.split(self._path)
            with _private_dir(folder) as dfd:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             0o644, dir_fd=dfd)
                try:
                    _check_own_regular(os.fstat(fd), self._path)
                except BaseException:
                    os.close(fd)
                    raise
            self._fd = fd
        os.write(fd, STAMP.pack(value))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WaitWriter(StepWriter):
    """Appends one all-reduce wait (seconds) per :meth:`append` to ``waits-<rank>.bin``."""

    __slots__ = ()

    def __init__(self, directory: Path | str, rank: int) -> None:
        super().__init__(directory, rank)
        self._path = os.fspath(waits_path(directory, rank))


def write_hints(directory: Path | str, rank: int, hints: Mapping[str, object]) -> Path:
    """Write ``hints`` as JSON to ``hints-<rank>.json`` atomically (readers see the old file or the new one).

    Only into a directory that is this user's alone (:func:`open_private_dir`), through a temporary file with an
    unpredictable name created with ``O_EXCL | O_NOFOLLOW``: a link planted under a guessable name is never
    followed. Raises OSError otherwise.
    """
    final = hints_path(directory, rank)
    data = json.dumps(dict(hints), sort_keys=True).encode()
    if len(data) > MAX_HINTS_BYTES:
        raise OSError(errno.EFBIG, f"hints of {len(data)} bytes, over the {MAX_HINTS_BYTES}-byte limit")
    with _private_dir(directory) as dfd:
        write_at(dfd, final.name, data, mode=0o644)
    return final


def create_hook_dir(wanted: Path | str) -> Path:
    """Create the hook directory of one run next to ``wanted``, under an unpredictable name; returns its path.

    ``wanted`` is ``<state dir>/hooks/<job id>[-profile]``. The shared ``hooks/`` directory must be a real
    directory (``ecolaunch init-state`` creates it sticky, root-owned) owned by root, this user or the state
    directory's owner, and sticky when others may write it: then nobody else can rename or replace what this
    launcher creates in it. It is created (sticky) when missing. The run's own directory,
    ``<job id>[-profile]-<random>``, is created with ``mkdir`` (which never follows a link and fails on anything
    already there), mode 0700. Raises OSError (a :class:`~ecolaunch.safefs.RefusedFile` when something in
    the way is not safe to use): the caller then runs without step marks.
    """
    wanted = Path(wanted)
    hooks, state_dir = wanted.parent, wanted.parent.parent
    state_fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(state_fd)
        hooks_fd = open_dir(hooks.name, parent_fd=state_fd, create_mode=shared_dir_mode(st.st_mode),
                            owners={0, os.geteuid(), st.st_uid})
    finally:
        os.close(state_fd)
    try:
        for _ in range(8):
            name = f"{wanted.name}-{secrets.token_hex(8)}"
            try:
                os.mkdir(name, 0o700, dir_fd=hooks_fd)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, f"could not create a fresh directory in {hooks}")
    finally:
        os.close(hooks_fd)
    path = hooks / name
    with _private_dir(path) as fd:  # what was just created: this user's alone
        os.fchmod(fd, 0o700)  # whatever the umask, and without the setgid bit inherited from hooks/
    return path


def open_private_dir(directory: Path | str) -> int:
    """Open a hook directory for writing into it; refuse (RefusedFile, an OSError) a link, or a directory that
    is not owned by this process's user or that anyone else may write: such a directory may have been swapped in
    by someone who could have filled it with links. Returns its descriptor."""
    return open_dir(directory, owners={os.geteuid()}, private=True)


@contextlib.contextmanager
def _private_dir(directory: Path | str) -> Iterator[int]:
    fd = open_private_dir(directory)
    try:
        yield fd
    finally:
        os.close(fd)


def _check_own_regular(st: os.stat_result, where: str) -> None:
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        raise RefusedFile("not a regular file of this user", where)


def _read_file(folder: Path, name: str, max_bytes: int, offset: int = 0) -> bytes:
    """A file of a hook directory, from ``offset``: regular, not a link, never blocking; at most ``max_bytes``."""
    fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile("not a regular file", folder / name)
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        chunks, total = [], 0
        while total < max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_steps(directory: Path | str) -> dict[int, list[float]]:
    """``{rank: [monotonic stamp, ...]}`` for every ``steps-<rank>.bin``; a torn trailing record is dropped."""
    return _read_records(directory, _STEPS)


def read_waits(directory: Path | str) -> dict[int, list[float]]:
    """``{rank: [seconds waited at the all-reduce, ...]}`` for every ``waits-<rank>.bin`` (as :func:`read_steps`)."""
    return _read_records(directory, _WAITS)


def read_new_waits(directory: Path | str, offsets: Mapping[int, int]) -> dict[int, tuple[int, list[float]]]:
    """What each ``waits-<rank>.bin`` gained past ``offsets`` (bytes, by rank): ``{rank: (new offset, waits)}``, only
    the ranks with new whole records (a partial record is read again next time)."""
    return _new_records(Path(directory), _WAITS, offsets)


def _new_records(folder: Path, pattern: re.Pattern[str],
                 offsets: Mapping[int, int]) -> dict[int, tuple[int, list[float]]]:
    """For every file of ``folder`` matching ``pattern`` (its rank in group 1): the whole float64 records past its
    offset, at most ``MAX_POLL_BYTES`` a file, and the offset after them; ranks with nothing new are left out."""
    out: dict[int, tuple[int, list[float]]] = {}
    if not folder.is_dir():
        return out
    for entry in folder.iterdir():
        m = pattern.match(entry.name)
        if m is None:
            continue
        rank = int(m.group(1))
        offset = offsets.get(rank, 0)
        try:
            data = _read_file(folder, entry.name, MAX_POLL_BYTES, offset)
        except OSError as e:
            logger.debug("cannot read %s: %s", entry, e)
            continue
        whole = len(data) - len(data) % STAMP.size  # a partial record is read again next time
        if whole:
            out[rank] = (offset + whole, [v for (v,) in STAMP.iter_unpack(data[:whole])])
    return out


def _read_records(directory: Path | str, pattern: re.Pattern[str]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    folder = Path(directory)
    if not folder.is_dir():
        return out
    for entry in folder.iterdir():
        m = pattern.match(entry.name)
        if m is None:
            continue
        try:
            data = _read_file(folder, entry.name, MAX_STEPS_BYTES)
        except OSError as e:
            logger.warning("ignoring step marks %s: %s", entry, e)
            continue
        whole = len(data) - len(data) % STAMP.size
        if whole != len(data):
            logger.debug("dropped a torn %d-byte record at the end of %s", len(data) - whole, entry)
        out[int(m.group(1))] = [v for (v,) in STAMP.iter_unpack(data[:whole])]
    return dict(sorted(out.items()))


def read_hints(directory: Path | str) -> dict[str, object]:
    """The job's hints: those of the lowest rank that wrote any (all ranks run the same script); ``{}`` if none.

    A file that is not valid JSON (never produced by :func:`write_hints`) is skipped with a warning.
    """
    folder = Path(directory)
    if not folder.is_dir():
        return {}
    ranked = sorted((int(m.group(1)), e) for e in folder.iterdir() if (m := _HINTS.match(e.name)))
    for rank, entry in ranked:
        try:
            raw = _read_file(folder, entry.name, MAX_HINTS_BYTES + 1)
            if len(raw) > MAX_HINTS_BYTES:
                raise ValueError(f"over the {MAX_HINTS_BYTES}-byte limit")
            value = json.loads(raw)
        except (OSError, ValueError, RecursionError) as e:
            logger.warning("ignoring unreadable hints file %s: %s", entry, e)
            continue
        if isinstance(value, dict):
            return value
        logger.warning("ignoring hints file %s of rank %d: not a JSON object", entry, rank)
    return {}


def iteration_times(stamps: Sequence[float], warmup: int) -> list[float]:
    """Seconds per iteration from consecutive stamps, skipping the first ``warmup`` iterations.

    ``n`` stamps give ``n - 1`` intervals; the first ``warmup`` intervals are dropped. Non-positive
    intervals (a clock that did not advance) are dropped too.
    """
    integer(warmup, what="warm-up iterations", lo=0)
    out = []
    for a, b in zip(stamps[warmup:], stamps[warmup + 1:]):
        if b > a:
            out.append(b - a)
    return out


class StepReader:
    """Incremental reader of every ``steps-<rank>.bin`` in a directory, for the launcher's polling loop.

    Keeps, per rank, the number of stamps seen, the last stamp and the first ``keep`` stamps (profiling and
    the early-stage check need only the beginning of a run; a long run's count and mean iteration time need
    only the count and the ends), so memory stays bounded however long the job runs.
    """

    def __init__(self, directory: Path | str, keep: int = 20_000) -> None:
        integer(keep, what="the stamps a StepReader keeps", lo=2)
        self._dir = Path(directory)
        self._keep = keep
        self._offsets: dict[int, int] = {}
        self._kept: dict[int, list[float]] = {}
        self._counts: dict[int, int] = {}
        self._last: dict[int, float] = {}
        #: per rank, its latest stamps (the closed loop follows a run however long it is)
        self._tail: dict[int, collections.deque[float]] = {}

    @property
    def directory(self) -> Path:
        return self._dir

    @directory.setter
    def directory(self, value: Path | str) -> None:
        """Follow another directory (the launcher creates the run's own one, see :func:`create_hook_dir`); only
        before anything was read."""
        if self._offsets:
            raise ConfigError("a StepReader cannot change directory after it has read step marks")
        self._dir = Path(value)

    def poll(self) -> int:
        """Read what the workers appended since the last poll; returns how many new stamps were read."""
        new = 0
        for rank, (offset, stamps) in _new_records(self._dir, _STEPS, self._offsets).items():
            self._offsets[rank] = offset
            kept = self._kept.setdefault(rank, [])
            kept.extend(stamps[: max(0, self._keep - len(kept))])
            self._tail.setdefault(rank, collections.deque(maxlen=TAIL_STAMPS)).extend(stamps)
            self._counts[rank] = self._counts.get(rank, 0) + len(stamps)
            self._last[rank] = stamps[-1]
            new += len(stamps)
        return new

    def count(self) -> int:
        """Steps every rank has marked (the slowest rank's count); 0 before any stamp."""
        return min(self._counts.values()) if self._counts else 0

    def stamps(self) -> list[float]:
        """The kept stamps of the job: stamp k is the latest rank's k-th stamp (when every rank had ended step k)."""
        if not self._kept:
            return []
        n = min(len(v) for v in self._kept.values())
        return [max(v[k] for v in self._kept.values()) for k in range(n)]

    def since(self, index: int) -> tuple[int, list[float]]:
        """The job's stamps from ``index`` on, as :meth:`stamps` merges them, among the latest ones kept
        (``TAIL_STAMPS`` per rank): ``(first index returned, stamps)``; the first index is later than ``index``
        when older stamps were dropped, and the list is empty when nothing from ``index`` on has been read."""
        if not self._tail:
            return index, []
        n = self.count()
        starts = {r: self._counts[r] - len(t) for r, t in self._tail.items()}
        first = max(index, max(starts.values()), 0)
        out = [max(t[k - starts[r]] for r, t in self._tail.items()) for k in range(first, n)]
        return first, out

    def last(self) -> float | None:
        """The latest stamp of the slowest rank, or None before any stamp."""
        if not self._counts:
            return None
        slowest = min(self._counts, key=lambda r: (self._counts[r], self._last[r]))
        return self._last[slowest]

    def mean_iter_time_s(self, warmup: int) -> float | None:
        """Mean seconds per step after the first ``warmup`` steps, from the ends of the run; None if too short."""
        last, n = self.last(), self.count()
        # stamp ``warmup`` as :meth:`stamps` merges it, without merging them all (the monitor thread asks every poll)
        if last is None or min(len(v) for v in self._kept.values()) <= warmup or n - 1 <= warmup:
            return None
        start = max(v[warmup] for v in self._kept.values())
        if last <= start:
            return None
        return (last - start) / (n - 1 - warmup)
