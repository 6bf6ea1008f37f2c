"""Job history in the state directory: finished-job records and the latest profile of each job fingerprint.

What lives here: :class:`ProfileEntry` (a stored profile, :class:`ecolaunch.jobmodel.profile.Profile`, and what came
with it), :class:`JobRecord` (one finished job), :func:`fingerprint`, and :class:`History` (the files). Their JSON
form, its versions and its validation are :mod:`ecolaunch.jobmodel.codec`'s: a record of an older version is migrated.

**Layout** (under ``<state dir>/history/``, sticky; one directory per user, ``0755``, that only its user writes)::

    <user>/jobs/<job_id>.json            one JobRecord per finished job, written once
    <user>/profiles/<fingerprint>.json   the latest profile of that fingerprint (replaced on every store)

A process writes only below its own user's directory (named after its effective uid's account), so no member
can overwrite, replace or plant a colleague's record. A file counts only when the kernel says it belongs to the
user whose directory holds it, is a regular file (never a link, FIFO or device) and is within
:data:`MAX_RECORD_BYTES`; a record naming another user counts only in root's directory (root's launcher may
record anyone's job). Files directly under ``history/jobs`` and ``history/profiles`` (the layout before
per-user directories: group-writable, so untrustworthy) are not read. See :mod:`ecolaunch.state.userdirs`.

Every file is written atomically (temporary file with an unpredictable name, fsync, rename, fsync of the
directory), so a crash leaves the old file or the new one, never a torn one. No lock is needed:
each job record has a single writer (the job's launcher, under a unique job id) and a profile replace is
atomic, so concurrent stores of one fingerprint end with one of them whole (the last rename wins). A file
that is torn anyway (written by something else), not JSON, or not of this format is skipped with a warning
and treated as missing; nothing here raises on a bad file.

**Fingerprint** (:func:`fingerprint`): sha256 over a canonical JSON of (format version, sha256 of the
script file's bytes, the script's arguments in order, the worker count, the user, the GPU model name). The
same script run the same way by the same user on the same kind of GPU has the same fingerprint; editing the
script, changing an argument (even an output path or a seed), the worker count, the user or the GPU model
makes a new one, because any of them can change the iteration time, power or memory. A ``-m module`` launch
or a script that cannot be read is keyed by its name instead of its content (documented weakness: an edit
then goes unnoticed).
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta

from ecolaunch.errors import ConfigError, StateError, with_hint
from ecolaunch.jobmodel import codec
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.state.userdirs import UserTree, account_name
from ecolaunch.validate import is_integer

logger = logging.getLogger(__name__)
_R = TypeVar("_R", "ProfileEntry", "JobRecord")

HISTORY_DIR = "history"
#: records and profiles larger than this are refused unread (a link to /dev/zero must not fill memory)
MAX_RECORD_BYTES = 8 * 1024 * 1024
MAX_PROFILE_BYTES = 1024 * 1024
_JOB_FORMAT, _PROFILE_FORMAT = "ecolaunch-job", "ecolaunch-profile"
_FINGERPRINT_VERSION = 1
_SAFE_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")
#: what to do when a member squatted this user's history directory (only root can move another's directory)
SQUAT_HINT = ("ask the lab admin to run `sudo ecolaunch init-state`: it moves the directory aside and gives you a "
              "fresh one")


# --- records ---------------------------------------------------------------------------------------
JobId = Annotated[str, Meta(pattern=_SAFE_ID.pattern)]
Seconds = Annotated[float, Meta(ge=0)]
Joules = Annotated[float, Meta(ge=0)]
Watts = Annotated[float, Meta(ge=0)]


@dataclass(frozen=True, slots=True)
class ProfileEntry:
    """A stored profile, whether the script declared itself safe to profile, who stored it, when.

    ``profile`` is None for a job that ran without yielding one (e.g. it ended first): the entry then only
    remembers ``profile_safe`` for the next launch's ``--profile auto``.
    """

    fingerprint: str
    profile: Profile | None
    profile_safe: bool = False
    job_id: str | None = None
    updated_at: Seconds = 0.0
    #: what the script declared with ``@ecolaunch.job`` (:func:`launch_hints`): the next launch asks for it
    hints: dict[str, Any] = field(default_factory=dict)


_HINTS: dict[str, Any] = {"max_slowdown_pct": Annotated[float, Meta(ge=0, le=1000)],
                          "memory_mib": Annotated[int, Meta(ge=0, le=2 ** 31)]}


def launch_hints(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The hints a launch can use, validated: ``max_slowdown_pct`` (a number in 0-1000) and ``memory_mib`` (a whole
    number >= 0) of ``@ecolaunch.job``; anything else, or a value of the wrong kind, is left out."""
    out: dict[str, Any] = {}
    raw = raw if isinstance(raw, Mapping) else {}
    for key, kind in _HINTS.items():
        if key in raw:
            try:
                out[key] = msgspec.convert(raw[key], kind)
            except msgspec.ValidationError:
                continue
    return out


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One finished job. Times are unix seconds; energies joules; ``samples`` a short series per GPU UUID.

    ``energy_j`` is the job's attributed share of its GPUs' energy (see :mod:`ecolaunch.profile.attribution`),
    ``gpu_energy_j`` the whole energy of those GPUs over the run, ``profiling_energy_j`` that of a separate
    pre-launch profiling run (not included in the other two). ``power_caps_w`` is the cap each GPU spent
    most of the run at; ``colocated_with`` lists, per GPU, the other jobs that shared it at any time.
    ``iterations`` counts step marks (``track()`` marks one per item it yields, as ``step()`` once per iteration).
    """

    job_id: JobId
    user: str
    name: str
    fingerprint: str | None
    started: Seconds
    ended: Seconds
    duration_s: Seconds
    exit_code: int | None
    gpus: tuple[str, ...]
    gpu_names: tuple[str, ...]
    power_caps_w: dict[str, Watts | None] = field(default_factory=dict)
    colocated_with: dict[str, list[str]] = field(default_factory=dict)
    energy_j: Joules | None = None
    gpu_energy_j: Joules | None = None
    profiling_energy_j: Joules | None = None
    iterations: int | None = None
    iter_time_s: Seconds | None = None
    profile: Profile | None = None
    profile_action: str | None = None
    recommended_cap_w: Watts | None = None
    recommendation: str | None = None
    findings: tuple[str, ...] = ()
    samples: dict[str, list[Any]] = field(default_factory=dict)


# --- fingerprint -----------------------------------------------------------------------------------
def fingerprint(script: str | os.PathLike[str], script_args: Sequence[str], nproc: int | str, user: str,
                gpu_model: str, *, module: bool = False) -> str:
    """The job's fingerprint: 64 hex digits (see the module docstring for what goes in and why)."""
    if module:
        script_key = f"module:{os.fspath(script)}"
    else:
        try:
            script_key = "sha256:" + hashlib.sha256(Path(script).read_bytes()).hexdigest()
        except OSError as e:
            logger.debug("cannot read script %s for its fingerprint (%s); using its path", script, e)
            script_key = f"path:{os.path.abspath(os.fspath(script))}"
    doc = {"v": _FINGERPRINT_VERSION, "script": script_key, "args": [str(a) for a in script_args],
           "nproc": str(nproc), "user": str(user), "gpu_model": " ".join(str(gpu_model).split())}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# --- the store -------------------------------------------------------------------------------------
class History:
    """The job history of one state directory (see the module docstring for layout and guarantees)."""

    fingerprint = staticmethod(fingerprint)

    def __init__(self, state_dir: Path | str) -> None:
        self.root = Path(state_dir) / HISTORY_DIR
        self._tree = UserTree(self.root)
        #: this user's own directories (the only ones this process writes)
        self.jobs_dir = self._tree.own_dir("jobs")
        self.profiles_dir = self._tree.own_dir("profiles")
        #: why this user's own directory can never be written (a member squatted it), once looked at
        self._squatted: str | None = None
        self._looked = False

    def __repr__(self) -> str:
        return f"History({str(self.root.parent)!r})"

    # --- profiles ----------------------------------------------------------------------------------
    def lookup(self, fp: str) -> ProfileEntry | None:
        """The stored profile entry of a fingerprint, or None (missing or unreadable: warned)."""
        if not _FINGERPRINT.match(fp):
            raise ConfigError(f"fingerprint {fp!r} is not 64 hex digits", hint="use history.fingerprint(...)")
        if self.own_dir_problem() is not None:
            return None  # said once: nothing of this user's can be there
        entry = self._read(self._tree.user, self._tree.uid, "profiles", f"{fp}.json", _PROFILE_FORMAT, ProfileEntry)
        return None if entry is None else dataclasses.replace(entry, fingerprint=fp, hints=launch_hints(entry.hints))

    def lookup_profile(self, fp: str) -> Profile | None:
        entry = self.lookup(fp)
        return None if entry is None else entry.profile

    def store_profile(self, fp: str, profile: Profile | None, *, profile_safe: bool = False, job_id: str | None = None,
                      now: float | None = None, hints: Mapping[str, Any] | None = None) -> Path:
        """Replace the fingerprint's profile (and the script's launch hints). Raises StateError when the directory
        cannot be written."""
        if not _FINGERPRINT.match(fp):
            raise ConfigError(f"fingerprint {fp!r} is not 64 hex digits", hint="use history.fingerprint(...)")
        entry = ProfileEntry(fp, profile, bool(profile_safe), job_id, time.time() if now is None else now,
                             launch_hints(hints))
        return self._write("profiles", f"{fp}.json", _PROFILE_FORMAT, entry)

    # --- job records -------------------------------------------------------------------------------
    def record(self, rec: JobRecord) -> Path:
        """Store a finished job's record. Raises StateError when the directory cannot be written."""
        if not _SAFE_ID.match(rec.job_id):
            raise ConfigError(f"job id {rec.job_id!r} cannot name a file", hint="use letters, digits, '_', '.', '-'")
        return self._write("jobs", f"{rec.job_id}.json", _JOB_FORMAT, rec)

    def get(self, job_id: str) -> JobRecord | None:
        """The record of ``job_id`` (this user's first, then any user's), or None (missing, or unreadable: warned)."""
        if not _SAFE_ID.match(job_id):
            return None
        for user, uid in self._tree.users():
            rec = self._parse_record(user, uid, f"{job_id}.json")
            if rec is not None:
                return rec
        return None

    def job_ids(self) -> builtins.list[str]:
        """Every stored job id of every user (unsorted), without reading the records."""
        return [e.name[: -len(".json")] for e in self._tree.entries("jobs") if _SAFE_ID.match(e.name[: -len(".json")])]

    def list(self, limit: int | None = None) -> builtins.list[JobRecord]:
        """Finished jobs of every user, newest end first; unreadable files are skipped with a warning.

        With ``limit``, only the newest files (by modification time) are read until ``limit`` records parse.
        """
        if limit is not None and (not is_integer(limit) or limit < 0):
            raise ConfigError(f"limit must be an integer >= 0, got {limit!r}")
        entries = [e for e in self._tree.entries("jobs") if _SAFE_ID.match(e.name[: -len(".json")])]
        entries.sort(key=lambda e: (e.mtime, e.name), reverse=True)
        out: builtins.list[JobRecord] = []
        for e in entries:
            if limit is not None and len(out) >= limit:
                break
            rec = self._parse_record(e.user, e.uid, e.name)
            if rec is not None:
                out.append(rec)
        out.sort(key=lambda r: (r.ended, r.started, r.job_id), reverse=True)
        return out

    def squatted(self) -> builtins.list[tuple[str, int, int]]:
        """``(directory name, its user's uid, the uid that owns it)`` of every user directory someone else made
        (:meth:`ecolaunch.state.userdirs.UserTree.squatted`): those users' records are never written or read."""
        return self._tree.squatted()

    def own_dir_problem(self) -> str | None:
        """Why this user's history directory is not their own (a member created ``history/<user>`` first, or a
        file in its place), or None. The first call that finds one says so once, as a warning with the fix: this
        user's jobs and profiles can never be recorded until the admin repairs it."""
        if not self._looked:
            self._looked = True
            self._squatted = self._tree.own_problem(("jobs", "profiles"))
            if self._squatted is not None:
                logger.warning("%s", with_hint(f"your history directory is not your own: {self._squatted}, so your "
                                               "jobs and profiles are not recorded", self._squat_hint()))
        return self._squatted

    def _squat_hint(self) -> str:
        return "run `ecolaunch init-state`: it moves the directory aside and makes you a fresh one" \
            if self._tree.uid == 0 else SQUAT_HINT

    # --- internals ---------------------------------------------------------------------------------
    def _parse_record(self, user: str, uid: int, name: str) -> JobRecord | None:
        rec = self._read(user, uid, "jobs", name, _JOB_FORMAT, JobRecord)
        if rec is None:
            return None
        where = self.root / user / "jobs" / name
        if uid != 0 and rec.user not in (user, account_name(uid)):
            # root's launcher may record a job for anyone; a user only for themselves
            logger.warning("ignoring history record %s: it names user %r but belongs to %s", where, rec.user, user)
            return None
        return rec

    def _read(self, user: str, uid: int, kind: str, name: str, fmt: str, type_: type[_R]) -> _R | None:
        """The record in ``<user>/<kind>/<name>``, decoded by :func:`ecolaunch.jobmodel.codec.decode_record`; None when
        missing, refused (a link, a FIFO, a device, too large, not this user's) or not a valid record: warned."""
        where = self.root / user / kind / name
        try:
            raw = self._tree.read(user, uid, kind, name, MAX_RECORD_BYTES if kind == "jobs" else MAX_PROFILE_BYTES)
        except FileNotFoundError:
            return None
        except OSError as e:  # RefusedFile included: a link, a FIFO, a device, too large, not this user's
            logger.warning("ignoring history file %s: %s", where, getattr(e, "why", None) or e.strerror or e)
            return None
        try:
            return codec.decode_record(raw, fmt, type_, where=str(where))
        except ConfigError as e:
            logger.warning("ignoring history file %s", e)
            return None

    def _write(self, kind: str, name: str, fmt: str, record: ProfileEntry | JobRecord) -> Path:
        path = self._tree.own_dir(kind) / name
        data = codec.encode_record(fmt, record)
        if len(data) > (MAX_RECORD_BYTES if kind == "jobs" else MAX_PROFILE_BYTES):
            raise ConfigError(f"history document for {name} is {len(data)} bytes, over the limit readers accept",
                              hint="this is an ecolaunch bug: records keep short series only")
        try:
            return self._tree.write(kind, name, data)
        except OSError as e:
            why = getattr(e, "why", None) or e.strerror or e
            squatted = self.own_dir_problem()
            hint = self._squat_hint() if squatted else ("the lab admin should run `ecolaunch init-state` (or check the "
                                                        "state directory's permissions, or set ECOLAUNCH_STATE_DIR)")
            raise StateError(f"cannot write the history file {str(path)!r}: {squatted or why}", hint=hint) from e
