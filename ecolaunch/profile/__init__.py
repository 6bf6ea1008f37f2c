"""Knowing a job: in-process hooks, the hook channel, sampling, profiling, pace-matching, energy and history.

This package imports nothing, so ``import ecolaunch`` stays cheap: import its modules directly. Which module holds
what: docs/architecture.md (the ``profile/`` row of the module table).
"""
