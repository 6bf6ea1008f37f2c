"""Checks of a valid policy file against this host's GPUs: warnings about rules that would not do what their admin
meant, and the one error that depends on the host (the power budget).

What lives here: :func:`policy_warnings` (rules that apply to nothing: warnings, never errors, since one file may
serve several machines) and :func:`check_power_budget` (a budget this host could never meet or that never binds:
an error). What does not: validation proper (:mod:`ecolaunch.admin.schema`); nothing here reads a file or opens a
device (the caller passes the GPUs in); users and groups are looked up in the user database (``pwd``, ``grp``).
Each warning and the budget's check: docs/admin.md#the-policy-file.
"""

from __future__ import annotations

import difflib
import grp
import pwd
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ecolaunch.admin.rules import Rules, budget_range_w, cap_bounds_w
from ecolaunch.admin.schema import ANY_USER, CAP_KEYS, dotted, normalize_model, render
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
    warnings += _range_warnings(rules, sources, host_gpus)
    warnings += _account_warnings(rules, sources)
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
    on_host = {normalize_model(g.name): _nvml_name(g.name) for g in host_gpus or ()}
    names = {normalize_model(n): n for n in (*(_nvml_name(m.full_name) for m in CATALOGUE.values()),
                                             *on_host.values())}
    where, key = sources.get(f"cap_bounds_model[{model}]", "?"), dotted(("caps", model))
    if normalize_model(model) in on_host:
        return None
    if normalize_model(model) in names:
        if host_gpus is None:
            return None  # a model NVML reports: without this host's GPUs there is nothing more to check
        # a real model this host does not have: fine where the same file serves a machine that has one
        here = sorted(set(on_host.values()))
        examples = " or ".join(f"[{dotted(('caps', m))}]" for m in here)
        return PolicyWarning(where, key, f"this host has no {model} ({_describe_models(host_gpus)}): the bounds apply "
                             "to no GPU here",
                             "keep it if the file also serves machines with that GPU; else remove the table"
                             + (f" or write this host's model, {examples}" if examples else ""))
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


def _describe_models(host_gpus: Sequence[GpuSnapshot]) -> str:
    """``its GPUs are 4 x NVIDIA A100-SXM4-80GB``: this host's GPUs by model."""
    if not host_gpus:
        return "it has no GPUs"
    counts: dict[str, int] = {}
    for gpu in host_gpus:
        counts[gpu.name] = counts.get(gpu.name, 0) + 1
    return "its GPUs are " + ", ".join(f"{n} x {name}" for name, n in counts.items())


def _range_warnings(rules: Rules, sources: dict[str, str],
                    host_gpus: Sequence[GpuSnapshot] | None) -> Iterable[PolicyWarning]:
    """A ``[caps]`` bound outside the power-limit range of the board it applies to: caps are always clipped into the
    board's range, so such a bound does not do what it says (``max_w = 900`` on a 400 W board allows 400 W). The
    board is this host's GPU of that model or index, else the catalogue's entry for the model."""
    for model, bounds in rules.cap_bounds_model.items():
        board = _board_of_model(model, host_gpus)
        if board is not None:
            yield from _bounds_outside(bounds, board, sources.get(f"cap_bounds_model[{model}]", "?"), ("caps", model))
    by_index = {g.index: g for g in host_gpus or ()}
    for index, bounds in rules.cap_bounds_index.items():
        gpu = by_index.get(index)
        if gpu is not None and gpu.power_limit_min_w is not None and gpu.power_limit_max_w is not None:
            board = (f"{gpu.name} that is GPU {index}", gpu.power_limit_min_w, gpu.power_limit_max_w)
            yield from _bounds_outside(bounds, board, sources.get(f"cap_bounds_index[{index}]", "?"),
                                       ("caps", "index", str(index)))


def _board_of_model(model: str, host_gpus: Sequence[GpuSnapshot] | None) -> tuple[str, float, float] | None:
    """(name, minimum, maximum power limit in W) of the board ``[caps.<model>]`` applies to, or None if unknown."""
    wanted = normalize_model(model)
    for gpu in host_gpus or ():
        if normalize_model(gpu.name) == wanted and gpu.power_limit_min_w is not None and gpu.power_limit_max_w is not None:
            return gpu.name, gpu.power_limit_min_w, gpu.power_limit_max_w
    entry = next((m for m in CATALOGUE.values() if normalize_model(m.full_name) == wanted), None)
    return None if entry is None else (entry.full_name, entry.power_limit_min_w, entry.power_limit_max_w)


def _bounds_outside(bounds, board: tuple[str, float, float], where: str,
                    path: tuple[str, ...]) -> Iterable[PolicyWarning]:
    name, lo, hi = board
    if not 0 < lo <= hi < float("inf"):
        return  # a broken range from the driver: cap_bounds_w refuses it where it matters
    for key in CAP_KEYS:
        value = getattr(bounds, key)
        if value is None:
            continue
        fraction = key.endswith("_fraction")
        watts = value * hi if fraction else value
        if lo - 1e-9 <= watts <= hi + 1e-9:
            continue
        edge, side = (hi, "above") if watts > hi else (lo, "below")
        shown = f"{value:g} ({watts:g} W)" if fraction else f"{value:g} W"
        allowed = f"{lo / hi:.2f}-1" if fraction else f"{lo:g}-{hi:g} W"
        yield PolicyWarning(where, dotted((*path, key)),
                            f"{shown} is {side} the power-limit range of the {name}, {lo:g}-{hi:g} W: caps stay "
                            f"within the board's range, so this bound means {edge:g} W",
                            f"write a value within {allowed}, or leave {key} out for the board's own limit")


def _account_warnings(rules: Rules, sources: dict[str, str]) -> Iterable[PolicyWarning]:
    """A user or group the policy names that this host's user database does not know: the rule applies to nobody
    (names are matched as written; ``[users."*"]`` is everyone else)."""
    for gpu, users in rules.reserved.items():
        for user in users:
            if not _is_user(user):
                yield PolicyWarning(sources.get(f"reserved[{gpu}]", "?"), dotted(("reserve", gpu, "users")),
                                    f"no user {user!r} on this host: the reservation lets nobody of that name use "
                                    f"GPU {_gpu(gpu)}", _ACCOUNT_HINT.format(kind="passwd", name=user))
    for gpu, groups in rules.reserved_groups.items():
        for group in groups:
            if not _is_group(group):
                yield PolicyWarning(sources.get(f"reserved_groups[{gpu}]", "?"), dotted(("reserve", gpu, "groups")),
                                    f"no group {group!r} on this host: the reservation lets no member of it use "
                                    f"GPU {_gpu(gpu)}", _ACCOUNT_HINT.format(kind="group", name=group))
    for user in rules.user_gpu_limit:
        if user != ANY_USER and not _is_user(user):
            yield PolicyWarning(sources.get(f"user_gpu_limit[{user}]", "?"), dotted(("users", user, "max_gpus")),
                                f"no user {user!r} on this host: the limit applies to nobody",
                                _ACCOUNT_HINT.format(kind="passwd", name=user))
    if rules.state_group is not None and not _is_group(rules.state_group):
        yield PolicyWarning(sources.get("state_group", "?"), "state.group",
                            f"no group {rules.state_group!r} on this host: `ecolaunch init-state` cannot give the "
                            "state directory to it", _ACCOUNT_HINT.format(kind="group", name=rules.state_group))


_ACCOUNT_HINT = "check the name with `getent {kind} {name}`; keep it if the file also serves machines that have it"


def _is_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _is_group(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


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
