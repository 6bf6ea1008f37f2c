"""The caps one run changes while it runs, and their one way back to the caps the run found.

:class:`RunCaps` sits between a run's cap changers (the :class:`~ecolaunch.profile.profiler.Profiler`'s caps, the
profiled choice and the closed loop's moves, :mod:`ecolaunch.launch.observe`) and the job's one cap writer
(``set_cap``: :meth:`ecolaunch.launch.jobcaps.JobCaps.set_cap` in a launch, which clips and records the wish). It
remembers each GPU's cap when the run began (:attr:`RunCaps.found`) and what the run set, and :meth:`RunCaps.restore`
gives every GPU the run changed its found cap back: when profiling ends, and when the observer exits. What the job's
placement set is restored at release by ``JobCaps``; what a crashed launcher left, by the cap keeper's sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ecolaunch.errors import PermissionDenied
from ecolaunch.validate import is_number

logger = logging.getLogger(__name__)


class RunCaps:
    """The caps one run of job ``job_id`` sets on ``gpu_uuids`` through ``set_cap(uuid, watts)`` (None: caps may
    not be changed), and their restore to :attr:`found`."""

    def __init__(self, job_id: str, gpu_uuids: Sequence[str], set_cap: Callable[[str, float], Any] | None,
                 found: dict[str, float | None] | None = None) -> None:
        self._job_id, self._uuids, self._setter = job_id, tuple(gpu_uuids), set_cap
        #: each GPU's cap when the run began (None: not known)
        self.found: dict[str, float | None] = dict(found or {})
        self._set: dict[str, float] = {}  # what this run set since the last restore
        self._refused = False  # the setter said caps may not be changed here

    @property
    def can_set(self) -> bool:
        """Whether caps may be changed: a setter, which has not refused with PermissionDenied."""
        return self._setter is not None and not self._refused

    def set(self, uuid: str, watts: float) -> float:
        """Set ``watts`` on GPU ``uuid``; returns the cap applied (the setter's, which may clip it to the admin
        policy, when it says). The setter's exception passes (the cap stays as it was). After a PermissionDenied
        (caps may not be changed here, which the job's cap owner has told the user once) the run asks no more:
        :attr:`can_set` is False."""
        try:
            applied = self._setter(uuid, watts)  # type: ignore[misc]
        except PermissionDenied:
            self._refused = True
            raise
        value = float(applied) if is_number(applied) else watts
        self._set[uuid] = value
        return value

    def apply(self, cap_w: float, why: str) -> bool:
        """Set ``cap_w`` on every GPU of the job (``why``: logged); False (logged) at the first that fails, whose cap
        stays as it was. A refusal the cap owner already said (PermissionDenied) is logged for ``-v`` only."""
        for uuid in self._uuids:
            try:
                self.set(uuid, cap_w)
            except Exception as e:  # noqa: BLE001 - a failed live change leaves the cap as it was
                log = logger.info if isinstance(e, PermissionDenied) else logger.warning
                log("could not set GPU %s to %.0f W (%s): %s", uuid, cap_w, why, e)
                return False
        logger.info("job %s: %s", self._job_id, why)
        return True

    def current(self, uuid: str) -> float | None:
        """The cap GPU ``uuid`` runs at as far as this run knows: what it set, else what it found."""
        return self._set.get(uuid, self.found.get(uuid))

    def restore(self) -> None:
        """Give every GPU this run changed the cap it found. A failure is logged and tried again at the next restore
        (the launcher's release restores the job's caps in any case)."""
        for uuid, watts in list(self._set.items()):
            found = self.found.get(uuid)
            if found is None:
                continue
            if found != watts:
                try:
                    self._setter(uuid, found)  # type: ignore[misc]
                except Exception as e:  # noqa: BLE001 - an injected setter may fail in any way; caps stay safe
                    logger.warning("could not restore the power cap of GPU %s to %.0f W: %s", uuid, found, e)
                    continue
            del self._set[uuid]
