"""What a launch does differently when its job spans several nodes: meet, follow the plan, stop while waiting.

What lives here: :class:`SingleNode` and :class:`MultiNode` (the node role a run of the pipeline asks at each step),
:func:`multi_node` (whether the launch's rendezvous spans nodes), :func:`meet_nodes` and
:func:`finish_nodes` (the meeting and the job's total, with what the launch prints about them), :func:`at_default`
and :func:`follow_leader` (a node that does not set caps: its GPUs at their default limit, or at the leader's caps
through :class:`CapFollower`), :class:`PublishedCaps` (the leader's cap setter, which publishes each cap),
:func:`leave_stuck` (a stop signal inside torch's rendezvous). What does not: the meeting's protocol, the plan and the
store (:mod:`ecolaunch.launch.nodes`), the launch's steps (:mod:`ecolaunch.launch.pipeline`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
from collections.abc import Callable, Mapping

from ecolaunch.launch import exitcodes
from ecolaunch.caps.job import CapFollower, JobCaps, PublishedCaps
from ecolaunch.launch.nodes import POLL_S, Meeting, meet
from ecolaunch.run.observer import RunObserver
from ecolaunch.launch.session import Placement, Session
from ecolaunch.launch.torchrun import Rendezvous, TorchrunArgs, WorkerOutcome, rendezvous_of
from ecolaunch.policy.waiting import Waiting
from ecolaunch.state.graph import Job

logger = logging.getLogger(__name__)

Message = Callable[[str], None]


def multi_node(args: TorchrunArgs) -> Rendezvous | None:
    """The rendezvous of a job that may span several nodes (``--nnodes`` above 1), else None."""
    from torch.distributed.run import parse_min_max_nnodes  # lazy: torch is loaded already (the parser is torch's)

    if args.standalone or parse_min_max_nnodes(args.nnodes)[1] <= 1:
        return None
    return rendezvous_of(args)


class SingleNode:
    """How one run of a job on one node goes: the pipeline's steps as they are. :class:`MultiNode` wraps each step
    for a job over several nodes; the pipeline (:class:`ecolaunch.launch.pipeline._Run`) asks its node role, never
    which of the two it has."""

    #: whether this node sets (and profiles, and closes the loop on) its own GPUs' caps
    sets_caps = True
    #: whether this node's pace-matching acts alone on its own ranks' waits
    paces = True

    def info(self) -> dict[str, str]:
        """What the job's request records of its nodes (nothing here)."""
        return {}

    def place(self, session: Session, job: Job, timeout_s: float | None,
              on_wait: Callable[[Waiting, float], None]) -> Placement:
        """Wait in the queue until the job is placed (:meth:`~ecolaunch.launch.session.Session.wait_for_placement`)."""
        return session.wait_for_placement(job.id, timeout_s, on_wait)

    def meet(self, job: Job, placement: Placement) -> None:
        """Agree the run with the job's other nodes (none here)."""

    def set_cap(self, caps: JobCaps, placement: Placement) -> Callable[[str, float], float]:
        """The run's cap setter: the node's own (its ``JobCaps``, not refused)."""
        return caps.set_cap

    def peer_waits(self) -> Callable[[Mapping[int, float]], float | None] | None:
        """How long the job's other nodes waited per step (None: no other nodes)."""
        return None

    def following(self, caps: JobCaps, placement: Placement) -> contextlib.AbstractContextManager[object]:
        """What runs beside the workers (nothing here)."""
        return contextlib.nullcontext()

    def on_stuck(self, session: Session, job: Job, caps: JobCaps) -> Callable[[int], None] | None:
        """What a stop signal does inside torch's rendezvous (no rendezvous to wait in here)."""
        return None

    def on_round(self, observer: RunObserver) -> Callable[[object, int, int], None] | None:
        """What follows each round of torch's c10d rendezvous (no rounds here)."""
        return None

    def finish(self, observer: RunObserver, outcome: WorkerOutcome) -> None:
        """What the node tells the others at the end (nothing here)."""


class MultiNode(SingleNode):
    """A run of a job over several nodes: meet the others once placed (:func:`meet_nodes`), then lead the caps
    (:class:`PublishedCaps`), follow them (:func:`follow_leader`) or run at the default limit; leave when stopped in
    torch's rendezvous (:func:`leave_stuck`); agree each c10d round; send this node's energy to the leader."""

    def __init__(self, rdzv: Rendezvous, plan_wait_s: float, host: str, message: Message) -> None:
        self.rdzv, self.plan_wait_s, self.host, self.message = rdzv, plan_wait_s, host, message
        #: the last run's meeting with the other nodes
        self.meeting: Meeting | None = None
        #: the job of another node of this job on this host whose GPUs this node shares (None: its own GPUs)
        self.shares: Job | None = None

    @property
    def rendezvous(self) -> str:
        """The job's rendezvous, by which another launcher of the same job on this host finds it."""
        return f"{self.rdzv.backend} {self.rdzv.endpoint} {self.rdzv.run_id}"

    def info(self) -> dict[str, str]:
        return {"rendezvous": self.rendezvous}

    def place(self, session: Session, job: Job, timeout_s: float | None,
              on_wait: Callable[[Waiting, float], None]) -> Placement:
        """The host's first launcher of this job is placed as any job; a later one shares its GPUs, as torchrun's
        workers of two nodes on one host do (:meth:`~ecolaunch.launch.session.Session.try_join`; its decision line
        says so): two launchers that each waited for GPUs of their own would wait for each other until the
        rendezvous timed out."""
        self.shares = session.node_sibling(job.id, self.rendezvous)
        if self.shares is None:
            return super().place(session, job, timeout_s, on_wait)
        sibling = self.shares.id
        return session.wait_for_placement(job.id, timeout_s, on_wait, attempt=lambda: session.try_join(job.id, sibling))

    def meet(self, job: Job, placement: Placement) -> None:
        self.meeting = meet_nodes(self.rdzv, job, placement, self.plan_wait_s, self.host, self.message)

    @property
    def sets_caps(self) -> bool:
        """The node that leads the job's caps sets them, unless it shares another node's GPUs (whose caps are that
        node's)."""
        return self.meeting.leads_caps and self.shares is None

    @property
    def paces(self) -> bool:
        return self.meeting.paces_alone

    def set_cap(self, caps: JobCaps, placement: Placement) -> Callable[[str, float], float]:
        if not self.sets_caps:
            return caps.set_cap
        decision = placement.decision
        published = PublishedCaps(self.meeting, caps.set_cap, decision.gpus, decision.power_caps_w)
        caps.on_follow = published.follow  # what the leader's budget changes, every node follows
        published.follow(caps.wishes())  # and what it changed since the booking, before the follower looked
        return published

    def peer_waits(self) -> Callable[[Mapping[int, float]], float | None] | None:
        return self.meeting.share_waits if self.meeting.paces_alone else None

    def following(self, caps: JobCaps, placement: Placement) -> contextlib.AbstractContextManager[object]:
        if self.meeting.follows_caps and not caps.refused:
            return follow_leader(self.meeting, caps, placement, self.message)
        return contextlib.nullcontext()

    def on_stuck(self, session: Session, job: Job, caps: JobCaps) -> Callable[[int], None] | None:
        return leave_stuck(session, job, caps, self.message)

    def on_round(self, observer: RunObserver) -> Callable[[object, int, int], None] | None:
        """After each round of torch's c10d rendezvous: agree the round's plan with the nodes
        (:meth:`~ecolaunch.launch.nodes.Meeting.new_round`) and start pacing afresh (the workers restart)."""
        meeting = self.meeting

        def on_round(store, group_rank: int, nodes: int) -> None:
            for line in (*meeting.new_round(store, group_rank, nodes), *observer.new_round()):
                self.message(f"job {meeting.me.job_id}: {line}")
        return on_round

    def finish(self, observer: RunObserver, outcome: WorkerOutcome) -> None:
        done = observer.summary()
        finish_nodes(self.meeting, done.energy_j, done.duration_s, outcome, self.message)


def meet_nodes(rdzv: Rendezvous, job: Job, placement: Placement, wait_s: float, host: str,
               message: Message) -> Meeting:
    """Meet the job's other nodes (:func:`~ecolaunch.launch.nodes.meet`) and say what was agreed; a stop signal
    while waiting says that the job leaves (its booking is released by the caller's ``finally``)."""
    names = [placement.gpus[u].name for u in placement.decision.gpus if u in placement.gpus]
    try:
        meeting = meet(rdzv, job.id, placement.decision.gpus, names, wait_s=wait_s, host=host)
    except BaseException as stop:
        if not isinstance(stop, Exception):  # a stop signal's exception (the CLI's), not an error
            message(f"job {job.id} ({job.name}) stopped while waiting for its other nodes; its GPUs are released")
        raise
    for line in meeting.lines:
        message(f"job {job.id}: {line}")
    return meeting


def finish_nodes(meeting: Meeting, energy_j: float | None, duration_s: float, outcome: WorkerOutcome,
                 message: Message) -> None:
    """This node's energy to the leader; the leader says the whole job's (each node's share with ``-v``)."""
    lines = meeting.finish(energy_j, duration_s, outcome.exit_code)
    if lines:
        message(lines[0])
    for line in lines[1:]:
        logger.info("%s", line.strip())


def at_default(placement: Placement) -> Placement:
    """The placement with every GPU at its default limit (a node of a multi-node job that does not set caps)."""
    decision = dataclasses.replace(placement.decision, power_caps_w=dict.fromkeys(placement.decision.gpus))
    return dataclasses.replace(placement, decision=decision)


def follow_leader(meeting: Meeting, caps: JobCaps, placement: Placement, message: Message) -> CapFollower:
    """A follower node: the leader's caps on this node's GPUs, by position, through this node's own ``JobCaps``."""
    gpus = placement.decision.gpus

    def apply(position: int, watts: float | None) -> float | None:
        if position >= len(gpus):
            return None
        gpu = placement.gpus[gpus[position]]
        target = watts if watts is not None else (gpu.power_limit_default_w or gpu.power_limit_max_w)
        return None if target is None else caps.set_cap(gpu.uuid, target)

    return CapFollower(meeting, apply, message, poll_s=POLL_S)


def leave_stuck(session: Session, job: Job, caps: JobCaps | None, message: Message) -> Callable[[int], None]:
    """What a stop signal does while torch's rendezvous waits for the other nodes (in C++, where the CLI's handler
    cannot run: :class:`~ecolaunch.launch.torchrun._StopWatch`): release the job and its caps, say so, and end the
    process with 128+N as the handler would have."""

    def leave(signum: int) -> None:
        try:
            message(f"job {job.id} ({job.name}) stopped by {signal.Signals(signum).name} while waiting for its other "
                    f"nodes at torch's rendezvous; its GPUs are released; exit {exitcodes.from_signal(signum)}")
            session.release(job.id)
            if caps is not None:
                caps.release()
        finally:
            os._exit(exitcodes.from_signal(signum))

    return leave


def exit_stuck(signum: int) -> None:
    """A launch that booked nothing, stopped while torch's rendezvous waits: end as the CLI's handler would."""
    os._exit(exitcodes.from_signal(signum))
