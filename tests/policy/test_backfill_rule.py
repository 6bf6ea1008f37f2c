"""The backfill rule (ecolaunch.policy.backfill): the head's reservation from the running jobs' expected ends, the
queue played forward, which job may start ahead, and the margin learned from predictions that ran over."""

from __future__ import annotations

import pytest

from ecolaunch.policy.backfill import (DEFAULT_MARGIN, Reservation, backfill_default, expected_starts, may_backfill,
                                       overrun_margin, reservation)
from ecolaunch.state.graph import GpuNode, Host, Job, StateGraph

NOW = 1000.0


def _graph(running: dict[str, tuple[list[int], float | None]], queued: list[tuple[str, int, float | None]],
           foreign: tuple[int, ...] = ()) -> StateGraph:
    """4 GPUs; ``running``: job -> (GPU indexes, expected length from its start at 0 s); ``queued`` in order."""
    graph = StateGraph()
    host = Host(name="h")
    for i in range(4):
        host.gpus[f"g{i}"] = GpuNode(uuid=f"g{i}", index=i, name="A100", memory_total_mib=81920,
                                     foreign_pids=[4242] if i in foreign else [])
    graph.hosts["h"] = host
    for seq, (jid, (gpus, length)) in enumerate(running.items()):
        job = Job.queued(jid, user="u", host="h", nproc=len(gpus), seq=seq, submitted_at=0.0,
                         request={} if length is None else {"expected_s": length})
        graph.jobs[jid] = job
        graph.book(jid, [f"g{i}" for i in gpus], {}, {}, None, 0.0)
    for seq, (jid, n, length) in enumerate(queued, start=100):
        graph.jobs[jid] = Job.queued(jid, user="u", host="h", nproc=n, seq=seq, submitted_at=NOW,
                                     request={} if length is None else {"expected_s": length})
    return graph


def test_the_head_is_promised_the_earliest_time_enough_gpus_free() -> None:
    graph = _graph({"a": ([0], 1500.0), "b": ([1, 2], 1100.0)}, [("head", 3, None)])
    assert reservation(graph, "h", "head", 3, NOW) == Reservation("head", 3, 1100.0, 0, ())
    assert reservation(graph, "h", "head", 1, NOW) == Reservation("head", 1, NOW, 0, ())  # enough free now
    assert reservation(graph, "h", "head", 2, NOW) == Reservation("head", 2, 1100.0, 1, ())  # b frees two
    assert reservation(graph, "h", "head", 4, NOW).at == 1500.0
    unknown = _graph({"a": ([0], None), "b": ([1, 2], 1100.0)}, [])
    assert reservation(unknown, "h", "head", 4, NOW) == Reservation("head", 4, None, 0, ("a",))
    assert reservation(unknown, "h", "head", 3, NOW) == Reservation("head", 3, 1100.0, 0, ("a",))
    # a GPU busy with processes outside ecolaunch never frees up here; one past its expected end neither
    assert reservation(_graph({"b": ([1], 1100.0)}, [], foreign=(0,)), "h", "x", 4, NOW).at is None
    assert reservation(_graph({"b": ([1], 900.0)}, []), "h", "x", 4, NOW).at is None


def test_a_job_may_start_ahead_on_spare_gpus_or_when_it_ends_before_the_reservation() -> None:
    promise = Reservation("head", 3, 1100.0, 1)
    assert may_backfill(promise, 1, None, 0.0, NOW).yes  # takes only a GPU the head will not need
    assert not may_backfill(promise, 2, None, 0.0, NOW).yes
    assert may_backfill(promise, 2, 100.0, 0.0, NOW).yes
    assert not may_backfill(promise, 2, 100.0, 0.01, NOW).yes  # the margin makes it 101 s
    assert "no expected end: job a" in may_backfill(Reservation("head", 3, None, 0, ("a",)), 1, 1.0, 0.0, NOW).why


def test_the_queue_played_forward_gives_each_waiting_job_its_expected_start() -> None:
    graph = _graph({"a": ([0, 1], 1500.0), "b": ([2], 1100.0)},
                   [("q1", 2, 300.0), ("q2", 1, 50.0), ("q3", 4, None), ("q4", 1, 10.0)])
    # q1 takes g3 (free now) and b's GPU at 1100 until 1400; q2 the first GPU free after that (q1's, at 1400); q3 all
    # four: a's at 1500; q4 nothing after q3, whose length is unknown
    assert expected_starts(graph, "h", NOW) == {"q1": 1100.0, "q2": 1400.0, "q3": 1500.0, "q4": None}
    assert expected_starts(_graph({"a": ([0, 1, 2, 3], None)}, [("q", 1, 5.0)]), "h", NOW) == {"q": None}


def test_the_margin_is_the_90th_percentile_of_how_far_predictions_ran_over() -> None:
    assert overrun_margin([(100.0, 200.0)] * 4) == DEFAULT_MARGIN  # too few to learn from
    runs = [(100.0, 100.0 + i) for i in range(10)]  # 0 .. 9 % over
    assert overrun_margin(runs) == pytest.approx(0.08)
    assert overrun_margin([(100.0, 50.0)] * 10) == 0.0  # early ends need no margin
    assert overrun_margin([(0.0, 50.0)] * 10) == DEFAULT_MARGIN  # no prediction: nothing learned


def test_every_policy_but_exclusive_backfills_unless_told() -> None:
    assert backfill_default("curve") and backfill_default("gnn") and not backfill_default("exclusive")
