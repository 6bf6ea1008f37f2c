"""The privileged cap agent: one loop that keeps every managed GPU at the cap its jobs want.

What lives here: :class:`CapAgent` (each pass: lock the state, reconcile it, run :meth:`CapKeeper.reconcile
<ecolaunch.caps.keeper.CapKeeper.reconcile>` in the same transaction, unlock, sleep; a lock-free snapshot of the
job files when a member holds the lock), its announcement in ``<state dir>/agent.json`` (:func:`agent_alive`), and
the metrics textfile it writes after every pass. What does not: deciding caps (:mod:`ecolaunch.caps.keeper`),
the command line (``ecolaunch.cli.agent_cmd``); nothing here prints or exits. What the agent guarantees:
docs/admin.md#the-cap-agent and docs/threat-model.md#power-caps-the-agent-root-launchers-unprivileged-launchers.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import Protocol

from ecolaunch.caps.keeper import CapKeeper, CapReport
from ecolaunch.caps.ledger import LedgerWriteError
from ecolaunch.admin.rules import Rules
from ecolaunch.admin.safety import trusted_by_root
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.errors import DeviceError, PermissionDenied, StateError
from ecolaunch.state.reconcile import ProcessTable, PsutilProcessTable, process_start_time
from ecolaunch.safefs import RECORD_MODE, RefusedFile, read_file, write_file
from ecolaunch.state.store import StateStore
from ecolaunch.statedir import StateLayout
from ecolaunch.validate import is_integer, is_real

__all__ = ["CapAgent", "agent_alive"]

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0


class Stop(Protocol):
    """What :meth:`CapAgent.run` waits on: a ``threading.Event``, or the command's stop signals
    (``ecolaunch.cli.stopsignals.StopSignals``, which a signal handler can set without a lock)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class CapAgent:
    """The cap agent's passes over one state directory.

    Args:
        store: the state store (give it a short lock timeout: a pass must not hang on a hostile lock holder).
        backend: this host's GPU backend.
        rules: the effective admin policy.
        processes: the process table (psutil by default).
        ledger_path: where the ledger of original caps lives (default ``<state dir>/caps.json``).
        wall_clock: seconds since the epoch, for the heartbeat file.
        textfile: where to write this host's metrics after every pass (a ``*.prom`` file), or None.
    """

    def __init__(
        self,
        store: StateStore,
        backend: GpuBackend,
        rules: Rules,
        *,
        processes: ProcessTable | None = None,
        ledger_path: Path | None = None,
        wall_clock=time.time,
        textfile: Path | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.rules = rules
        self.processes = processes or PsutilProcessTable()
        self.host = backend.hostname()
        self.keeper = CapKeeper(backend, store.directory, rules, host=self.host, processes=self.processes,
                                ledger_path=ledger_path, only_uids=None)  # the agent serves every member
        self._wall_clock = wall_clock
        self._topology = None
        self._pid = os.getpid()
        self._start_time: float | None = None
        self.textfile = textfile
        self._metrics = None
        if textfile is not None:
            # lazy: prometheus-client loads only in an agent that writes metrics (every launcher imports this module)
            from ecolaunch.admin.metrics import registry

            self._metrics = registry(store, backend, self.processes)
        self._textfile_failing: str | None = None

    def step(self) -> CapReport:
        """One pass: reconcile the state and bring every managed GPU to its desired cap."""
        if self._topology is None:
            self._topology = self.backend.topology()
        report = self.keeper.pass_over(self.store, self._topology)
        self._announce()
        self._write_metrics()
        return report

    def restore_all(self) -> CapReport:
        """Restore every GPU in the ledger (shutdown); works without the lock if it cannot be had. The hardware is
        restored even when the ledger cannot be written afterwards (said in the log)."""
        try:
            try:
                with self.store.transaction():
                    return self.keeper.restore_all()
            except StateError as e:
                logger.warning("state lock unavailable (%s); restoring caps without it", e)
                return self.keeper.restore_all()
        except OSError as e:
            logger.warning("restored the caps but could not update the ledger %s: %s", self.keeper.ledger_path, e)
            return CapReport()

    def run(self, interval_s: float, stop: Stop) -> CapReport:
        """Pass every ``interval_s`` seconds until ``stop`` is set; then restore every GPU and return that report.

        A device error, a state error or a ledger that cannot be written in one pass is logged (once while it lasts)
        and retried at the next; PermissionDenied ends the loop (it cannot heal).
        """
        failing: str | None = None
        try:
            while not stop.is_set():
                try:
                    report = self.step()
                    if failing is not None:
                        logger.warning("cap passes work again (after: %s)", failing)
                        failing = None
                    if report.applied or report.restored:
                        logger.info("caps set %s, restored %s", _fmt(report.applied), _fmt(report.restored))
                except PermissionDenied:
                    raise
                except (DeviceError, StateError, OSError) as e:
                    why = self._why(e)
                    if why != failing:
                        logger.warning("cap pass failed: %s; retrying every %g s", why, interval_s)
                    else:
                        logger.debug("cap pass failed again: %s", why)
                    failing = why
                stop.wait(interval_s)
        finally:
            report = self.restore_all()
            self._retire()
        return report

    def _why(self, error: Exception) -> str:
        """One line for a failed pass; for a file that cannot be written, what it means and the fix."""
        if not isinstance(error, OSError):
            return str(error)
        fix = ("free space there" if error.errno == errno.ENOSPC else
               "run `ecolaunch init-state` to repair the state directory's layout, or give --ledger a file in a "
               "root-only directory")
        if isinstance(error, LedgerWriteError):
            return (f"cannot write the cap ledger {error.filename} ({error.strerror}): no new cap is set until it "
                    f"can be ({fix})")
        return f"cannot write the state directory {self.store.directory} ({error.strerror or error}; {fix})"

    # --- the metrics file ------------------------------------------------------------------------
    def _write_metrics(self) -> None:
        if self.textfile is None or self._metrics is None:
            return
        # lazy: as the registry in the constructor
        from ecolaunch.admin.metrics import write_textfile

        try:
            write_textfile(self.textfile, self._metrics)
        except OSError as e:
            why = f"cannot write the metrics file {self.textfile}: {e.strerror or e}"
            if why != self._textfile_failing:
                logger.warning("%s; retrying at every pass", why)
            self._textfile_failing = why
            return
        if self._textfile_failing is not None:
            logger.warning("the metrics file %s is written again", self.textfile)
            self._textfile_failing = None

    # --- the heartbeat file ----------------------------------------------------------------------
    def _announce(self) -> None:
        if self._start_time is None:
            self._start_time = process_start_time(self._pid)
        doc = {"pid": self._pid, "start_time": self._start_time, "heartbeat_at": self._wall_clock(), "host": self.host}
        with contextlib.suppress(OSError):
            write_file(self.store.layout.agent_file, json.dumps(doc).encode(), mode=RECORD_MODE)

    def _retire(self) -> None:
        if self.textfile is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.textfile)
        path = self.store.layout.agent_file
        with contextlib.suppress(OSError, RefusedFile, ValueError, TypeError):
            raw, _ = read_file(path, 4096)
            if json.loads(raw).get("pid") == self._pid:
                os.unlink(path)


def agent_alive(state_dir: Path, processes: ProcessTable | None = None) -> bool:
    """Whether a cap agent serves this state directory: ``agent.json`` is trusted (root's, or this user's) and
    names a live process."""
    processes = processes or PsutilProcessTable()
    try:
        raw, st = read_file(StateLayout(state_dir).agent_file, 4096)
        doc = json.loads(raw)
        pid, start = doc["pid"], doc["start_time"]
    except (OSError, RefusedFile, ValueError, TypeError, KeyError, AttributeError):
        return False
    if not trusted_by_root(st) or not is_integer(pid) or not is_real(start):
        return False
    return pid > 0 and processes.alive(pid, float(start))


def _fmt(caps: dict[str, float]) -> str:
    return ", ".join(f"{u[:12]}={w:.0f}W" for u, w in caps.items()) or "-"
