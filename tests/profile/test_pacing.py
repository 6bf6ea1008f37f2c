"""Pace-matching while a job runs (ecolaunch.profile.pacing): the controller's moves from measured waits and step
times, and a real launch whose fast rank's GPU is lowered while the slow rank's is left alone."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from ecolaunch.profile.pacing import MIN_WASTE_SHARE, STEP_SHARE, PaceController, pace_summary
from ecolaunch.runtime import open_gpus, resolve
from tests.conftest import BIN, REPO, ecolaunch_cmd

GPUS = ("GPU-fast", "GPU-slow")


def controller(floor_w: float = 150.0) -> tuple[PaceController, list[tuple[str, float]]]:
    calls: list[tuple[str, float]] = []

    def set_cap(uuid: str, watts: float) -> float:  # the node's cap owner: clips to the admin's lowest cap
        applied = max(floor_w, watts)
        calls.append((uuid, applied))
        return applied

    return PaceController(GPUS, {u: 250.0 for u in GPUS}, {u: 250.0 for u in GPUS}, set_cap), calls


def test_the_waiting_rank_is_lowered_a_step_at_a_time_and_the_slowest_never() -> None:
    pace, calls = controller()
    step_w = STEP_SHARE * 250.0
    move = pace.decide({0: 0.030, 1: 0.002}, 0.100)  # rank 0 waits 28 % of the step for rank 1
    assert move is not None and move.gpu == "GPU-fast" and move.cap_w == 250.0 - step_w
    assert move.reason == "pace: GPU 0 (rank 0) to 238 W: it waited 28 % of each step for rank 1, the slowest"
    assert pace.decide({0: 0.025, 1: 0.002}, 0.100).cap_w == 250.0 - 2 * step_w  # the step did not grow
    assert all(gpu == "GPU-fast" for gpu, _ in calls)
    # a waste under the threshold: nothing to do
    assert pace.decide({0: 0.002 + 0.1 * (MIN_WASTE_SHARE - 0.01), 1: 0.002}, 0.100) is None


def test_a_move_that_slows_the_job_is_undone_and_its_gpu_left_there() -> None:
    pace, _ = controller()
    pace.decide({0: 0.030, 1: 0.002}, 0.100, 0.0005)
    back = pace.decide({0: 0.001, 1: 0.004}, 0.105, 0.0005)  # 5 % slower, far beyond the noise
    assert back is not None and back.cap_w == 250.0 and "back to 250 W" in back.reason
    assert pace.decide({0: 0.030, 1: 0.002}, 0.100) is None  # frozen: never lowered again
    assert pace_summary(pace) == ["pace: GPU 0 ended at 250 W after 2 move(s) (its last step undone: the job's step "
                                  "grew); at the first, it waited 28 % of each step for rank 1, the slowest"]


def test_a_rise_within_the_noise_is_kept_and_the_floor_stops_it() -> None:
    pace, _ = controller(floor_w=230.0)
    pace.decide({0: 0.030, 1: 0.002}, 0.100, 0.002)
    kept = pace.decide({0: 0.028, 1: 0.002}, 0.102, 0.002)  # 2 % slower, within 2.33 standard errors
    assert kept is not None and kept.cap_w == 230.0 and "back" not in kept.reason  # the second move, to the floor
    assert pace.decide({0: 0.028, 1: 0.002}, 0.100, 0.002) is None  # at its lowest allowed cap: done
    assert pace.caps_w == {"GPU-fast": 230.0, "GPU-slow": 250.0}


def test_over_several_nodes_a_rank_is_measured_against_the_whole_jobs_slowest() -> None:
    # this node's two ranks both wait for a rank on another node (its span 2 ms): both are lowered, the most
    # waiting first; without the other node's span, rank 1 would pass for the slowest and stay
    pace, calls = controller()
    move = pace.decide({0: 0.032, 1: 0.030}, 0.100, floor_s=0.002)
    assert move is not None and move.gpu == "GPU-fast"
    assert move.reason == ("pace: GPU 0 (rank 0) to 238 W: it waited 30 % of each step for the slowest rank, on "
                           "another node")
    assert pace.decide({0: 0.030, 1: 0.032}, 0.100, floor_s=0.002).gpu == "GPU-slow"
    # a node of one GPU paces against the others; the node that holds the slowest rank lowers nothing
    alone, _ = controller()
    assert alone.decide({0: 0.030}, 0.100) is None
    assert alone.decide({0: 0.030}, 0.100, floor_s=0.002).gpu == "GPU-fast"
    slow, slow_calls = controller()
    assert slow.decide({0: 0.002}, 0.100, floor_s=0.030) is None and slow_calls == []
    assert [gpu for gpu, _ in calls] == ["GPU-fast", "GPU-slow"]


def test_a_new_round_puts_the_paced_caps_back_and_counts_its_own_waits(tmp_path) -> None:
    from ecolaunch.profile.channel import WaitWriter
    from ecolaunch.profile.pacing import WaitReader

    pace, calls = controller()
    pace.decide({0: 0.030, 1: 0.002}, 0.100)
    pace.decide({0: 0.030, 1: 0.002}, 0.100)
    assert pace.caps_w["GPU-fast"] == 225.0
    back = pace.restore()
    assert [(m.gpu, m.cap_w) for m in back] == [("GPU-fast", 250.0)] and calls[-1] == ("GPU-fast", 250.0)
    assert back[0].reason == "pace: GPU 0 back to 250 W: the workers restarted in a new rendezvous round"
    assert pace.restore() == []  # nothing left to put back
    # the old round's ranks 0 and 1; the new round's workers are ranks 2 and 3 (this node's group rank changed)
    old = [WaitWriter(tmp_path, r) for r in (0, 1)]
    for w in old:
        for _ in range(30):
            w.append(0.01)
    reader = WaitReader(tmp_path)
    reader.poll()
    assert reader.count() == 30
    reader.skip_existing()
    assert reader.count() == 0 and reader.mean_spans(20) == {}
    for r, span in ((2, 0.03), (3, 0.002)):
        w = WaitWriter(tmp_path, r)
        for _ in range(5):
            w.append(span)
    reader.poll()
    assert reader.count() == 5 and reader.mean_spans(20) == pytest.approx({0: 0.03, 1: 0.002})


@pytest.mark.skipif(os.geteuid() != 0, reason="a launcher applies caps itself only as root")
def test_a_launch_lowers_the_waiting_ranks_gpu_and_restores_it(sim_env) -> None:
    env = sim_env("2xA100-SXM4-80GB")
    out = subprocess.run(ecolaunch_cmd("-v", "--profile", "off", "--nproc-per-node", "2", str(BIN / "ddp_waiter.py"),
                                       "150", "0.03"), env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    moves = re.findall(r"pace: GPU (\d) \(rank (\d)\) to (\d+) W: it waited (\d+) % of each step for rank 1", out.stderr)
    assert moves, out.stderr
    # only the fast rank's GPU, lower at each move (simulated caps do not slow CPU workers: nothing stops it but the
    # run's end or the admin's lowest cap)
    assert {(g, r) for g, r, _, _ in moves} == {("0", "0")}
    caps = [int(w) for _, _, w, _ in moves]
    assert caps == sorted(caps, reverse=True) and caps[0] < 400
    # a step whose window read slower by more than the noise is undone (a loaded machine can do that): the summary
    # then says so
    assert re.search(r"power cap: pace: GPU 0 ended at \d+ W after \d+ move\(s\)( \(its last step undone: the "
                     r"job's step grew\))?; at the first, it waited", out.stderr), out.stderr
    assert "GPU 1 capped" not in out.stderr
    gpus = open_gpus(resolve(env)[0]).gpus()
    assert [g.power_limit_w for g in gpus] == [400.0, 400.0]  # restored when the run ended
