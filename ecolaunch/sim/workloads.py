"""The simulator's workload catalogue and the measured job-population data the traces are drawn from.

What lives here: :func:`workload_catalogue` / :func:`workload_profiles` / :func:`workload_names` (one
:class:`~ecolaunch.jobmodel.profile.Profile` per Gavel job type), :data:`ASSUMED_MEMORY_MIB`,
:func:`memory_agreement`, and cached loaders of the population data (:func:`gavel_vc`, :func:`sample_runtimes`,
:func:`alibaba_pods`), each computed at most once per process, on first use, never at import. What does not:
assembling traces (:mod:`ecolaunch.sim.traces`), the models (:mod:`ecolaunch.sim.interference`,
:mod:`ecolaunch.sim.power`, :mod:`ecolaunch.sim.node`). Where each profile field comes from:
docs/simulator.md#workload-profiles.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.models import ZEUS_GPUS, gavel_solo, read_data_csv, zeus_rows

logger = logging.getLogger(__name__)

#: ASSUMPTION, not measured: peak GPU memory (MiB) of each Gavel job type, see docs/simulator.md#workload-profiles.
ASSUMED_MEMORY_MIB: Mapping[str, int] = {
    "ResNet-18 (batch size 16)": 900, "ResNet-18 (batch size 32)": 1000, "ResNet-18 (batch size 64)": 1200,
    "ResNet-18 (batch size 128)": 1600, "ResNet-18 (batch size 256)": 2200,
    "ResNet-50 (batch size 16)": 3000, "ResNet-50 (batch size 32)": 4600, "ResNet-50 (batch size 64)": 7800,
    "ResNet-50 (batch size 128)": 14000,
    "Transformer (batch size 16)": 1600, "Transformer (batch size 32)": 2000,
    "Transformer (batch size 64)": 2800, "Transformer (batch size 128)": 4400,
    "Transformer (batch size 256)": 8500,
    "LM (batch size 5)": 1000, "LM (batch size 10)": 1100, "LM (batch size 20)": 1300,
    "LM (batch size 40)": 1700, "LM (batch size 80)": 2500,
    "Recommendation (batch size 512)": 1200, "Recommendation (batch size 1024)": 1600,
    "Recommendation (batch size 2048)": 2400, "Recommendation (batch size 4096)": 4000,
    "Recommendation (batch size 8192)": 7200,
    "A3C": 1000, "CycleGAN": 4000,
}
#: Gavel job type family -> the Zeus workload of the same model family (only ResNet-50 has one).
ZEUS_SAME_FAMILY: Mapping[str, str] = {"ResNet-50": "imagenet/resnet50"}
#: The board the Zeus power values were measured on (V100 PCIe) and its maximum power limit.
_ZEUS_GPU = "v100"
_NAME = re.compile(r"^(?P<family>.+?)(?: \(batch size (?P<batch>\d+)\))?$")


@dataclass(frozen=True, slots=True)
class Workload:
    """One Gavel job type with the provenance of its profile."""

    name: str
    family: str
    batch_size: int | None
    #: Gavel's solo throughput on V100, iterations/s (measured)
    solo_throughput: float
    #: latent GPU demand on V100 in [0, 1] fitted on Gavel's pairs
    demand: float
    #: average power / board maximum power limit, from Zeus; None when no same-family sweep exists
    power_frac: float | None
    #: where ``power_frac`` comes from, or why it is None
    power_source: str
    #: ASSUMPTION (see :data:`ASSUMED_MEMORY_MIB`)
    memory_mib: int

    def profile(self, power_limit_max_w: float = ZEUS_GPUS[_ZEUS_GPU]) -> Profile:
        """The solo profile, with ``power_w`` scaled to a board of maximum power limit ``power_limit_max_w``."""
        power = None if self.power_frac is None else self.power_frac * power_limit_max_w
        return Profile(iter_time_s=1.0 / self.solo_throughput, sm_util_pct=100.0 * self.demand,
                          mem_bw_util_pct=None, memory_mib=self.memory_mib, power_w=power)


@functools.lru_cache(maxsize=1)
def workload_catalogue() -> tuple[Workload, ...]:
    """Every Gavel job type with its measured and fitted values, in Gavel's order (computed once)."""
    from ecolaunch.sim.interference import fit_gavel  # the fit pulls in the model; keep it off the import path

    demands = fit_gavel().demands
    solo = {job: tp for (gpu, job), tp in gavel_solo().items() if gpu == "v100"}
    zeus_max = ZEUS_GPUS[_ZEUS_GPU]
    zeus_at_max = {(r.workload, r.batch_size): r.power_w for r in zeus_rows(_ZEUS_GPU) if r.power_limit_w == zeus_max}
    out = []
    for name, throughput in solo.items():
        m = _NAME.match(name)
        family, batch = m["family"], (int(m["batch"]) if m["batch"] else None)
        if name not in ASSUMED_MEMORY_MIB:
            raise ConfigError(f"Gavel job type {name!r} has no memory assumption",
                              hint="add it to ecolaunch.sim.workloads.ASSUMED_MEMORY_MIB")
        zeus = ZEUS_SAME_FAMILY.get(family)
        power_w = zeus_at_max.get((zeus, batch)) if zeus else None
        if power_w is not None:
            frac, source = power_w / zeus_max, f"Zeus {zeus} batch {batch} on V100 PCIe at {zeus_max:.0f} W"
        else:
            frac, source = None, "no Zeus sweep of this model family: dynamic power assumed proportional to demand"
        out.append(Workload(name, family, batch, throughput, demands[("v100", name)], frac, source,
                            ASSUMED_MEMORY_MIB[name]))
    return tuple(out)


def workload_names() -> tuple[str, ...]:
    """The 26 workload names (Gavel's job type names), in Gavel's order."""
    return tuple(w.name for w in workload_catalogue())


def workload_profiles(gpu: GpuModel | None = None) -> dict[str, Profile]:
    """Workload name -> solo profile (a new dict each call; the profiles are immutable).

    Args:
        gpu: the board the jobs run on: the Zeus-grounded ``power_w`` is scaled to its ``power_limit_max_w``.
            ``None``: as measured, on Zeus's 250 W V100 PCIe. Iteration times and demands are V100's whatever the
            board.
    """
    p_max = ZEUS_GPUS[_ZEUS_GPU] if gpu is None else gpu.power_limit_max_w
    return {w.name: w.profile(p_max) for w in workload_catalogue()}


def workload_profile(name: str, gpu: GpuModel | None = None) -> Profile:
    """One workload's profile; ConfigError naming the close matches for an unknown name."""
    profiles = workload_profiles(gpu)
    if name not in profiles:
        import difflib

        near = difflib.get_close_matches(name, list(profiles), n=3, cutoff=0.5)
        raise ConfigError(f"unknown workload {name!r}",
                          hint=f"did you mean {', '.join(map(repr, near))}?" if near else
                          f"use one of: {', '.join(profiles)}")
    return profiles[name]


def memory_agreement(capacity_mib: int = 16384, gpu: str = "v100") -> tuple[int, int]:
    """``(agreeing, total)`` ordered Gavel pairs on ``gpu`` where "the two assumed memories fit in
    ``capacity_mib``" matches Gavel's mark (measured vs ``[0, 0]``). Gavel's V100s had 16 GiB."""
    agree = total = 0
    for r in read_data_csv("gavel_pairs_sf1.csv"):
        if r["gpu"] != gpu:
            continue
        fits = ASSUMED_MEMORY_MIB[r["job_a"]] + ASSUMED_MEMORY_MIB[r["job_b"]] <= capacity_mib
        measured = float(r["throughput_a"]) > 0.0 or float(r["throughput_b"]) > 0.0
        agree += fits == measured
        total += 1
    return agree, total


# --- job-population data ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class VcJob:
    """One job of a Gavel per-VC trace: Philly's arrival time and GPU count, Gavel's job type."""

    arrival_s: float
    nproc: int
    job_type: str


@dataclass(frozen=True, slots=True)
class Pod:
    """One Alibaba 2023 GPU pod that ran: creation time, lifetime (deletion - scheduling), GPUs, GPU share."""

    creation_s: float
    lifetime_s: float
    num_gpu: int
    gpu_milli: int




#: The Gavel virtual clusters vendored (file ``gavel_vc_<vc>.csv``).
GAVEL_VCS: tuple[str, ...] = ("6214e9", "0e4a51")


@functools.lru_cache(maxsize=None)
def gavel_vc(vc: str) -> tuple[VcJob, ...]:
    """The jobs of one vendored Gavel VC trace, in arrival order (read once per process)."""
    if vc not in GAVEL_VCS:
        raise ConfigError(f"no vendored Gavel trace for VC {vc!r}", hint=f"use one of {', '.join(GAVEL_VCS)}")
    return tuple(VcJob(float(r["arrival_s"]), int(r["scale_factor"]), r["job_type"])
                 for r in read_data_csv(f"gavel_vc_{vc}.csv"))


@functools.lru_cache(maxsize=1)
def alibaba_pods() -> tuple[Pod, ...]:
    """The Alibaba 2023 GPU pods that ran (``openb_pod_list_default``), in creation order (read once)."""
    return tuple(Pod(float(r["creation_s"]), float(r["lifetime_s"]), int(r["num_gpu"]), int(r["gpu_milli"]))
                 for r in read_data_csv("alibaba2023_gpu_pods.csv"))


@functools.lru_cache(maxsize=1)
def philly_runtime_quantiles() -> tuple[np.ndarray, np.ndarray]:
    """``(quantile, runtime_s)`` of the 83,154 Philly job runtimes at quantiles 0, 0.001, ..., 1."""
    rows = read_data_csv("philly_runtime_quantiles.csv")
    q = np.array([float(r["quantile"]) for r in rows])
    x = np.array([float(r["runtime_s"]) for r in rows])
    q.setflags(write=False)
    x.setflags(write=False)
    return q, x


def sample_runtimes(rng: np.random.Generator, n: int, min_s: float, max_s: float) -> np.ndarray:
    """``n`` Philly runtimes (s): runs shorter than ``min_s`` are left out (drawn from the distribution
    conditioned on ``>= min_s``), longer ones are cut to ``max_s``. Inverse-CDF sampling, linear between the
    table's quantiles; deterministic for a given ``rng`` state."""
    if not 0 < min_s < max_s:
        raise ConfigError(f"runtime range [{min_s}, {max_s}] s is empty", hint="give 0 < min_s < max_s")
    q, x = philly_runtime_quantiles()
    q_lo = float(np.interp(min_s, x, q))
    u = rng.uniform(q_lo, 1.0, size=n)
    return np.clip(np.interp(u, q, x), min_s, max_s)


__all__ = ["ASSUMED_MEMORY_MIB", "GAVEL_VCS", "Pod", "VcJob", "Workload", "alibaba_pods", "gavel_vc",
           "memory_agreement", "philly_runtime_quantiles", "sample_runtimes", "workload_catalogue",
           "workload_names", "workload_profile", "workload_profiles"]
