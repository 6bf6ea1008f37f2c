"""Checks of a valid policy file against this host's GPUs: warnings about rules that would not do what their admin
meant, and the one error that depends on the host (the power budget).

:func:`policy_warnings` looks for rules that apply to no GPU: a ``[caps.MODEL]`` table whose model no GPU
reports (matched as :func:`ecolaunch.admin.rules.cap_bounds_w` matches it: the name NVML reports, without case,
spacing or a leading ``NVIDIA``), and, when this host's GPUs are known, ``[caps.index.N]``, ``[reserve.N]`` (or a
UUID) and ``[agent] gpus`` entries naming a GPU the host does not have, and a ``[power] max_total_w`` that cannot
let every GPU run a job at once under the ``[caps]`` lower bounds. Such a file is valid — the same policy may
serve several machines — so these are warnings, never errors.

:func:`check_power_budget` is an error (``policy check`` exits 1): a ``[power] max_total_w`` below what this host
needs to run a single job (the sum of its boards' minimum power limits, plus what a ``[caps]`` lower bound adds
for the GPU the job gets), or above what its boards can draw (the sum of their maximum limits). Both sums count a
GPU without a job at its minimum limit, as the budget itself does (:mod:`ecolaunch.admin.budget`).

Validation proper lives in :mod:`ecolaunch.admin.schema`; nothing here reads a file or opens a device (the caller
passes the GPUs in).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ecolaunch.admin.rules import Rules, budget_range_w, cap_bounds_w
from ecolaunch.admin.schema import dotted, normalize_model, render
from ecolaunch.devices.catalogue import CATALOGUE, lookup
from ecolaunch.errors import ConfigError

if TYPE_CHECKING:
    from ecolaunch.devices.backend import GpuSnapshot

__all__ = ["PolicyWarning", "check_power_budget", "policy_warnings"]

_CHECK_HINT = "check the index or UUID with nvidia-smi -L"
_BUDGET_KEY = "power.max_total_w"


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
        warnings.append(_budget_warning(rules, sources, host_gpus))
    return sorted((w for w in warnings if w is not None), key=_line_order)


def check_power_budget(rules: Rules, sources: dict[str, str], host_gpus: Sequence[GpuSnapshot]) -> None:
    """Raise ConfigError (``<file>:<line>: power.max_total_w = ...: ...`` with a hint) when the budget can never be
    met on this host, or can never bind; nothing when it is unset or fits. ``host_gpus``: this host's GPUs."""
    budget = rules.power_max_total_w
    if budget is None or not host_gpus:
        return
    lo, hi, unknown = budget_range_w(host_gpus)
    where = sources.get("power_max_total_w", "?")
    shown = f"{where}: {_BUDGET_KEY} = {render(budget)}"
    extra, extra_gpu = _one_job_extra_w(rules, host_gpus)
    if budget < lo + extra - 1e-9:
        need = lo + extra
        why = f"its GPUs' minimum power limits add up to {lo:g} W ({_limits(host_gpus, 'min')})"
        if extra > 0:
            why += (f", and [caps] keeps a GPU with a job at least {extra:g} W above its minimum limit "
                    f"({extra_gpu})")
        raise ConfigError(f"{shown}: below the {need:g} W this host needs to run any job: {why}",
                          hint=f"raise it to at least {need:g} (a GPU without a job counts at its minimum limit), "
                               "or remove [power] for no budget")
    if unknown == 0 and budget > hi + 1e-9:
        raise ConfigError(f"{shown}: above the {hi:g} W this host's GPUs can draw: their maximum power limits add "
                          f"up to {hi:g} W ({_limits(host_gpus, 'max')}), so the budget would never bind",
                          hint=f"lower it to at most {hi:g}, or remove [power] for no budget")


def _one_job_extra_w(rules: Rules, host_gpus: Sequence[GpuSnapshot]) -> tuple[float, str]:
    """The least a job's GPU adds over its minimum limit under the [caps] lower bounds, and which GPU that is."""
    best: tuple[float, str] | None = None
    for gpu in host_gpus:
        lo = _cap_floor_w(rules, gpu)
        if lo is None:
            continue
        extra = lo - gpu.power_limit_min_w  # type: ignore[operator]
        if best is None or extra < best[0]:
            best = (extra, f"GPU {gpu.index} at {lo:g} W")
    return best if best is not None else (0.0, "")


def _cap_floor_w(rules: Rules, gpu: GpuSnapshot) -> float | None:
    a, b = gpu.power_limit_min_w, gpu.power_limit_max_w
    if a is None or b is None or not (0 <= a <= b < float("inf")):
        return None
    return cap_bounds_w(rules, gpu.name, gpu.index, a, b)[0]


def _limits(host_gpus: Sequence[GpuSnapshot], which: str) -> str:
    """``4 x NVIDIA A100-SXM4-80GB at 100 W``: the host's boards grouped by model and limit."""
    counts: dict[tuple[str, float], int] = {}
    for gpu in host_gpus:
        value = gpu.power_limit_min_w if which == "min" else gpu.power_limit_max_w
        if value is not None:
            counts[(gpu.name, value)] = counts.get((gpu.name, value), 0) + 1
    return ", ".join(f"{n} x {name} at {w:g} W" for (name, w), n in counts.items())


def _budget_warning(rules: Rules, sources: dict[str, str], host_gpus: Sequence[GpuSnapshot]) -> PolicyWarning | None:
    """A budget that fits one job but not a job on every GPU under the [caps] lower bounds: jobs will wait."""
    budget = rules.power_max_total_w
    floors = [_cap_floor_w(rules, g) for g in host_gpus]
    if budget is None or not host_gpus or any(f is None for f in floors):
        return None
    total = sum(floors)  # type: ignore[arg-type]
    if budget >= total - 1e-9:
        return None
    return PolicyWarning(sources.get("power_max_total_w", "?"), _BUDGET_KEY,
                         f"with a job on every GPU the lowest caps [caps] allows add up to {total:g} W, above the "
                         f"{budget:g} W budget: some jobs will wait for others to end",
                         f"raise it to {total:g} to let every GPU run a job at once, or lower the [caps] min_w")


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
