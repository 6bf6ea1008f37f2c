"""What a calibration measures and where: :class:`Settings` (the command line's choices), :func:`choose_gpus` (which
GPUs), :func:`cap_access` (who sets the caps). Pure choices: nothing here measures, books or prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecolaunch.admin.agent import agent_alive
from ecolaunch.calibrate.booking import Occupant
from ecolaunch.errors import ConfigError
from ecolaunch.state.graph import GpuNode
from ecolaunch.calibrate.canned import NAMES, parse_spec

__all__ = ["Settings", "cap_access", "choose_gpus"]


@dataclass(frozen=True, slots=True)
class Settings:
    """What to measure, and for how long (``ecolaunch calibrate``'s options). ``workloads``: canned workload names,
    each optionally with a duty cycle (``mm@30``: :func:`~ecolaunch.calibrate.canned.parse_spec`), measured alone and
    in every pair, under that name."""

    workloads: tuple[str, ...] = NAMES
    seconds: float = 8.0
    settle_s: float = 1.0
    budget_s: float = 540.0
    caps: bool = True
    mps: bool = True
    force: bool = False

    def __post_init__(self) -> None:
        for w in self.workloads:
            try:
                parse_spec(w)
            except ValueError as e:
                raise ConfigError(str(e), hint="e.g. --workloads mm,bw,mlp,mm@30") from None
        if not self.workloads or len(set(self.workloads)) != len(self.workloads):
            raise ConfigError(f"workloads {','.join(self.workloads)!r}: name each of {', '.join(NAMES)} (optionally "
                              "@P, a duty cycle in %) at most once")
        for name in ("seconds", "budget_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not self.settle_s >= 0:
            raise ConfigError(f"settle_s must be >= 0, got {self.settle_s!r}")


def cap_access(backend: Any, state_dir: Path) -> str | None:
    """Who sets caps for a calibration here: ``agent`` (a cap agent serves the state directory), ``root`` (this
    process may set them itself), or None (neither)."""
    if agent_alive(Path(state_dir)):
        return "agent"
    return "root" if backend.privileged else None


def choose_gpus(gpus: Sequence[GpuNode], busy: Mapping[str, list[Occupant]], selectors: Sequence[str]) -> list[GpuNode]:
    """The GPUs to calibrate: those ``selectors`` name (NVML index or UUID), else one of each model, the first
    nobody uses (the first one when all are in use: the caller refuses it, naming who uses it).

    Raises ConfigError for a selector that names no GPU of the host.
    """
    ordered = sorted(gpus, key=lambda g: g.index)
    if selectors:
        chosen: list[GpuNode] = []
        for sel in selectors:
            match = [g for g in ordered if sel.strip() in (str(g.index), g.uuid)]
            if not match:
                have = ", ".join(f"{g.index} ({g.uuid})" for g in ordered) or "none"
                raise ConfigError(f"--gpu {sel!r} names no GPU of this host", hint=f"its GPUs: {have}")
            if match[0] not in chosen:
                chosen.append(match[0])
        return chosen
    by_model: dict[str, list[GpuNode]] = {}
    for g in ordered:
        by_model.setdefault(g.name, []).append(g)
    return [next((g for g in same if not busy.get(g.uuid)), same[0]) for same in by_model.values()]
