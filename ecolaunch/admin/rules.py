"""The lab admin's power policy as data (:class:`Rules`), the policy file that sets it, and its precedence.

What lives here: :class:`Rules` (defaults = behaviour without a policy file), :func:`load_rules` /
:func:`parse_rules` (TOML file or text → rules + the source of each value), and the helpers that apply
the policy over a user's request: :func:`clip_slowdown`, :func:`job_bound_pct` (the one resolution of a job's
slowdown bound), :func:`cap_bounds_w` (the caps the policy allows on one GPU), :func:`profiler_settings`, :func:`may_use_gpu`
(:func:`reservation`), :func:`user_gpu_limit`. What does not: key checking and line finding
(:mod:`ecolaunch.admin.schema`), clipping a cap to those bounds, for one GPU or a job's GPUs together
(:mod:`ecolaunch.caps.limits`), what the policy *means* for a placement (``ecolaunch.policy``).
Every key, its range and default: docs/admin.md#every-key-of-the-policy-file.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ecolaunch.admin.schema import ANY_USER, normalize_model, validate
from ecolaunch.config import DEFAULT_POLICY_FILE, ENV_ALLOWED_SLOWDOWN, ENV_POLICY_FILE
from ecolaunch.errors import ConfigError, DeviceError
from ecolaunch.jobmodel.gpu import CapBounds
from ecolaunch.profile.modes import ProfilerSettings
from ecolaunch.validate import is_number

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "Rules",
    "budget_range_w",
    "cap_bounds_w",
    "clip_slowdown",
    "job_bound_pct",
    "load_rules",
    "may_manage_gpu",
    "may_use_gpu",
    "parse_rules",
    "profiler_settings",
    "reservation",
    "user_gpu_limit",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rules:
    """The effective admin policy. Users may ask for less than these allow, never for more."""

    #: may two jobs share one GPU at all
    allow_colocation: bool = True
    #: the most jobs on one GPU at once
    max_jobs_per_gpu: int = 2
    #: memory kept free on a shared GPU beyond the jobs' peaks (MiB)
    memory_margin_mib: int = 1024
    #: the sharing contract for a job that does not ask (``--share-if-sooner``; :mod:`ecolaunch.policy.contract`)
    share_if_sooner: bool = False
    #: may a job start ahead of the queue's waiting head when that keeps its reservation (``--backfill``,
    #: :mod:`ecolaunch.policy.backfill`); false: every queue is a strict FIFO
    backfill: bool = True
    #: allowed slowdown when the user asks for none (percent of solo, uncapped speed)
    default_slowdown_pct: float = 10.0
    #: the most slowdown a user may ask for
    max_slowdown_pct: float = 25.0
    #: weight of energy against time when choosing a cap (Zeus's eta: 1 = energy only, 0 = time only); 1 is
    #: the one objective (least energy per unit of work within the bound); below 1 the admin's alternative
    eta: float = 1.0
    #: caps that weigh the queue (:func:`~ecolaunch.jobmodel.capchoice.queue_eta`): a second of delay a cap imposes
    #: on a waiting job costs this many seconds of the GPU at its maximum power; 0: the queue is not counted
    wait_weight: float = 0.0
    #: reserved GPUs (NVML index as a string, or UUID) → the users who may get them; see ``may_use_gpu``
    reserved: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the most GPUs one user may hold at once (absent: no limit; key ``"*"``: every other user)
    user_gpu_limit: dict[str, int] = field(default_factory=dict)
    #: reserved GPUs (same keys as ``reserved``) → the Unix groups whose members may get them
    reserved_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: power-cap bounds per GPU model name (as written in the file)
    cap_bounds_model: dict[str, CapBounds] = field(default_factory=dict)
    #: power-cap bounds per NVML index; these replace the model's bounds for that GPU
    cap_bounds_index: dict[int, CapBounds] = field(default_factory=dict)
    #: profiling budget: iterations, seconds, and power caps tried (None: no admin limit)
    profiling_max_iterations: int | None = None
    profiling_max_time_s: float | None = None
    profiling_max_caps: int | None = None
    #: may a first launch of a job another user ran here start from that user's profile of it (its closed loop
    #: corrects it; docs/profiling.md#a-colleagues-profile-of-the-same-job); false: every user profiles their own
    profiling_colleagues: bool = True
    #: the state directory for this host (None: ``$ECOLAUNCH_STATE_DIR`` or the built-in default)
    state_dir: Path | None = None
    #: the Unix group that shares the state directory (None: not checked)
    state_group: str | None = None
    #: GPUs (NVML index as a string, or UUID) whose power caps ecolaunch may change (None: every GPU of the host)
    agent_gpus: tuple[str, ...] | None = None
    #: the host's power budget (W): the sum of its GPUs' power limits, a GPU without a job counted at its minimum
    #: limit (:mod:`ecolaunch.caps.limits`); None: no budget
    power_max_total_w: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form: paths as strings, tuples as lists, bounds as dicts, index keys as strings."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif f.name.startswith("cap_bounds_"):
                value = {str(k): asdict(b) for k, b in value.items()}
            elif isinstance(value, dict):
                value = {str(k): list(v) if isinstance(v, tuple) else v for k, v in value.items()}
            out[f.name] = value
        return out


def _defaults() -> dict[str, Any]:
    return {
        f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        for f in fields(Rules)
    }


def default_sources() -> dict[str, str]:
    """Every field's source when no file sets it: ``"default"``."""
    return {f.name: "default" for f in fields(Rules)}


def parse_rules(text: str, label: str = "<policy>") -> tuple[Rules, dict[str, str]]:
    """Rules from policy text; ``label`` names the file in errors and sources. Raises ConfigError only."""
    try:
        doc = tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer too long for int()
        msg = getattr(e, "msg", None) or str(e)
        line, col = getattr(e, "lineno", None), getattr(e, "colno", None)
        if line is None and " (at line " in msg:
            msg, _, pos = msg.rpartition(" (at line ")
            line_text, _, col_text = pos.rstrip(")").partition(", column ")
            line, col = int(line_text), int(col_text)
        where = f"{label}:{line}:{col}" if line is not None else label
        raise ConfigError(
            f"{where}: invalid TOML: {msg}", hint="fix the syntax there (TOML reference: https://toml.io/en/v1.0.0)"
        ) from e
    except RecursionError:
        raise ConfigError(f"{label}: invalid TOML: arrays or tables nested too deeply", hint="flatten the file") from None
    values, sources = validate(doc, text, label, _defaults())
    for name in ("cap_bounds_model", "cap_bounds_index"):
        if name in values:
            values[name] = {k: CapBounds(**b) for k, b in values[name].items()}
    all_sources = default_sources()
    all_sources.update(sources)
    return Rules(**values), all_sources


def load_rules(path: Path | None = None, *, required: bool | None = None) -> tuple[Rules, dict[str, str]]:
    """Read the policy file at ``path`` (None: ``/etc/ecolaunch/policy.toml``); return rules and sources.

    A missing file gives the defaults when it is the default location, and is a ConfigError for any other
    path (one named by ``--file`` or ``$ECOLAUNCH_POLICY``); ``required`` overrides that choice.
    Sources map each :class:`Rules` field (and each entry of a dict field, as ``"field[key]"``) to
    ``"default"`` or ``"<file>:<line>"``.
    """
    path = DEFAULT_POLICY_FILE if path is None else path
    required = path != DEFAULT_POLICY_FILE if required is None else required
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if not required:
            logger.debug("no policy file at %s: using the built-in defaults", path)
            return Rules(), default_sources()
        raise ConfigError(
            f"policy file {path} does not exist",
            hint=f"check the path (without --file or {ENV_POLICY_FILE}, {DEFAULT_POLICY_FILE} is read if it exists)",
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"policy file {path} is a directory", hint="name the TOML file itself") from None
    except OSError as e:
        # an unreadable policy must not silently become "no policy": users could escape the admin's limits
        raise ConfigError(
            f"cannot read policy file {path}: {e.strerror or e}",
            hint="the admin should make it readable by every user (chmod 644)",
        ) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})", hint="save the policy file as UTF-8") from e
    rules, sources = parse_rules(text, str(path))
    logger.debug("policy loaded from %s", path)
    return rules, sources


# --- precedence: the policy over a user's request -------------------------------------------------
def clip_slowdown(rules: Rules, requested_pct: float | None) -> tuple[float, bool]:
    """The slowdown bound a job gets, and whether the request was clipped to the policy's maximum.

    None → the policy's default; a request above ``max_slowdown_pct`` → the maximum (clipped = True); a
    tighter request is kept. A negative or non-finite request is a ConfigError.
    """
    if requested_pct is None:
        return rules.default_slowdown_pct, False
    if not is_number(requested_pct) or requested_pct < 0:
        raise ConfigError(
            f"allowed slowdown {requested_pct!r} is not a percentage of 0 or more",
            hint=f"pass --allowed-slowdown (or {ENV_ALLOWED_SLOWDOWN}) between 0 and {rules.max_slowdown_pct:g}",
        )
    if requested_pct > rules.max_slowdown_pct:
        return rules.max_slowdown_pct, True
    return float(requested_pct), False


def job_bound_pct(rules: Rules, requested_pct: float | None, declared_pct: float | None = None) -> float:
    """The slowdown bound a job gets, resolved once per launch into ``JobRequest.allowed_slowdown_pct``: the command
    line's (``--allowed-slowdown``), else what the script declared on an earlier run (``@ecolaunch.job(
    max_slowdown_pct=...)``, kept in history), else the policy's default; never above the admin's maximum
    (:func:`clip_slowdown`). A clipped command line is logged as one WARNING (the user asked for more than they get)."""
    if requested_pct is None and declared_pct is not None:
        return clip_slowdown(rules, declared_pct)[0]
    pct, clipped = clip_slowdown(rules, requested_pct)
    if clipped:
        logger.warning("allowed slowdown %g %% is above the admin policy's maximum: the job gets %g %%",
                       requested_pct, pct)
    return pct


def cap_bounds_w(
    rules: Rules, gpu_name: str, gpu_index: int, board_min_w: float, board_max_w: float
) -> tuple[float, float]:
    """The power caps (W) the policy allows on one GPU: index rule, else model rule, else the board's range.

    The result always lies inside ``[board_min_w, board_max_w]`` and has min <= max. A board range that
    is empty or not finite is a DeviceError (it came from the driver, not from the admin).
    """
    if not (math.isfinite(board_min_w) and math.isfinite(board_max_w) and 0 <= board_min_w <= board_max_w):
        raise DeviceError(
            f"GPU {gpu_index} ({gpu_name}) reports power limits {board_min_w!r}..{board_max_w!r} W",
            hint="check nvidia-smi -q -d POWER; the driver's limit range looks broken",
        )
    bounds = rules.cap_bounds_index.get(gpu_index)
    if bounds is None:
        wanted = normalize_model(gpu_name)
        bounds = next((b for m, b in rules.cap_bounds_model.items() if normalize_model(m) == wanted), None)
    if bounds is None:
        return float(board_min_w), float(board_max_w)
    return bounds.resolve_w(float(board_min_w), float(board_max_w))


def profiler_settings(rules: Rules, **overrides: object) -> ProfilerSettings:
    """How long to profile: the defaults (or ``overrides``) within the admin's ``[profiling]`` budget."""
    s = ProfilerSettings(**overrides)  # type: ignore[arg-type]
    caps = s.max_caps if rules.profiling_max_caps is None else min(s.max_caps, rules.profiling_max_caps)
    iters = _min_opt(s.max_iterations, rules.profiling_max_iterations)
    secs = _min_opt(s.max_time_s, rules.profiling_max_time_s)
    return ProfilerSettings(s.warmup_iters, s.settle_iters, s.measured_iters, caps, s.uninstrumented_after_s,
                            s.window_warmup_s, s.window_measure_s, iters, secs)


def _min_opt(a, b):
    return b if a is None else a if b is None else min(a, b)



def budget_range_w(gpus: Iterable[Any]) -> tuple[float, float, int]:
    """What a power budget is measured against on a host with ``gpus`` (snapshots or GpuNodes): the sum of the
    boards' minimum power limits (every GPU idle, or capped as low as its board allows), the sum of their maximum
    limits (what the boards can draw), and how many GPUs report no usable limit range (left out of both sums).

    A GPU without a job counts at its minimum limit (see :mod:`ecolaunch.caps.limits`), so a budget below the
    first sum could never be met, and one above the second never binds.
    """
    lo = hi = 0.0
    unknown = 0
    for gpu in gpus:
        a, b = gpu.power_limit_min_w, gpu.power_limit_max_w
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b) and 0 <= a <= b):
            unknown += 1
            continue
        lo, hi = lo + a, hi + b
    return lo, hi, unknown


def reservation(rules: Rules, gpu_uuid: str, gpu_index: int) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Who a reserved GPU is open to: (users, groups) of every reservation that names it (by NVML index or UUID,
    UUIDs compared without case), each sorted; None when no reservation names it (open to all)."""
    names = {str(gpu_index), gpu_uuid.casefold()}
    matched = False
    users: set[str] = set()
    allowed_groups: set[str] = set()
    for key in rules.reserved.keys() | rules.reserved_groups.keys():
        norm = str(int(key)) if key.isascii() and key.isdigit() else key.casefold()
        if norm in names:
            matched = True
            users.update(rules.reserved.get(key, ()))
            allowed_groups.update(rules.reserved_groups.get(key, ()))
    return (tuple(sorted(users)), tuple(sorted(allowed_groups))) if matched else None


def may_use_gpu(rules: Rules, user: str, groups: Iterable[str], gpu_uuid: str, gpu_index: int) -> bool:
    """Whether ``user`` (member of ``groups``) may get this GPU under the reservations.

    A GPU named by no reservation (by NVML index or UUID, UUIDs compared without case) is open to all.
    A reserved GPU is open to the users and group members of every reservation that names it
    (:func:`reservation`).
    """
    reserved = reservation(rules, gpu_uuid, gpu_index)
    if reserved is None:
        return True
    users, allowed_groups = reserved
    return user in users or not set(allowed_groups).isdisjoint(groups)


def may_manage_gpu(rules: Rules, gpu_uuid: str, gpu_index: int) -> bool:
    """Whether ecolaunch may change this GPU's power cap: ``[agent] gpus`` names it, or that key is unset."""
    if rules.agent_gpus is None:
        return True
    names = {str(gpu_index), gpu_uuid.casefold()}
    return any((k if k.isascii() and k.isdigit() else k.casefold()) in names for k in rules.agent_gpus)


def user_gpu_limit(rules: Rules, user: str) -> int | None:
    """The most GPUs ``user`` may hold at once: their own limit, else ``[users."*"]``'s, else None."""
    limit = rules.user_gpu_limit.get(user)
    return rules.user_gpu_limit.get(ANY_USER) if limit is None else limit
