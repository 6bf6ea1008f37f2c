"""ecolaunch: a drop-in ``torchrun`` for shared GPU workstations.

This module holds the version (:mod:`ecolaunch._version`) and the small public API that training scripts use.
It imports nothing heavy (no torch, no torch_geometric), so ``import ecolaunch`` costs next to nothing in a
script that is not launched by ecolaunch.

Training-loop API (see :mod:`ecolaunch.profile.hooks`): ``step()`` marks one iteration,
``track(loader)`` marks each iteration of a loop, ``@train_step`` marks one step per call,
``@job(name=None, max_slowdown_pct=None, memory_mib=None, profile_safe=False, key=None)`` passes hints to the
launcher (``job_hints()`` reads them back, as a :class:`JobHints`), ``is_profiling()`` is True during a
profiling run. All are no-ops outside an ecolaunch launch.
"""

from __future__ import annotations

from ecolaunch._version import __version__
from ecolaunch.profile.hooks import JobHints, is_profiling, job, job_hints, step, track, train_step

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
    # lazy: `import ecolaunch` loads only the hooks; the integrations load when a callback is asked for
    from ecolaunch.profile.integrations import lightning_callback as make

    return make()


def hf_callback():
    """A Hugging Face ``TrainerCallback`` marking one iteration per step (see ``ecolaunch.profile.integrations``)."""
    # lazy: as in lightning_callback: `import ecolaunch` loads only the hooks
    from ecolaunch.profile.integrations import hf_callback as make

    return make()
