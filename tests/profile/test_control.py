"""The closed loop's decisions (CapController) on scripted truths: up by the smallest step the corrected curve says
keeps the bound, down (bounded) on slack, no oscillation under noise, robust to stalls, what it learned."""

from __future__ import annotations

import random

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.errors import ConfigError
from ecolaunch.caps.control import CapController, ControlSettings
from ecolaunch.jobmodel.capchoice import REFERENCE_RUN_ITERS, job_cap_choice, queue_eta, window_error_pct
from ecolaunch.jobmodel.capcurve import merge_points
from ecolaunch.jobmodel.profile import CapPoint

BOUNDS = (100.0, 400.0)
#: the loops of tests about something else: no window at the top to measure the reference (tested on its own below)
NO_REFERENCE = ControlSettings(reference_window=False)


def truth_time(cap_w: float, demand_w: float = 300.0, base_s: float = 0.1) -> float:
    """A job slower as the cap bites below its demand (the shape of tests/profile/conftest.iter_time_at)."""
    return base_s * max(1.0, demand_w / cap_w) ** 0.7


def truth_power(cap_w: float, demand_w: float = 300.0) -> float:
    return min(demand_w, cap_w)


def run(ctl: CapController, iterations: int, *, noise: float = 0.0, seed: int = 0, stall_every: int = 0,
        time_at=truth_time, power_at=truth_power) -> list[float]:
    """Feed ``iterations`` at whatever cap the controller holds, 10 at a time; returns the caps it moved to."""
    rng = random.Random(seed)
    caps = []
    for i in range(0, iterations, 10):
        cap = ctl.cap_w
        times = [time_at(cap) * max(0.05, 1.0 + rng.gauss(0.0, noise)) for _ in range(10)]
        if stall_every and (i // 10) % stall_every == 0:
            times[3] *= 40.0  # a data-loader stall
        move = ctl.observe(times, power_at(cap))
        if move is not None:
            caps.append(move.cap_w)
    return caps


def profiled(noise_cv_pct: float = 0.0) -> list[CapPoint]:
    """What profiling measured: the top, ~85 % and ~65 % of the job's power (15 iterations each)."""
    return [CapPoint(c, truth_time(c), truth_power(c), 15, noise_cv_pct) for c in (400.0, 250.0, 200.0)]


def test_a_cap_that_runs_too_slow_moves_up_by_the_smallest_step_that_keeps_the_bound() -> None:
    # the decision believed 250 W keeps a 10 % bound (only the uncapped point was known); it runs 13.6 % slower
    ctl = CapController([CapPoint(400.0, 0.1, 300.0)], BOUNDS, 10.0, 250.0)
    caps = run(ctl, 400)
    assert caps and caps[0] > 250.0 and caps[0] < 400.0  # never a jump to uncapped the curve does not ask for
    assert truth_time(ctl.cap_w) / 0.1 - 1.0 <= 0.10
    assert ctl.moves[0].up and ctl.moves[0].measured_slowdown_pct == pytest.approx(13.6, abs=0.1)
    assert 250.0 in {p.power_cap_w for p in ctl.learned()}


def test_uncapped_only_when_the_curve_says_so() -> None:
    # a job that loses 30 % at any cap below 400 W: the corrected curve says only uncapped keeps 10 %
    def steep(cap_w: float) -> float:
        return 0.1 if cap_w >= 400.0 else 0.13

    ctl = CapController([CapPoint(400.0, 0.1, 300.0)], BOUNDS, 10.0, 300.0)
    run(ctl, 2000, time_at=steep)
    assert ctl.cap_w == 400.0
    assert ctl.moves[-1].cap_w == 400.0 and "uncapped" in ctl.moves[-1].reason


def test_slack_moves_the_cap_down_a_bounded_number_of_times() -> None:
    points = profiled()
    ctl = CapController(points, BOUNDS, 10.0, 400.0, settings=ControlSettings(max_down_moves=2, reference_window=False))
    run(ctl, 3000)
    downs = [m for m in ctl.moves if not m.up]
    assert 1 <= len(downs) <= 2 and ctl.cap_w < 400.0
    assert truth_time(ctl.cap_w) / 0.1 - 1.0 <= 0.10
    # near the choice on what the run knows at its end: its windows at the top pooled into the profiled reference
    best = job_cap_choice(ctl.points(), BOUNDS, 10.0, 1.0)
    assert abs(ctl.cap_w - best.cap_w) <= 25.0


@pytest.mark.parametrize("noise", [0.01, 0.03])
def test_no_oscillation_and_the_bound_holds_under_noise(noise: float) -> None:
    for seed in range(10):
        cv = 100.0 * noise
        ctl = CapController(profiled(cv), BOUNDS, 10.0, job_cap_choice(profiled(cv), BOUNDS, 10.0).cap_w,
                            settings=NO_REFERENCE)
        run(ctl, 5000, noise=noise, seed=seed)
        directions = [m.up for m in ctl.moves]
        assert len(ctl.moves) <= 4, ctl.moves
        # hysteresis: a cap found too slow is never gone back to, so the run never goes up, down and up again
        assert directions.count(True) <= 1 or all(directions), ctl.moves
        assert truth_time(ctl.cap_w) / 0.1 - 1.0 <= 0.10


def test_stalls_do_not_move_the_cap() -> None:
    points = profiled()
    start = job_cap_choice(points, BOUNDS, 10.0).cap_w
    ctl = CapController(points, BOUNDS, 10.0, start, settings=ControlSettings(max_down_moves=0, reference_window=False))
    run(ctl, 3000, stall_every=2)  # every other batch of 10 has one iteration 40x too long
    assert ctl.moves == [] and ctl.cap_w == start


def test_a_flat_job_is_never_moved() -> None:
    ctl = CapController([CapPoint(400.0, 0.1, 60.0)], BOUNDS, 10.0, 400.0)
    run(ctl, 2000, power_at=lambda cap: 60.0, time_at=lambda cap: 0.1)
    assert ctl.moves == [] and ctl.cap_w == 400.0 and ctl.measured_slowdown_pct == pytest.approx(0.0, abs=1e-9)


def test_a_reading_knows_its_measurement_error() -> None:
    """Issue 41: a run at the uncapped limit read "13.0 % faster than alone and uncapped" against a reference of 15
    jittery iterations; the reading carries its error, the reference's included, which such a difference is within."""
    ctl = CapController([CapPoint(400.0, 0.1, 60.0, 15, 30.0)], BOUNDS, 10.0, 400.0)
    run(ctl, 200, power_at=lambda cap: 60.0, time_at=lambda cap: 0.087, noise=0.3)
    assert ctl.cap_w == 400.0 and ctl.measured_slowdown_pct < -1.0
    assert ctl.measured_error_pp >= abs(ctl.measured_slowdown_pct)
    quiet = CapController([CapPoint(400.0, 0.1, 60.0, 2000, 0.5)], BOUNDS, 10.0, 400.0)
    run(quiet, 200, power_at=lambda cap: 60.0, time_at=lambda cap: 0.1)
    # the window error of its reference: one profiling window and the run's own window at the same cap, pooled
    (top,) = merge_points(quiet.points())
    assert top.windows == 2 and quiet.measured_error_pp == pytest.approx(2.33 * window_error_pct(top), abs=0.1)


def test_settling_iterations_after_a_move_are_not_counted() -> None:
    ctl = CapController([CapPoint(400.0, 0.1, 300.0)], BOUNDS, 10.0, 250.0,
                        settings=ControlSettings(settle_iters=5, window_iters=30))
    assert ctl.observe([1.0] * 5, 250.0) is None  # settling (e.g. still under the previous cap): ignored
    ctl.observe([truth_time(250.0)] * 30, 250.0)
    (point,) = ctl.learned()
    assert point.iterations == 30 and point.iter_time_s == pytest.approx(truth_time(250.0))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="measured cap points"):
        CapController([], BOUNDS, 10.0, 300.0)
    with pytest.raises(ConfigError, match="allowed slowdown"):
        CapController([CapPoint(400.0, 0.1, 300.0)], BOUNDS, float("nan"), 300.0)
    with pytest.raises(ConfigError, match="window_iters"):
        ControlSettings(window_iters=2)


def test_hysteresis_a_cap_found_too_slow_is_never_gone_back_to() -> None:
    ctl = CapController([CapPoint(400.0, 0.1, 300.0)], BOUNDS, 10.0, 250.0)
    run(ctl, 300)  # 13.6 % slower at 250 W: moves up
    assert ctl.moves and ctl.moves[0].from_w == 250.0 and ctl.cap_w > 250.0
    raised = ctl.cap_w
    # then the job changes phase and no cap slows it: slack everywhere, but the run never returns to 250 W or below
    run(ctl, 5000, time_at=lambda cap: 0.1, power_at=lambda cap: min(cap, 300.0) * 0.9)
    assert all(m.cap_w > 250.0 for m in ctl.moves)
    assert ctl.cap_w <= raised  # the slack was taken, above the floor


def test_a_disturbed_run_is_not_learned_and_never_moves_the_cap_down() -> None:
    # contention: every iteration three times what the profile says at that cap
    ctl = CapController(profiled(2.0), BOUNDS, 10.0, 250.0, settings=NO_REFERENCE)
    caps = run(ctl, 300, time_at=lambda c: 3.0 * truth_time(c))
    assert ctl.off_profile is not None and "times the profile's" in ctl.off_profile
    assert ctl.learned() == ()  # nothing of it reaches the curve (or the history)
    assert all(c > 250.0 for c in caps)  # too slow: up (the safe side), never down
    # the reverse: a run far faster than its profile (one measured while disturbed) never lowers the cap on it
    fast = CapController(profiled(2.0), BOUNDS, 10.0, 400.0)
    assert run(fast, 300, time_at=lambda c: truth_time(c) / 3.0) == [] and fast.cap_w == 400.0
    assert fast.off_profile is not None and fast.learned() == ()
    # a lower cap measured faster than uncapped contradicts the profile: not learned, no move down
    odd = CapController(profiled(2.0), BOUNDS, 10.0, 250.0, settings=NO_REFERENCE)
    run(odd, 300, time_at=lambda c: 0.8 * truth_time(400.0))
    assert odd.off_profile is not None and "faster than" in odd.off_profile and odd.learned() == ()
    assert all(m.up for m in odd.moves)


def test_jobs_waiting_raise_the_cap_and_it_comes_back_down_once_nobody_waits() -> None:
    # caps that weigh the queue ([energy] wait_weight): while two jobs wait, the choice counts their delay and the cap
    # goes up (not a floor); once nobody waits it comes back down, and that move is not one of max_down_moves
    points = profiled()
    own = job_cap_choice(points, BOUNDS, 10.0, 1.0).cap_w
    ctl = CapController(points, BOUNDS, 10.0, own, rules=Rules(wait_weight=1.0),
                        settings=ControlSettings(max_down_moves=0, reference_window=False))
    assert run(ctl, 300) == []  # nobody waits: it stays at the energy's choice
    ctl.set_waiting(2.0)
    raised = run(ctl, 300)
    lifted = job_cap_choice(points, BOUNDS, 10.0, queue_eta(1.0, 1.0, 2.0)).cap_w
    assert lifted > own + 10.0 and raised and raised[0] == pytest.approx(lifted, abs=10.0)
    assert ctl.moves[-1].up and "2 waiting job(s)" in ctl.moves[-1].reason
    ctl.set_waiting(0.0)
    run(ctl, 600)
    # back to the energy's choice on what the run now knows (its window at the lifted cap joined the curve)
    assert ctl.cap_w == pytest.approx(job_cap_choice(ctl.points(), BOUNDS, 10.0, 1.0).cap_w, abs=10.0)
    assert not ctl.moves[-1].up
    with pytest.raises(ConfigError, match="waiting jobs"):
        ctl.set_waiting(-1.0)


def test_without_a_wait_weight_the_queue_moves_nothing() -> None:
    points = profiled()
    own = job_cap_choice(points, BOUNDS, 10.0, 1.0).cap_w
    quiet, queued = (CapController(points, BOUNDS, 10.0, own) for _ in range(2))  # wait_weight 0: the default
    queued.set_waiting(8.0)
    assert run(queued, 600) == run(quiet, 600)
    assert [m.reason for m in queued.moves] == [m.reason for m in quiet.moves]


def test_a_run_measures_the_uncapped_reference_for_one_window_and_goes_back() -> None:
    """Issue 39: a profiled reference (its error repeats from run to run) is measured again inside the run, once,
    at the top cap; the loop goes back below it and what it measured there joins the curve as a window of a run."""
    points = profiled(3.0)
    start = job_cap_choice(points, BOUNDS, 10.0).cap_w
    ctl = CapController(points, BOUNDS, 10.0, start)
    run(ctl, 3000, noise=0.01)
    up = [m for m in ctl.moves if m.cap_w == 400.0]
    assert len(up) == 1 and "measuring the uncapped reference" in up[0].reason and up[0].from_w == start
    back = ctl.moves[ctl.moves.index(up[0]) + 1]
    assert back.cap_w < 400.0 and "measured the uncapped reference inside the run" in back.reason
    (top,) = [p for p in ctl.learned() if p.power_cap_w == 400.0]
    assert top.windows == 1 and top.run_iterations == top.iterations > 0
    assert truth_time(ctl.cap_w) / 0.1 - 1.0 <= 0.10
    # history with enough of it measured inside runs: no window at the top
    measured = [*points, CapPoint(400.0, 0.1, 300.0, REFERENCE_RUN_ITERS, 1.0, 4, REFERENCE_RUN_ITERS)]
    quiet = CapController(measured, BOUNDS, 10.0, start)
    run(quiet, 3000, noise=0.01)
    assert all(m.cap_w < 400.0 for m in quiet.moves)
    # a budget's ceiling below the top: the window waits (ClosedLoop clears it while the ceiling holds)
    held = CapController(points, BOUNDS, 10.0, start)
    held.reference_allowed = False
    run(held, 3000, noise=0.01)
    assert all(m.cap_w < 400.0 for m in held.moves)



def test_a_borrowed_profile_is_tested_against_the_runs_own_reference_and_dropped_when_it_lies() -> None:
    """Issue 39: a colleague's profile claims its reference well measured inside runs, so a loop of its own would not
    measure it again; borrowed, the run measures it anyway. A forged one (the job claimed 30 % slower uncapped than it
    is, and low caps nearly free) has the run capped where it is truly ~35 % slower while it reads within the bound
    against the forged reference (and within the loop's test of a disturbed run); against the run's own reference
    window the forgery goes, and the loop keeps the bound."""
    t0 = 1.3 * truth_time(400.0)
    forged = [CapPoint(400.0, t0, 300.0, REFERENCE_RUN_ITERS, 1.0, 4, REFERENCE_RUN_ITERS),
              CapPoint(250.0, 1.02 * t0, 250.0, 15, 1.0), CapPoint(200.0, 1.06 * t0, 200.0, 15, 1.0)]
    start = job_cap_choice(forged, BOUNDS, 10.0).cap_w
    assert truth_time(start) / truth_time(400.0) - 1.0 > 0.3
    trusting = CapController(forged, BOUNDS, 10.0, start)
    run(trusting, 3000, noise=0.01)
    assert trusting.disowned is None and all(m.cap_w < 400.0 for m in trusting.moves)
    assert truth_time(trusting.cap_w) / 0.1 - 1.0 > 0.3  # the forgery holds: no reference window, no correction
    ctl = CapController(forged, BOUNDS, 10.0, start, borrowed=True)
    run(ctl, 3000, noise=0.01)
    assert ctl.disowned is not None and "from the borrowed profile's 130 ms" in ctl.disowned
    assert ctl.points() == ctl.learned() and 400.0 in [p.power_cap_w for p in ctl.learned()]
    assert truth_time(ctl.cap_w) / 0.1 - 1.0 <= 0.10
    # an honest colleague's profile: measured again, within both errors, kept and pooled as a repeat's
    honest = [*profiled(1.0), CapPoint(400.0, 0.1, 300.0, REFERENCE_RUN_ITERS, 1.0, 4, REFERENCE_RUN_ITERS)]
    kept = CapController(honest, BOUNDS, 10.0, job_cap_choice(honest, BOUNDS, 10.0).cap_w, borrowed=True)
    run(kept, 3000, noise=0.01)
    assert kept.disowned is None and any(m.cap_w == 400.0 for m in kept.moves)
    assert kept.points()[:len(honest)] == tuple(honest)
