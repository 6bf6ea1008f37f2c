"""The static description of a GPU model: :class:`GpuModel`, one board as its datasheet and NVML describe it; the one
clamp of a power cap (:func:`clip_w`) and the admin's cap bounds for a board (:class:`CapBounds`).

A GPU model is what does not change while a machine runs: name, memory, power-limit range, idle power,
architecture, links; the catalogue's boards and a machine spec's custom boards are :class:`GpuModel` records. What
lives elsewhere: a GPU at one instant (``ecolaunch.devices.backend.GpuSnapshot``), a GPU as the state graph knows it
(``ecolaunch.state.graph.GpuNode``, built from a snapshot or from a model).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ecolaunch.errors import ConfigError

__all__ = ["GpuModel"]


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU board: its catalogue name, what NVML calls it (``full_name``), its memory and its power envelope.

    ``idle_power_w`` is the board's draw with no process on it (an assumption of the catalogue, see
    :mod:`ecolaunch.devices.catalogue`); ``source`` cites where the numbers come from.
    """

    name: str
    full_name: str
    memory_mib: int
    power_limit_min_w: float
    power_limit_default_w: float
    power_limit_max_w: float
    idle_power_w: float
    nvlink: bool
    architecture: str
    source: str

    def __post_init__(self) -> None:
        problems = []
        if self.memory_mib <= 0:
            problems.append(f"memory_mib={self.memory_mib} must be > 0")
        if not 0 < self.power_limit_min_w <= self.power_limit_default_w <= self.power_limit_max_w:
            problems.append(
                f"power limits must satisfy 0 < min <= default <= max, got min={self.power_limit_min_w} "
                f"default={self.power_limit_default_w} max={self.power_limit_max_w}"
            )
        if not 0 <= self.idle_power_w <= self.power_limit_max_w:
            problems.append(f"idle_power_w={self.idle_power_w} must lie in [0, power_limit_max_w]")
        if problems:
            raise ConfigError(
                f"GPU model {self.name!r}: " + "; ".join(problems),
                hint="fix the GPU's values in the machine spec",
            )


def clip_w(watts: float, bounds_w: tuple[float, float]) -> float:
    """``watts`` inside ``bounds_w`` (min, max): the one clamp of a power cap. Callers with one GPU use
    :func:`ecolaunch.caps.limits.clip_cap_w` (the GPU's bounds under the policy, then this); the budget and the
    closed loop clip to a job's bounds (every one of its GPUs', :func:`ecolaunch.caps.limits.job_cap_bounds`)."""
    lo, hi = bounds_w
    return min(max(float(watts), lo), hi)


@dataclass(frozen=True, slots=True)
class CapBounds:
    """Power-cap bounds for one GPU model or index: watts, or fractions of the board's maximum limit (the admin
    policy's ``[caps]`` tables, :class:`~ecolaunch.admin.rules.Rules`); :meth:`resolve_w` clamps them to a board.

    The file uses one unit per table; an unset side falls back to the board's own limit.
    """

    min_w: float | None = None
    max_w: float | None = None
    min_fraction: float | None = None
    max_fraction: float | None = None

    def resolve_w(self, board_min_w: float, board_max_w: float) -> tuple[float, float]:
        """The bounds in watts on a board whose limits span ``[board_min_w, board_max_w]``, inside that span."""
        lo = self.min_w if self.min_w is not None else _times(self.min_fraction, board_max_w, board_min_w)
        hi = self.max_w if self.max_w is not None else _times(self.max_fraction, board_max_w, board_max_w)
        board = (board_min_w, board_max_w)
        lo, hi = clip_w(lo, board), clip_w(hi, board)
        # the upper bound is the admin's power limit: it wins if a hand-built record mixes units badly
        return min(lo, hi), hi

    def describe(self) -> str:
        """``min_w=150.0 max_w=250.0``: the bounds that are set, in TOML spelling (the policy file's ``[caps]`` keys are
        these fields' names)."""
        return " ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) is not None)


def _times(fraction: float | None, board_max_w: float, fallback_w: float) -> float:
    return fallback_w if fraction is None else fraction * board_max_w
