"""The hook channel: how a worker's ``ecolaunch.step()`` reaches the launcher. Local files, no server.

The launcher creates a directory and sets, for every worker it starts:

- ``ECOLAUNCH_HOOK_DIR=<dir>``: turns the in-process hooks on (unset: they do nothing);
- ``ECOLAUNCH_PROFILING=1`` during a profiling run (``ecolaunch.is_profiling()`` then returns True);
- ``ECOLAUNCH_PROFILE_STEPS=<n>`` in a pre-launch profiling run: each worker exits with status 0 (see ``hooks``)
  after its n-th step mark; every rank counts the same marks, so all ranks stop together;
- ``RANK`` comes from torchrun (absent: rank 0).

Files in ``<dir>`` (one writer each, so no locking is needed):

- ``steps-<rank>.bin``: one little-endian float64 ``time.monotonic()`` per step, appended with a single
  8-byte ``os.write`` on an ``O_APPEND`` descriptor. Appends of that size are atomic on local file systems,
  so a crash can at worst leave a torn final record, which :func:`read_steps` drops. ``CLOCK_MONOTONIC`` is
  system-wide on Linux, so stamps of different ranks (and of a restarted worker) share one time line.
- ``hints-<rank>.json``: the ``@ecolaunch.job(...)`` hints, written once, atomically (temp file + rename).

Worker side: :class:`StepWriter`, :func:`write_hints`. Launcher side: :func:`read_steps`,
:func:`read_hints`, :func:`iteration_times`, and :class:`StepReader`, which reads only what was appended
since its last poll (a launcher polls every second for the whole run; re-reading every file would grow
with the run). The worker side must never raise into a training loop; the
hooks module catches ``OSError`` from here and switches itself off.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ecolaunch.errors import ConfigError

logger = logging.getLogger(__name__)

ENV_HOOK_DIR = "ECOLAUNCH_HOOK_DIR"
ENV_PROFILING = "ECOLAUNCH_PROFILING"
ENV_RANK = "RANK"
ENV_PROFILE_STEPS = "ECOLAUNCH_PROFILE_STEPS"

STAMP = struct.Struct("<d")
_STEPS = re.compile(r"^steps-(\d+)\.bin$")
_HINTS = re.compile(r"^hints-(\d+)\.json$")


def steps_path(directory: Path | str, rank: int) -> Path:
    return Path(directory) / f"steps-{rank}.bin"


def hints_path(directory: Path | str, rank: int) -> Path:
    return Path(directory) / f"hints-{rank}.json"


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
        """Record "one step ended now". Raises OSError if the file cannot be opened or written."""
        fd = self._fd
        if fd is None:
            fd = self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, STAMP.pack(self._clock()))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def write_hints(directory: Path | str, rank: int, hints: Mapping[str, object]) -> Path:
    """Write ``hints`` as JSON to ``hints-<rank>.json`` atomically (readers see the old file or the new one)."""
    final = hints_path(directory, rank)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    data = json.dumps(dict(hints), sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    return final


def read_steps(directory: Path | str) -> dict[int, list[float]]:
    """``{rank: [monotonic stamp, ...]}`` for every ``steps-<rank>.bin``; a torn trailing record is dropped."""
    out: dict[int, list[float]] = {}
    folder = Path(directory)
    if not folder.is_dir():
        return out
    for entry in folder.iterdir():
        m = _STEPS.match(entry.name)
        if m is None:
            continue
        data = entry.read_bytes()
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
            value = json.loads(entry.read_text())
        except (OSError, ValueError) as e:
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
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ConfigError(f"warm-up iterations must be an integer >= 0, got {warmup!r}")
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
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 2:
            raise ConfigError(f"StepReader must keep at least 2 stamps, got {keep!r}")
        self._dir = Path(directory)
        self._keep = keep
        self._offsets: dict[int, int] = {}
        self._kept: dict[int, list[float]] = {}
        self._counts: dict[int, int] = {}
        self._last: dict[int, float] = {}

    def poll(self) -> int:
        """Read what the workers appended since the last poll; returns how many new stamps were read."""
        if not self._dir.is_dir():
            return 0
        new = 0
        for entry in self._dir.iterdir():
            m = _STEPS.match(entry.name)
            if m is None:
                continue
            rank = int(m.group(1))
            offset = self._offsets.get(rank, 0)
            try:
                with open(entry, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError as e:
                logger.debug("cannot read %s: %s", entry, e)
                continue
            whole = len(data) - len(data) % STAMP.size  # a partial record is read again next time
            if not whole:
                continue
            self._offsets[rank] = offset + whole
            stamps = [v for (v,) in STAMP.iter_unpack(data[:whole])]
            kept = self._kept.setdefault(rank, [])
            kept.extend(stamps[: max(0, self._keep - len(kept))])
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

    def last(self) -> float | None:
        """The latest stamp of the slowest rank, or None before any stamp."""
        if not self._counts:
            return None
        slowest = min(self._counts, key=lambda r: (self._counts[r], self._last[r]))
        return self._last[slowest]

    def mean_iter_time_s(self, warmup: int) -> float | None:
        """Mean seconds per step after the first ``warmup`` steps, from the ends of the run; None if too short."""
        kept = self.stamps()
        last, n = self.last(), self.count()
        if last is None or len(kept) <= warmup or n - 1 <= warmup or last <= kept[warmup]:
            return None
        return (last - kept[warmup]) / (n - 1 - warmup)
