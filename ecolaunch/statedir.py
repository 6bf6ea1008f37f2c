"""The state directory's tree: every path in it, named once (:class:`StateLayout`).

What lives here: the names of the entries (module constants), :class:`StateLayout` (one property or method per path,
its docstring saying what the path holds and who writes it), and :func:`tree`, the rows of ``docs/architecture.md``'s
generated table (``python -m tests.doclists``). What does not: which directory is the state directory
(``ecolaunch.config.default_state_dir``), modes, owners and trust checks (``ecolaunch.safefs``, ``ecolaunch.state.layout``,
``ecolaunch.state.init``), and what the files mean. In the base beside ``safefs``, because every layer names its paths
here.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AGENT_FILE", "CALIBRATION_DIR", "CORRUPT_PREFIX", "GNN_DIR", "GNN_MANIFEST_FILE", "GNN_WEIGHTS_FILE",
           "HISTORY_DIR", "HISTORY_JOBS", "HISTORY_PROFILES", "HOOKS_DIR", "JOBS_DIR", "LEDGER_FILE", "LOCK_FILE",
           "SIM_GPUS_FILE", "STATE_FILE", "StateLayout", "tree"]

STATE_FILE = "state.json"
#: a broken ``state.json`` moved aside is ``state.json.corrupt-<time>-<pid>-<random>``
CORRUPT_PREFIX = f"{STATE_FILE}.corrupt-"
LOCK_FILE = "state.lock"
JOBS_DIR = "jobs"
HOOKS_DIR = "hooks"
HISTORY_DIR = "history"
#: the two directories of ``history/<user>/`` (a user directory never takes these names: ``state.userdirs``)
HISTORY_JOBS = "jobs"
HISTORY_PROFILES = "profiles"
LEDGER_FILE = "caps.json"
AGENT_FILE = "agent.json"
GNN_DIR = "gnn"
GNN_WEIGHTS_FILE = "weights.pt"
#: ``ecolaunch.learn.train`` writes it beside any weight file it writes
GNN_MANIFEST_FILE = "manifest.json"
CALIBRATION_DIR = "calibration"
SIM_GPUS_FILE = "simulated-gpus.json"


@dataclass(frozen=True, slots=True)
class StateLayout:
    """The paths of the state directory ``root``. Naming a path opens, creates and checks nothing.

    Every file name has an extension and no directory name has one (:func:`tree` relies on it).
    """

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def state_file(self) -> Path:
        """Hosts, GPUs, links, the queue counter and a budget's caps; rewritten in place by every member
        (``state.store``)."""
        return self.root / STATE_FILE

    def corrupt_copy(self, tail: str) -> Path:
        """A broken ``state.json`` moved aside, the newest 3 per owner kept; by whoever found it (``state.store``)."""
        return self.root / f"{CORRUPT_PREFIX}{tail}"

    @property
    def lock(self) -> Path:
        """The ``fcntl`` lock every transaction holds, never read; opened by every member (``state.store``)."""
        return self.root / LOCK_FILE

    @property
    def jobs(self) -> Path:
        """One file per queued or running job; sticky, made by ``ecolaunch init-state`` (root's), else by the state
        directory's owner (``state.store``)."""
        return self.root / JOBS_DIR

    def job_file(self, job_id: str) -> Path:
        """One job (its request, GPUs, caps, profile); written by its own launcher, as its user
        (``state.store``)."""
        return self.jobs / f"{job_id}.json"

    @property
    def hooks(self) -> Path:
        """One directory per run; sticky, made by ``ecolaunch init-state`` (root's), else by the first launcher
        (``profile.channel``)."""
        return self.root / HOOKS_DIR

    def run_hooks(self, run: str) -> Path:
        """Names one run's hook directory: its launcher makes ``<this>-<random>/`` (``0700``) for the workers' step
        marks and hints (``profile.channel``)."""
        return self.hooks / run

    @property
    def history(self) -> Path:
        """One directory per user; sticky, made by ``ecolaunch init-state`` (root's), else by the first launcher
        (``state.userdirs``)."""
        return self.root / HISTORY_DIR

    def history_user(self, user: str) -> Path:
        """A user's job records and profiles; written by that user's launchers alone (``profile.history``)."""
        return self.history / user

    def history_job(self, user: str, job_id: str) -> Path:
        """One finished job's record, written once by its launcher (``profile.history``)."""
        return self.history_user(user) / HISTORY_JOBS / f"{job_id}.json"

    def history_profile(self, user: str, fingerprint: str) -> Path:
        """The latest profile of a job fingerprint, replaced by each launch that measures it
        (``profile.history``)."""
        return self.history_user(user) / HISTORY_PROFILES / f"{fingerprint}.json"

    @property
    def ledger(self) -> Path:
        """Each GPU's cap before ecolaunch changed it; written by root: the cap agent or a root launcher
        (``caps.keeper``)."""
        return self.root / LEDGER_FILE

    @property
    def agent_file(self) -> Path:
        """The cap agent's heartbeat (pid, start time, host); written by the agent, as root (``caps.agent``)."""
        return self.root / AGENT_FILE

    @property
    def gnn(self) -> Path:
        """The lab's trained GNN; made by ``ecolaunch init-state`` (root's), else by the first ``ecolaunch policy
        train``."""
        return self.root / GNN_DIR

    @property
    def gnn_weights(self) -> Path:
        """The ``gnn`` policy's weights, used when trusted; written by ``ecolaunch policy train``
        (``cli.policy_cmd``)."""
        return self.gnn / GNN_WEIGHTS_FILE

    @property
    def gnn_manifest(self) -> Path:
        """How those weights were trained; written with them by ``ecolaunch policy train`` (``learn.train``)."""
        return self.gnn / GNN_MANIFEST_FILE

    @property
    def calibration(self) -> Path:
        """``ecolaunch calibrate``'s results; made by ``ecolaunch init-state`` (root's), else by the first
        ``ecolaunch calibrate``."""
        return self.root / CALIBRATION_DIR

    def calibration_result(self, model_file: str) -> Path:
        """One GPU model's results; written by ``ecolaunch calibrate`` (``calibrate.results``)."""
        return self.calibration / model_file

    @property
    def simulated_gpus(self) -> Path:
        """What simulated GPUs report (simulated machines only); rewritten in place by every member
        (``devices.simulated``)."""
        return self.root / SIM_GPUS_FILE

    @property
    def simulated_gpus_lock(self) -> Path:
        """The lock of that file, beside it; opened by every member (``devices.simulated``)."""
        return self.simulated_gpus.with_name(f"{SIM_GPUS_FILE}.lock")


#: how :func:`tree` shows a method's argument, where ``<argument>`` would say too little
_SHOWN = {"tail": "<time>-<pid>-<random>", "run": "<job id>[-profile]", "model_file": "<model>[.simulated].json"}


def tree() -> list[tuple[str, str]]:
    """``(path, what it holds and who writes it)`` for every path :class:`StateLayout` names, in its order: a path
    relative to the state directory, a directory ending in ``/``, a method's arguments as ``<argument>``."""
    root = Path("/")
    layout = StateLayout(root)
    rows = []
    for name, member in vars(StateLayout).items():
        if isinstance(member, property):
            path = member.fget(layout)
            doc = member.fget.__doc__
        elif inspect.isfunction(member) and not name.startswith("_"):
            args = [_SHOWN.get(p, f"<{p.replace('_', ' ')}>") for p in list(inspect.signature(member).parameters)[1:]]
            path = member(layout, *args)
            doc = member.__doc__
        else:
            continue
        shown = path.relative_to(root).as_posix() + ("" if path.suffix else "/")
        rows.append((shown, " ".join((doc or "").split())))
    return rows
