"""The meeting of a multi-node job's launchers (ecolaunch.launch.nodes) on torch's in-process HashStore: who leads,
the plan every node reads, a peer of another protocol, a leader that never answers, and the job's total."""

from __future__ import annotations

import json
import threading

import pytest

from ecolaunch.caps.job import CapFollower, PublishedCaps
from ecolaunch.launch.nodes import PROTOCOL, Meeting, NodeInfo, Plan, meet, total_lines
from ecolaunch.launch.torchrun import Rendezvous


class Clock:
    """Virtual time: sleeping advances it (the meeting polls)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def rdzv(backend: str = "c10d", nodes: tuple[int, int] = (2, 2), rank: int | None = None) -> Rendezvous:
    return Rendezvous(backend, "127.0.0.1:29400", "run-1", nodes[0], nodes[1], rank, 600.0)


@pytest.fixture
def store():
    from torch.distributed import HashStore

    return HashStore()


def test_the_first_to_arrive_leads_and_the_others_read_its_plan(store) -> None:
    results = {}

    def node(name: str, gpus: tuple[str, ...]) -> None:
        results[name] = meet(rdzv(), f"job-{name}", gpus, ["NVIDIA A100-SXM4-80GB"] * len(gpus), wait_s=30,
                             host=name, open_store=lambda is_server: store)

    first = threading.Thread(target=node, args=("h0", ("GPU-a", "GPU-b")))
    first.start()
    second = threading.Thread(target=node, args=("h1", ("GPU-c",)))
    second.start()
    first.join(30)
    second.join(30)
    leaders = [n for n, m in results.items() if m.leader]
    assert len(leaders) == 1
    plans = {n: m.plan for n, m in results.items()}
    assert plans["h0"] == plans["h1"]
    assert [n.host for n in plans["h0"].nodes] in (["h0", "h1"], ["h1", "h0"])
    # two GPUs on one node, one on the other: not the same GPUs, so each node at its default limit, unprofiled
    assert plans["h0"].caps == "default" and plans["h0"].profile is False
    follower = next(m for m in results.values() if not m.leader)
    assert follower.lines == [f"one plan for 2 nodes ({', '.join(f'{n.host} ({len(n.gpus)}x NVIDIA A100-SXM4-80GB)' for n in plans['h0'].nodes)}); "
                              f"this node follows {leaders[0]}: a job over several nodes runs at each node's default "
                              "power limit, unprofiled; its nodes have different GPUs (1x NVIDIA A100-SXM4-80GB, 2x "
                              "NVIDIA A100-SXM4-80GB): one cap would not pace them alike, so each node lowers the GPUs "
                              "whose ranks wait for the slowest node, where the job times its all-reduce "
                              "(ecolaunch.allreduce_wait_hook: docs/pace-matching.md)"]
    # each node paces its own GPUs against the other nodes' waits, shared through the store
    assert all(m.paces_alone for m in results.values())
    a, b = results["h0"], results["h1"]
    assert a.share_waits({0: 0.030, 1: 0.031}) is None  # the other has published nothing yet
    assert b.share_waits({0: 0.002}) == pytest.approx(0.030)
    assert a.share_waits({0: 0.029, 1: 0.031}) == pytest.approx(0.002)
    b.store.set(f"waits/{b.me.arrival}", '["fast", -1, 1e999, {"x": 1}, 0.004]')  # another node's word
    assert a.share_waits({0: 0.029}) == pytest.approx(0.004)
    b.store.set(f"waits/{b.me.arrival}", "not json")
    assert a.share_waits({0: 0.029}) is None
    b.store = None  # a node whose store is gone paces alone
    assert b.share_waits({0: 0.002}) is None


def _two_nodes(store, gpus: int = 1):
    """Two nodes of the same A100s meeting through ``store``: (the leader's meeting, the follower's)."""
    results = {}

    def node(name: str) -> None:
        results[name] = meet(rdzv(), f"job-{name}", [f"GPU-{name}-{i}" for i in range(gpus)],
                             ["NVIDIA A100-SXM4-80GB"] * gpus, wait_s=30, host=name, open_store=lambda is_server: store)

    threads = [threading.Thread(target=node, args=(n,)) for n in ("h0", "h1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return next(m for m in results.values() if m.leader), next(m for m in results.values() if not m.leader)


def test_the_same_gpus_on_every_node_follow_the_leaders_caps(store) -> None:
    lead, follow = _two_nodes(store)
    assert lead.leads_caps and follow.follows_caps and lead.plan.profile
    assert follow.leader_caps() is None
    applied: list[tuple[int, float | None]] = []
    lines: list[str] = []

    def apply(position: int, watts: float | None) -> float | None:
        applied.append((position, watts))
        return 300.0 if watts == 250.0 else watts  # this node's policy clips 250 W to 300 W

    with CapFollower(follow, apply, lines.append, poll_s=0.01):
        set_cap = PublishedCaps(lead, lambda uuid, w: w, ["GPU-x"], {"GPU-x": None})
        wait(lambda: applied == [(0, None)])
        assert set_cap("GPU-x", 250.0) == 250.0
        wait(lambda: applied == [(0, None), (0, 250.0)])
    assert lines == ["the leader's 250 W cap is 300 W here: this node's admin policy clips it"]
    assert follow.leader_caps() == (2, [250.0])


def test_what_the_leaders_power_budget_changes_every_node_follows(store) -> None:
    lead, follow = _two_nodes(store, gpus=2)
    assert lead.leads_caps and follow.follows_caps
    applied: list[tuple[int, float | None]] = []

    def apply(position: int, watts: float | None) -> float | None:
        applied.append((position, watts))
        return watts

    with CapFollower(follow, apply, lambda line: None, poll_s=0.01):
        published = PublishedCaps(lead, lambda uuid, w: w, ["GPU-x", "GPU-y"], {"GPU-x": 300.0, "GPU-y": 300.0})
        wait(lambda: applied == [(0, 300.0), (1, 300.0)])
        published.follow({"GPU-y": 200.0, "GPU-elsewhere": 100.0})  # the budget lowered one GPU (and names another)
        wait(lambda: applied[2:] == [(0, 300.0), (1, 200.0)])
        published.follow({"GPU-y": None})  # room again: back to the default limit
        wait(lambda: applied[4:] == [(0, 300.0), (1, None)])
        published.follow({"GPU-elsewhere": 100.0, "GPU-x": 300.0})  # nothing changed: nothing published
    assert follow.leader_caps() == (3, [300.0, None])


def wait(predicate, timeout: float = 10.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_static_rendezvous_node_rank_0_leads_whoever_arrives_first(store) -> None:
    clock = Clock()
    # node rank 1 arrives first and waits for a plan that never comes: its own, and a line saying why
    alone = meet(rdzv("static", rank=1), "job-1", ["GPU-c"], ["Tesla V100-SXM2-16GB"], wait_s=3, host="h1",
                 open_store=lambda is_server: store, sleep=clock.sleep, clock=clock)
    assert not alone.leader
    assert alone.lines == ["no plan from the job's leader within 3 s: this node runs at its default power limit, "
                           "unprofiled"]
    lead = meet(rdzv("static", rank=0), "job-0", ["GPU-a"], ["NVIDIA A100-SXM4-80GB"], wait_s=3, host="h0",
                open_store=lambda is_server: store, sleep=clock.sleep, clock=clock)
    assert lead.leader and [n.host for n in lead.plan.nodes] == ["h1", "h0"]


def test_a_peer_of_another_protocol_is_left_out_and_named(store) -> None:
    from torch.distributed import PrefixStore

    mine = PrefixStore("ecolaunch/run-1", store)
    mine.add("arrivals", 1)
    mine.set("node/1", json.dumps({"host": "old", "version": "0.1", "protocol": PROTOCOL + 1}))
    clock = Clock()
    lead = meet(rdzv(nodes=(1, 2)), "job-0", ["GPU-a"], ["NVIDIA A100-SXM4-80GB"], wait_s=2, host="h0",
                open_store=lambda is_server: store, sleep=clock.sleep, clock=clock)
    # the first arrival was the foreign peer, so this node is not the c10d leader: it waits for a plan in vain
    assert not lead.leader and "no plan from the job's leader within 2 s" in lead.lines[0]


def test_a_leader_names_a_peer_of_another_protocol(store) -> None:
    from torch.distributed import PrefixStore

    mine = PrefixStore("ecolaunch/run-1", store)

    def foreign_peer() -> None:  # arrives second, writes a note of protocol 2
        while not mine.check(["node/1"]):
            threading.Event().wait(0.01)
        mine.add("arrivals", 1)
        mine.set("node/2", json.dumps({"host": "new", "version": "9.0", "protocol": PROTOCOL + 1}))

    peer = threading.Thread(target=foreign_peer)
    peer.start()
    lead = meet(rdzv(nodes=(2, 2)), "job-0", ["GPU-a"], ["NVIDIA A100-SXM4-80GB"], wait_s=5, host="h0",
                open_store=lambda is_server: store)
    peer.join(10)
    assert lead.leader and [n.host for n in lead.plan.nodes] == ["h0"]
    assert "nodes speaking another ecolaunch protocol: new (ecolaunch 9.0)" in lead.plan.why


def test_a_store_that_never_answers_and_a_rendezvous_without_one() -> None:
    clock = Clock()

    def refuse(is_server: bool):
        raise RuntimeError("connection refused")

    unreachable = meet(rdzv(), "job-0", ["GPU-a"], ["A"], wait_s=2, host="h0", open_store=refuse,
                       sleep=clock.sleep, clock=clock)
    assert unreachable.store is None and not unreachable.leader
    assert unreachable.lines == ["the rendezvous store at 127.0.0.1:29400 did not answer (connection refused): this "
                                 "node runs at its default power limit, unprofiled"]
    assert unreachable.finish(1.0, 1.0, 0) == []
    etcd = meet(rdzv("etcd-v2"), "job-0", ["GPU-a"], ["A"], wait_s=2, host="h0")
    assert etcd.lines == ["the etcd-v2 rendezvous has no store ecolaunch can read: this node runs at its default "
                          "power limit, unprofiled"]


def test_a_plan_reads_back_and_refuses_another_protocol() -> None:
    plan = Plan("h0", (NodeInfo(1, "h0", "j", ("GPU-a",), ("A",), 0),), why="because")
    assert Plan.from_json(plan.to_json()) == plan
    other = json.loads(plan.to_json())
    other["protocol"] = PROTOCOL + 1
    with pytest.raises(ValueError, match="a plan of protocol 2, not 1"):
        Plan.from_json(json.dumps(other))


def test_the_total_counts_what_was_reported_and_names_what_was_not() -> None:
    lines = total_lines({"1": ("h0", {"energy_j": 1500.0, "wall_s": 10.0, "exit_code": 0}),
                         "2": ("h1", {"energy_j": 500.0, "wall_s": 12.5, "exit_code": 0}),
                         "3": ("h2", None)})
    assert lines == ["the whole job used 2 kJ (0.556 Wh) over 3 nodes in 12.5 s; not counted: h2 (node 3), which "
                     "reported no energy",
                     "node 1 (h0): 1.5 kJ in 10.0 s, exit 0",
                     "node 2 (h1): 0.5 kJ in 12.5 s, exit 0"]


def test_what_another_node_writes_is_checked_before_it_is_used(store) -> None:
    from torch.distributed import PrefixStore

    mine = PrefixStore("ecolaunch/run-1", store)
    mine.add("arrivals", 1)
    mine.set("node/1", json.dumps({"protocol": PROTOCOL, "host": "odd"}))  # a note of this protocol, missing fields
    clock = Clock()
    lead = meet(rdzv("static", nodes=(2, 2), rank=0), "job-0", ["GPU-a"], ["A"], wait_s=2, host="h0",
                open_store=lambda is_server: store, sleep=clock.sleep, clock=clock)
    assert lead.leader and [n.host for n in lead.plan.nodes] == ["h0"]
    assert "node 1 (a note this ecolaunch cannot read)" in lead.plan.why
    # caps that are no positive number are the default limit, never a NaN handed on
    mine.set("caps", json.dumps({"seq": 7, "caps_w": [250, "nan", -5, None, True]}))
    assert lead.leader_caps() == (7, [250.0, None, None, None, None])


def test_a_store_that_fails_while_the_nodes_meet_leaves_the_node_on_its_own() -> None:
    from torch.distributed import Store

    class Failing(Store):  # a store whose server went away after the connection
        def add(self, key, value):
            raise RuntimeError("Connection reset by peer")

    alone = meet(rdzv(), "job-0", ["GPU-a"], ["A"], wait_s=1, host="h0", open_store=lambda is_server: Failing())
    assert alone.store is None and not alone.leader
    assert alone.lines[0].startswith("the rendezvous store failed while the nodes met (")
    assert "Connection reset by peer" in alone.lines[0]
    assert alone.lines[0].endswith("): this node runs at its default power limit, unprofiled")


def meeting(store, caps: str, *infos: NodeInfo, me: NodeInfo | None = None) -> Meeting:
    """A node's meeting whose plan lists ``infos`` (the first leads); ``me``: this node (default the first)."""
    me = me or infos[0]
    return Meeting(Plan(infos[0].host, tuple(infos), caps, "why"), me, me == infos[0], store)


def node_info(arrival: int, board: str = "NVIDIA A100-SXM4-80GB") -> NodeInfo:
    return NodeInfo(arrival, f"h{arrival}", f"job-{arrival}", (f"GPU-{arrival}",), (board,))


def in_round(store, meetings, ranks, nodes: int) -> list[list[str]]:
    """Every meeting's :meth:`new_round` at once (its group rank), as the nodes leaving torch's round do."""
    lines: dict[int, list[str]] = {}
    threads = [threading.Thread(target=lambda m=m, r=r: lines.__setitem__(r, m.new_round(store, r, nodes, wait_s=30)))
               for m, r in zip(meetings, ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return [lines[r] for r in ranks]


def test_a_new_round_with_a_joining_node_agrees_a_plan_of_the_rounds_nodes() -> None:
    from torch.distributed import HashStore

    a, b, c = node_info(1), node_info(2, "Tesla V100-SXM2-16GB"), node_info(3)
    first, joiner = meeting(HashStore(), "default", a), meeting(HashStore(), "default", a, me=b)  # b joined late
    round_store = HashStore()  # torch's store of the round (its own prefix per round)
    lines = in_round(round_store, [first, joiner], [0, 1], 2)
    assert first.plan == joiner.plan and [n.host for n in first.plan.nodes] == ["h1", "h2"]
    assert all(len(ls) == 1 and ls[0].startswith("a new rendezvous round: one plan for 2 nodes (h1 (1x NVIDIA "
                                                  "A100-SXM4-80GB), h2 (1x Tesla V100-SXM2-16GB))") for ls in lines)
    assert "the job's nodes changed at a rendezvous round" in lines[0][0] and "different GPUs" in lines[0][0]
    # the same nodes again (torch restarted them): nothing to say; the energy is added up over every node seen
    assert in_round(HashStore(), [first, joiner], [1, 0], 2) == [[], []]
    first.seen[c.arrival] = c
    assert sorted(first.seen) == [1, 2, 3]


def test_a_restart_keeps_the_leaders_caps_and_a_silent_round_keeps_the_plan() -> None:
    from torch.distributed import HashStore

    a, b = node_info(1), node_info(2)
    lead = meeting(HashStore(), "leader", a, b)
    follow = meeting(HashStore(), "leader", a, b, me=b)
    assert in_round(HashStore(), [lead, follow], [0, 1], 2) == [[], []]
    assert lead.plan.caps == follow.plan.caps == "leader" and lead.leads_caps and follow.follows_caps
    # no note from the round's first node: this node keeps its plan and says so (the wait is virtual time)
    clock = Clock()
    said = follow.new_round(HashStore(), 1, 2, wait_s=5, sleep=clock.sleep, clock=clock)
    assert said == ["no plan from this rendezvous round's first node within 5 s: this node keeps its plan"]
    store = HashStore()
    store.set("ecolaunch/round/plan", "not a plan")
    assert "could not be agreed" in follow.new_round(store, 1, 2, wait_s=5, sleep=clock.sleep, clock=clock)[0]
    assert follow.plan.caps == "leader"


def test_the_round_watch_calls_the_launch_back_and_outlives_its_failure() -> None:
    import argparse

    from ecolaunch.launch import torchrun

    class Inner:
        def __init__(self) -> None:
            self.rounds = 0

        def next_rendezvous(self):
            self.rounds += 1
            return argparse.Namespace(store="store", rank=1, world_size=2)

        def get_backend(self) -> str:
            return "c10d"

        def num_nodes_waiting(self) -> int:
            return 3

    calls: list[tuple] = []
    watch = torchrun._RoundWatch(Inner())
    assert watch.get_backend() == torchrun.ROUND_BACKEND and watch.num_nodes_waiting() == 3
    torchrun._on_round = lambda *a: calls.append(a)
    try:
        assert watch.next_rendezvous().rank == 1 and calls == [("store", 1, 2)]
        torchrun._on_round = lambda *a: 1 / 0
        assert watch.next_rendezvous().world_size == 2  # torch's round goes on
    finally:
        torchrun._on_round = None
    nnodes = {"1:2": (1, 2), "2": (2, 2)}.__getitem__
    ns = argparse.Namespace(standalone=False, rdzv_backend="c10d", nnodes="1:2")
    assert torchrun._grows(ns, nnodes) and not torchrun._grows(argparse.Namespace(**{**vars(ns), "nnodes": "2"}),
                                                               nnodes)
    assert not torchrun._grows(argparse.Namespace(**{**vars(ns), "rdzv_backend": "static"}), nnodes)
