"""ecolaunch: a drop-in ``torchrun`` for shared GPU workstations.

This module holds the version (:mod:`ecolaunch._version`) and the small public API that training scripts use.
It imports nothing heavy (no torch, no torch_geometric), so ``import ecolaunch`` costs next to nothing in a
script that is not launched by ecolaunch.

Training-loop API (see :mod:`ecolaunch.profile.hooks`): ``step()`` marks one iteration,
``track(loader)`` marks each iteration of a loop, ``@train_step`` marks one step per call,
``@job(name=None, max_slowdown_pct=None, memory_mib=None, profile_safe=False, key=None)`` passes hints to the
launcher (``job_hints()`` reads them back, as a :class:`JobHints`), ``is_profiling()`` is True during a
profiling run. All are no-ops outside an ecolaunch launch.

Launch API (see :mod:`ecolaunch.api`, loaded on first call): ``launch(fn_or_script, *args, nproc=...)`` runs a
function or a script on ``nproc`` workers as the command line would and returns each rank's result with the job's
energy; ``measure(name)`` is a measurement window (``with ecolaunch.measure("eval") as m:``, then ``m.time_s``,
``m.energy_j``); a failed worker raises :class:`WorkerFailed`.
"""

from __future__ import annotations

import importlib

from ecolaunch._version import __version__
from ecolaunch.errors import WorkerFailed
from ecolaunch.profile.hooks import JobHints, is_profiling, job, job_hints, step, track, train_step

# the subpackage ecolaunch.launch, imported before the function launch() below is defined, so that the function is
# what `ecolaunch.launch` names: importing the subpackage later would set the attribute to it (it imports nothing)
importlib.import_module("ecolaunch.launch")

__all__ = [
    "__version__",
    "JobHints",
    "allreduce_wait_hook",
    "hf_callback",
    "is_profiling",
    "job",
    "job_hints",
    "launch",
    "lightning_callback",
    "measure",
    "step",
    "track",
    "train_step",
    "WorkerFailed",
]


def launch(entrypoint, *args, **options):
    """Run a function (its return value on each rank) or a script on ``nproc`` workers, placed, queued, capped and
    accounted as the command line would: ``ecolaunch.launch(train, cfg, nproc=2)[0]``, ``.energy_j``, ``.time_s``.
    The options and errors are those of :func:`ecolaunch.api.launch`."""
    # lazy: `import ecolaunch` loads only the hooks; the launcher loads when a launch is asked for
    from ecolaunch.api import launch as run

    return run(entrypoint, *args, **options)


def measure(name=None, *, sync_cuda=True):
    """A measurement window of time and GPU energy: ``with ecolaunch.measure("eval") as m: ...``, then
    ``m.time_s``, ``m.energy_j``, ``m.gpu_energy_j`` (see :func:`ecolaunch.api.measure`)."""
    # lazy: as in launch(); the GPU backend loads with the first window
    from ecolaunch.api import measure as window

    return window(name, sync_cuda=sync_cuda)


def allreduce_wait_hook(state, bucket):
    """A DDP communication hook (``model.register_comm_hook(None, ecolaunch.allreduce_wait_hook)``): DDP's default
    all-reduce, timing how long this rank waits there for the slowest (see ``ecolaunch.profile.ddpwait``)."""
    # lazy: `import ecolaunch` loads only the hooks; the timing loads with the first bucket
    from ecolaunch.profile.ddpwait import allreduce_wait_hook as hook

    return hook(state, bucket)


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
