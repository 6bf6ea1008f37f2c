"""What a calibration measures and where: :class:`Settings` (the command line's choices), :func:`choose_gpus` (which
GPUs, and which the admin policy's reservations leave out: :func:`closed_gpus`, :class:`Reserved`),
:func:`cap_access` (who sets the caps). Pure choices: nothing here measures, books or prints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecolaunch.caps.agent import agent_alive
from ecolaunch.admin.rules import Rules, may_use_gpu, reservation
from ecolaunch.calibrate.booking import Occupant
from ecolaunch.errors import ConfigError
from ecolaunch.state.graph import GpuNode
from ecolaunch.calibrate.canned import NAMES, parse_spec

__all__ = ["Choice", "Reserved", "Settings", "cap_access", "choose_gpus", "closed_gpus"]


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


@dataclass(frozen=True, slots=True)
class Reserved:
    """A GPU the admin policy reserves (``[reserve.N]``) for others than the caller, and whom it is open to."""

    gpu: GpuNode
    users: tuple[str, ...]
    groups: tuple[str, ...]

    def describe(self) -> str:
        """``GPU 0 (NVIDIA A100-SXM4-80GB), reserved for user alice``."""
        who = [f"{kind}{'s' if len(names) > 1 else ''} {', '.join(names)}"
               for kind, names in (("user", self.users), ("group", self.groups)) if names]
        return f"GPU {self.gpu.index} ({self.gpu.name}), reserved for {' and '.join(who) or 'nobody'}"


def closed_gpus(rules: Rules, user: str, groups: Iterable[str], gpus: Iterable[GpuNode]) -> dict[str, Reserved]:
    """The GPUs of ``gpus`` that the reservations keep from ``user`` (member of ``groups``), by UUID."""
    groups = tuple(groups)
    out = {}
    for g in gpus:
        who = reservation(rules, g.uuid, g.index)
        if who is not None and not may_use_gpu(rules, user, groups, g.uuid, g.index):
            out[g.uuid] = Reserved(g, *who)
    return out


@dataclass(frozen=True, slots=True)
class Choice:
    """What :func:`choose_gpus` chose. ``gpus``: to calibrate, in order; ``skipped``: reserved GPUs left out (a
    ``--gpu`` that names one, or every GPU of a model; nothing of theirs is calibrated); ``instead``: reserved GPUs
    passed over for another GPU of their model; ``as_root``: reserved GPUs calibrated because the caller is root."""

    gpus: list[GpuNode]
    skipped: list[Reserved] = field(default_factory=list)
    instead: list[tuple[Reserved, GpuNode]] = field(default_factory=list)
    as_root: list[Reserved] = field(default_factory=list)


def choose_gpus(gpus: Sequence[GpuNode], busy: Mapping[str, list[Occupant]], selectors: Sequence[str],
                closed: Mapping[str, Reserved] | None = None, *, root: bool = False) -> Choice:
    """The GPUs to calibrate: those ``selectors`` name (NVML index or UUID), else one of each model, the first
    nobody uses (the first one when all are in use: the caller refuses it, naming who uses it).

    ``closed`` (:func:`closed_gpus`): GPUs reserved for others. A calibration books its GPU, so it never takes one
    of them for a caller who is not root: a ``--gpu`` naming one is skipped, and by default another GPU of the model
    is taken, or the model is skipped. Root may calibrate them (the reservation binds the members; root's launches
    keep to it all the same): by default only where no other GPU of the model is free to take.

    Raises ConfigError for a selector that names no GPU of the host.
    """
    closed = closed or {}
    ordered = sorted(gpus, key=lambda g: g.index)
    if selectors:
        chosen: list[GpuNode] = []
        skipped: list[Reserved] = []
        for sel in selectors:
            match = [g for g in ordered if sel.strip() in (str(g.index), g.uuid)]
            if not match:
                have = ", ".join(f"{g.index} ({g.uuid})" for g in ordered) or "none"
                raise ConfigError(f"--gpu {sel!r} names no GPU of this host", hint=f"its GPUs: {have}")
            g = match[0]
            if g.uuid in closed and not root:
                if closed[g.uuid] not in skipped:
                    skipped.append(closed[g.uuid])
            elif g not in chosen:
                chosen.append(g)
        return Choice(chosen, skipped=skipped, as_root=[closed[g.uuid] for g in chosen if g.uuid in closed])
    by_model: dict[str, list[GpuNode]] = {}
    for g in ordered:
        by_model.setdefault(g.name, []).append(g)
    choice = Choice([])
    for same in by_model.values():
        free = [g for g in same if not busy.get(g.uuid)]
        first = (free or same)[0]  # the choice without reservations
        # open and free first; then, for root, a reserved one that is free; then whatever is busy (refused later)
        ranked = [g for g in free if g.uuid not in closed]
        if root:
            ranked += [g for g in free if g.uuid in closed] + [g for g in same if g not in free]
        else:
            ranked += [g for g in same if g not in free and g.uuid not in closed]
        if not ranked:
            choice.skipped.extend(closed[g.uuid] for g in same)
            continue
        pick = ranked[0]
        choice.gpus.append(pick)
        if pick.uuid in closed:
            choice.as_root.append(closed[pick.uuid])
        elif first.uuid in closed:
            choice.instead.append((closed[first.uuid], pick))
    return choice
