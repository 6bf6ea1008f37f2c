"""The file-locked store of the state graph: ``<state dir>/state.json`` guarded by ``state.lock``.

Every change is a read-modify-write transaction under ``filelock.FileLock`` (an ``fcntl`` lock the kernel
drops when its holder dies, even by SIGKILL, so a killed launcher can never leave the store locked).
Writes are atomic: a temporary file in the same directory, ``fsync``, ``os.replace``, then ``fsync`` of the
directory, so a crash leaves either the old or the new document, never half of one.

A document that is not valid JSON, or not an ecolaunch state document of this version, is moved aside to
``state.json.corrupt-<time>`` with a warning and the transaction starts from an empty graph; the next
reconcile rebuilds the hosts from the live GPUs, and running launchers re-register their jobs at their next
heartbeat. Nothing crashes on a bad file.

This module is the only importer of ``filelock``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from ecolaunch.errors import StateError
from ecolaunch.state.graph import StateGraph

logger = logging.getLogger(__name__)

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
DEFAULT_LOCK_TIMEOUT_S = 60.0


class StateStore:
    """Transactions on the state graph of one state directory.

    Args:
        directory: the state directory; created (group-shared, setgid) when missing.
        lock_timeout_s: how long a transaction waits for the lock before raising StateError.
        on_lock_wait: called with the seconds each transaction waited for the lock (benchmarks use it).
    """

    def __init__(
        self,
        directory: Path,
        *,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        on_lock_wait: Callable[[float], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STATE_FILE
        self._lock_timeout_s = lock_timeout_s
        self._lock: FileLock | None = None
        self._on_lock_wait = on_lock_wait

    def __repr__(self) -> str:
        return f"StateStore({str(self.directory)!r})"

    # --- public API ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[StateGraph]:
        """Lock, load, yield the graph for changes, and write it back if it changed.

        An exception inside the block discards the changes (the file is left as it was).
        """
        with self._locked():
            graph = self._load()
            before = graph.to_dict()
            yield graph
            after = graph.to_dict()
            if after != before:
                graph.generation += 1
                after["generation"] = graph.generation
                self._write(after)

    def read(self) -> StateGraph:
        """A consistent snapshot of the graph (taken under the lock, written back only if it was corrupt)."""
        with self.transaction() as graph:
            return graph

    # --- internals -------------------------------------------------------------------------------
    def _ensure_directory(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o2775)
        except OSError as e:
            raise StateError(
                f"cannot create the state directory {str(self.directory)!r}: {e.strerror}",
                hint="set ECOLAUNCH_STATE_DIR to a directory you can write, or ask the lab admin",
            ) from e
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise StateError(
                f"the state directory {str(self.directory)!r} is not writable by this user",
                hint="ask the lab admin to add you to the directory's group, or set ECOLAUNCH_STATE_DIR",
            )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._lock is None:
            self._ensure_directory()
            # mode 0o664: the lock file is shared by every user of the (group-shared) directory
            self._lock = FileLock(str(self.directory / LOCK_FILE), timeout=self._lock_timeout_s, mode=0o664)
        start = time.perf_counter()
        try:
            self._lock.acquire()
        except Timeout as e:
            raise StateError(
                f"waited {self._lock_timeout_s:g} s for the state lock {str(self.directory / LOCK_FILE)!r}",
                hint="another ecolaunch process holds it; if none is running, the file system may not support locks",
            ) from e
        if self._on_lock_wait is not None:
            self._on_lock_wait(time.perf_counter() - start)
        try:
            yield
        finally:
            self._lock.release()

    def _load(self) -> StateGraph:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return StateGraph()
        except OSError as e:
            raise StateError(f"cannot read {str(self.path)!r}: {e.strerror}", hint="check the file's permissions") from e
        try:
            return StateGraph.from_dict(json.loads(raw))
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            aside = self.path.with_name(f"{STATE_FILE}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            logger.warning("state file %s is not a valid state document (%s); moved it to %s and rebuilt the state", self.path, e, aside)
            return StateGraph()

    def _write(self, doc: dict) -> None:
        atomic_write_bytes(self.path, json.dumps(doc, separators=(",", ":"), sort_keys=True).encode())


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o664) -> None:
    """Replace ``path`` with ``data`` atomically: temporary file in the same directory, fsync, rename, fsync
    of the directory. Readers see the old or the new content, never a mix, even across a crash."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    # fsync of the directory makes the rename itself durable (ext4/xfs need it after os.replace)
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
