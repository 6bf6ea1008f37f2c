"""The observed run, one owner: its state (:mod:`.state`: :class:`~ecolaunch.run.state.RunState`,
:class:`~ecolaunch.run.state.Run`), its one loop (:mod:`.observer`: :class:`~ecolaunch.run.observer.RunObserver`) and
its plug-ins, one module each behind one interface (:class:`~ecolaunch.run.state.Part`): profiling
(:mod:`.profiling`), the early check (:mod:`.earlycheck`), the closed loop (:mod:`.closedloop`), pace-matching
(:mod:`.pacing`) and the record (:mod:`.record`). What the plug-ins drive lives below: the profiler, the monitor, the
recorder and the early check in ``ecolaunch.profile``, the closed loop and the run's caps in ``ecolaunch.caps``.
docs/architecture.md, "The flow of one launch", step 8."""
