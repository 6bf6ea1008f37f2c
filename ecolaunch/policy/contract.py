"""Sharing judged on completion time: the contract a job may accept, "start me now on a shared GPU if that finishes me
sooner than waiting for GPUs of my own".

What lives here: :func:`terms`, the two estimates of the decision (waiting, sharing now) at
``JobRequest.decided_at``, as :class:`Terms` (``known`` False with the reason in one line when either is unknown;
``Terms.deadline_s`` the contract's deadline). What does not: the decision (``policy.energy``), where
``expected_s`` comes from (``profile.history.ProfileEntry.expected_run``). The contract and how it is kept:
docs/queue.md#sharing-to-finish-sooner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ecolaunch.admin.rules import Rules
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.candidates import eligible_gpus
from ecolaunch.state.graph import StateGraph

__all__ = ["Terms", "terms"]


@dataclass(frozen=True, slots=True)
class Terms:
    """A contract job's estimates at its decision: seconds until GPUs of its own are free (``wait_s``), its
    expected length alone (``expected_s``), and whether both are known (else ``why`` says what is not)."""

    known: bool
    why: str
    wait_s: float = math.inf
    expected_s: float = math.inf
    bound_pct: float = 0.0

    @property
    def waiting_done_s(self) -> float:
        """Seconds from the decision until it would finish after waiting for GPUs of its own."""
        return self.wait_s + self.expected_s

    @property
    def deadline_s(self) -> float:
        """Seconds from the decision by which the contract promises it done: waiting x (1 + its bound)."""
        return self.waiting_done_s * (1.0 + self.bound_pct / 100.0)

    def sharing_done_s(self, throughput: float) -> float:
        """Seconds from the decision until it would finish sharing now at normalized ``throughput``."""
        return self.expected_s / throughput if throughput > 0 else math.inf

    def sooner(self, throughput: float) -> bool:
        """Whether sharing at ``throughput`` finishes it before waiting would."""
        return self.known and self.sharing_done_s(throughput) < self.waiting_done_s


def terms(state: StateGraph, job: JobRequest, rules: Rules) -> Terms:
    """The contract's estimates for ``job`` at ``job.decided_at`` (docs/queue.md#sharing-to-finish-sooner)."""
    if job.expected_s is None or job.expected_s <= 0:
        return Terms(False, "no sharing to finish sooner: this job never completed here, so nothing says how long "
                            "it runs")
    if job.decided_at is None:
        return Terms(False, "no sharing to finish sooner: the decision has no time to count from")
    free_at = []
    for gpu in eligible_gpus(state, job, rules):
        if gpu.foreign_pids:
            continue
        left = [j.remaining_s(job.decided_at) for j in state.jobs_on(gpu.uuid)]
        if any(t is None for t in left):  # it may free any time: no estimate of waiting holds
            return Terms(False, f"no sharing to finish sooner: nothing says when GPU {gpu.index} is free (a job on it "
                                "never completed here, or ran past what was expected)")
        free_at.append(max(left, default=0.0))
    if len(free_at) < job.nproc:
        return Terms(False, "no sharing to finish sooner: not enough GPUs it may use would ever be free")
    wait = sorted(free_at)[job.nproc - 1]
    return Terms(True, f"waiting for GPUs of its own: free in about {wait:.0f} s, then {job.expected_s:.0f} s alone",
                 wait, float(job.expected_s), job.allowed_slowdown_pct)
