"""The run's record plug-in: what the run leaves in the history when it ends.

What lives here: :class:`Recording` (a :class:`~ecolaunch.run.state.Part`: at the end, the run's
:class:`~ecolaunch.profile.history.JobRecord`, its profile where it changed, and the ranks' all-reduce waits). What
does not: the attribution of energy and the writes (:class:`~ecolaunch.profile.record.RunRecorder`, which the run
holds as :attr:`Run.recorder <ecolaunch.run.state.Run.recorder>`), what the history keeps
(:mod:`ecolaunch.profile.history`). docs/history.md.
"""

from __future__ import annotations

import logging

from ecolaunch.profile import channel
from ecolaunch.profile.ddpwait import RankWaits, rank_waits
from ecolaunch.profile.modes import ProfileAction
from ecolaunch.profile.record import RunSpan
from ecolaunch.run.state import Part, Run

logger = logging.getLogger(__name__)


class Recording(Part):
    """Builds and writes the run's record once the run ended (after the closed loop's finish, which corrects the
    profile from what it measured)."""

    def __init__(self) -> None:
        #: what the ranks waited at the all-reduce for the slowest, read at the end
        self.waits: RankWaits | None = None

    def finish(self, run: Run) -> None:
        hints = run.monitor.hints()
        not_learned = run.not_learned()
        reader = run.monitor.reader
        config = run.config
        run.record = run.recorder.build(
            RunSpan(run.t0, run.t1, run.wall0, run.wall1), user=config.user, name=config.name,
            name_given=config.name_given, hints=hints, profile=run.profile, exit_code=run.exit_code,
            iterations=reader.count(), iter_time_s=reader.mean_iter_time_s(run.settings.warmup_iters),
            source=config.source, result=run.result, findings=run.findings,
            profiling_energy_j=config.profiling_energy_j, not_learned=not_learned, predicted_s=config.predicted_s)
        adopted = run.adopted
        if not_learned is not None:
            logger.info("job %s: the history is not updated from this run: %s", run.job_id, not_learned)
            if adopted:  # the colleague's profile is not this job's here: the user's next launch measures its own
                run.recorder.store_profile(None, hints, refused=True)
        elif adopted:  # started from a colleague's profile: it (corrected by the loop, if it learned) is now theirs
            run.recorder.store_profile(run.profile, hints)
        elif run.learned and run.profile is not None or (run.result is None and run.recorder.hints_changed(hints)):
            # the corrected curve; or what the script declared, for the next launch (--profile auto, its bound)
            run.store_profile(hints)
        if run.mode is not ProfileAction.PRE:  # a profiling run leaves its profile only
            run.recorder.write(run.record)
        self.waits = rank_waits(channel.read_waits(run.monitor.hook_dir), run.record.iter_time_s,
                                run.settings.warmup_iters)
