"""A running job's progress as its launcher last measured it: :class:`JobProgress`.

The launcher writes one into its job file at every heartbeat, so that readers of the state graph (``ecolaunch
status --json``, ``ecolaunch top``) see how far a job is without the launcher's private channels. Every field
carries the bounds a job file may claim, checked by :mod:`ecolaunch.jobmodel.codec` on read. What does not live
here: how the figures are measured (``ecolaunch.run.observer``, ``ecolaunch.profile.record``), the job file
(``ecolaunch.state.graph``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta

from ecolaunch.jobmodel.profile import Count, Seconds

#: far beyond any real job's energy (a 100 kW node for a year is 3e12 J): what matters is a finite number
MAX_ENERGY_J = 1e15

Joules = Annotated[float, Meta(ge=0, le=MAX_ENERGY_J)]
SignedJoules = Annotated[float, Meta(ge=-MAX_ENERGY_J, le=MAX_ENERGY_J)]
WallTime = Annotated[float, Meta(ge=0, le=1e11)]


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A running job so far, measured at ``at`` (seconds since the epoch).

    ``iterations``: the steps every rank has marked (``ecolaunch.step()``; 0 for an uninstrumented script);
    ``iter_time_s``: the mean seconds per step after the warm-up, as the end-of-job summary computes it (None until
    there are enough steps); ``energy_j``: the job's share of its GPUs' energy since it started (the attribution of
    the history record); ``saving_j``: an *estimate* of the energy saved so far against running uncapped (None
    without a known cap curve, see ``ecolaunch.profile.record.saving_estimate_j``), negative where the caps cost energy;
    ``total_iterations``: the steps the whole run is declared to mark (``--steps``, else the script's
    ``@ecolaunch.job(steps=...)``, else the total its ``track()`` loops declared so far; None: not declared), from
    which the job's end is expected (``ecolaunch.state.graph.Job.remaining_s``).
    """

    at: WallTime
    iterations: Count = 0
    iter_time_s: Seconds | None = None
    energy_j: Joules = 0.0
    saving_j: SignedJoules | None = None
    total_iterations: Count | None = None
