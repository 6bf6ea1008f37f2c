"""Loaders for the Zeus (NSDI '23) power-limit traces, as :class:`~ecolaunch.jobmodel.profile.CapPoint` curves.

What lives here: :func:`load_power_traces` (the summary sweeps, one :class:`ZeusSweep` per GPU, workload and batch
size; a curve's ``iter_time_s`` holds seconds per *epoch*) and :func:`load_profile_windows` (Zeus's profiling
windows). Nothing here decides anything; the accuracy benchmark and the tests use these loaders. Which files, where
they come from and how they are read: docs/simulator.md, "Measured curves as truth".
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.profile import CapPoint

# the development checkout's copy of the full traces (docs/simulator.md); an installed package has none
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "zeus-nsdi23"
POWER_TRACE_GPUS = ("v100", "a40", "p100", "rtx6000")
ZEUS_WINDOW_ITERS = 40  # assumption: Zeus's default profiled iterations per window (not stored in the files)

_WINDOW_NAME = re.compile(r"__GlobalPowerLimitOptimizer_(\d+)$")


@dataclass(frozen=True, slots=True)
class ZeusSweep:
    """One Zeus power-limit sweep (data, not a curve model): ``points`` ascending by cap; ``time_unit`` is
    ``"epoch"`` for a summary sweep (docs/simulator.md, "Measured curves as truth", units)."""

    gpu: str
    workload: str  # "<dataset>/<network>", e.g. "imagenet/resnet50"
    batch_size: int | None
    optimizer: str | None
    time_unit: str  # "epoch" (summary traces) or "iteration" (profile windows)
    points: tuple[CapPoint, ...]
    num_gpus: int = 1

    @property
    def key(self) -> str:
        bs = "" if self.batch_size is None else f" bs{self.batch_size}"
        return f"{self.gpu} {self.workload}{bs}" + ("" if self.num_gpus == 1 else f" x{self.num_gpus}")


def _require(path: Path) -> Path:
    if not path.exists():
        raise ConfigError(f"Zeus trace not found: {path}",
                          hint="pass a folder holding the Zeus NSDI '23 trace files (github.com/ml-energy/zeus, "
                               "examples/research_reproducibility/zeus_nsdi23/trace)")
    return path


def _read_rows(path: Path) -> list[dict[str, str]]:
    with _require(path).open(newline="") as f:
        return list(csv.DictReader(f))


def workload_optimizers(data_dir: Path = DEFAULT_DATA_DIR) -> dict[str, str]:
    """``{"<dataset>/<network>": optimizer}`` as paired in summary_train.csv (alphabetically first if several)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for row in _read_rows(Path(data_dir) / "summary_train.csv"):
        seen[f"{row['dataset']}/{row['network']}"].add(row["optimizer"])
    return {w: sorted(opts)[0] for w, opts in seen.items()}


def load_power_traces(data_dir: Path = DEFAULT_DATA_DIR, gpus: tuple[str, ...] = POWER_TRACE_GPUS) -> list[ZeusSweep]:
    """Every (GPU, workload, batch size) curve of ``summary_power_<gpu>.csv``, one point per power limit."""
    data_dir = Path(data_dir)
    optimizers = workload_optimizers(data_dir)
    curves: list[ZeusSweep] = []
    for gpu in gpus:
        groups: dict[tuple[str, int, str], dict[float, CapPoint]] = defaultdict(dict)
        for row in _read_rows(data_dir / f"summary_power_{gpu}.csv"):
            workload = f"{row['dataset']}/{row['network']}"
            chosen = optimizers.get(workload)
            if chosen is not None and row["optimizer"] != chosen:
                continue
            try:
                cap = float(row["power_limit"])
                point = CapPoint(cap, float(row["time_per_epoch"]), float(row["average_power"]))
                key = (workload, int(row["batch_size"]), row["optimizer"])
            except (KeyError, ValueError) as e:
                raise ConfigError(f"bad row in summary_power_{gpu}.csv: {row!r}") from e
            groups[key][cap] = point
        for (workload, bs, opt), pts in sorted(groups.items()):
            curves.append(ZeusSweep(gpu.upper(), workload, bs, opt, "epoch",
                                    tuple(pts[c] for c in sorted(pts))))
    return curves


def load_profile_windows(data_dir: Path = DEFAULT_DATA_DIR) -> list[ZeusSweep]:
    """Every ``profile_windows/*.csv`` as a curve (per-GPU mean power; time per assumed 40-iteration window)."""
    folder = _require(Path(data_dir) / "profile_windows")
    curves: list[ZeusSweep] = []
    for path in sorted(folder.glob("*.csv")):
        gpu, model, ids = path.stem.split("+")
        num_gpus = len(ids.removeprefix("gpu").split(","))
        points: dict[float, CapPoint] = {}
        for row in _read_rows(path):
            m = _WINDOW_NAME.match(row.get("window_name", ""))
            if m is None:
                raise ConfigError(f"unexpected window name in {path.name}: {row.get('window_name')!r}")
            elapsed_s = float(row["elapsed_time"])
            energies = [float(v) for k, v in row.items() if k.endswith("_energy")]
            power_w = sum(energies) / len(energies) / elapsed_s
            cap = float(m.group(1))
            points[cap] = CapPoint(cap, elapsed_s / ZEUS_WINDOW_ITERS, power_w)
        curves.append(ZeusSweep(gpu, model, None, None, "iteration",
                                tuple(points[c] for c in sorted(points)), num_gpus))
    return curves
