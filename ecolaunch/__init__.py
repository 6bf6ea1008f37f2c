"""ecolaunch: a drop-in ``torchrun`` for shared GPU workstations.

This module holds the version and the small public API that training scripts use. It imports nothing
heavy (no torch, no torch_geometric), so ``import ecolaunch`` costs next to nothing in a script that is
not launched by ecolaunch.

Training-loop API (see :mod:`ecolaunch.profile.hooks`): ``step()`` marks one iteration,
``track(loader)`` marks each iteration of a loop, ``@train_step`` marks one step per call,
``@job(name=None, max_slowdown_pct=None, memory_mib=None, profile_safe=False)`` passes hints to the
launcher (``job_hints()`` reads them back, as a :class:`JobHints`), ``is_profiling()`` is True during a
profiling run. All are no-ops outside an ecolaunch launch.
"""

from __future__ import annotations

import importlib

# The job-model package ``ecolaunch.job`` is loaded before the ``@job`` decorator is bound below: loaded later, it
# would rebind ``ecolaunch.job`` (the public decorator) to the package.
importlib.import_module("ecolaunch.job")

from ecolaunch.profile.hooks import JobHints, is_profiling, job, job_hints, step, track, train_step  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "JobHints",
    "hf_callback",
    "is_profiling",
    "job",
    "job_hints",
    "lightning_callback",
    "step",
    "track",
    "train_step",
]


def lightning_callback():
    """A PyTorch Lightning callback marking one iteration per batch (see ``ecolaunch.profile.integrations``)."""
    from ecolaunch.profile.integrations import lightning_callback as make

    return make()


def hf_callback():
    """A Hugging Face ``TrainerCallback`` marking one iteration per step (see ``ecolaunch.profile.integrations``)."""
    from ecolaunch.profile.integrations import hf_callback as make

    return make()
