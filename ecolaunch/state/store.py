"""The file-locked store of the state graph, safe for a directory shared by several Unix users.

What lives here: :class:`StateStore`, which owns three paths of a state directory: ``state.json`` (shared, rebuilt
from the live GPUs at will; a broken one moved aside, at most :data:`KEEP_CORRUPT_COPIES` copies kept),
``state.lock`` (the ``fcntl`` lock every transaction holds) and ``jobs/`` (one file per job, owned by its user). A
transaction locks, loads and validates, yields the :class:`StateGraph`, and writes back what changed, atomically.
Also :func:`check_state_dir` (the checks made on every run). What does not: every path's name
(:class:`ecolaunch.statedir.StateLayout`), the admin's layout (:mod:`ecolaunch.state.layout`). Who may write what
and which job file counts: docs/threat-model.md#who-can-write-what.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ecolaunch.errors import StateError
from ecolaunch.state.graph import MAX_SEQ, IgnoredJob, Job, StateGraph, job_from_dict, job_to_dict
from ecolaunch.state.reconcile import ProcessTable, PsutilProcessTable, account_name, launcher_alive
from ecolaunch.safefs import (RECORD_MODE, SHARED_DIR_MODE, SHARED_FILE_MODE, RefusedFile, open_lock, read_at, read_file,
                              shared_dir_mode, write_file, write_in_place)
from ecolaunch.statedir import CORRUPT_PREFIX, StateLayout

logger = logging.getLogger(__name__)

JOB_SCHEMA = "ecolaunch.job"
JOB_VERSION = 1
DEFAULT_LOCK_TIMEOUT_S = 60.0
#: documents larger than this are refused unread (a hostile user could otherwise make every launcher parse gigabytes)
MAX_STATE_BYTES = 8 * 1024 * 1024
MAX_JOB_BYTES = 256 * 1024
#: job files read per uid (in file-name order): far more jobs than one user queues or runs on a host, and a bound on
#: what a member who fills ``jobs/`` with files costs every transaction
MAX_JOB_FILES_PER_UID = 256
#: job ids become file names: no separators, no leading dot
JOB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: moved-aside copies of a broken ``state.json`` (``state.json.corrupt-*``) kept per owner; older ones are removed
KEEP_CORRUPT_COPIES = 3


class StateStore:
    """Transactions on the state graph of one state directory.

    Args:
        directory: the state directory; created (group-shared, setgid) when missing, checked when present.
        lock_timeout_s: how long a transaction waits for the lock before raising StateError.
        on_lock_wait: called with the seconds each transaction waited for the lock (benchmarks use it).
        group: the Unix group that must own the directory (the policy's ``[state] group``), or None.
        processes: the process table that proves another user's launcher dead (psutil by default).
    """

    def __init__(
        self,
        directory: Path,
        *,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        on_lock_wait: Callable[[float], None] | None = None,
        group: str | None = None,
        processes: ProcessTable | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.layout = StateLayout(self.directory)
        self.path = self.layout.state_file
        self.jobs_dir = self.layout.jobs
        self._lock_timeout_s = lock_timeout_s
        self._on_lock_wait = on_lock_wait
        self._group = group
        self._processes = processes or PsutilProcessTable()
        self._checked = False
        self._warned: set[object] = set()

    def __repr__(self) -> str:
        return f"StateStore({str(self.directory)!r})"

    # --- public API ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[StateGraph]:
        """Lock, load, yield the graph for changes, and write back what changed.

        An exception inside the block discards the changes (the files are left as they were). Raises StateError
        when the block changed or removed another user's job whose launcher is alive.
        """
        with self._locked():
            graph = self._load()
            before_state = _shared_part(graph)
            before_jobs = dict(graph.jobs)
            # serialized at once: job_to_dict shares nested dicts with the job, which the block may change in place
            before_docs = {jid: _dumps(job_to_dict(j)) for jid, j in graph.jobs.items()}
            yield graph
            self._commit(graph, before_state, before_jobs, before_docs)

    def read(self) -> StateGraph:
        """A consistent snapshot of the graph (taken under the lock, written back only if it was corrupt)."""
        with self.transaction() as graph:
            return graph

    def read_unlocked(self) -> StateGraph:
        """A snapshot taken without the lock: each file is read whole (writes are atomic renames), but two files
        may come from different transactions. The cap agent uses it when a hostile holder keeps the lock."""
        self._prepare()
        graph = self._load(move_aside=False)
        return graph

    def job_file(self, job_id: str) -> Path:
        """Where ``job_id``'s file lives."""
        return self.layout.job_file(job_id)

    def hold_job_file(self, job_id: str) -> int | None:
        """Open this process's own job file and keep it open (the caller closes the descriptor when the job ends):
        the kernel then names this process as the job's launcher (``/proc/<pid>/fd``), which is what ``ecolaunch
        cancel`` believes before it signals anyone (``launch.cancel``). None when the file cannot be opened."""
        try:
            fd = os.open(self.job_file(job_id), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            logger.debug("cannot hold the file of job %s open: %s", job_id, e)
            return None
        return fd

    # --- loading ---------------------------------------------------------------------------------
    def discard_job_file(self, job_id: str) -> bool:
        """Remove this user's own file of ``job_id``, whatever it holds, under the lock (a launch that failed, or
        whose job vanished from the graph because its file was refused, must not leave it behind). Returns whether
        a file was removed; another user's file, a link or a directory is left alone."""
        if not JOB_ID.fullmatch(job_id) or not os.path.isdir(self.jobs_dir):
            return False
        with self._locked():
            name = self.layout.job_file(job_id).name
            dir_fd = os.open(self.jobs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    return False
                os.unlink(name, dir_fd=dir_fd)
                return True
            except FileNotFoundError:
                return False
            finally:
                os.close(dir_fd)

    def _load(self, *, move_aside: bool = True) -> StateGraph:
        graph = self._load_shared(move_aside)
        graph.jobs = self._load_jobs(graph.ignored)
        # the queue counter lives in the shared file, which anyone may reset: never hand out a seq already in use
        # (job seqs are at most MAX_SEQ, so the counter saturates there instead of handing out a refused seq)
        graph.next_seq = min(MAX_SEQ, max([graph.next_seq, *(j.seq + 1 for j in graph.jobs.values())]))
        if graph.next_seq >= MAX_SEQ:
            self._warn_once("seq", "the queue counter is at its bound (%d; a job file claims that seq); new jobs "
                            "queue by submission time", MAX_SEQ)
        return graph

    def _load_shared(self, move_aside: bool) -> StateGraph:
        try:
            raw, _ = read_file(self.path, MAX_STATE_BYTES)
        except FileNotFoundError:
            return StateGraph()
        except RefusedFile as e:
            return self._rebuild(str(e), move_aside)
        except OSError as e:
            # e.g. a mode-600 file a member planted: it holds nothing that is not rebuilt, so never fatal
            return self._rebuild(f"unreadable ({e.strerror or e})", move_aside)
        try:
            graph = StateGraph.from_dict(json.loads(raw))
        except (ValueError, TypeError, UnicodeDecodeError, RecursionError) as e:
            return self._rebuild(f"not a valid state document ({e})", move_aside)
        if graph.jobs:
            # a document from before per-user job files: its jobs carry no proof of ownership; running launchers
            # re-register theirs at their next heartbeat
            logger.warning("state file %s lists %d job(s) in the old shared format; ignoring them", self.path, len(graph.jobs))
            graph.jobs = {}
        return graph

    def _rebuild(self, why: str, move_aside: bool) -> StateGraph:
        if move_aside:
            # a random tail: two broken files in one second must not replace each other's copy (the pruning bounds them)
            aside = self.layout.corrupt_copy(f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{secrets.token_hex(3)}")
            try:
                os.replace(self.path, aside)  # renames a symlink itself, never its target
            except OSError as e:
                # a sticky directory: only the file's owner (or root) may move it. Nothing in it matters (the next
                # transaction rebuilds it from the driver), so carry on with a rebuilt state in memory
                self._warn_once(("state", why), "state file %s is %s and cannot be moved aside (%s); using a rebuilt "
                                "state (the admin should remove it, or run `ecolaunch init-state`)", self.path, why,
                                e.strerror or e)
            else:
                logger.warning("state file %s is %s; moved it to %s and rebuilt the state", self.path, why, aside)
                self._prune_corrupt_copies()
        return StateGraph()

    def _prune_corrupt_copies(self) -> None:
        """Keep this user's :data:`KEEP_CORRUPT_COPIES` newest moved-aside copies; remove the older ones."""
        try:
            dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            mine = []
            for name in os.listdir(dir_fd):
                if not name.startswith(CORRUPT_PREFIX):
                    continue
                with contextlib.suppress(OSError):
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    # only copies this user moved (a member's planted names are theirs to remove), never a directory
                    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                        mine.append((st.st_mtime_ns, name))
            for _, name in sorted(mine, reverse=True)[KEEP_CORRUPT_COPIES:]:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)
                    logger.info("removed %s, an old copy of a broken state file", self.directory / name)
        finally:
            os.close(dir_fd)

    def _warn_once(self, key: object, msg: str, *args: object) -> None:
        """A warning the first time, DEBUG afterwards: a launcher polls every 0.2 s and must not flood stderr."""
        if key in self._warned:
            logger.debug(msg, *args)
        else:
            self._warned.add(key)
            logger.warning(msg, *args)

    def _load_jobs(self, ignored: dict[str, IgnoredJob]) -> dict[str, Job]:
        try:
            dir_fd = os.open(self.jobs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise StateError(f"cannot open {str(self.jobs_dir)!r}: {e.strerror}", hint="check the directory (see ecolaunch's threat model)") from e
        jobs: dict[str, Job] = {}
        per_uid: dict[int, int] = {}
        try:
            for name in sorted(os.listdir(dir_fd)):
                if name.startswith(".") or not name.endswith(".json"):
                    continue
                try:
                    uid = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_uid
                except FileNotFoundError:
                    continue
                per_uid[uid] = per_uid.get(uid, 0) + 1
                if per_uid[uid] > MAX_JOB_FILES_PER_UID:
                    continue  # a member who fills jobs/ slows nobody's transaction down: her surplus is not read
                job = self._load_job_file(dir_fd, name, ignored)
                if job is not None:
                    jobs[job.id] = job
        finally:
            os.close(dir_fd)
        for uid, count in per_uid.items():
            if count > MAX_JOB_FILES_PER_UID:
                self._warn_once(("surplus", uid), "uid %d has %d job files in %s; reading the first %d only", uid,
                                count, self.jobs_dir, MAX_JOB_FILES_PER_UID)
                key = f"({count - MAX_JOB_FILES_PER_UID} more files of uid {uid})"
                ignored[key] = IgnoredJob(key, f"over the {MAX_JOB_FILES_PER_UID} job files one uid may have; not read")
        return jobs

    def _load_job_file(self, dir_fd: int, name: str, ignored: dict[str, IgnoredJob]) -> Job | None:
        where = self.jobs_dir / name
        jid = name[: -len(".json")]
        try:
            # the rule of trust: one link (a member cannot pass off a hard link of the root-owned, group-writable
            # state.lock or state.json as a root job), writable by its owner alone
            raw, st = read_at(dir_fd, name, MAX_JOB_BYTES, trusted=True)
            owner = st.st_uid
            doc = json.loads(raw)
            if not (isinstance(doc, dict) and doc.get("schema") == JOB_SCHEMA and doc.get("version") == JOB_VERSION):
                raise ValueError(f"not an {JOB_SCHEMA} document of version {JOB_VERSION}")
            job = job_from_dict(jid, doc.get("job"))
        except FileNotFoundError:
            return None  # removed between listing and opening
        except (OSError, ValueError, TypeError, UnicodeDecodeError, RecursionError) as e:
            self._warn_once((name, str(e)), "ignoring job file %s: %s", where, e)
            ignored[jid] = IgnoredJob(jid, f"refused: {e}")
            return None
        if owner not in (0, job.uid):
            self._warn_once((name, owner), "ignoring job file %s: it names uid %d but belongs to uid %d", where, job.uid, owner)
            ignored[jid] = IgnoredJob(jid, f"names uid {job.uid} but belongs to uid {owner}")
            return None
        if owner != 0:
            # the user is the file's owner, whatever name it claims (a root-written file is the admin's word)
            real = account_name(owner)
            if job.user != real:
                self._warn_once((name, "user"), "job file %s claims user %r; it belongs to %s (uid %d)", where,
                                job.user, real, owner)
                job.user = real
        return job

    # --- writing ---------------------------------------------------------------------------------
    def _commit(self, graph: StateGraph, before_state: dict, before_jobs: dict[str, Job], before_docs: dict[str, bytes]) -> None:
        euid = os.geteuid()
        after_docs = {jid: job_to_dict(j) for jid, j in graph.jobs.items()}
        changed = [jid for jid, d in after_docs.items() if before_docs.get(jid) != _dumps(d)]
        # a job set aside by this transaction (StateGraph.ignored) keeps its file: it is left out, not removed
        removed = [jid for jid in before_docs if jid not in after_docs and jid not in graph.ignored]
        graph.next_seq = min(graph.next_seq, MAX_SEQ)
        for jid in changed:  # check everything before writing anything
            job = graph.jobs[jid]
            if job.id != jid or not JOB_ID.fullmatch(jid):
                raise StateError(f"job id {jid!r} is not a valid job id", hint="job ids are letters, digits, '_', '-', '.'")
            if euid != 0 and job.uid != euid:
                raise StateError(
                    f"job {jid} belongs to {job.user} (uid {job.uid}); uid {euid} may not change it",
                    hint="a user can only change or remove their own jobs",
                )
        for jid in removed:
            job = before_jobs[jid]
            if euid != 0 and job.uid != euid and launcher_alive(self._processes, job):
                raise StateError(
                    f"job {jid} belongs to {job.user} (uid {job.uid}) and its launcher (pid {job.launcher_pid}) is alive",
                    hint="a user can only remove another user's job once its launcher is dead",
                )
        wrote = False
        if changed:
            self._ensure_jobs_dir()
        for jid in changed:
            doc = {"schema": JOB_SCHEMA, "version": JOB_VERSION, "job": after_docs[jid]}
            try:
                write_file(self.layout.job_file(jid), _dumps(doc), mode=RECORD_MODE)
            except PermissionError as e:
                raise StateError(f"cannot write job file {jid}.json: {e.strerror}", hint="a user can only change their own jobs") from e
            wrote = True
        for jid in removed:
            try:
                os.unlink(self.layout.job_file(jid))
                wrote = True
            except FileNotFoundError:
                pass
            except PermissionError:
                # another user's job whose launcher is dead: the sticky directory keeps its file, which every
                # reconcile ignores, until its owner, root or the cap agent removes it
                logger.debug("left the file of dead job %s (uid %d) in place", jid, before_jobs[jid].uid)
        if wrote or _shared_part(graph) != before_state:
            graph.generation += 1
            self._write_shared(graph)

    def _write_shared(self, graph: StateGraph) -> None:
        doc = graph.to_dict(include_jobs=False)
        data = _dumps(doc)
        try:
            try:
                write_file(self.path, data, mode=SHARED_FILE_MODE)
            except PermissionError:
                # a sticky state directory: only state.json's owner may rename over it. Everyone else rewrites it in
                # place (it is group-writable); a write torn by a crash reads as corrupt and is rebuilt, losing
                # nothing that the next reconcile does not restore
                write_in_place(self.path, data)
        except OSError as e:
            # a state.json planted by a member (a directory, or a file only they may write): it holds nothing that
            # the next transaction does not rebuild from the driver and the job files, so the transaction stands
            self._warn_once(("write", type(e).__name__), "cannot write the state file %s (%s); carrying on without "
                            "it (the admin should remove it, or run `ecolaunch init-state`)", self.path, e.strerror or e)

    # --- directory and lock ----------------------------------------------------------------------
    def _prepare(self) -> None:
        if self._checked:
            return
        try:
            if not os.path.lexists(self.directory):
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o770)
                with contextlib.suppress(OSError):  # mkdir drops setgid and sticky and applies the umask
                    os.chmod(self.directory, SHARED_DIR_MODE)
        except OSError as e:
            raise StateError(
                f"cannot create the state directory {str(self.directory)!r}: {e.strerror}",
                hint="set ECOLAUNCH_STATE_DIR to a directory you can write, or ask the lab admin",
            ) from e
        check_state_dir(self.directory, group=self._group)
        if not os.access(self.directory, os.W_OK | os.X_OK):
            if _read_only_mount(self.directory):  # no group membership helps there: say what is wrong
                raise StateError(
                    f"the state directory {str(self.directory)!r} is on a read-only file system",
                    hint="set ECOLAUNCH_STATE_DIR to a directory on a writable file system, or ask the lab admin to "
                    "mount it read-write",
                )
            raise StateError(
                f"the state directory {str(self.directory)!r} is not writable by this user",
                hint="ask the lab admin to add you to the directory's group, or set ECOLAUNCH_STATE_DIR",
            )
        if os.path.lexists(self.jobs_dir):
            check_jobs_dir(self.jobs_dir, os.stat(self.directory).st_uid)
        elif os.geteuid() in (0, os.stat(self.directory).st_uid):
            # created by root or the directory's owner, so that no member ends up owning everyone's job directory
            self._ensure_jobs_dir()
        self._checked = True

    def _ensure_jobs_dir(self) -> None:
        owner = os.stat(self.directory).st_uid
        if not os.path.lexists(self.jobs_dir) and os.geteuid() not in (0, owner):
            # created by a member, jobs/ would be theirs: they could remove anyone's job file (sticky rules spare a
            # directory's owner), so every other user refuses it. Only root or the state directory's owner creates it
            raise StateError(f"{str(self.jobs_dir)!r} does not exist, and a member may not create it for everyone",
                             hint="the lab admin should run: ecolaunch init-state (or set ECOLAUNCH_STATE_DIR to a "
                                  "directory of your own)")
        try:
            os.mkdir(self.jobs_dir, 0o700)
        except FileExistsError:
            pass
        else:
            # mkdir ignores the setgid bit and applies the umask; the sticky bit is what protects job files
            os.chmod(self.jobs_dir, shared_dir_mode(os.stat(self.directory).st_mode))
        check_jobs_dir(self.jobs_dir, os.stat(self.directory).st_uid)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._prepare()
        lock_path = self.layout.lock
        try:
            fd = open_lock(lock_path, SHARED_FILE_MODE)
        except RefusedFile as e:
            raise StateError(f"the state lock {str(lock_path)!r} is {e.why}; refusing to use it",
                             hint="remove it; someone may be trying to make ecolaunch write elsewhere") from e
        except OSError as e:
            raise StateError(f"cannot open the state lock {str(lock_path)!r}: {e.strerror}",
                             hint="check the state directory's permissions") from e
        try:
            waited = self._acquire(fd, lock_path)
            if self._on_lock_wait is not None:
                self._on_lock_wait(waited)
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the flock

    def _acquire(self, fd: int, lock_path: Path) -> float:
        start = time.perf_counter()
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return time.perf_counter() - start
            except BlockingIOError:
                if time.perf_counter() - start >= self._lock_timeout_s:
                    holders = describe_lock_holders(fd)
                    raise StateError(
                        f"waited {self._lock_timeout_s:g} s for the state lock {str(lock_path)!r}"
                        + (f", held by {holders}" if holders else ""),
                        hint="another ecolaunch process holds it" + (": if it hangs, its user or the lab admin may "
                             "stop it" if holders else "; if none is running, the file system may not support locks"),
                    ) from None
                time.sleep(delay)
                delay = min(0.05, delay * 2)


def lock_holders(fd: int, locks_file: str = "/proc/locks") -> list[int]:
    """The pids the kernel lists as holding a lock on the file open at ``fd`` (``/proc/locks``; empty where there
    is none, or no such file)."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    try:
        with open(locks_file, encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 fd:00:56789 0 EOF" (a blocked waiter's line starts "1: ->")
                if len(fields) >= 6 and fields[1] != "->" and fields[5] == key and fields[4].isdigit():
                    pids.append(int(fields[4]))
    except OSError:
        return []
    return sorted(set(pids))


def describe_lock_holders(fd: int) -> str:
    """``pid 1234 (uid 1001, python -m ecolaunch ...)`` for each holder the kernel names; empty when it names none."""
    out = []
    for pid in lock_holders(fd):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read(200).replace(b"\0", b" ").decode("utf-8", "replace").strip()
            cmd = "".join(c if c.isprintable() else "?" for c in cmd)  # its owner chose it: no terminal escapes
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            out.append(f"pid {pid}")
            continue
        out.append(f"pid {pid} (uid {uid}: {cmd or '?'})")
    return ", ".join(out)


# --- checks --------------------------------------------------------------------------------------
def check_state_dir(directory: Path, *, group: str | None = None) -> None:
    """Check (and, where this user owns it, repair) the mode of a state directory; raises StateError.

    Refused: a symbolic link owned by someone other than root or this user; a world-writable directory without the
    sticky bit (anyone could replace its files); a group-writable one without setgid (new files would get their
    creator's group, and colleagues could not read them) unless this user owns it and can fix it; a directory whose
    group is not ``group`` when the policy names one.
    """
    euid = os.geteuid()
    try:
        st = os.lstat(directory)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (0, euid):
                raise StateError(f"the state directory {str(directory)!r} is a symbolic link owned by uid {st.st_uid}",
                                 hint="point ECOLAUNCH_STATE_DIR at the real directory, or ask the lab admin")
            st = os.stat(directory)
    except FileNotFoundError as e:
        raise StateError(f"the state directory {str(directory)!r} does not exist", hint="create it or set ECOLAUNCH_STATE_DIR") from e
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"the state directory {str(directory)!r} is not a directory", hint="set ECOLAUNCH_STATE_DIR to a directory")
    mode = st.st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise StateError(f"the state directory {str(directory)!r} is world-writable without the sticky bit",
                         hint=f"any user could replace ecolaunch's files: chmod o-w {directory} (or chmod +t)")
    if mode & stat.S_IWGRP and not mode & stat.S_ISGID:
        if st.st_uid != euid:
            raise StateError(f"the state directory {str(directory)!r} is group-writable but not setgid",
                             hint=f"the lab admin should run: chmod g+s {directory}")
        mode |= stat.S_ISGID
        os.chmod(directory, stat.S_IMODE(mode))
    if mode & stat.S_IWGRP and not mode & stat.S_ISVTX:
        if st.st_uid == euid:
            os.chmod(directory, stat.S_IMODE(mode) | stat.S_ISVTX)
        else:
            # not fatal: without the sticky bit a member can swap jobs/ or the lock file (see the threat model)
            logger.warning("state directory %s is group-writable without the sticky bit; the admin should run: chmod +t %s", directory, directory)
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise StateError(f"the policy's state group {group!r} does not exist on this host",
                             hint="fix [state] group in the policy file, or create the group") from None
        if st.st_gid != gid:
            if st.st_uid == euid:
                with contextlib.suppress(OSError):
                    os.chown(directory, -1, gid)
                    return
            raise StateError(f"the state directory {str(directory)!r} belongs to group {st.st_gid}, not {group!r}",
                             hint=f"the lab admin should run: chgrp {group} {directory} && chmod 3770 {directory}")
    if st.st_uid not in (0, euid):
        logger.debug("state directory %s is owned by uid %d, who can remove any job file in it", directory, st.st_uid)


def check_jobs_dir(jobs_dir: Path, dir_owner: int) -> None:
    """The job directory must be a real directory, sticky when others can write it, owned by root, this user or the
    state directory's owner (a look-alike planted by another member after renaming the real one is refused)."""
    euid = os.geteuid()
    st = os.lstat(jobs_dir)
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"{str(jobs_dir)!r} is not a directory (a symbolic link is refused)",
                         hint="remove it; ecolaunch recreates it (see docs/threat-model.md)")
    if st.st_uid not in (0, euid, dir_owner):
        raise StateError(f"{str(jobs_dir)!r} belongs to uid {st.st_uid}, not to root or the state directory's owner",
                         hint=f"the lab admin should check it and run: chown root {jobs_dir} && chmod 3770 {jobs_dir}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        if st.st_uid != euid:
            raise StateError(f"{str(jobs_dir)!r} is writable by others but not sticky: anyone could remove any job",
                             hint=f"the lab admin should run: chmod +t {jobs_dir}")
        os.chmod(jobs_dir, stat.S_IMODE(st.st_mode) | stat.S_ISVTX)


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# --- files ---------------------------------------------------------------------------------------
def _shared_part(graph: StateGraph) -> dict[str, Any]:
    doc = graph.to_dict(include_jobs=False)
    doc.pop("jobs")
    doc.pop("generation")
    return doc


def _dumps(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

