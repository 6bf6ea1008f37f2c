"""The run's early-check plug-in: once, is this run its profile's job, and is it slower than its bound?

What lives here: :class:`Checking` (a :class:`~ecolaunch.run.state.Part`: it runs the armed check and reports what it
found). What does not: the check itself (:class:`~ecolaunch.profile.earlycheck.EarlyCheck`, which the run holds as
:attr:`Run.early <ecolaunch.run.state.Run.early>`; the observer's start and profiling arm it). What it reads, and
when: docs/profiling.md, "The early check".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ecolaunch.run.state import Part, Run

logger = logging.getLogger(__name__)


class Checking(Part):
    """Runs the run's early check once the observer's start (a known profile) or profiling armed it, and says what it
    found (it changes no cap)."""

    def step(self, run: Run, stamps: Sequence[float], final: bool) -> None:
        if not run.early.armed or final:
            return
        finding = run.early.step(stamps, run.profile, run.allowed_slowdown_pct, run.bounds)
        if run.early.off_profile is not None and not run.shared():
            match = run.config.match
            logger.warning("job %s: %s: a disturbed run, or not the job whose profile it matched (%s)", run.job_id,
                           run.early.off_profile, match.how if match is not None else "its fingerprint")
        if finding is None:
            return
        # without the closed loop (caps may not be changed, or the GPU is shared) the check only reports
        logger.warning("job %s: %s", run.job_id, finding.message)
        run.findings.append(finding.message)
