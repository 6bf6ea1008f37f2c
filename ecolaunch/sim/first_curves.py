"""What a first launch's cap curve is told before it runs, in the measured world: what the machine's history gives.

What lives here: :class:`HistoryFirstCurve` (what the launcher does: the profile another user measured of the same
job on this machine; else nothing, or a fallback's curve), :class:`SimFirstLaunchCurves` (binds the policy layer's
:class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves` to the simulation's world), :func:`as_launched` (wraps a
policy with it: ``ecolaunch simulate --policy curve`` on a measured trace) and :func:`job_board`. What does not:
why a first launch is told a curve (:mod:`ecolaunch.policy.firstcurve`), the world's truth
(:mod:`ecolaunch.sim.measured`), the budget that reads the curve (:mod:`ecolaunch.caps.limits`), and the bounds
and scoring of a learned predictor, which only the benchmarks run (``benchmarks/_first_curves.py``). The history's
curve: docs/simulator.md#the-measured-world.
"""

from __future__ import annotations

from collections.abc import Mapping

from ecolaunch.jobmodel.profile import Profile
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.firstcurve import FirstLaunchCurves
from ecolaunch.sim.measured import MeasuredWorld
from ecolaunch.state.graph import StateGraph

__all__ = ["HistoryFirstCurve", "SimFirstLaunchCurves", "as_launched", "job_board"]


def job_board(world: MeasuredWorld, state: StateGraph, job: JobRequest) -> str | None:
    """The measured board the job's host runs, or None when it mixes models (no curve before the model is known,
    as for a real launch)."""
    names = {g.name for g in state.hosts[job.host].gpus.values()}
    return world.board_of(names.pop()) if len(names) == 1 else None


class HistoryFirstCurve:
    """What the history of the machine says of a first launch: the profile another user measured of the same job
    type on the job's board (:meth:`~ecolaunch.sim.measured.MeasuredWorld.machine_history_profile`: a colleague ran
    the same script the same way), else ``fallback``'s curve (None: nothing, as the launcher does). The world is the
    simulation's own, bound when it is made (:meth:`bind_world`): its history grows as the run goes."""

    name = "history"

    def __init__(self, kind_of: Mapping[str, str], fallback=None) -> None:
        self.kind_of, self.fallback = dict(kind_of), fallback
        self.world: MeasuredWorld | None = None
        self.told = {"history": 0, "fallback": 0}

    def bind_world(self, world: MeasuredWorld) -> None:
        self.world = world

    def __call__(self, state: StateGraph, job: JobRequest) -> Profile | None:
        if self.world is None:
            raise RuntimeError("HistoryFirstCurve reads the simulation's world: bind_world() it first")
        board = job_board(self.world, state, job)
        if board is None:
            return None
        known = self.world.machine_history_profile(job.user, self.kind_of[job.id], board)
        self.told["history" if known is not None else "fallback"] += 1
        if known is not None or self.fallback is None:
            return known
        return self.fallback(state, job)


class SimFirstLaunchCurves(FirstLaunchCurves):
    """:class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves` in the simulator: the supplier reads the simulation's
    own world where it needs one (:class:`HistoryFirstCurve`), bound when the simulation is made."""

    def bind_world(self, world: MeasuredWorld) -> None:
        if hasattr(self.supply, "bind_world"):
            self.supply.bind_world(world)

    @property
    def reads_history(self) -> bool:
        """Whether the policy reads the machine's history as the launcher does (:class:`HistoryFirstCurve`): its
        simulation then starts a first launch from a colleague's profile (``Simulation(colleague_profiles=True)``)."""
        return isinstance(self.supply, HistoryFirstCurve)


def as_launched(policy, trace, name: str = "curve") -> SimFirstLaunchCurves:
    """``policy`` as the launcher runs it by default in the measured world: a first launch told the profile another
    user of the machine measured of the same job where there is one, else nothing (:class:`HistoryFirstCurve`). What
    the ``curve`` row of ``benchmarks/energy.py`` and ``ecolaunch simulate --policy curve`` on a measured trace run."""
    return SimFirstLaunchCurves(policy, HistoryFirstCurve({j.id: j.kind for j in trace.jobs}), name)
