"""The environment ecolaunch adds to torchrun's for the workers.

GPU identity is the NVML UUID everywhere else; only here are CUDA indices computed. ecolaunch exports
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA enumerates GPUs in NVML's order and the indices agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ecolaunch.config import ENV_JOB_ID
from ecolaunch.errors import ConfigError
from ecolaunch.state.graph import GpuNode


def allowed_by_visible_devices(visible: str | None, gpus: Sequence[GpuNode]) -> tuple[str, ...] | None:
    """The UUIDs an inherited ``CUDA_VISIBLE_DEVICES`` (a Slurm allocation, say) lets the job use.

    Entries are NVML indices or (prefixes of) UUIDs, as CUDA accepts them; None when the variable is unset.
    """
    if visible is None:
        return None
    chosen: list[str] = []
    for entry in (e.strip() for e in visible.split(",") if e.strip()):
        if entry.isdigit():
            match = [g.uuid for g in gpus if g.index == int(entry)]
        else:
            match = [g.uuid for g in gpus if g.uuid.startswith(entry)]
        if len(match) != 1:
            raise ConfigError(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {len(match)} GPUs of this host",
                hint="use NVML indices or UUIDs from 'ecolaunch status', or unset CUDA_VISIBLE_DEVICES",
            )
        chosen.append(match[0])
    return tuple(chosen)


def allowed_by_slurm(indices: Sequence[int], gpus: Sequence[GpuNode]) -> tuple[str, ...]:
    """The UUIDs of the GPUs a Slurm allocation gave this node (``SLURM_STEP_GPUS``/``SLURM_JOB_GPUS``: NVML indices,
    :mod:`ecolaunch.launch.slurm`)."""
    by_index = {g.index: g.uuid for g in gpus}
    missing = [i for i in indices if i not in by_index]
    if missing:
        raise ConfigError(f"the Slurm allocation names GPU {', '.join(map(str, missing))}, which this host does not "
                          f"have (it has {', '.join(str(g.index) for g in gpus) or 'none'})",
                          hint="check the allocation's --gres and gres.conf; 'ecolaunch status' lists this host's GPUs")
    return tuple(by_index[i] for i in indices)


def worker_env(job_id: str, gpu_uuids: Sequence[str], gpus: Mapping[str, GpuNode]) -> dict[str, str]:
    """Variables to add to every worker's environment (torch's own are set by torch)."""
    indices = ",".join(str(gpus[u].index) for u in gpu_uuids)
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": indices,
        ENV_JOB_ID: job_id,
    }
