"""ecolaunch: a drop-in ``torchrun`` for shared GPU workstations.

The small public API for training scripts; ``import ecolaunch`` loads nothing heavy (no torch, no torch_geometric).
In the training loop (no-ops outside an ecolaunch launch): ``step()`` marks one iteration, ``track(loader)`` each
iteration of a loop, ``@train_step`` one step per call; ``@job(...)`` passes hints to the launcher (``job_hints()``
reads them back); ``is_profiling()`` is True during a profiling run. From Python: ``launch(fn_or_script, *args,
nproc=...)`` runs a function or a script on ``nproc`` workers and returns each rank's result with the job's energy
(a failed worker raises :class:`WorkerFailed`); ``with measure(name) as m:`` times a block and reads its GPUs' energy
(``m.time_s``, ``m.energy_j``). Details: docs/python-api.md.
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
