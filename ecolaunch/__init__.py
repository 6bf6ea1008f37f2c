"""ecolaunch: a drop-in ``torchrun`` for shared GPU workstations.

This module holds the version and the small public API that training scripts use. It imports nothing
heavy (no torch, no torch_geometric), so ``import ecolaunch`` costs next to nothing in a script that is
not launched by ecolaunch.
"""

from __future__ import annotations

from ecolaunch.profile.hooks import JobHints, is_profiling, job, job_hints, step, track, train_step

__version__ = "0.1.0"

__all__ = ["__version__", "JobHints", "is_profiling", "job", "job_hints", "step", "track", "train_step"]
