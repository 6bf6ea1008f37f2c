"""The cap-curve model (fit from a few caps, prior from the Zeus traces) and the cap choice."""

from __future__ import annotations

import math
import statistics

import pytest

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.jobmodel import capchoice as cc
from ecolaunch.jobmodel import capcurve as jc
from ecolaunch.jobmodel import powercap as pc
from ecolaunch.sim.truth import vendored_zeus_curves



def synthetic(p_free_w: float, exponent: float, caps: list[float], t0_s: float = 0.5) -> dict[float, CapPoint]:
    """A DVFS-like job independent of the prior: power follows 0.95 x cap below its free draw, time ~ 1/power^b."""
    out = {}
    for c in caps:
        p = min(p_free_w, 0.95 * c)
        out[c] = CapPoint(c, t0_s * (p_free_w / p) ** exponent, p)
    return out


def fit_from_profile(truth: dict[float, CapPoint],
                     prior: jc.CapPrior = jc.DEFAULT_PRIOR) -> tuple[jc.CapCurve, list[float]]:
    caps = sorted(truth)
    wanted = pc.profile_caps(caps[0], caps[-1], uncapped_power_w=truth[caps[-1]].power_w)
    profiled = sorted({min(caps, key=lambda c: abs(c - w)) for w in wanted})
    return jc.fit_curve([truth[c] for c in profiled], prior), profiled


def mape(model: jc.CapCurve, truth: dict[float, CapPoint], skip: list[float]) -> tuple[float, float]:
    caps = [c for c in truth if c not in skip]
    t = statistics.fmean(abs(model.predict(c).iter_time_s / truth[c].iter_time_s - 1) for c in caps)
    p = statistics.fmean(abs(model.predict(c).power_w / truth[c].power_w - 1) for c in caps)
    return 100 * t, 100 * p


def measured_range(truth: dict[float, CapPoint], profiled: list[float]) -> dict[float, CapPoint]:
    return {c: p for c, p in truth.items() if c >= min(profiled)}


def assert_extrapolation_is_monotone(model: jc.CapCurve, truth: dict[float, CapPoint],
                                     profiled: list[float]) -> None:
    """Below the lowest measured cap (the slowest caps, ~65 % of the job's power and less) the model
    extrapolates and may err by tens of percent; it still never predicts less slowdown than it measured at
    that cap, so no bound tighter than that measured slowdown can be met by extrapolating."""
    lowest = min(profiled)
    times = [model.predict(c).iter_time_s for c in sorted(truth, reverse=True) if c <= lowest]
    assert times[0] == pytest.approx(truth[lowest].iter_time_s, rel=1e-9)
    assert all(b >= a * (1 - 1e-9) for a, b in zip(times, times[1:]))


def true_optimum(truth: dict[float, CapPoint], bound_pct: float) -> float:
    hi = max(truth)
    ok = [c for c in truth if truth[c].iter_time_s <= (1 + bound_pct / 100) * truth[hi].iter_time_s]
    return min(ok, key=lambda c: (truth[c].iter_time_s * truth[c].power_w, c))


# --- fitting ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("p_free_w", "exponent"), [(280, 0.9), (220, 0.6), (160, 1.2)])
def test_fit_on_synthetic_curves(p_free_w: float, exponent: float) -> None:
    truth = synthetic(p_free_w, exponent, pc.cap_grid(100, 300))
    model, profiled = fit_from_profile(truth)
    assert len(profiled) <= 3
    for c in profiled:  # measured caps are reproduced
        assert model.predict(c).iter_time_s == pytest.approx(truth[c].iter_time_s, rel=1e-9)
        assert model.predict(c).power_w == pytest.approx(truth[c].power_w, rel=1e-9)
    # between the measured caps (where a 10 % bound is decided) the curve is followed closely
    time_mape, power_mape = mape(model, measured_range(truth, profiled), profiled)
    assert time_mape < 2.0
    assert power_mape < 5.0
    assert_extrapolation_is_monotone(model, truth, profiled)
    choice = cc.choose_cap(model, sorted(truth), 10.0, 1.0, 300)
    assert abs(choice.cap_w - true_optimum(truth, 10.0)) <= 25


def test_flat_job_needs_one_cap_and_is_left_uncapped() -> None:
    truth = synthetic(60, 1.0, pc.cap_grid(100, 250))
    model, profiled = fit_from_profile(truth)
    assert profiled == [250]
    assert model.is_flat
    assert {round(model.predict(c).iter_time_s, 12) for c in truth} == {0.5}
    choice = cc.choose_cap(model, sorted(truth), 10.0, 1.0, 250)
    assert choice.cap_w == 250  # no cap saves anything: none is set for nothing
    assert choice.slowdown_pct == pytest.approx(0.0) and choice.saving_pct == pytest.approx(0.0)
    assert "not bound by any cap" in choice.reason
    # Zeus's plain rule (the baseline) takes the lowest of equal costs
    assert cc.choose_cap(model, sorted(truth), 10.0, 1.0, 250, z=0.0, min_saving_pct=0.0).cap_w == 100


def test_non_binding_caps_pool_their_power_and_keep_their_own_times() -> None:
    points = [CapPoint(250, 1.0, 50), CapPoint(175, 1.2, 52), CapPoint(100, 1.1, 48)]
    model = jc.fit_curve(points)
    assert model.reference_iter_time_s == pytest.approx(1.0)  # the top's time, never their mean (1.1)
    assert model.reference_power_w == pytest.approx(50)  # what the job draws: their mean
    assert model.is_flat  # no cap binds it by the prior ...
    assert model.predict(175).iter_time_s == pytest.approx(1.2)  # ... but what each cap measured counts
    assert model.predict(100).iter_time_s == pytest.approx(1.1)


#: Zeus's own profiling windows of ResNet-18 on 4 A40s (You et al., NSDI '23, Apache-2.0; the data set's
#: ``profile_windows/A40+resnet18+gpu0,1,2,3.csv``): power limit (W), seconds for the window, mean joules per GPU
ZEUS_A40_RESNET18_4GPU = [
    (300, 33.27751154080033, 4130.0), (275, 33.00594837591052, 4213.7), (250, 36.48891949467361, 4464.3),
    (225, 36.66162250004709, 4375.6), (200, 37.248074693605304, 4283.2), (175, 36.39538828097284, 4061.8),
    (150, 38.184570075944066, 4105.8), (125, 36.32660359144211, 3830.5), (100, 37.29101261496544, 3739.0),
]


@pytest.mark.parametrize("bound_pct", [5.0, 10.0])
def test_the_bound_is_kept_against_the_window_measured_at_the_highest_cap(bound_pct: float) -> None:
    # the job draws about 124 W, so every cap from 175 W up "does not bind" it by the prior; yet it ran 10 % slower
    # at 250 W than at 300 W. Averaged into the reference, the cap chosen under a 5 % bound ran 9.2 % slower than the
    # window at 300 W.
    points = [CapPoint(cap, s / 40, j / s) for cap, s, j in ZEUS_A40_RESNET18_4GPU]
    model = jc.fit_curve(points)
    top = points[0]
    assert model.reference_iter_time_s == top.iter_time_s
    choice = cc.choose_cap(model, [c for c, _, _ in ZEUS_A40_RESNET18_4GPU], bound_pct, 1.0, 300, z=0.0)
    measured = next(p for p in points if p.power_cap_w == choice.cap_w)
    assert measured.iter_time_s <= top.iter_time_s * (1 + bound_pct / 100)


def test_duplicate_caps_are_averaged() -> None:
    model = jc.fit_curve([CapPoint(250, 1.0, 200), CapPoint(250, 1.2, 220)])
    assert model.reference_iter_time_s == pytest.approx(1.1)
    assert model.reference_power_w == pytest.approx(210)


def test_prior_is_monotone_and_normalized() -> None:
    prior = jc.DEFAULT_PRIOR
    assert all(a >= b for a, b in zip(prior.time_ratio, prior.time_ratio[1:]))
    assert all(a <= b for a, b in zip(prior.power_ratio, prior.power_ratio[1:]))
    assert min(prior.time_ratio) >= 1.0
    assert prior.time_at(2.0) == pytest.approx(1.0, abs=0.01)  # a cap far above the job's draw changes nothing
    assert prior.power_at(2.0) == pytest.approx(1.0, abs=0.01)


def test_default_prior_matches_a_refit_from_the_traces() -> None:
    curves = vendored_zeus_curves()  # the loader's curves on the package's copies (tests/sim/test_truth.py)
    refit = jc.CapPrior.fit([c.points for c in curves])
    assert refit.u_grid == jc.DEFAULT_PRIOR.u_grid
    assert refit.time_ratio == pytest.approx(jc.DEFAULT_PRIOR.time_ratio, abs=1e-4)
    assert refit.power_ratio == pytest.approx(jc.DEFAULT_PRIOR.power_ratio, abs=1e-4)


@pytest.mark.parametrize(("gpu", "workload", "batch_size"), [
    ("V100", "imagenet/resnet50", 256), ("A40", "squad/bert_base_uncased", 32),
    ("RTX6000", "librispeech/deepspeech2", 32),
])
def test_fit_on_real_zeus_rows(gpu: str, workload: str, batch_size: int) -> None:
    curves = vendored_zeus_curves()
    (curve,) = [c for c in curves if (c.gpu, c.workload, c.batch_size) == (gpu, workload, batch_size)]
    network = workload.split("/")[1]
    prior = jc.CapPrior.fit([c.points for c in curves if c.workload.split("/")[1] != network])  # not trained on it
    truth = {p.power_cap_w: p for p in curve.points}
    model, profiled = fit_from_profile(truth, prior)
    time_mape, power_mape = mape(model, measured_range(truth, profiled), profiled)
    assert time_mape < 2.0  # 0.5-0.8 % today
    assert power_mape < 5.0
    assert_extrapolation_is_monotone(model, truth, profiled)
    choice = cc.choose_cap(model, sorted(truth), 10.0, 1.0, max(truth))
    assert abs(choice.cap_w - true_optimum(truth, 10.0)) <= 25


# --- choosing -----------------------------------------------------------------------------------------------


@pytest.fixture
def bound_job() -> tuple[jc.CapCurve, list[float]]:
    truth = synthetic(240, 0.8, pc.cap_grid(100, 300))
    return fit_from_profile(truth)[0], sorted(truth)


@pytest.mark.parametrize("bound_pct", [0.0, 2.0, 5.0, 10.0, 25.0, 60.0])
def test_choice_respects_the_slowdown_bound(bound_job, bound_pct: float) -> None:
    model, caps = bound_job
    choice = cc.choose_cap(model, caps, bound_pct, 1.0, 300)
    assert choice.slowdown_pct <= bound_pct + 1e-6
    ref = model.predict(300).iter_time_s
    assert choice.predicted_iter_time_s <= ref * (1 + bound_pct / 100) + 1e-12


def test_eta_one_picks_minimum_energy(bound_job) -> None:
    model, caps = bound_job
    choice = cc.choose_cap(model, caps, None, 1.0, 300)
    energies = {c: model.predict(c).iter_time_s * model.predict(c).power_w for c in caps}
    assert choice.cap_w == min(energies, key=energies.get)
    assert choice.predicted_energy_j_per_iter == pytest.approx(energies[choice.cap_w])
    assert choice.cap_w < 300


def test_eta_zero_picks_the_fastest(bound_job) -> None:
    model, caps = bound_job
    choice = cc.choose_cap(model, caps, None, 0.0, 300)
    times = {c: model.predict(c).iter_time_s for c in caps}
    assert times[choice.cap_w] == min(times.values())


def test_no_feasible_cap_falls_back_to_the_fastest(bound_job) -> None:
    model, _ = bound_job
    choice = cc.choose_cap(model, [100.0, 125.0], 5.0, 1.0, 300)
    assert choice.cap_w == 125.0
    assert "no candidate cap meets" in choice.reason


# --- grids and plans ----------------------------------------------------------------------------------------


def test_cap_grid_includes_bounds_and_25w_multiples() -> None:
    assert pc.cap_grid(100, 260) == [100, 125, 150, 175, 200, 225, 250, 260]
    assert pc.cap_grid(110, 160) == [110, 125, 150, 160]
    assert pc.cap_grid(200, 200) == [200]


@pytest.mark.parametrize(("lo", "hi", "power", "expected"), [
    # no power known: fractions of the max
    (100, 250, None, [250, 225, 175]), (100, 300, None, [300, 250, 200]), (200, 700, None, [700, 600, 450]),
    # fractions of the job's own power: a job drawing 174 W of a 400 W board gets caps that bind it
    (100, 400, 174.0, [400, 150, 125]), (100, 400, 400.0, [400, 350, 250]), (100, 400, 500.0, [400, 350, 250]),
    (100, 250, 150.0, [250, 125, 100]), (125, 250, 150.0, [250, 125]), (100, 250, 110.0, [250, 100]),
    # input-bound below the lowest cap: nothing binds, one cap
    (100, 250, 60.0, [250]),
])
def test_profile_caps(lo: float, hi: float, power: float | None, expected: list[float]) -> None:
    assert pc.profile_caps(lo, hi, uncapped_power_w=power) == expected


# --- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("points", [
    [], [CapPoint(250, -1.0, 200)], [CapPoint(250, 1.0, 0.0)], [CapPoint(float("nan"), 1.0, 200)],
    [CapPoint(250, math.inf, 200)],
])
def test_fit_rejects_bad_points(points: list[CapPoint]) -> None:
    with pytest.raises(ConfigError):
        jc.fit_curve(points)


def test_bad_choice_arguments(bound_job) -> None:
    model, caps = bound_job
    for kwargs in ({"caps_w": []}, {"eta": 1.5}, {"eta": -0.1}, {"allowed_slowdown_pct": -1.0},
                   {"allowed_slowdown_pct": float("nan")}, {"max_power_w": 0.0}):
        args = {"model": model, "caps_w": caps, "allowed_slowdown_pct": 10.0, "eta": 1.0, "max_power_w": 300.0}
        args.update(kwargs)
        with pytest.raises(ConfigError):
            cc.choose_cap(**args)
    with pytest.raises(ConfigError):
        model.predict(0.0)


def test_bad_grid_and_plan_arguments() -> None:
    with pytest.raises(ConfigError):
        pc.cap_grid(300, 100)
    with pytest.raises(ConfigError):
        pc.cap_grid(100, 300, step_w=0)
    with pytest.raises(ConfigError):
        pc.profile_caps(100, 300, fractions=(1.0, 1.5))
    with pytest.raises(ConfigError):
        jc.CapPrior((0.5, 0.4), (1.0, 1.0), (1.0, 1.0))
    with pytest.raises(ConfigError):
        jc.CapPrior.fit([])


# --- what was measured: robust statistics, the margin, pooling -------------------------------------------------
def test_iteration_stats_ignore_a_stall_and_measure_the_spread() -> None:
    rng = __import__("random").Random(1)
    times = [0.1 * (1 + rng.gauss(0, 0.03)) for _ in range(40)]
    plain = cc.iteration_stats(times)
    stalled = cc.iteration_stats(times[:-1] + [5.0])  # one data-loader wait of 50 iterations
    assert stalled.mean_s == pytest.approx(plain.mean_s, rel=0.01)
    assert 2.0 < plain.cv_pct < 4.5 and stalled.cv_pct == pytest.approx(plain.cv_pct, rel=0.2)
    assert plain.count == 40 and plain.se_pct == pytest.approx(plain.cv_pct / 40 ** 0.5)
    assert cc.iteration_stats([]) is None


def test_the_margin_comes_from_what_was_measured() -> None:
    exact = jc.fit_curve([CapPoint(400, 0.1, 300), CapPoint(250, 0.114, 250), CapPoint(200, 0.13, 200)])
    assert cc.cap_margin_pct(exact, 250) == cc.MIN_MARGIN_PP  # a measured cap, measured without noise: the floor
    between = [cc.cap_margin_pct(exact, c) for c in (265, 275, 290)]
    assert cc.MIN_MARGIN_PP < between[0] < between[1] < between[2]  # grows with the distance from a measured cap
    assert cc.cap_margin_pct(exact, 150) >= cc.MARGIN_Z * cc.EXTRAPOLATION_ERROR_PP  # below the lowest measured
    noisy = jc.fit_curve([CapPoint(400, 0.1, 300, 15, 3.0), CapPoint(250, 0.114, 250, 15, 3.0),
                              CapPoint(200, 0.13, 200, 15, 3.0)])
    # the two points' standard errors (3 % over 15 iterations each) and the reference window's own error: one
    # profiling window, its part that repeats from run to run and its part that does not
    window = cc.REPEATING_WINDOW_ERROR_PCT ** 2 + cc.WINDOW_ERROR_PCT ** 2
    assert cc.cap_margin_pct(noisy, 250) == pytest.approx(cc.MARGIN_Z * (2 * 9.0 / 15 + window) ** 0.5)
    more = jc.fit_curve([CapPoint(400, 0.1, 300, 600, 3.0), CapPoint(250, 0.114, 250, 600, 3.0)])
    assert cc.cap_margin_pct(more, 250) == pytest.approx(cc.MARGIN_Z * (2 * 9.0 / 600 + window) ** 0.5)
    assert cc.cap_margin_pct(more, 250) < cc.cap_margin_pct(noisy, 250)  # more iterations, less margin ...
    assert cc.cap_margin_pct(more, 250) > cc.MARGIN_Z * window ** 0.5  # ... but never less than one window's
    # a second window at a cap that does not bind is a measurement of its own, not of the reference: the reference
    # is the top's window alone, with its whole window error
    twice = jc.fit_curve([CapPoint(400, 0.1, 300, 600, 3.0), CapPoint(395, 0.1, 300, 600, 3.0),
                          CapPoint(250, 0.114, 250, 600, 3.0)])
    assert cc.reference_se_pct(twice) == pytest.approx((9.0 / 600 + window) ** 0.5)
    # the closed loop's live test leaves it out; a curve nobody measured (no spread) has none
    assert cc.reference_se_pct(more, window=False) == pytest.approx(3.0 / 600 ** 0.5)
    assert cc.reference_se_pct(exact) == 0.0


def test_pooled_windows_shrink_the_reference_error_to_the_part_that_repeats() -> None:
    """Issue 39: a reference pooled from windows of several runs; profiling windows' repeating part stays by the share
    of the iterations they measured, the rest shrinks as the root of the windows; a closed loop's windows inside runs
    repeat nothing."""
    profiled = CapPoint(400, 0.1, 300, 30, 3.0)
    assert cc.window_error_pct(profiled) == pytest.approx((cc.REPEATING_WINDOW_ERROR_PCT ** 2
                                                           + cc.WINDOW_ERROR_PCT ** 2) ** 0.5)
    in_run = [CapPoint(400, 0.1, 300, 30, 3.0, 1, 30) for _ in range(4)]
    (pooled,) = jc.merge_points([profiled, *in_run])
    assert (pooled.windows, pooled.iterations, pooled.run_iterations) == (5, 150, 120)
    assert pooled.profiled_share == pytest.approx(0.2)
    assert cc.window_error_pct(pooled) == pytest.approx(((0.2 * cc.REPEATING_WINDOW_ERROR_PCT) ** 2
                                                         + cc.WINDOW_ERROR_PCT ** 2 / 5) ** 0.5)
    errors = [cc.window_error_pct(jc.merge_points([profiled, *in_run[:k]])[0]) for k in range(5)]
    assert errors == sorted(errors, reverse=True) and errors[-1] < errors[0] / 3  # each run's window helps
    # many profiling windows alone (a job profiled again and again) never go below their repeating part
    (reprofiled,) = jc.merge_points([profiled] * 25)
    assert cc.window_error_pct(reprofiled) > cc.REPEATING_WINDOW_ERROR_PCT
    # what history wrote before windows were counted: one window of it, all profiled
    assert CapPoint(400, 0.1, 300, 30, 3.0).window_count == 1 and CapPoint(400, 0.1, 300).window_count == 0
    # the margin follows: the same curve with a pooled reference keeps less back at a measured cap
    low = CapPoint(250, 0.114, 250, 600, 3.0, 1, 600)
    first = jc.fit_curve([profiled, low])
    later = jc.fit_curve([profiled, *in_run, low])
    assert cc.cap_margin_pct(later, 250) < cc.cap_margin_pct(first, 250) - 2.0


def test_a_reference_window_is_due_until_runs_measured_enough_of_it() -> None:
    profiled = CapPoint(400, 0.1, 300, 30, 3.0)
    assert cc.reference_window_due([profiled, CapPoint(250, 0.114, 250, 30, 3.0)], 400)
    assert not cc.reference_window_due([profiled], 350)  # nothing measured at that top
    assert not cc.reference_window_due([CapPoint(400, 0.1, 300)], 400)  # nobody measured it: a table, a trace
    window = CapPoint(400, 0.1, 300, 30, 3.0, 1, 30)
    runs = cc.REFERENCE_RUN_ITERS // 30
    assert cc.reference_window_due([profiled, *[window] * (runs - 1)], 400)
    assert not cc.reference_window_due([profiled, *[window] * runs], 400)


def test_the_choice_keeps_its_margin_and_noisier_profiles_choose_higher_caps() -> None:
    points = [CapPoint(400, 0.1, 300), CapPoint(250, 0.114, 250), CapPoint(200, 0.13, 200)]
    exact = cc.job_cap_choice(points, (100, 400), 10.0)
    noisy = cc.job_cap_choice([CapPoint(p.power_cap_w, p.iter_time_s, p.power_w, 15, 3.0) for p in points],
                              (100, 400), 10.0)
    for choice in (exact, noisy):
        assert choice.slowdown_pct + choice.margin_pct <= 10.0 + 1e-9 and choice.cap_w % cc.CHOICE_STEP_W == 0
    assert noisy.cap_w > exact.cap_w and noisy.margin_pct > exact.margin_pct
    assert "kept back for what is not known" in noisy.reason
    assert cc.job_cap_choice([], (100, 400), 10.0) is None


def test_points_at_one_cap_pool_by_iterations() -> None:
    merged = jc.merge_points([CapPoint(250, 0.11, 250, 15, 3.0), CapPoint(250, 0.12, 240, 585, 1.0),
                              CapPoint(400, 0.1, 300)])
    assert [p.power_cap_w for p in merged] == [250, 400]
    assert merged[0].iterations == 600 and merged[0].iter_time_s == pytest.approx((15 * 0.11 + 585 * 0.12) / 600)
    assert merged[0].iter_time_cv_pct == pytest.approx(((15 * 9 + 585 * 1) / 600) ** 0.5)


def test_no_cap_is_predicted_faster_than_uncapped() -> None:
    """A point measured faster at a lower cap (a disturbed reference, noise) reads as no slowdown, never a negative
    one, and the cap choice on it never reports one (issue 23: "predicted -97.5 % slower")."""
    points = [CapPoint(400.0, 0.8686, 160.0, 15, 0.7), CapPoint(125.0, 0.4574, 117.4, 15, 143.6),
              CapPoint(100.0, 0.0106, 100.1, 462, 63.2)]  # the junk profile of the disturbed first run
    curve = jc.fit_curve(points)
    for cap in range(100, 401, 5):
        assert curve.predict(float(cap)).iter_time_s >= curve.reference_iter_time_s - 1e-12
    choice = cc.choose_cap(curve, [float(c) for c in range(100, 401, 5)], 10.0, 1.0, 400.0)
    assert choice.slowdown_pct >= 0.0 and "slowdown -" not in choice.reason
    assert cc.contradiction(points) is not None and "faster than" in cc.contradiction(points)
    assert cc.contradiction([CapPoint(400.0, 0.1, 300.0, 15, 2.0), CapPoint(250.0, 0.098, 250.0, 15, 2.0)]) is None


def test_a_lower_cap_faster_than_a_higher_one_beyond_their_spreads_contradicts_the_profile() -> None:
    """The audit's contended run (issue 23): 31.8 ms at 125 W with a 76 % spread, between 3.4 ms at 100 W and
    uncapped. No cap test against the reference catches it (125 W is slower than uncapped, as caps are); the pair does."""
    points = [CapPoint(100.0, 0.0034, 90.0, 15, 5.0), CapPoint(125.0, 0.0318, 110.0, 15, 76.0),
              CapPoint(400.0, 0.0034, 125.0, 30, 3.0)]
    why = cc.contradiction(points)
    assert why is not None and "at 100 W is 89 % faster than 31.8 ms at 125 W" in why
    # within the larger spread of the two, or the 10 % floor, it is noise, not a contradiction
    assert cc.contradiction([CapPoint(100.0, 0.0034, 90.0, 15, 5.0), CapPoint(125.0, 0.0037, 110.0, 15, 12.0),
                             CapPoint(400.0, 0.0034, 125.0, 30, 3.0)]) is None
    assert cc.contradiction([CapPoint(100.0, 0.040, 90.0, 15, 2.0), CapPoint(150.0, 0.043, 110.0, 15, 2.0),
                             CapPoint(400.0, 0.030, 125.0, 30, 2.0)]) is None  # 7 % faster: under the floor
