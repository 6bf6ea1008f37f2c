"""A job over several machines: its launchers meet in torch's own rendezvous store, agree one plan, and add up the
job's energy at the end.

What lives here: :func:`meet` (every node's launcher, after it booked its GPUs and before torch's rendezvous),
:class:`Meeting` (what was agreed, the leader's caps as it publishes them, and :meth:`Meeting.finish`: each node's
energy to the leader, the job's total back), :class:`Plan`. What does not: where the rendezvous is
(:func:`ecolaunch.launch.torchrun.rendezvous_of`, read from torch's own ``config_from_args``), how a launch follows
the plan (:mod:`ecolaunch.launch.multinode`: the caps through the node's own ``JobCaps``), printing (the pipeline's
callbacks). The store, the meeting, the plan and the job's total: docs/multinode.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from ecolaunch._version import __version__
from ecolaunch.launch.torchrun import Rendezvous
from ecolaunch.validate import number_or_none

logger = logging.getLogger(__name__)

#: the meeting's protocol: a leader plans only with peers that speak the same one
PROTOCOL = 1
#: seconds between two looks at the store while waiting (a stop signal is handled between them)
POLL_S = 0.2
#: seconds one connection attempt to the store may take (a stop signal is handled between attempts)
CONNECT_TRY_S = 1.0
#: seconds the leader waits at the end for the other nodes' energy (they end with it: the job is synchronous), and
#: after a run that failed or was stopped (a node that died reports nothing: the leader does not wait long for it)
FINISH_WAIT_S = 30.0
FAILED_FINISH_WAIT_S = 3.0
#: seconds the leader still waits for missing peers once others are seen in torch's own rendezvous (an ecolaunch
#: peer between its arrival and its note, or one that gave up waiting)
FOREIGN_GRACE_S = 5.0
#: the key prefix of ecolaunch's keys in the rendezvous store
KEY_PREFIX = "ecolaunch"
#: seconds the nodes of a new rendezvous round wait for each other's notes (they leave torch's round together)
ROUND_WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What one node's launcher tells the others."""

    arrival: int
    host: str
    job_id: str
    gpus: tuple[str, ...]
    gpu_names: tuple[str, ...]
    node_rank: int | None = None
    version: str = __version__
    protocol: int = PROTOCOL

    @classmethod
    def from_dict(cls, info: Mapping[str, Any]) -> NodeInfo:
        """A note as :func:`meet` writes it (``asdict``), read back; TypeError/KeyError for one that is not."""
        return cls(**{**info, "gpus": tuple(info["gpus"]), "gpu_names": tuple(info["gpu_names"])})


@dataclass(frozen=True, slots=True)
class Plan:
    """What every node of the job does: its caps (``"leader"``: the leader's, as its profile, history and closed
    loop set them; ``"default"``: each node's default power limit, unprofiled), and why; the nodes it was agreed
    between (by arrival)."""

    leader: str
    nodes: tuple[NodeInfo, ...]
    caps: str = "default"
    why: str = ""

    @property
    def profile(self) -> bool:
        """Whether the job is profiled (by its leader, every node at the caps it probes)."""
        return self.caps == "leader"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "protocol": PROTOCOL})

    @classmethod
    def from_json(cls, text: bytes | str) -> Plan:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("protocol") != PROTOCOL:
            raise ValueError(f"a plan of protocol {data.get('protocol') if isinstance(data, dict) else None!r}, "
                             f"not {PROTOCOL}")
        nodes = tuple(NodeInfo.from_dict(n) for n in data["nodes"])
        if data["caps"] not in ("leader", "default"):
            raise ValueError(f"a plan's caps {data['caps']!r} are not 'leader' or 'default'")
        return cls(str(data["leader"]), nodes, str(data["caps"]), str(data["why"]))


@dataclass
class Meeting:
    """One node's part in a job's meeting: the plan agreed (or this node's own, when none could be), whether this
    node leads, and the store (None: it could not be reached)."""

    plan: Plan
    me: NodeInfo
    leader: bool
    store: Any = None
    #: whether the store's server runs in this process (it must outlive the leader's collection)
    hosting: bool = False
    #: the lines this node prints about the meeting (the pipeline prints them)
    lines: list[str] = field(default_factory=list)
    _seq: int = 0
    #: every node that took part in some round, by arrival (the leader adds up their energy at the end)
    seen: dict[int, NodeInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.seen.update({n.arrival: n for n in self.plan.nodes})
        self.seen.setdefault(self.me.arrival, self.me)

    @property
    def leads_caps(self) -> bool:
        """This node sets the job's caps (profile, history, closed loop) and publishes them."""
        return self.leader and self.plan.caps == "leader"

    @property
    def follows_caps(self) -> bool:
        """This node applies the leader's caps, decides none."""
        return not self.leader and self.plan.caps == "leader" and self.store is not None

    def publish_caps(self, caps_w: Sequence[float | None]) -> None:
        """The leader's caps now, by the position of its GPUs (each follower's GPU at that position follows)."""
        self._seq += 1
        self.store.set("caps", json.dumps({"seq": self._seq, "caps_w": list(caps_w)}))

    def leader_caps(self) -> tuple[int, list[float | None]] | None:
        """The caps the leader published last, with their sequence number; None before any."""
        if not self.store.check(["caps"]):
            return None
        data = json.loads(self.store.get("caps"))
        # another node's word: a cap that is no positive number is not a cap (the default limit, as None)
        return int(data["seq"]), [number_or_none(w, positive=True) for w in data["caps_w"]]

    @property
    def paces_alone(self) -> bool:
        """This node's GPUs run at its default limit and it paces them itself (:mod:`ecolaunch.profile.pacing`),
        against the other nodes' waits when the store is reachable."""
        return self.plan.caps == "default"

    def share_waits(self, spans_s: Mapping[int, float]) -> float | None:
        """Publish this node's ranks' mean all-reduce spans of the latest window (s) and return the shortest the
        other nodes published last (None before any, or when the store cannot be reached: pacing is then this node's
        alone). Another node's word: a span that is no finite number >= 0, or a note that is no JSON list, is not
        read."""
        if self.store is None:
            return None
        try:
            self.store.set(f"waits/{self.me.arrival}", json.dumps([float(v) for v in spans_s.values()]))
            spans = []
            for n in self.plan.nodes:
                key = f"waits/{n.arrival}"
                if n.arrival == self.me.arrival or not self.store.check([key]):
                    continue
                try:
                    data = json.loads(self.store.get(key))
                except ValueError:  # another node's word, not what it publishes: skipped
                    continue
                spans += [v for v in (number_or_none(w, lo=0) for w in (data if isinstance(data, list) else []))
                          if v is not None]
        except Exception as e:  # noqa: BLE001 - a peer's store that went away: this node paces alone
            logger.debug("the other nodes' waits could not be read: %s", e)
            return None
        return min(spans, default=None)

    def new_round(self, store, group_rank: int, nodes: int, *, wait_s: float = ROUND_WAIT_S,
                  sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
                  ) -> list[str]:
        """Torch's c10d rendezvous completed a round (``store``: that round's, which torch keeps apart from every
        other round's; ``group_rank``: this node's in the round; ``nodes``: the round's node count): agree the
        round's plan, and return the lines to print (none when the nodes are the plan's already).

        The round's group rank 0 decides, once every node of the round wrote its note (or ``wait_s`` passed): a
        job whose plan follows the leader's caps (a fixed node count, restarted) keeps them, with the round's
        nodes; any other runs every node at its default limit, pacing where the boards differ (an elastic job's
        nodes changed). The leader of the job's first meeting stays the one that adds up its energy. Never
        raises: a round whose plan cannot be agreed keeps this node at its default limit (pacing, when it runs,
        reads the waits of the nodes it knows)."""
        key = f"{KEY_PREFIX}/round"
        try:
            store.set(f"{key}/node/{group_rank}", json.dumps(asdict(self.me)))
            if group_rank == 0:
                names = [f"{key}/node/{r}" for r in range(nodes)]
                _wait_keys(store, names, wait_s, sleep, clock)
                members = [_node_note(store.get(n)) for n in names if store.check([n])]
                plan = self._round_plan([m for m in members if m is not None], nodes)
                store.set(f"{key}/plan", plan.to_json())
            elif _wait_keys(store, [f"{key}/plan"], wait_s, sleep, clock):
                plan = Plan.from_json(store.get(f"{key}/plan"))
            else:
                return [f"no plan from this rendezvous round's first node within {wait_s:g} s: this node keeps "
                        "its plan"]
        except (RuntimeError, ValueError, KeyError, TypeError) as e:  # the store, or another node's word
            return [f"this rendezvous round's plan could not be agreed ({e}): this node keeps its plan"]
        self.seen.update({n.arrival: n for n in plan.nodes})
        same = {(n.host, n.job_id) for n in plan.nodes} == {(n.host, n.job_id) for n in self.plan.nodes}
        if same and plan.caps == self.plan.caps:
            return []
        self.plan = plan
        return ["a new rendezvous round: " + _plan_line(plan, self.me, group_rank == 0)]

    def _round_plan(self, members: Sequence[NodeInfo], nodes: int) -> Plan:
        """The round's plan (:meth:`new_round`), decided by its group rank 0."""
        if self.plan.caps == "leader":  # a job of a fixed node count restarted: the leader's caps stand
            return dataclasses.replace(self.plan, nodes=tuple(members))
        why = ("the job's nodes changed at a rendezvous round: every node runs at its default power limit, "
               "unprofiled")
        if len(members) < nodes:
            why += f"; {nodes - len(members)} of the round's {nodes} nodes wrote no note (torchrun or an older ecolaunch)"
        if len({(n.gpu_names, len(n.gpus)) for n in members}) > 1 or any(len({*n.gpu_names}) > 1 for n in members):
            why += "; its nodes have different GPUs, so each node lowers the GPUs whose ranks wait for the slowest node"
        return Plan(self.me.host, tuple(members), "default", why)

    def finish(self, energy_j: float | None, wall_s: float, exit_code: int, *,
               wait_s: float | None = None, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> list[str]:
        """Write this node's energy (the job's share of its GPUs', J); the leader collects every node's and
        returns the lines of the job's total (the others return none). A node whose process runs the store's
        server waits for the leader to be done. Never raises: a peer that left only makes the total partial, and
        says so."""
        if self.store is None:
            return []
        if wait_s is None:
            wait_s = FINISH_WAIT_S if exit_code == 0 else FAILED_FINISH_WAIT_S
        try:
            self.store.set(f"energy/{self.me.arrival}", json.dumps(
                {"host": self.me.host, "energy_j": energy_j, "wall_s": wall_s, "exit_code": exit_code}))
            if not self.leader:
                if self.hosting:
                    _wait_keys(self.store, ["summary"], wait_s, sleep, clock)
                return []
            members = sorted(self.seen.values(), key=lambda n: n.arrival)
            keys = [f"energy/{n.arrival}" for n in members]
            _wait_keys(self.store, keys, wait_s, sleep, clock)
            shares = {f"{n.arrival}": (n.host, json.loads(self.store.get(f"energy/{n.arrival}")) if self.store.check(
                [f"energy/{n.arrival}"]) else None) for n in members}
            self.store.set("summary", "done")
        except Exception as e:  # noqa: BLE001 - the store's peer is gone: the job ran, only its total is lost
            logger.warning("the job's total energy could not be collected: %s", e)
            return []
        return total_lines(shares)


def total_lines(shares: Mapping[str, tuple[str, Mapping[str, Any] | None]]) -> list[str]:
    """The job's total energy and time over its nodes (``shares``: by arrival, the node's host and what it reported,
    None when nothing), then one line per node (what ``--verbose`` shows)."""
    known = {a: (h, s) for a, (h, s) in shares.items()
             if isinstance(s, Mapping) and number_or_none(s.get("energy_j"), lo=0) is not None
             and number_or_none(s.get("wall_s"), lo=0) is not None}
    missing = [f"{h} (node {a})" for a, (h, _) in shares.items() if a not in known]
    total_j = sum(s["energy_j"] for _, s in known.values())
    wall_s = max((s["wall_s"] for _, s in known.values()), default=0.0)
    head = (f"the whole job used {total_j / 1e3:.3g} kJ ({total_j / 3.6e3:.3g} Wh) over {len(shares)} nodes in "
            f"{wall_s:.1f} s")
    if missing:
        head += f"; not counted: {', '.join(missing)}, which reported no energy"
    return [head, *(f"node {a} ({h}): {s['energy_j'] / 1e3:.3g} kJ in {s['wall_s']:.1f} s, exit {s.get('exit_code')}"
                    for a, (h, s) in known.items())]


def meet(rdzv: Rendezvous, job_id: str, gpus: Sequence[str], gpu_names: Sequence[str], *,
         wait_s: float, host: str | None = None, open_store: Callable[..., Any] | None = None,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Meeting:
    """Meet the job's other nodes (docs/multinode.md#what-is-agreed); never raises for a peer or store that does not
    answer (the meeting's plan is then this node's own, and its lines say why). ``wait_s``: how long to wait for the
    store, for the peers (leader) and for the plan (the others)."""
    host = host or socket.gethostname()
    deadline = clock() + wait_s
    own = Plan(host, (), "default", "a job over several nodes runs at each node's default power limit, unprofiled")
    if rdzv.backend not in ("static", "c10d"):
        me = NodeInfo(0, host, job_id, tuple(gpus), tuple(gpu_names), rdzv.node_rank)
        return _alone(own, me, f"the {rdzv.backend} rendezvous has no store ecolaunch can read")
    try:
        store, raw, hosting = _open(rdzv, open_store, deadline, sleep, clock)
    except _Unreachable as e:
        me = NodeInfo(0, host, job_id, tuple(gpus), tuple(gpu_names), rdzv.node_rank)
        return _alone(own, me, str(e))
    try:
        return _meet_in(store, raw, hosting, rdzv, job_id, gpus, gpu_names, host, own, wait_s, deadline, sleep, clock)
    except RuntimeError as e:  # torch's DistError: the store's server went away while the nodes met
        me = NodeInfo(0, host, job_id, tuple(gpus), tuple(gpu_names), rdzv.node_rank)
        return _alone(own, me, f"the rendezvous store failed while the nodes met ({e})")


def _meet_in(store, raw, hosting: bool, rdzv: Rendezvous, job_id: str, gpus: Sequence[str], gpu_names: Sequence[str],
             host: str, own: Plan, wait_s: float, deadline: float, sleep, clock) -> Meeting:
    """:func:`meet` once the store is open."""
    arrival = int(store.add("arrivals", 1))
    me = NodeInfo(arrival, host, job_id, tuple(gpus), tuple(gpu_names), rdzv.node_rank)
    store.set(f"node/{arrival}", json.dumps(asdict(me)))
    leader = rdzv.node_rank == 0 if rdzv.backend == "static" else arrival == 1
    if leader:
        plan = _lead(store, raw, me, rdzv, deadline, sleep, clock)
        store.set("plan", plan.to_json())
    else:
        if not _wait_keys(store, ["plan"], max(0.0, deadline - clock()), sleep, clock):
            return _alone(own, me, f"no plan from the job's leader within {wait_s:g} s", store, hosting)
        try:
            plan = Plan.from_json(store.get("plan"))
        except (ValueError, KeyError, TypeError) as e:
            return _alone(own, me, f"the leader's plan is not one this ecolaunch reads ({e})", store, hosting)
    return Meeting(plan, me, leader, store, hosting, [_plan_line(plan, me, leader)])


def _alone(own: Plan, me: NodeInfo, why: str, store=None, hosting: bool = False) -> Meeting:
    """A node that runs by its own plan (each node at its default limit, unprofiled), and its line saying why."""
    return Meeting(own, me, False, store, hosting, [f"{why}: this node runs at its default power limit, unprofiled"])


def _lead(store, raw, me: NodeInfo, rdzv: Rendezvous, deadline: float, sleep, clock) -> Plan:
    """The leader's plan: once ``min_nodes`` nodes wrote (or the wait ended, or :func:`_others_in_torch` saw
    nodes already in torch's own rendezvous for :data:`FOREIGN_GRACE_S`), the nodes that did."""
    keys = [f"node/{a}" for a in range(1, rdzv.min_nodes + 1)]
    foreign_since: float | None = None
    while not (complete := store.check(keys)):
        now = clock()
        if now >= deadline:
            break
        if foreign_since is None and _others_in_torch(store, raw):
            foreign_since = now
        if foreign_since is not None and now - foreign_since >= FOREIGN_GRACE_S:
            break
        sleep(POLL_S)
    arrived = int(store.add("arrivals", 0))
    nodes, foreign = [], []
    for a in range(1, arrived + 1):
        if not store.check([f"node/{a}"]):
            continue
        try:
            info = json.loads(store.get(f"node/{a}"))
            if info.get("protocol") != PROTOCOL:
                foreign.append(f"{info.get('host', '?')} (ecolaunch {info.get('version', '?')})")
                continue
            nodes.append(NodeInfo.from_dict(info))
        except (ValueError, KeyError, TypeError, AttributeError):  # another node's word, not what a note holds
            foreign.append(f"node {a} (a note this ecolaunch cannot read)")
    why = "a job over several nodes runs at each node's default power limit, unprofiled"
    if rdzv.min_nodes != rdzv.max_nodes:
        return Plan(me.host, tuple(nodes), "default", why + "; an elastic job's nodes may change")
    boards = {(n.gpu_names, len(n.gpus)) for n in nodes}
    if complete and not foreign and len(boards) == 1 and len({*nodes[0].gpu_names}) == 1 and nodes[0].gpus:
        return Plan(me.host, tuple(nodes), "leader", "every node runs at the leader's caps, which its profile, history "
                    "and closed loop choose (the same GPUs on every node: one cap paces them alike)")
    if len(boards) > 1 or any(len({*n.gpu_names}) > 1 for n in nodes):
        kinds = sorted({f"{len(n.gpus)}x {'+'.join(sorted({*n.gpu_names}))}" for n in nodes})
        why += (f"; its nodes have different GPUs ({', '.join(kinds)}): one cap would not pace them alike, so each "
                "node lowers the GPUs whose ranks wait for the slowest node, where the job times its all-reduce "
                "(ecolaunch.allreduce_wait_hook: docs/pace-matching.md)")
    if not complete and foreign_since is not None:
        why += (f"; only {len(nodes)} of {rdzv.min_nodes} nodes run this ecolaunch (the others are already in "
                "torch's rendezvous: torchrun or an older ecolaunch)")
    elif not complete:
        why += f"; only {len(nodes)} of {rdzv.min_nodes} nodes answered in time (the others have not started)"
    if foreign:
        why += f"; nodes speaking another ecolaunch protocol: {', '.join(foreign)}"
    return Plan(me.host, tuple(nodes), "default", why)


def _others_in_torch(store, raw) -> bool:
    """Whether some node is in torch's own rendezvous already: the store holds keys that are not ecolaunch's (the
    leader's torch has not started yet, so they are other nodes': torch's c10d state, a static node's count)."""
    arrived = int(store.add("arrivals", 0))
    ours = 1 + sum(store.check([f"node/{a}"]) for a in range(1, arrived + 1))
    return int(raw.num_keys()) > ours


def _node_note(text: bytes | str) -> NodeInfo | None:
    """A node's note (what :func:`meet` and :meth:`Meeting.new_round` write), or None when it is not one this
    protocol reads (another node's word)."""
    try:
        info = json.loads(text)
        if info.get("protocol") != PROTOCOL:
            return None
        return NodeInfo.from_dict(info)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _plan_line(plan: Plan, me: NodeInfo, leader: bool) -> str:
    nodes = ", ".join(f"{n.host} ({len(n.gpus)}x {n.gpu_names[0] if n.gpu_names else 'no GPU'})" for n in plan.nodes)
    role = "leads" if leader else f"follows {plan.leader}"
    count = f"{len(plan.nodes)} node" + ("s" if len(plan.nodes) != 1 else "")
    return f"one plan for {count} ({nodes}); this node {role}: {plan.why}"


class _Unreachable(Exception):
    pass


def _open(rdzv: Rendezvous, open_store, deadline: float, sleep, clock):
    """The rendezvous store under ``ecolaunch/<run id>/``, the store itself and whether this process runs its
    server, retried in short attempts until ``deadline``."""
    from torch.distributed import PrefixStore, TCPStore  # lazy: torch.distributed loads only for a multi-node job

    host, _, port_text = rdzv.endpoint.rpartition(":")
    try:
        port = int(port_text) if port_text else 29400
    except ValueError as e:
        raise _Unreachable(f"the rendezvous endpoint {rdzv.endpoint!r} has no port") from e
    if rdzv.backend == "static":
        server = rdzv.node_rank == 0
    else:  # torch's own heuristic: host the store when the endpoint is this machine
        from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

        server = _matches_machine_hostname(host)
    make = open_store or (lambda is_server: TCPStore(host, port, None, is_server, timedelta(seconds=CONNECT_TRY_S),
                                                     wait_for_workers=False, multi_tenant=True))
    last: Exception | None = None
    while True:
        for is_server in ((True, False) if server and rdzv.backend == "c10d" else (server,)):
            try:
                raw = make(is_server)
                return PrefixStore(f"{KEY_PREFIX}/{rdzv.run_id}", raw), raw, is_server
            except (RuntimeError, ValueError, TimeoutError) as e:  # torch's DistError is a RuntimeError
                last = e
        if clock() >= deadline:
            raise _Unreachable(f"the rendezvous store at {rdzv.endpoint} did not answer ({last})")
        sleep(POLL_S)


def _wait_keys(store, keys: Sequence[str], wait_s: float, sleep, clock) -> bool:
    """Poll until every key exists (True) or ``wait_s`` passed (False)."""
    end = clock() + wait_s
    while not store.check(list(keys)):
        if clock() >= end:
            return False
        sleep(POLL_S)
    return True

