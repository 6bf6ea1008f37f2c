"""The policy interface: ``decide(state, job, rules) -> Decision | None``.

A policy reads the state graph (already reconciled against live GPUs) and a :class:`JobRequest`, and
returns a :class:`Decision` or ``None`` when nothing fits now (the launcher then waits or fails). The
launcher and the simulator call the same ``decide``; a policy never touches devices, files or clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ecolaunch.admin.rules import Rules
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.state.graph import StateGraph


#: how a decision's reasons name the curve a job's cap is chosen on (:attr:`JobRequest.curve_named`)
MEASURED_CURVE = "the job's measured curve"


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a policy needs to know about the job asking for GPUs."""

    id: str
    user: str
    host: str
    #: GPUs wanted (one per worker); with ``elastic`` this is the minimum
    nproc: int
    #: ``--nproc-per-node gpu|auto``: take as many GPUs as the policy grants (at least ``nproc``)
    elastic: bool = False
    #: peak memory per GPU in MiB when known (profile, history or a hint), else None
    memory_mib: int | None = None
    #: the job's slowdown bound in percent, already clipped to the admin policy
    allowed_slowdown_pct: float = 10.0
    #: the job's profile when known
    profile: Profile | None = None
    #: restrict placement to these GPU UUIDs (e.g. an allocation given through CUDA_VISIBLE_DEVICES)
    allowed_gpus: tuple[str, ...] | None = None
    #: what set ``allowed_gpus``, for the messages that name it (``CUDA_VISIBLE_DEVICES``, a Slurm allocation)
    allowed_by: str = "CUDA_VISIBLE_DEVICES"
    #: the user's Unix groups (for GPUs the admin reserved for a group)
    groups: tuple[str, ...] = ()
    #: how the decision's reasons name the curve of ``profile`` (a first launch told a prediction says so,
    #: :class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves`)
    curve_named: str = MEASURED_CURVE
    #: how long the job is expected to run alone and how many steps it marks (each None: unknown), from its declared
    #: length, else its latest completed runs (:func:`~ecolaunch.launch.pipeline.expected_length`)
    expected_s: float | None = None
    expected_iterations: int | None = None
    #: the sharing contract (:mod:`ecolaunch.policy.contract`): start now on a shared GPU when that finishes the job
    #: sooner than waiting for GPUs of its own, its run-time bound waived for that
    share_if_sooner: bool = False
    #: when the decision is made (seconds since the epoch, the state's clock): what remaining times count from
    decided_at: float | None = None
    #: the waiting jobs this job's slowdown would delay (:meth:`~ecolaunch.state.graph.StateGraph.waiting_share`),
    #: which its cap choice weighs under ``[energy] wait_weight`` (:func:`~ecolaunch.jobmodel.capchoice.queue_eta`)
    waiting_share: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    """Which GPUs the job gets, who it shares them with, the caps, the predictions and the reasons."""

    policy: str
    gpus: tuple[str, ...]
    power_caps_w: dict[str, float | None]
    colocated_with: dict[str, list[str]]
    reasons: list[str]
    predicted: dict[str, Any] = field(default_factory=dict)
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    #: under a power budget (``[power] max_total_w``): new budget caps (W) for GPUs of jobs already running, chosen
    #: jointly with this job's (:mod:`ecolaunch.policy.budgeted`); booking records them, their launchers apply them
    recaps_w: dict[str, float] = field(default_factory=dict)

    def to_dict(self, cuda_visible_devices: str | None = None) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "gpus": list(self.gpus),
            "cuda_visible_devices": cuda_visible_devices,
            "power_caps_w": dict(self.power_caps_w),
            "colocated_with": {u: list(j) for u, j in self.colocated_with.items()},
            "predicted": dict(self.predicted),
            "reasons": list(self.reasons),
            "alternatives": list(self.alternatives),
            "recaps_w": dict(self.recaps_w),
        }


class Policy(Protocol):
    """A placement policy. ``name`` is what ``--policy`` selects."""

    name: str

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None: ...
