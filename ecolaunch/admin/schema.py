"""Validation of a parsed policy document into :class:`~ecolaunch.admin.rules.Rules` field values.

What lives here: the table of known keys (:data:`SCALAR_KEYS`, :data:`CAP_KEYS`, ...), the :class:`Locator` that
maps a dotted key back to its line (``tomllib`` reports no positions), and :func:`validate`, which raises a
:class:`~ecolaunch.errors.ConfigError` naming file, line, dotted key, value and a hint, or :class:`PolicyErrors`
carrying every error of the file in order. What does not: reading files and the precedence helpers
(:mod:`ecolaunch.admin.rules`); nothing here touches a file or a device. The keys for admins:
docs/admin.md#every-key-of-the-policy-file.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ecolaunch.errors import ConfigError
from ecolaunch.validate import is_integer, is_number, is_real

#: the largest slowdown bound a file may name, in percent (a guard against typos such as 2500)
MAX_SLOWDOWN_PCT = 1000.0
#: the largest power budget a file may name, in watts (a guard against typos: no workstation draws a megawatt)
MAX_BUDGET_W = 1_000_000.0


@dataclass(frozen=True, slots=True)
class ScalarKey:
    """One plain key of a fixed table: the :class:`Rules` field it sets, its kind, range and a hint."""

    field: str
    kind: str  # "bool" | "int" | "float" | "abspath" | "name"
    lo: float | None = None
    hi: float | None = None
    hint: str = ""


_PCT_HINT = "a slowdown is in percent of the solo, uncapped iteration time: 10 means at most 10 % slower"
_COUNT_HINT = "write a whole number of 0 or more; leave the key out for no limit"
SCALAR_KEYS: dict[str, dict[str, ScalarKey]] = {
    "slowdown": {
        "default_pct": ScalarKey("default_slowdown_pct", "float", 0, MAX_SLOWDOWN_PCT, _PCT_HINT),
        "max_pct": ScalarKey("max_slowdown_pct", "float", 0, MAX_SLOWDOWN_PCT, _PCT_HINT),
    },
    "energy": {
        "eta": ScalarKey("eta", "float", 0, 1, "eta weighs energy against time: 0 = time only, 1 = energy only"),
        "wait_weight": ScalarKey("wait_weight", "float", 0, 100,
                                 "a waiting job's second of delay weighs wait_weight seconds of the GPU at its "
                                 "maximum power: 0 = the queue is not counted, 1 = as much as the GPU's time"),
    },
    "power": {
        "max_total_w": ScalarKey("power_max_total_w", "float", 1, MAX_BUDGET_W,
                                 "the budget is in watts for all of this host's GPUs together, e.g. max_total_w = 1200; "
                                 "leave [power] out for no budget"),
    },
    "colocation": {
        "enabled": ScalarKey("allow_colocation", "bool", hint="write true or false (no quotes)"),
        "max_jobs_per_gpu": ScalarKey("max_jobs_per_gpu", "int", 1, 64, "write a whole number from 1 to 64"),
        "memory_margin_mib": ScalarKey("memory_margin_mib", "int", 0, None, "write a whole number of MiB, 0 or more"),
        "share_if_sooner": ScalarKey("share_if_sooner", "bool", hint="write true or false (no quotes)"),
    },
    "queue": {
        "backfill": ScalarKey("backfill", "bool", hint="write true or false (no quotes)"),
    },
    "profiling": {
        "max_iterations": ScalarKey("profiling_max_iterations", "int", 0, None, _COUNT_HINT),
        "max_time_s": ScalarKey("profiling_max_time_s", "float", 0, None, "write a number of seconds, 0 or more"),
        "max_caps": ScalarKey("profiling_max_caps", "int", 0, None, _COUNT_HINT),
        "colleagues": ScalarKey("profiling_colleagues", "bool", hint="write true or false (no quotes)"),
    },
    "state": {
        "dir": ScalarKey("state_dir", "abspath", hint='write an absolute path, e.g. dir = "/var/lib/ecolaunch"'),
        "group": ScalarKey("state_group", "name", hint='write a Unix group name, e.g. group = "gpu-users"'),
    },
}
CAP_KEYS = ("min_w", "max_w", "min_fraction", "max_fraction")
RESERVE_KEYS = ("users", "groups")
USER_KEYS = ("max_gpus",)
AGENT_KEYS = ("gpus",)
TABLES = (*SCALAR_KEYS, "caps", "reserve", "users", "agent")
#: the ``[users."*"]`` entry: the limit for every user without a table of their own
ANY_USER = "*"

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_BASIC = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_LITERAL = re.compile(r"'([^'\n]*)'")
_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@-]*\$?")
_INDEX = re.compile(r"[0-9]+")
_UUID_PREFIXES = ("gpu-", "mig-")
_NO_VALUE = object()
_MODEL_HINT = 'write the model as nvidia-smi shows it, e.g. [caps."A100-SXM4-80GB"]'
_UNIT_HINT = "use either min_w/max_w (watts) or min_fraction/max_fraction (of the board's maximum) in one table"
_GPU_HINT = 'name a GPU by its NVML index ([reserve.0]) or its UUID from nvidia-smi -L ([reserve."GPU-..."])'


def normalize_model(name: str) -> str:
    """Compare GPU model names without case, spacing or the ``NVIDIA`` prefix that NVML adds."""
    words = name.split()
    if words and words[0].casefold() == "nvidia":
        words = words[1:]
    return " ".join(words).casefold()


def gpu_key(text: str) -> str | None:
    """A reservation key: ``"3"`` for an NVML index, the UUID as written for a UUID, None for neither."""
    if _INDEX.fullmatch(text):
        return str(int(text))
    if text.casefold().startswith(_UUID_PREFIXES) and len(text) > 4 and not any(c.isspace() for c in text):
        return text
    return None


def dotted(path: tuple[str, ...]) -> str:
    """A key path as TOML spells it: bare parts plain, others quoted."""
    return ".".join(p if _BARE.fullmatch(p) else json.dumps(p, ensure_ascii=False) for p in path)


def render(value: Any, limit: int = 80) -> str:
    """A value as TOML would spell it, shortened to ``limit`` characters."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (str, Path)):
        text = json.dumps(str(value), ensure_ascii=False)
    elif isinstance(value, float):
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    elif isinstance(value, int):
        text = str(value) if abs(value) < 10**300 else "<a huge integer>"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{dotted((str(k),))} = {render(v, limit)}" for k, v in value.items()) + "}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(render(v, limit) for v in value) + "]"
    else:  # TOML dates and times
        text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_key(s: str, i: int) -> tuple[tuple[str, ...], int] | None:
    """Read a (dotted, possibly quoted) TOML key starting at ``s[i]``; None if there is none."""
    parts: list[str] = []
    while True:
        while i < len(s) and s[i] in " \t":
            i += 1
        m = _BASIC.match(s, i) or _LITERAL.match(s, i) or _BARE.match(s, i)
        if m is None:
            return None
        part = m.group(1) if m.re is not _BARE else m.group(0)
        if m.re is _BASIC:
            try:
                part = json.loads(f'"{part}"')
            except ValueError:
                pass  # an escape JSON lacks (\e, \U...): keep the raw text, it only labels a line
        parts.append(part)
        i = m.end()
        while i < len(s) and s[i] in " \t":
            i += 1
        if i < len(s) and s[i] == ".":
            i += 1
            continue
        return tuple(parts), i


class PolicyErrors(ConfigError):
    """Every error of one policy file (two or more, in the order the walk met them); ``str()`` and ``hint`` are the
    first's, so that a caller that shows one error shows what it did before."""

    def __init__(self, errors: list[ConfigError]) -> None:
        super().__init__(str(errors[0]), hint=errors[0].hint)
        self.errors = tuple(errors)


class Locator:
    """Finds the line that sets a dotted key, by scanning table headers and ``key =`` lines.

    ``line(path)`` gives the first line of the longest prefix of ``path`` that the text mentions (so a key
    inside an inline table maps to the line of the table), or None. It is a scanner, not a parser: it only
    labels error messages, for text that ``tomllib`` has already accepted.
    """

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        open_string: str | None = None
        for number, line in enumerate(text.split("\n"), start=1):
            if open_string is not None:  # inside a multi-line string: no keys here
                if open_string in line:
                    open_string = None
                continue
            s = line.lstrip(" \t")
            if s.startswith("["):
                header = self._header(s)
                if header is not None:
                    table = header
                    self._note(table, number)
                continue
            found = _read_key(s, 0)
            if found is None or not s[found[1] :].startswith("="):
                continue
            self._note(table + found[0], number)
            value = s[found[1] + 1 :]
            for delimiter in ('"""', "'''"):
                if value.count(delimiter) % 2 == 1:
                    open_string = delimiter
                    break

    @staticmethod
    def _header(s: str) -> tuple[str, ...] | None:
        double = s.startswith("[[")
        found = _read_key(s, 2 if double else 1)
        if found is None:
            return None
        rest = s[found[1] :]
        close = "]]" if double else "]"
        tail = rest[len(close) :].strip()
        return found[0] if rest.startswith(close) and (not tail or tail.startswith("#")) else None

    def _note(self, path: tuple[str, ...], number: int) -> None:
        for k in range(1, len(path) + 1):
            self._lines.setdefault(path[:k], number)

    def line(self, path: tuple[str, ...]) -> int | None:
        for k in range(len(path), 0, -1):
            if path[:k] in self._lines:
                return self._lines[path[:k]]
        return None


def validate(
    doc: Mapping[str, Any], text: str, label: str, defaults: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Check a ``tomllib`` document; return the :class:`Rules` fields it sets and each one's source.

    Sources are ``"<label>:<line>"`` per field name, and per container entry under ``"field[key]"``
    (``"reserved[0]"``, ``"cap_bounds_model[A40]"``). ``defaults`` are the built-in field values, used for
    checks that span two keys (``slowdown.default_pct`` must not exceed ``slowdown.max_pct``).
    """
    walker = _Walker(label, Locator(text))
    walker.document(doc)
    if not walker.errors:  # a key that failed has no value to compare
        walker.cross_checks(defaults)
    if len(walker.errors) > 1:
        raise PolicyErrors(walker.errors)
    if walker.errors:
        raise walker.errors[0]
    return walker.values, walker.sources


class _Walker:
    def __init__(self, label: str, locator: Locator) -> None:
        self.label = label
        self.locator = locator
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        #: what failed so far: each top-level table, and each key of a table of scalars, is checked on its own
        self.errors: list[ConfigError] = []

    # --- reporting --------------------------------------------------------------------------------
    def where(self, path: tuple[str, ...]) -> str:
        line = self.locator.line(path)
        return self.label if line is None else f"{self.label}:{line}"

    def fail(self, path: tuple[str, ...], problem: str, hint: str, value: Any = _NO_VALUE) -> NoReturn:
        shown = "" if value is _NO_VALUE or isinstance(value, dict) else f" = {render(value)}"
        raise ConfigError(f"{self.where(path)}: {dotted(path)}{shown}: {problem}", hint=hint)

    def unknown(self, path: tuple[str, ...], known: tuple[str, ...]) -> NoReturn:
        name, parent = path[-1], path[:-1]
        close = difflib.get_close_matches(name, known, n=1)
        if not parent:  # a key of some table written at the top: point at its table
            home = [f"{t}.{name}" for t, keys in SCALAR_KEYS.items() if name in keys]
            close = home[:1] or close
        suggestion = f"did you mean {dotted(parent + (close[0],)) if parent else close[0]}? " if close else ""
        where = f"[{dotted(parent)}]" if parent else "the top level"
        raise ConfigError(
            f"{self.where(path)}: unknown key {dotted(path)}",
            hint=f"{suggestion}{where} takes: {', '.join(known)}",
        )

    def set(self, field: str, value: Any, path: tuple[str, ...]) -> None:
        self.values[field] = value
        self.sources[field] = self.where(path)

    # --- shapes -----------------------------------------------------------------------------------
    def table(self, path: tuple[str, ...], value: Any, known: tuple[str, ...] | None = None) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, "must be a table", f"write it as a table: [{dotted(path)}] with its keys below", value)
        if known is not None:
            for key in value:
                if key not in known:
                    self.unknown(path + (key,), known)
        return value

    def scalar(self, path: tuple[str, ...], value: Any, spec: ScalarKey) -> Any:
        if spec.kind == "bool":
            if not isinstance(value, bool):
                self.fail(path, "must be true or false", spec.hint, value)
            return value
        if spec.kind in ("int", "float"):
            return self.number(path, value, spec)
        if not isinstance(value, str) or not value:
            self.fail(path, "must be a non-empty string", spec.hint, value)
        if spec.kind == "abspath":
            if "\0" in value or not Path(value).is_absolute():
                self.fail(path, "must be an absolute path", spec.hint, value)
            return Path(value)
        if not _NAME.fullmatch(value):
            self.fail(path, "is not a valid user or group name", spec.hint, value)
        return value

    def number(self, path: tuple[str, ...], value: Any, spec: ScalarKey) -> float | int:
        integer = spec.kind == "int"
        if not (is_integer(value) if integer else is_real(value)):
            self.fail(path, "must be a whole number" if integer else "must be a number", spec.hint, value)
        if not is_number(value):
            self.fail(path, "must be a finite number", spec.hint, value)
        if spec.lo is not None and value < spec.lo:
            self.fail(path, f"must be at least {spec.lo:g}", spec.hint, value)
        if spec.hi is not None and value > spec.hi:
            self.fail(path, f"must be at most {spec.hi:g}", spec.hint, value)
        return value if integer else float(value)

    def names(self, path: tuple[str, ...], value: Any, what: str) -> tuple[str, ...]:
        hint = f'write a list of {what} names, e.g. {path[-1]} = ["alice", "bob"]'
        if not isinstance(value, list):
            self.fail(path, f"must be a list of {what} names", hint, value)
        for item in value:
            if not isinstance(item, str) or not _NAME.fullmatch(item):
                self.fail(path, f"{render(item)} is not a valid {what} name", hint, value)
        return tuple(dict.fromkeys(value))

    # --- the document -----------------------------------------------------------------------------
    def document(self, doc: Mapping[str, Any]) -> None:
        for name, value in doc.items():
            path = (name,)
            try:
                if name not in TABLES:
                    self.unknown(path, TABLES)
                if name in SCALAR_KEYS:
                    for key, item in self.table(path, value).items():
                        self._scalar_key(path, key, item)
                else:
                    getattr(self, f"_{name}")(path, self.table(path, value))
            except ConfigError as e:
                self.errors.append(e)

    def _scalar_key(self, path: tuple[str, ...], key: str, item: Any) -> None:
        """One key of a table of scalars: its error is collected, and the table's other keys are still checked."""
        keys = SCALAR_KEYS[path[-1]]
        try:
            if key not in keys:
                self.unknown(path + (key,), tuple(keys))
            spec = keys[key]
            self.set(spec.field, self.scalar(path + (key,), item, spec), path + (key,))
        except ConfigError as e:
            self.errors.append(e)

    def _caps(self, path: tuple[str, ...], caps: dict[str, Any]) -> None:
        by_model: dict[str, dict[str, float]] = {}
        by_index: dict[int, dict[str, float]] = {}
        seen: dict[str, str] = {}
        for name, value in caps.items():
            if name == "index":
                for key, bounds in self.table(path + (name,), value).items():
                    entry = path + (name, key)
                    if not _INDEX.fullmatch(key):
                        self.fail(entry, "is not a GPU index", "GPU indexes are whole numbers, e.g. [caps.index.0]")
                    if int(key) in by_index:
                        self.fail(entry, f"names GPU {int(key)} twice", "keep one table per GPU index")
                    by_index[int(key)] = self.bounds(entry, bounds)
                    self.sources[f"cap_bounds_index[{int(key)}]"] = self.where(entry)
                continue
            entry = path + (name,)
            norm = normalize_model(name)
            if not norm:
                self.fail(entry, "is not a GPU model name", _MODEL_HINT)
            if norm in seen:
                self.fail(entry, f"names the same model as caps.{dotted((seen[norm],))}", "keep one table per model")
            seen[norm] = name
            by_model[name] = self.bounds(entry, value)
            self.sources[f"cap_bounds_model[{name}]"] = self.where(entry)
        self.values["cap_bounds_model"], self.values["cap_bounds_index"] = by_model, by_index
        if by_model:
            self.sources["cap_bounds_model"] = self.where(path)
        if by_index:
            self.sources["cap_bounds_index"] = self.where(path + ("index",))

    def bounds(self, path: tuple[str, ...], value: Any) -> dict[str, float]:
        table = self.table(path, value, CAP_KEYS)
        got: dict[str, float] = {}
        for key, item in table.items():
            fraction = key.endswith("_fraction")
            hint = "a fraction of the board's maximum limit, above 0 and at most 1" if fraction else "watts, above 0"
            got[key] = self.number(path + (key,), item, ScalarKey(key, "float", None, 1 if fraction else None, hint))
            if got[key] <= 0:
                self.fail(path + (key,), "must be above 0", hint, item)
        if not got:
            self.fail(path, "sets no bound", _UNIT_HINT)
        if {"min_w", "max_w"} & got.keys() and {"min_fraction", "max_fraction"} & got.keys():
            key = next(k for k in table if k.endswith("_fraction"))
            self.fail(path + (key,), "mixes watts and fractions in one table", _UNIT_HINT, table[key])
        for lo, hi in (("min_w", "max_w"), ("min_fraction", "max_fraction")):
            if lo in got and hi in got and got[lo] > got[hi]:
                problem = f"is above {hi} = {render(table[hi])}"
                self.fail(path + (lo,), problem, f"{lo} must not exceed {hi}", table[lo])
        return got

    def _reserve(self, path: tuple[str, ...], reserve: dict[str, Any]) -> None:
        users: dict[str, tuple[str, ...]] = {}
        groups: dict[str, tuple[str, ...]] = {}
        seen: dict[str, str] = {}
        for name, value in reserve.items():
            entry = path + (name,)
            key = gpu_key(name)
            if key is None:
                self.fail(entry, "is neither a GPU index nor a UUID", _GPU_HINT)
            if key.casefold() in seen:
                other = dotted((seen[key.casefold()],))
                self.fail(entry, f"names the same GPU as reserve.{other}", "keep one table per GPU")
            seen[key.casefold()] = name
            table = self.table(entry, value, RESERVE_KEYS)
            if not table:
                self.fail(entry, "names neither users nor groups", 'add users = ["alice"] and/or groups = ["ml-lab"]')
            users[key] = self.names(entry + ("users",), table["users"], "user") if "users" in table else ()
            groups[key] = self.names(entry + ("groups",), table["groups"], "group") if "groups" in table else ()
            self.sources[f"reserved[{key}]"] = self.sources[f"reserved_groups[{key}]"] = self.where(entry)
        self.values["reserved"], self.values["reserved_groups"] = users, groups
        if users:
            self.sources["reserved"] = self.sources["reserved_groups"] = self.where(path)

    def _users(self, path: tuple[str, ...], table: dict[str, Any]) -> None:
        limits: dict[str, int] = {}
        spec = ScalarKey("user_gpu_limit", "int", 0, 4096, "write the most GPUs the user may hold at once, 0 or more")
        for name, value in table.items():
            entry = path + (name,)
            if name != ANY_USER and not _NAME.fullmatch(name):
                self.fail(entry, "is not a valid user name", 'write [users.alice], or [users."*"] for everyone else')
            limits_table = self.table(entry, value, USER_KEYS)
            if "max_gpus" not in limits_table:
                self.fail(entry, "sets no limit", "add max_gpus = N, or remove the table")
            limits[name] = int(self.number(entry + ("max_gpus",), limits_table["max_gpus"], spec))
            self.sources[f"user_gpu_limit[{name}]"] = self.where(entry + ("max_gpus",))
        self.values["user_gpu_limit"] = limits
        if limits:
            self.sources["user_gpu_limit"] = self.where(path)

    def _agent(self, path: tuple[str, ...], table: dict[str, Any]) -> None:
        table = self.table(path, table, AGENT_KEYS)
        if "gpus" not in table:
            return
        entry = path + ("gpus",)
        hint = 'list GPU indexes and/or UUIDs, e.g. gpus = [0, 1, "GPU-8f3c..."]; leave the key out for every GPU'
        value = table["gpus"]
        if not isinstance(value, list):
            self.fail(entry, "must be a list of GPU indexes or UUIDs", hint, value)
        keys: list[str] = []
        for item in value:
            key = None
            if is_integer(item) and item >= 0:
                key = str(item)
            elif isinstance(item, str):
                key = gpu_key(item)
            if key is None:
                self.fail(entry, f"{render(item)} is neither a GPU index nor a UUID", hint, value)
            keys.append(key)
        self.set("agent_gpus", tuple(dict.fromkeys(keys)), entry)

    def cross_checks(self, defaults: Mapping[str, Any]) -> None:
        default, top = self.values.get("default_slowdown_pct"), self.values.get("max_slowdown_pct")
        if default is None and top is not None and top < defaults["default_slowdown_pct"]:
            # only the maximum was tightened: the default follows it down rather than exceeding it
            self.values["default_slowdown_pct"] = top
            self.sources["default_slowdown_pct"] = self.sources["max_slowdown_pct"]
        elif default is not None:
            limit = top if top is not None else defaults["max_slowdown_pct"]
            if default > limit:
                origin = "" if top is not None else " (the built-in default)"
                problem = f"is above slowdown.max_pct = {render(limit)}{origin}"
                hint = "the default must not exceed what a user may ask for: lower default_pct or raise max_pct"
                self.fail(("slowdown", "default_pct"), problem, hint, default)
