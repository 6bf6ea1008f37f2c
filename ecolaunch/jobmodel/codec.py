"""The one codec of the job model: the JSON form of profiles and history records, their schema versions, and the
one validation of what is read.

What lives here: :data:`VERSION`, :func:`encode_record` / :func:`decode_record` (a whole document: a history
file), :func:`profile_to_json` / :func:`profile_from_json` (a profile inside a job file),
:func:`progress_from_json` / :func:`progress_to_json` (a running job's progress, unversioned), and one migration
function per older version (:data:`_MIGRATIONS`). Decoding is :mod:`msgspec`'s, typed by the bounds of
:mod:`ecolaunch.jobmodel.profile`; errors are :class:`~ecolaunch.errors.ConfigError`. What each version changed:
docs/profiling.md#record-versions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.validate import is_integer

VERSION = 4

T = TypeVar("T")
_PATH = re.compile(r"^(?P<why>.*) - at `\$(?P<path>[^`]*)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_POINT_KEYS = ("power_cap_w", "iter_time_s", "power_w", "iterations", "iter_time_cv_pct")


# --- migrations --------------------------------------------------------------------------------------------
def _profile_v1(doc: Any) -> Any:
    """A version-1 profile at version 2: cap points as objects with all five fields; a whole float memory an int."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc, version=2)
    memory = out.get("memory_mib")
    if isinstance(memory, float) and memory.is_integer():
        out["memory_mib"] = int(memory)
    points = out.get("cap_points")
    if isinstance(points, list):
        out["cap_points"] = [_point_v1(p) for p in points]
    return out


def _point_v1(point: Any) -> Any:
    if isinstance(point, list) and 3 <= len(point) <= 5:
        point = dict(zip(_POINT_KEYS, point))
    if not isinstance(point, dict):
        return point
    return {**point, "iterations": point.get("iterations") or 0, "iter_time_cv_pct": point.get("iter_time_cv_pct")}


def _record_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-1 history document (job record or profile entry) at version 2: its profile migrated."""
    out = dict(doc, version=2)
    if isinstance(out.get("profile"), dict):
        out["profile"] = _profile_v1(out["profile"])
    return out


def _v2(doc: Any) -> Any:
    """A version-2 document at version 3: what version 3 adds is unknown in it (its fields' defaults)."""
    return dict(doc, version=3) if isinstance(doc, dict) else doc


def _v3(doc: Any) -> Any:
    """A version-3 document at version 4: what version 4 adds (a record's ``predicted_s``) is unknown in it."""
    return dict(doc, version=4) if isinstance(doc, dict) else doc


#: version -> the function that lifts a document of that version to the next
_MIGRATIONS: dict[str, dict[int, Callable[[Any], Any]]] = {
    "record": {1: _record_v1, 2: _v2, 3: _v3},
    "profile": {1: _profile_v1, 2: _v2, 3: _v3},
}


def _migrate(kind: str, doc: dict[str, Any], version: Any, where: str) -> dict[str, Any]:
    if not is_integer(version) or not 1 <= version <= VERSION:
        newer = is_integer(version) and version > VERSION
        raise ConfigError(f"{where}: version = {json.dumps(version)} is not a version this ecolaunch reads "
                          f"(1 to {VERSION})", hint="a newer ecolaunch wrote it: upgrade ecolaunch" if newer else None)
    while version < VERSION:
        doc = _MIGRATIONS[kind][version](doc)
        version += 1
    return doc


# --- decoding ----------------------------------------------------------------------------------------------
def _convert(doc: Any, type_: type[T], where: str) -> T:
    try:
        return msgspec.convert(doc, type_)
    except msgspec.ValidationError as e:
        raise ConfigError(_explain(str(e), doc, where)) from None


def _explain(message: str, doc: Any, where: str) -> str:
    """msgspec's ``... - at `$.a.b[0]``` as ``where: a.b[0] = <the value>: ...``."""
    m = _PATH.match(message)
    if m is None:
        return f"{where}: {message}"
    path, why = m["path"], m["why"]
    value, found = doc, True
    for name, index in _STEP.findall(path):
        if name and isinstance(value, dict) and name in value:
            value = value[name]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            found = False
            break
    field = path.lstrip(".") or "the document"
    shown = f" = {json.dumps(value)[:80]}" if found and path else ""
    return f"{where}: {field}{shown}: {why[0].lower()}{why[1:]}"


def decode_record(data: bytes, fmt: str, type_: type[T], *, where: str) -> T:
    """A history document ``{"format": fmt, "version": ..., <the fields of type_>}``, migrated to :data:`VERSION`
    and validated. Raises ConfigError naming ``where``, the field and the value."""
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:  # NaN, Infinity and 1e999 are not JSON numbers
        raise ConfigError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ConfigError(f"{where}: not an {fmt} document")
    return _convert(_migrate("record", doc, doc.get("version"), where), type_, where)


def encode_record(fmt: str, record: Any) -> bytes:
    """A history document of ``record`` at :data:`VERSION` (canonical JSON: sorted keys, no spaces). Raises
    ConfigError when a number is not finite (NaN must never reach a record)."""
    doc = {"format": fmt, "version": VERSION, **msgspec.to_builtins(record)}
    try:
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except ValueError as e:
        raise ConfigError(f"the {fmt} document holds a non-finite number: {e}",
                          hint="this is an ecolaunch bug: NaN must never reach a record") from e


def profile_from_json(doc: Any, *, where: str) -> Profile:
    """A profile from its JSON form inside another document (a job file), migrated and validated. Raises ConfigError
    naming ``where``, the field and the value."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where} = {json.dumps(doc)[:80]}: expected an object")
    return _convert(_migrate("profile", doc, doc.get("version", 1), where), Profile, where)


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """A profile's JSON form inside another document, with its version. Raises TypeError for anything but a
    :class:`Profile` (a dict or a record would be written as if it were one, unchecked)."""
    if not isinstance(profile, Profile):
        raise TypeError(f"profile_to_json takes a Profile, got {type(profile).__name__}")
    doc = msgspec.to_builtins(profile)
    return {"version": VERSION, **doc, "cap_points": list(doc.get("cap_points", ()))}


def progress_from_json(doc: Any, *, where: str) -> JobProgress:
    """A running job's progress from its JSON form in a job file, validated. Raises ConfigError naming ``where``,
    the field and the value."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where} = {json.dumps(doc)[:80]}: expected an object")
    return _convert(doc, JobProgress, where)


def progress_to_json(progress: JobProgress) -> dict[str, Any]:
    """A running job's progress as JSON values. Raises TypeError for anything but a :class:`JobProgress`."""
    if not isinstance(progress, JobProgress):
        raise TypeError(f"progress_to_json takes a JobProgress, got {type(progress).__name__}")
    return msgspec.to_builtins(progress)


def to_json(record: Any) -> Any:
    """A record as plain JSON values (objects, lists, numbers, strings), for printing."""
    return msgspec.to_builtins(record)
