"""A catalogue of common NVIDIA GPUs, keyed by the names users type in ``ECOLAUNCH_SIMULATE``: :data:`CATALOGUE` and
:func:`lookup`.

Each row is a :class:`~ecolaunch.jobmodel.gpu.GpuModel` with a ``source`` citation. Where its numbers come from, and
which are assumptions: docs/simulator.md#where-the-catalogues-numbers-come-from. What lives elsewhere: the
:class:`~ecolaunch.jobmodel.gpu.GpuModel` type and its checks (:mod:`ecolaunch.jobmodel.gpu`), machine specs
(:mod:`ecolaunch.devices.spec`), the simulated device state (:mod:`ecolaunch.devices.simulated`), performance and
power models (``ecolaunch.sim``).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping
from types import MappingProxyType

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel

__all__ = ["ARCHITECTURES", "CATALOGUE", "architecture", "lookup", "measured_for", "model_names"]

_ZEUS = "Zeus NSDI'23 power-limit grid (ecolaunch/sim/data/summary_power_*.csv)"
_DATASHEET_MIN = "NVML min as commonly reported by nvidia-smi -q (not verified from a stored source)"

# name, full_name (as NVML reports it), memory_mib, (min, default, max) W, idle W (ASSUMPTION), nvlink,
# architecture, source
_ROWS: tuple[tuple[str, str, int, tuple[float, float, float], float, bool, str, str], ...] = (
    ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 81920, (100, 400, 400), 50, True, "Ampere",
     "NVIDIA A100 datasheet (400 W); nvidia-smi -q min 100/max 400 W on A100 SXM4 in NVIDIA/nvidia-docker#1648"),
    ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 40960, (100, 400, 400), 50, True, "Ampere",
     "NVIDIA A100 datasheet (400 W); nvidia-smi -q min 100/max 400 W on A100 SXM4 in NVIDIA/DCGM#152"),
    ("A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", 40960, (150, 250, 250), 35, False, "Ampere",
     f"NVIDIA A100 PCIe datasheet (250 W); {_DATASHEET_MIN}"),
    ("A100-PCIE-80GB", "NVIDIA A100 80GB PCIe", 81920, (150, 300, 300), 40, False, "Ampere",
     f"NVIDIA A100 80GB PCIe product brief (300 W); {_DATASHEET_MIN}"),
    ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", 81920, (200, 700, 700), 70, True, "Hopper",
     "NVIDIA H100 datasheet (700 W); nvidia-smi -q min 200/max 700 W on Hopper SXM in "
     "stackhpc/ansible-slurm-appliance#975"),
    ("H100-PCIE-80GB", "NVIDIA H100 PCIe", 81920, (200, 350, 350), 50, False, "Hopper",
     f"NVIDIA H100 PCIe datasheet (350 W); {_DATASHEET_MIN}"),
    ("H200-SXM-141GB", "NVIDIA H200", 144384, (200, 700, 700), 75, True, "Hopper",
     "NVIDIA H200 datasheet (up to 700 W); nvidia-smi -q min 200/max 700 W on Hopper SXM in "
     "stackhpc/ansible-slurm-appliance#975"),
    ("V100-SXM2-32GB", "Tesla V100-SXM2-32GB", 32768, (150, 300, 300), 40, True, "Volta",
     f"NVIDIA V100 datasheet (SXM2 300 W); {_DATASHEET_MIN}"),
    ("V100-SXM2-16GB", "Tesla V100-SXM2-16GB", 16384, (150, 300, 300), 40, True, "Volta",
     f"NVIDIA V100 datasheet (SXM2 300 W); {_DATASHEET_MIN}"),
    ("V100-PCIE-32GB", "Tesla V100-PCIE-32GB", 32768, (100, 250, 250), 30, False, "Volta",
     f"{_ZEUS}: 100-250 W; NVIDIA V100 datasheet (PCIe 250 W)"),
    ("V100-PCIE-16GB", "Tesla V100-PCIE-16GB", 16384, (100, 250, 250), 30, False, "Volta",
     f"{_ZEUS}: 100-250 W; NVIDIA V100 datasheet (PCIe 250 W)"),
    ("A40", "NVIDIA A40", 49152, (100, 300, 300), 30, False, "Ampere",
     f"{_ZEUS}: 100-300 W; nvidia-smi -q min 100/max 300 W in NVIDIA/nvidia-docker#1447"),
    ("A6000", "NVIDIA RTX A6000", 49152, (100, 300, 300), 25, False, "Ampere",
     f"NVIDIA RTX A6000 datasheet (300 W); {_DATASHEET_MIN}"),
    ("L40S", "NVIDIA L40S", 49152, (100, 350, 350), 35, False, "Ada Lovelace",
     f"NVIDIA L40S datasheet (350 W); {_DATASHEET_MIN}"),
    ("L4", "NVIDIA L4", 24576, (40, 72, 72), 16, False, "Ada Lovelace",
     f"NVIDIA L4 datasheet (72 W); {_DATASHEET_MIN}"),
    ("RTX4090", "NVIDIA GeForce RTX 4090", 24576, (150, 450, 450), 25, False, "Ada Lovelace",
     "NVIDIA RTX 4090 spec (450 W); nvidia-smi -q min 150/default 450/max 450 W in 1Panel-dev/1Panel#11910 "
     "(some partner boards allow up to 600 W)"),
    ("RTX3090", "NVIDIA GeForce RTX 3090", 24576, (100, 350, 350), 25, False, "Ampere",
     f"NVIDIA RTX 3090 spec (350 W); {_DATASHEET_MIN}"),
    ("RTX6000", "Quadro RTX 6000", 24576, (100, 260, 260), 20, False, "Turing",
     f"{_ZEUS}: 100-260 W; NVIDIA Quadro RTX 6000 datasheet"),
    ("P100-PCIE-16GB", "Tesla P100-PCIE-16GB", 16384, (125, 250, 250), 30, False, "Pascal",
     f"{_ZEUS}: 125-250 W; NVIDIA P100 PCIe datasheet (250 W)"),
    ("T4", "Tesla T4", 16384, (60, 70, 70), 10, False, "Turing",
     f"NVIDIA T4 datasheet (70 W); {_DATASHEET_MIN}"),
)

#: Every catalogue model by its catalogue name (read-only).
CATALOGUE: Mapping[str, GpuModel] = MappingProxyType({
    name: GpuModel(name, full, mem, float(lo), float(default), float(hi), float(idle), nvlink, arch, source)
    for name, full, mem, (lo, default, hi), idle, nvlink, arch, source in _ROWS
})

# Vendor prefixes dropped before matching, so "NVIDIA GeForce RTX 4090", "Quadro RTX 6000",
# "RTX A6000" and "rtx4090" all find their row.
_PREFIXES = ("NVIDIA", "TESLA", "QUADRO", "GEFORCE")


def _normalize(name: str) -> str:
    key = re.sub(r"[\s_\-]+", "", name.upper())
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key, stripped = key[len(prefix):], True
    return key


def _build_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for model in CATALOGUE.values():
        for alias in (model.name, model.full_name):
            index.setdefault(_normalize(alias), model.name)
    index.setdefault("RTXA6000", "A6000")
    return index


_INDEX: Mapping[str, str] = MappingProxyType(_build_index())


def model_names() -> list[str]:
    """The catalogue names, in catalogue order."""
    return list(CATALOGUE)


def _close_names(name: str) -> list[str]:
    wanted = name.strip().upper()
    contains = [n for n in CATALOGUE if wanted and wanted in n.upper()]
    similar = difflib.get_close_matches(wanted, [n.upper() for n in CATALOGUE], n=5, cutoff=0.4)
    by_upper = {n.upper(): n for n in CATALOGUE}
    close = contains + [by_upper[s] for s in similar if by_upper[s] not in contains]
    return close[:6]


def lookup(name: str) -> GpuModel:
    """The catalogue model called ``name`` (case, spaces, dashes and vendor prefixes ignored).

    Raises:
        ConfigError: no model has that name; the message lists close names, the hint all names.
    """
    key = _INDEX.get(_normalize(name))
    if key is not None:
        return CATALOGUE[key]
    close = _close_names(name)
    suggestion = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"unknown GPU model {name.strip()!r}{suggestion}",
        hint=f"use one of: {', '.join(CATALOGUE)}",
    )


#: NVIDIA's architectures, oldest first
ARCHITECTURES = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper")
_ARCH_PATTERNS = (("hopper", r"\bG?H(100|200|800)"), ("ada", r"\bL(4|40S?)\b|RTX\s*40\d0|ADA"),
                  ("ampere", r"\bA(2|10|16|30|40|100|800)\b|RTX\s*(30\d0|A\d000)"), ("turing", r"\bT4\b|RTX\s*20\d0"),
                  ("volta", r"V100"), ("pascal", r"P(4|40|100)\b|GTX\s*10\d0"), ("maxwell", r"\bM(40|60)\b"),
                  ("kepler", r"\bK(20|40|80)"))


@functools.lru_cache(maxsize=256)
def architecture(name: str) -> str:
    """The lower-case architecture of board ``name`` ("volta", "hopper", ...): the catalogue's, else read off the
    name ("" when neither knows it)."""
    key = _INDEX.get(_normalize(name))
    if key is not None:
        return CATALOGUE[key].architecture.lower().split()[0]
    return next((arch for arch, pat in _ARCH_PATTERNS if re.search(pat, name.upper())), "")


def measured_for(arch: str, measured: Mapping[str, float], default: float) -> float:
    """A figure measured on some architectures, for a board of ``arch``: the figure of the newest measured
    architecture not newer than ``arch`` (of the oldest measured when ``arch`` is older still); ``default`` for an
    unknown ``arch`` or when nothing is measured."""
    if arch not in ARCHITECTURES:
        return default
    known = sorted((ARCHITECTURES.index(a), v) for a, v in measured.items() if a in ARCHITECTURES)
    if not known:
        return default
    older = [v for i, v in known if i <= ARCHITECTURES.index(arch)]
    return older[-1] if older else known[0][1]
