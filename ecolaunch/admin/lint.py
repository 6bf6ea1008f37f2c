"""Warnings about a valid policy file that would not do what its admin meant.

:func:`policy_warnings` looks for rules that apply to no GPU: a ``[caps.MODEL]`` table whose model no GPU
reports (matched as :func:`ecolaunch.admin.rules.cap_bounds_w` matches it: the name NVML reports, without case,
spacing or a leading ``NVIDIA``), and, when this host's GPUs are known, ``[caps.index.N]``, ``[reserve.N]`` (or a
UUID) and ``[agent] gpus`` entries naming a GPU the host does not have. Such a file is valid — the same policy may
serve several machines — so these are warnings, never errors. Validation proper lives in
:mod:`ecolaunch.admin.schema`; nothing here reads a file or opens a device (the caller passes the GPUs in).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ecolaunch.admin.schema import dotted, normalize_model
from ecolaunch.devices.catalogue import CATALOGUE, lookup
from ecolaunch.errors import ConfigError

if TYPE_CHECKING:
    from ecolaunch.admin.rules import Rules
    from ecolaunch.devices.base import GpuSnapshot

__all__ = ["PolicyWarning", "policy_warnings"]

_CHECK_HINT = "check the index or UUID with nvidia-smi -L"


@dataclass(frozen=True, slots=True)
class PolicyWarning:
    """One rule that applies to no GPU: where it is (``file:line``), its dotted key, the problem, what to do."""

    where: str
    key: str
    problem: str
    hint: str

    def __str__(self) -> str:
        return f"{self.where}: {self.key}: {self.problem}"


def policy_warnings(
    rules: Rules, sources: dict[str, str], host_gpus: Sequence[GpuSnapshot] | None = None
) -> list[PolicyWarning]:
    """The rules of ``rules`` (with the ``sources`` from ``load_rules``) that apply to no GPU.

    ``host_gpus``: this host's GPUs; None when they are unknown (no driver), which skips the index and UUID
    checks (a model name is still checked against the catalogue).
    """
    warnings = [_model_warning(model, sources, host_gpus) for model in rules.cap_bounds_model]
    if host_gpus is not None:
        warnings += _gpu_warnings(rules, sources, host_gpus)
    return sorted((w for w in warnings if w is not None), key=_line_order)


def _line_order(warning: PolicyWarning) -> tuple[str, int]:
    file, _, line = warning.where.rpartition(":")
    return (file, int(line)) if line.isdigit() else (warning.where, 0)


def _model_warning(
    model: str, sources: dict[str, str], host_gpus: Sequence[GpuSnapshot] | None
) -> PolicyWarning | None:
    names = {normalize_model(n): n for n in (*(_nvml_name(m.full_name) for m in CATALOGUE.values()),
                                             *(_nvml_name(g.name) for g in host_gpus or ()))}
    if normalize_model(model) in names:
        return None
    where, key = sources.get(f"cap_bounds_model[{model}]", "?"), dotted(("caps", model))
    try:
        entry = lookup(model)
    except ConfigError:
        if host_gpus is not None:
            problem = f"no GPU model {model!r} in ecolaunch's catalogue or on this host: the bounds apply to no GPU"
        else:
            problem = f"no GPU model {model!r} in ecolaunch's catalogue: the bounds apply only to a GPU of that name"
        close = difflib.get_close_matches(normalize_model(model), list(names), n=3, cutoff=0.5)
        examples = [f"[{dotted(('caps', names[c]))}]" for c in close]
        hint = "write the model as nvidia-smi -L shows it" + (f", e.g. {' or '.join(examples)}" if examples else "")
        return PolicyWarning(where, key, problem, hint)
    # a catalogue name that is not what NVML reports: the bounds would silently apply to nothing
    return PolicyWarning(where, key, f"no GPU reports the name {model!r}: NVML calls the {entry.name} "
                         f"{entry.full_name!r}", f"write [{dotted(('caps', _nvml_name(entry.full_name)))}]")


def _nvml_name(name: str) -> str:
    """A GPU name as a ``[caps.*]`` key can spell it: without NVML's leading ``NVIDIA``."""
    words = name.split()
    return " ".join(words[1:] if words and words[0].casefold() == "nvidia" else words)


def _gpu_warnings(
    rules: Rules, sources: dict[str, str], host_gpus: Sequence[GpuSnapshot]
) -> Iterable[PolicyWarning]:
    indices = {g.index for g in host_gpus}
    uuids = {g.uuid.casefold() for g in host_gpus}
    has = _describe(host_gpus)
    for index in rules.cap_bounds_index:
        if index not in indices:
            yield PolicyWarning(sources.get(f"cap_bounds_index[{index}]", "?"), f"caps.index.{index}",
                                f"this host has no GPU {index} ({has}): these bounds apply to no GPU",
                                _CHECK_HINT)
    for gpu in dict.fromkeys([*rules.reserved, *rules.reserved_groups]):
        if not _on_host(gpu, indices, uuids):
            where = sources.get(f"reserved[{gpu}]") or sources.get(f"reserved_groups[{gpu}]", "?")
            yield PolicyWarning(where, dotted(("reserve", gpu)), f"this host has no GPU {_gpu(gpu)} ({has}): "
                                "the reservation applies to no GPU", _CHECK_HINT)
    for gpu in rules.agent_gpus or ():
        if not _on_host(gpu, indices, uuids):
            where = sources.get("agent_gpus", "?")
            yield PolicyWarning(where, "agent.gpus", f"this host has no GPU {_gpu(gpu)} ({has})", _CHECK_HINT)


def _on_host(gpu: str, indices: set[int], uuids: set[str]) -> bool:
    if gpu.isascii() and gpu.isdigit():
        return int(gpu) in indices
    return gpu.casefold() in uuids


def _gpu(name: str) -> str:
    return name if name.isascii() and name.isdigit() else f"with UUID {name}"


def _describe(host_gpus: Sequence[GpuSnapshot]) -> str:
    if not host_gpus:
        return "it has no GPUs"
    indices = sorted(g.index for g in host_gpus)
    if indices == list(range(indices[0], indices[-1] + 1)) and len(indices) > 2:
        return f"its GPUs are {indices[0]}-{indices[-1]}"
    return f"its GPUs are {', '.join(map(str, indices))}" if len(indices) > 1 else f"its GPU is {indices[0]}"
