"""Job history in the state directory: finished-job records and the latest profile of each job fingerprint.

What lives here: :class:`ProfileEntry` (a stored profile, :class:`ecolaunch.jobmodel.profile.Profile`, and what came
with it), :class:`JobRecord` (one finished job), :func:`fingerprint`, :class:`JobIdentity` and :class:`JobMatch`
(what a launch is matched on, and how it was), and :class:`History` (the files: ``<user>/jobs/<job_id>.json``, one
per finished job, and ``<user>/profiles/<fingerprint>.json``, replaced on every store). What does not: their JSON form,
versions and validation (:mod:`ecolaunch.jobmodel.codec`), the per-user directories (:mod:`ecolaunch.state.userdirs`).
Nothing here raises on a bad file. Who may write what: docs/threat-model.md; how a launch is matched:
docs/profiling.md#how-a-launch-finds-its-job-in-the-history.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import json
import logging
import os
import re
import statistics
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
from ecolaunch.state.graph import MAX_EXPECTED_ITERATIONS
from ecolaunch.state.userdirs import UserTree, account_name
from ecolaunch.statedir import HISTORY_JOBS, HISTORY_PROFILES, StateLayout
from ecolaunch.validate import is_integer

logger = logging.getLogger(__name__)
_R = TypeVar("_R", "ProfileEntry", "JobRecord")

#: records and profiles larger than this are refused unread (a link to /dev/zero must not fill memory)
MAX_RECORD_BYTES = 8 * 1024 * 1024
MAX_PROFILE_BYTES = 1024 * 1024
#: more than any GPU board draws (the largest are rated about 1.2 kW): a record claiming more energy per GPU-second
#: than this is refused on read, as a lie or a corruption (a member's record once claimed 1e18 J)
MAX_GPU_POWER_W = 2000.0
#: the longest pre-launch profiling run a record's ``profiling_energy_j`` may cover (it is not in ``duration_s``)
MAX_PROFILING_S = 86400.0
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


#: the completed runs a profile entry remembers (the latest), from which a launch expects its run's length
KEPT_RUNS = 5


@dataclass(frozen=True, slots=True)
class RunLength:
    """One completed run (exit code 0) of a job: its wall time, and the steps it marked (None: not instrumented)."""

    duration_s: Seconds
    iterations: Annotated[int, Meta(ge=0)] | None = None


@dataclass(frozen=True, slots=True)
class ExpectedRun:
    """How long the next run of a job is expected to be: the medians of its latest completed runs (``runs`` of
    them); ``iterations`` None when no run marked steps."""

    duration_s: float
    iterations: int | None
    runs: int


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
    #: the latest completed runs, oldest first (:meth:`History.note_run`)
    runs: Annotated[tuple[RunLength, ...], Meta(max_length=KEPT_RUNS)] = ()

    def expected_run(self) -> ExpectedRun | None:
        """What :attr:`runs` say of the next run, or None when the job never completed here."""
        if not self.runs:
            return None
        steps = [r.iterations for r in self.runs if r.iterations]
        return ExpectedRun(float(statistics.median(r.duration_s for r in self.runs)),
                           int(statistics.median_low(steps)) if steps else None, len(self.runs))


#: a run's length in steps, as a script declares it
Steps = Annotated[int, Meta(ge=1, le=MAX_EXPECTED_ITERATIONS)]
_HINTS: dict[str, Any] = {"max_slowdown_pct": Annotated[float, Meta(ge=0, le=1000)],
                          "memory_mib": Annotated[int, Meta(ge=0, le=2 ** 31)],
                          "key": Annotated[str, Meta(min_length=1, max_length=200)],
                          "steps": Steps}


def launch_hints(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The hints a launch can use, validated: ``max_slowdown_pct`` (a number in 0-1000), ``memory_mib`` (a whole
    number >= 0), ``key`` (a string of 1-200 characters) and ``steps`` (a whole number from 1 to
    :data:`~ecolaunch.state.graph.MAX_EXPECTED_ITERATIONS`) of ``@ecolaunch.job``; anything else, or a value of the
    wrong kind, is left out."""
    out: dict[str, Any] = {}
    raw = raw if isinstance(raw, Mapping) else {}
    for key, kind in _HINTS.items():
        if key in raw:
            try:
                out[key] = msgspec.convert(raw[key], kind)
            except msgspec.ValidationError:
                continue
    return out


def declared_steps(raw: Mapping[str, Any] | None) -> int | None:
    """The run's length in steps as the running script declares it in its hints: ``@ecolaunch.job(steps=...)``,
    else the total its ``track()`` loops over sized iterables declared so far (``tracked_steps``: through the
    current epoch only, in a loop per epoch); None when neither (or neither is a valid step count). The tracked
    total is the running run's alone: it is never kept in the history (:func:`launch_hints`)."""
    steps = launch_hints(raw).get("steps")
    if steps is not None or not isinstance(raw, Mapping):
        return steps
    try:
        return msgspec.convert(raw.get("tracked_steps"), Steps | None)
    except msgspec.ValidationError:
        return None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One finished job. Times are unix seconds; energies joules; ``samples`` a short series per GPU UUID.

    ``energy_j`` is the job's attributed share of its GPUs' energy (see :mod:`ecolaunch.profile.attribution`),
    ``gpu_energy_j`` the whole energy of those GPUs over the run, ``profiling_energy_j`` that of a separate
    pre-launch profiling run (not included in the other two). ``power_caps_w`` is the cap each GPU spent
    most of the run at; ``colocated_with`` lists, per GPU, the other jobs that shared it at any time.
    ``iterations`` counts step marks (``track()`` marks one per item it yields, as ``step()`` once per iteration).
    ``predicted_s`` is the run's length as its launch expected it before it started (the request's ``expected_s``;
    None: nothing was known), so that predictions can be checked against ``duration_s``.
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
    #: how the launch was matched in the history (:attr:`JobMatch.how`), and the job whose stored profile it used
    history_match: str | None = None
    profile_from: JobId | None = None
    #: why the run updated nothing in the history (its iterations were not its profile's job undisturbed)
    not_learned: str | None = None
    predicted_s: Seconds | None = None


def implausible_energy(rec: JobRecord) -> str | None:
    """Why ``rec``'s energy cannot be true (more than :data:`MAX_GPU_POWER_W` per GPU over its run), or None."""
    n = max(1, len(rec.gpus))
    run_s = max(rec.duration_s, rec.ended - rec.started, 1.0)
    for name, value, seconds in (("energy_j", rec.energy_j, run_s), ("gpu_energy_j", rec.gpu_energy_j, run_s),
                                 ("profiling_energy_j", rec.profiling_energy_j, MAX_PROFILING_S)):
        if value is not None and value > MAX_GPU_POWER_W * n * seconds:
            return (f"{name} = {value:.4g} J over {seconds:.0f} s on {n} GPU{'s' if n > 1 else ''} is more than "
                    f"{MAX_GPU_POWER_W:.0f} W per GPU, which no board draws")
    return None


# --- fingerprint -----------------------------------------------------------------------------------
#: the options of a training script whose value never changes the work of one iteration, left out of its
#: fingerprint (spelled with ``-`` or ``_``, any case; ``--opt value`` or ``--opt=value``): how long it runs, where
#: its output, logs and checkpoints go, how often it logs and saves, and its seed
IGNORED_ARGS = frozenset({
    # run length
    "steps", "max-steps", "total-steps", "train-steps", "num-steps", "iters", "max-iters", "epochs",
    "num-epochs", "max-epochs", "num-train-epochs",
    # output, logging and checkpoint paths, and the run's name
    "output-dir", "out-dir", "save-dir", "checkpoint-dir", "ckpt-dir", "logging-dir", "log-dir",
    "resume-from-checkpoint", "run-name", "wandb-project",
    # logging and checkpoint intervals
    "log-interval", "log-every", "logging-steps", "save-steps", "save-interval", "save-every",
    "checkpoint-interval", "checkpoint-every",
    # seeds
    "seed", "data-seed",
})


def work_args(script_args: Sequence[str]) -> tuple[builtins.list[str], builtins.list[str]]:
    """``(kept, dropped)``: the script's arguments that go into its fingerprint, and those of :data:`IGNORED_ARGS`
    left out (the option and its value: ``--steps=600``, or ``--steps 600`` unless the next word is an option)."""
    kept: builtins.list[str] = []
    dropped: builtins.list[str] = []
    args = [str(a) for a in script_args]
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, _ = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name.lower().replace("_", "-") not in IGNORED_ARGS:
            kept.append(arg)
            i += 1
            continue
        takes_next = not eq and i + 1 < len(args) and not _is_option(args[i + 1])
        dropped += args[i:i + 2] if takes_next else [arg]
        i += 2 if takes_next else 1
    return kept, dropped


def _is_option(word: str) -> bool:
    if not word.startswith("-"):
        return False
    try:
        float(word)
    except ValueError:
        return True
    return False  # a negative number is a value


def fingerprint(script: str | os.PathLike[str], script_args: Sequence[str], nproc: int | str, user: str,
                gpu_model: str, *, module: bool = False, key: str | None = None, nnodes: int = 1) -> str:
    """The job's fingerprint: 64 hex digits (what goes in and why: docs/profiling.md#how-a-launch-finds-its-job-in-the-history). With ``key`` (a
    user's ``--job-key`` or the script's ``@ecolaunch.job(key=...)``), the key stands for the script and its
    arguments. ``nnodes``: the job's node count (a job over 2 nodes of 4 workers is not the 1-node job of 4; one
    node adds nothing, so every one-node fingerprint stays what it was)."""
    doc: dict[str, Any] = {"v": _FINGERPRINT_VERSION, "nproc": str(nproc), "user": str(user),
                           "gpu_model": " ".join(str(gpu_model).split())}
    if nnodes != 1:
        doc["nnodes"] = int(nnodes)
    if key is not None:
        doc["key"] = str(key)
    else:
        doc.update(script=_script_key(script, module), args=work_args(script_args)[0])
    return _digest(doc)


def _script_key(script: str | os.PathLike[str], module: bool) -> str:
    if module:
        return f"module:{os.fspath(script)}"
    try:
        return "sha256:" + hashlib.sha256(Path(script).read_bytes()).hexdigest()
    except OSError as e:
        logger.debug("cannot read script %s for its fingerprint (%s); using its path", script, e)
        return f"path:{os.path.abspath(os.fspath(script))}"


def _digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """What a launch is matched on in the history: the script (its content, or a module's name), its arguments,
    the worker count, the user and the GPU model (see :meth:`History.match`)."""

    script: str
    script_args: tuple[str, ...]
    nproc: str
    user: str
    gpu_model: str
    module: bool = False
    #: the job's node count (every node's workers and GPU model alike: a multi-node job's plan, ``launch.nodes``)
    nnodes: int = 1

    def fingerprint(self, key: str | None = None) -> str:
        return fingerprint(self.script, self.script_args, self.nproc, self.user, self.gpu_model, module=self.module,
                           key=key, nnodes=self.nnodes)

    def key_fingerprint(self) -> str:
        """Where the key the script declared (``@ecolaunch.job(key=...)``) is remembered for its next launch: the
        script, worker count, node count, user and GPU model, whatever its arguments."""
        doc = {"v": _FINGERPRINT_VERSION, "declares": "key", "script": _script_key(self.script, self.module),
               "nproc": self.nproc, "user": self.user, "gpu_model": " ".join(self.gpu_model.split())}
        return _digest({**doc, "nnodes": self.nnodes} if self.nnodes != 1 else doc)

    def describe(self) -> str:
        """The script, worker count and GPU model in words."""
        workers = "1 worker" if self.nproc == "1" else f"{self.nproc} workers"
        if self.nnodes != 1:
            workers = f"{self.nnodes} nodes x {workers}"
        what = f"module {self.script}" if self.module else f"script {os.path.basename(self.script)}"
        return f"{what}, {workers}, {self.gpu_model}"


@dataclass(frozen=True, slots=True)
class JobMatch:
    """How the launch of ``identity`` was matched in the history: the fingerprint its profile is stored under, how
    (``how``, one phrase: ``ecolaunch history JOB`` shows it), the key it was matched by (None: its arguments) and
    whether that came from the command line (``--job-key``), and the stored entry (None: none; its profile None
    with ``--fresh-profile``; a colleague's profile when the launch starts from it, ``colleague`` then naming them)."""

    identity: JobIdentity
    fingerprint: str
    how: str
    key: str | None
    key_from_cli: bool
    entry: ProfileEntry | None
    #: the user whose profile of the same job a first launch starts from (docs/profiling.md#a-colleagues-profile-of-the-same-job)
    colleague: str | None = None

    @property
    def profile_from(self) -> str | None:
        """The job whose stored profile the launch uses (None: it uses none)."""
        return self.entry.job_id if self.entry is not None and self.entry.profile is not None else None


def _contradiction(profile: Profile) -> str | None:
    # lazy: the cap choice (and its curve) load only for a launch that matches a stored profile
    from ecolaunch.jobmodel.capchoice import contradiction

    return contradiction(profile.cap_points)


# --- the store -------------------------------------------------------------------------------------
class History:
    """The job history of one state directory (layout and guarantees: docs/threat-model.md and docs/profiling.md)."""

    fingerprint = staticmethod(fingerprint)

    def __init__(self, state_dir: Path | str) -> None:
        self.layout = StateLayout(state_dir)
        self.root = self.layout.history
        self._tree = UserTree(self.root)
        #: this user's own directories (the only ones this process writes)
        self.jobs_dir = self._tree.own_dir(HISTORY_JOBS)
        self.profiles_dir = self._tree.own_dir(HISTORY_PROFILES)
        #: why this user's own directory can never be written (a member squatted it), once looked at
        self._squatted: str | None = None
        self._looked = False
        #: job id -> the uid whose directory its record was read from
        self._owners: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"History({str(self.root.parent)!r})"

    def self_reported(self, rec: JobRecord) -> bool:
        """Whether ``rec``'s figures are only its user's word to this reader: read from the directory of a user other
        than this one and root (a member's launcher writes her records, and could write anything a plausible record
        holds). The CLI marks such energy (``history``, ``report``, accounting)."""
        owner = self._owners.get(rec.job_id)
        return owner is not None and owner not in (0, self._tree.uid)

    # --- matching ----------------------------------------------------------------------------------
    def match(self, identity: JobIdentity, *, key: str | None = None, fresh: bool = False) -> JobMatch:
        """The history entry of a launch: by ``key`` (``--job-key``) when given; else by the key the script
        declared on an earlier run (``@ecolaunch.job(key=...)``); else by its fingerprint (the script, its
        arguments but :data:`IGNORED_ARGS`, the worker count, the user, the GPU model). ``fresh``
        (``--fresh-profile``): no stored profile is used, and the one this run measures replaces it."""
        where, cli = identity.describe(), key is not None
        if key is not None:
            fp, how = identity.fingerprint(key), f"job key {key!r} (--job-key), {where}"
        else:
            declared = self.lookup(identity.key_fingerprint())
            key = declared.hints.get("key") if declared is not None else None
            if key is not None:
                fp, how = identity.fingerprint(key), f"job key {key!r} (the script's @ecolaunch.job), {where}"
            else:
                kept, dropped = work_args(identity.script_args)
                fp = identity.fingerprint()
                args = ("its arguments" if kept else "no arguments") + (
                    f" (ignoring {' '.join(dropped)})" if dropped else "")
                how = f"{where}, {args}"
        entry = self.lookup(fp)
        if fresh:
            # what the script declared stays (its bound, profile_safe); its profile is measured again
            entry = None if entry is None else dataclasses.replace(entry, profile=None)
            how += "; --fresh-profile: its stored profile not used"
        elif entry is None or entry.profile is None:
            how += "; no stored profile"
        elif (disturbed := _contradiction(entry.profile)) is not None:
            entry = dataclasses.replace(entry, profile=None)
            how += f"; its stored profile (job {entry.job_id}) was measured while disturbed ({disturbed}): profiling again"
        else:
            how += f"; profile of job {entry.job_id}" if entry.job_id else "; stored profile"
        return JobMatch(identity, fp, how, key, cli, entry)

    def colleague_profile(self, identity: JobIdentity, *, key: str | None = None) -> tuple[str, ProfileEntry] | None:
        """What the history of this machine holds of the same job from another user: ``(their name, their entry)``
        of the newest profile with power that another user stored for ``identity`` run by them (the same script
        content, arguments but :data:`IGNORED_ARGS`, worker count and GPU model; or the same ``key``), or None.

        Each user's file is found by the fingerprint that user's own launch of it has, and read with the checks of
        every history read (the kernel says it is theirs, a regular file, within size); one that contradicts itself
        is not used. What it is used for is a first launch's decision alone (:mod:`ecolaunch.policy.firstcurve`):
        that launch profiles its own as it runs, and nothing of the colleague's is stored as the user's."""
        best: tuple[str, ProfileEntry] | None = None
        for name, uid in self._tree.users():
            if uid == self._tree.uid:
                continue
            theirs = dataclasses.replace(identity, user=account_name(uid))
            entry = self._profile_entry(name, uid, theirs.fingerprint(key))
            if entry is None or entry.profile is None or not entry.profile.knows_power:
                continue
            if (disturbed := _contradiction(entry.profile)) is not None:
                logger.info("history: %s's profile of the same job was measured while disturbed (%s): not used",
                            name, disturbed)
                continue
            if best is None or entry.updated_at > best[1].updated_at:
                best = (name, entry)
        return best

    # --- profiles ----------------------------------------------------------------------------------
    def lookup(self, fp: str) -> ProfileEntry | None:
        """The stored profile entry of a fingerprint, or None (missing or unreadable: warned)."""
        if not _FINGERPRINT.match(fp):
            raise ConfigError(f"fingerprint {fp!r} is not 64 hex digits", hint="use history.fingerprint(...)")
        if self.own_dir_problem() is not None:
            return None  # said once: nothing of this user's can be there
        return self._profile_entry(self._tree.user, self._tree.uid, fp)

    def lookup_profile(self, fp: str) -> Profile | None:
        entry = self.lookup(fp)
        return None if entry is None else entry.profile

    def store_profile(self, fp: str, profile: Profile | None, *, profile_safe: bool = False, job_id: str | None = None,
                      now: float | None = None, hints: Mapping[str, Any] | None = None) -> Path:
        """Replace the fingerprint's profile (and the script's launch hints). Raises StateError when the directory
        cannot be written."""
        if not _FINGERPRINT.match(fp):
            raise ConfigError(f"fingerprint {fp!r} is not 64 hex digits", hint="use history.fingerprint(...)")
        before = self.lookup(fp)
        entry = ProfileEntry(fp, profile, bool(profile_safe), job_id, time.time() if now is None else now,
                             launch_hints(hints), before.runs if before is not None else ())
        return self._write(HISTORY_PROFILES, f"{fp}.json", _PROFILE_FORMAT, entry)

    def note_run(self, fp: str, duration_s: float, iterations: int | None, *, job_id: str | None = None,
                 now: float | None = None) -> Path:
        """Remember a completed run of the fingerprint's job (the latest :data:`KEPT_RUNS`), keeping its profile.
        Raises StateError when the directory cannot be written."""
        before = self.lookup(fp)
        run = RunLength(max(0.0, float(duration_s)), None if not iterations or iterations < 0 else int(iterations))
        entry = before if before is not None else ProfileEntry(fp, None, job_id=job_id,
                                                               updated_at=time.time() if now is None else now)
        entry = dataclasses.replace(entry, runs=(*entry.runs, run)[-KEPT_RUNS:])
        return self._write(HISTORY_PROFILES, f"{fp}.json", _PROFILE_FORMAT, entry)

    # --- job records -------------------------------------------------------------------------------
    def record(self, rec: JobRecord) -> Path:
        """Store a finished job's record. Raises StateError when the directory cannot be written."""
        if not _SAFE_ID.match(rec.job_id):
            raise ConfigError(f"job id {rec.job_id!r} cannot name a file", hint="use letters, digits, '_', '.', '-'")
        return self._write(HISTORY_JOBS, f"{rec.job_id}.json", _JOB_FORMAT, rec)

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
        return [e.name[: -len(".json")] for e in self._tree.entries(HISTORY_JOBS)
                if _SAFE_ID.match(e.name[: -len(".json")])]

    def list(self, limit: int | None = None) -> builtins.list[JobRecord]:
        """Finished jobs of every user, newest end first; unreadable files are skipped with a warning.

        With ``limit``, only the newest files (by modification time) are read until ``limit`` records parse.
        """
        if limit is not None and (not is_integer(limit) or limit < 0):
            raise ConfigError(f"limit must be an integer >= 0, got {limit!r}")
        entries = [e for e in self._tree.entries(HISTORY_JOBS) if _SAFE_ID.match(e.name[: -len(".json")])]
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

    def length_predictions(self, limit: int = 100) -> builtins.list[tuple[float, float]]:
        """``(predicted_s, duration_s)`` of this user's latest ``limit`` completed runs (exit code 0) whose launch
        predicted their length (:attr:`JobRecord.predicted_s`), newest last: how far the queue's expected lengths
        were off. Only this user's own files are read (another's are their word alone); the newest first, until
        ``limit`` pairs are found, and no more than ``4 * limit`` files (every launch asks: a long history of runs
        without a prediction must not slow it down)."""
        if not is_integer(limit) or limit < 0:
            raise ConfigError(f"limit must be an integer >= 0, got {limit!r}", hint="e.g. length_predictions(100)")
        if self.own_dir_problem() is not None:
            return []
        entries = [e for e in self._tree.entries(HISTORY_JOBS)
                   if e.uid == self._tree.uid and e.user == self._tree.user and _SAFE_ID.match(e.name[: -len(".json")])]
        entries.sort(key=lambda e: (e.mtime, e.name), reverse=True)
        found: builtins.list[JobRecord] = []
        for e in entries[: 4 * limit]:
            if len(found) >= limit:
                break
            rec = self._parse_record(e.user, e.uid, e.name)
            if rec is not None and rec.exit_code == 0 and rec.predicted_s is not None:
                found.append(rec)
        found.sort(key=lambda r: (r.ended, r.started, r.job_id))
        return [(float(r.predicted_s), float(r.duration_s)) for r in found]  # type: ignore[arg-type]

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
            self._squatted = self._tree.own_problem((HISTORY_JOBS, HISTORY_PROFILES))
            if self._squatted is not None:
                logger.warning("%s", with_hint(f"your history directory is not your own: {self._squatted}, so your "
                                               "jobs and profiles are not recorded", self._squat_hint()))
        return self._squatted

    def _squat_hint(self) -> str:
        return "run `ecolaunch init-state`: it moves the directory aside and makes you a fresh one" \
            if self._tree.uid == 0 else SQUAT_HINT

    # --- internals ---------------------------------------------------------------------------------
    def _parse_record(self, user: str, uid: int, name: str) -> JobRecord | None:
        rec = self._read(user, uid, HISTORY_JOBS, name, _JOB_FORMAT, JobRecord)
        if rec is None:
            return None
        where = self.layout.history_user(user) / HISTORY_JOBS / name
        if uid != 0 and rec.user not in (user, account_name(uid)):
            # root's launcher may record a job for anyone; a user only for themselves
            logger.warning("ignoring history record %s: it names user %r but belongs to %s", where, rec.user, user)
            return None
        absurd = implausible_energy(rec)
        if absurd is not None:
            logger.warning("ignoring history record %s: %s", where, absurd)
            return None
        self._owners[rec.job_id] = uid
        return rec

    def _profile_entry(self, user: str, uid: int, fp: str) -> ProfileEntry | None:
        """``user``'s stored entry of fingerprint ``fp``, its hints validated (:func:`launch_hints`), or None."""
        entry = self._read(user, uid, HISTORY_PROFILES, f"{fp}.json", _PROFILE_FORMAT, ProfileEntry)
        return None if entry is None else dataclasses.replace(entry, fingerprint=fp, hints=launch_hints(entry.hints))

    def _read(self, user: str, uid: int, kind: str, name: str, fmt: str, type_: type[_R]) -> _R | None:
        """The record in ``<user>/<kind>/<name>``, decoded by :func:`ecolaunch.jobmodel.codec.decode_record`; None when
        missing, refused (a link, a FIFO, a device, too large, not this user's) or not a valid record: warned."""
        where = self.layout.history_user(user) / kind / name
        try:
            limit = MAX_RECORD_BYTES if kind == HISTORY_JOBS else MAX_PROFILE_BYTES
            raw = self._tree.read(user, uid, kind, name, limit)
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
        if len(data) > (MAX_RECORD_BYTES if kind == HISTORY_JOBS else MAX_PROFILE_BYTES):
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
