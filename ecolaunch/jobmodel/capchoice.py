"""The one cap choice: on a job's measured curve, the least energy per unit of work within its bound, with the
margin what was measured leaves.

What lives here: :func:`job_cap_choice`, the call every path makes, :func:`choose_cap` -> :class:`CapChoice`,
:func:`cap_margin_pct` (the part of a bound kept back for what is not known), :func:`iteration_stats` (a robust mean
of iteration times and their spread) and :func:`off_profile` (whether iterations can be the profiled job's,
undisturbed). What does not: the curve model (:class:`ecolaunch.jobmodel.capcurve.CapCurve`), which caps to profile
(:mod:`ecolaunch.jobmodel.powercap`), measuring, setting caps. The objective and its margin:
docs/profiling.md#one-objective-on-every-path.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR, NON_BINDING_RATIO, CapCurve, CapPrior, fit_curve, merge_points
from ecolaunch.jobmodel.powercap import cap_grid

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class CapChoice:
    """The chosen cap and what the model predicts there; ``reason`` is one line for logs and the CLI.

    ``margin_pct`` is the part of the slowdown bound kept back at the chosen cap for what is not known
    (:func:`cap_margin_pct`); ``saving_pct`` the predicted energy per iteration saved against the top cap.
    """

    cap_w: float
    predicted_iter_time_s: float
    predicted_power_w: float
    predicted_energy_j_per_iter: float
    slowdown_pct: float
    reason: str
    margin_pct: float = 0.0
    saving_pct: float = 0.0


# --- what was measured: robust iteration statistics and the margin they leave ---------------------------
#: one-sided normal quantile of the margin: the bound is kept with ~99 % confidence given what was measured
MARGIN_Z = 2.33
#: held-out slowdown error of the curve model, in percentage points per unit of ``u`` (cap / uncapped power)
#: between a cap and the nearest measured cap. Replaying the Zeus traces leave-one-workload-out gives the robust
#: sigma (1.4826 x MAD) of predicted minus true slowdown at held-out caps by distance from the nearest profiled
#: cap (``benchmarks/powercap_accuracy.py``; those include the traces' own noise, seen on non-binding caps of the
#: same curve); 6 points per ``u`` follows that line. Below the lowest measured cap the curve is extrapolated: the
#: same replay gave robust sigmas of a few points at any distance, hence the floor. Checked without the networks
#: the measured world plays (issue 20; ``benchmarks/powercap_accuracy.py --margin``; every Zeus network is played
#: by some type, so per type: the curves of the networks it does not play): 6.2 to 9.4 points per ``u`` across
#: the types' network sets, against 8.5 on all curves (bootstrap over curves, 95 %: 7.0 to 9.9), all by a
#: least-squares fit through zero of the binned sigmas. Leaving the played networks out does not move the slope
#: beyond that noise, so the constant stays. That fit reads higher than 6 on all curves alike (with an intercept
#: the same bins give about 5): the constant sits between the two readings, whatever the played networks.
MODEL_ERROR_PP_PER_U = 6.0
EXTRAPOLATION_ERROR_PP = 5.0
#: the error (% of it) of one measured window's mean beyond its iterations' standard error: what the host, the clocks
#: and the data path move from one window to the next, which the iterations' spread inside a window cannot show.
#: ecolaunch's profiler on an H200 read 164.7 / 177.1 / 213.6 ms where the reference sweep of the same day read
#: 164.4 / 177.2 / 217.7 (``data/h200-2026-11-30``): +0.2, -0.1, -1.9 %, root mean square 1.1 %. Windows of real
#: training jobs move more: Zeus's profiling windows at caps that do not bind (cap >= 1.1 x the window's power,
#: ``data/zeus-nsdi23/profile_windows``) spread 0.7 to 6.4 % by job, median 2.1 %. It is counted on the uncapped
#: reference alone (:func:`reference_se_pct`, divided by the root of its windows, :func:`window_error_pct`): every
#: predicted slowdown is a ratio to it, and it is measured for a window or two a run, while the closed loop measures
#: the job at its cap all through every run and corrects what that window misread. ``benchmarks/gpu_check.py``'s sweep measures it
#: again on a lent GPU (``window_error_pct``: a second window at the maximum cap, after the sweep).
WINDOW_ERROR_PCT = 1.1
#: the part of a profiling window's time error (% of it) that repeats in every run of the same job on the same board
#: (the same script reaches the same phase of its data at the same iteration, the board warms the same way through
#: the same schedule of caps), so that pooling profiled windows of repeated runs does not shrink it. Zeus's profiling
#: windows of real training jobs at caps that cannot bind them spread by a median 2.49 % (``benchmarks/window_error.py``,
#: ``data/zeus-nsdi23/profile_windows``); the part :data:`WINDOW_ERROR_PCT` does not explain is taken as repeating:
#: ``sqrt(2.49² - 1.1²)`` = 2.2 %. One sweep per job cannot tell the two parts apart, so this is the upper reading,
#: as the measured world's (which reads the same windows against its own 1 %: 2.3 %). A closed loop's windows inside a
#: run start at no fixed point of the script, so only :data:`WINDOW_ERROR_PCT` is counted on them
#: (:func:`window_error_pct`).
REPEATING_WINDOW_ERROR_PCT = 2.2
#: iterations a closed loop measures of the uncapped reference inside runs (over all of the job's runs) before it stops
#: measuring it: four windows of ``ControlSettings.window_iters``; with them a profiled reference's repeating part
#: weighs a fifth or less (:func:`reference_window_due`)
REFERENCE_RUN_ITERS = 120
#: the least margin, whatever was measured: a first run's whole-run slowdown also counts its profiling iterations
#: at lower caps, up to a few points over the 2,000-iteration runs of ``benchmarks/cap_control.py`` (the most on
#: steep curves, whose lowest profiled cap runs much slower). With no measurement noise (no other margin) this
#: floor halved the first runs breaking their bound there, for a fraction of a point of saving (as that run prints).
MIN_MARGIN_PP = 0.5
#: a cap that saves less than this (% of energy per iteration against the top cap) is not worth setting
MIN_SAVING_PCT = 0.5
#: the grid caps are chosen on: NVML takes any whole-watt limit; 5 W is finer than the curve's accuracy
CHOICE_STEP_W = 5.0
#: the most waiting jobs a cap choice counts (:func:`queue_eta`): a queue this long already asks for speed over
#: energy nearly alone, and a forged queue (a member's job files) can do no more than that
MAX_WAITING = 64.0
#: share of iterations trimmed at each end before averaging (data-loader stalls, checkpoints, GC pauses)
TRIM_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class IterationStats:
    """A robust summary of iteration times: trimmed mean (s), robust spread (coefficient of variation, %), count."""

    mean_s: float
    cv_pct: float
    count: int

    @property
    def se_pct(self) -> float:
        return self.cv_pct / math.sqrt(self.count) if self.count else 0.0


def point_stats(point: CapPoint) -> IterationStats:
    """What a measured cap point says of its iterations, as :class:`IterationStats` (spread 0 when not known)."""
    return IterationStats(point.iter_time_s, point.iter_time_cv_pct or 0.0, point.iterations)


def iteration_stats(times_s: Sequence[float]) -> IterationStats | None:
    """Trimmed mean of ``times_s`` (``TRIM_FRACTION`` off each end) and its spread; None for an empty sequence.

    The spread is 1.4826 x the median absolute deviation over the median (a normal sigma that outliers do not
    inflate), as a percentage. Trimming and MAD make one stalled iteration (a data-loader wait, a checkpoint)
    move neither, as it would move a plain mean.
    """
    xs = sorted(t for t in times_s if t > 0 and math.isfinite(t))
    if not xs:
        return None
    k = int(len(xs) * TRIM_FRACTION)
    kept = xs[k: len(xs) - k] or xs
    med = statistics.median(xs)
    mad = statistics.median(abs(x - med) for x in xs)
    return IterationStats(statistics.fmean(kept), 100.0 * 1.4826 * mad / med if med > 0 else 0.0, len(xs))


#: a run's iterations count as far outside its profile's spread when their robust mean lies more than this many of
#: the profile's robust spreads (its per-iteration coefficient of variation at the nearest measured cap) from what
#: the profile says at the cap they ran at, ...
FAR_SPREADS = 4.0
#: ... and at least this factor away, either way: a cap the curve mispredicts moves a job by a few tens of percent
#: at most within the caps the choice keeps within a bound; a stalled data loader, a CPU shared with other
#: processes, or another job under the same history key moves it by more
FAR_MIN_RATIO = 1.5
#: the least a time measured at a lower cap must undercut the uncapped reference by, beyond its measurement error,
#: to contradict it (a lower cap never makes a job faster). Less is read as no slowdown (the curve never predicts
#: a lower cap faster): windows of 15 iterations of a millisecond-long CPU step on a loaded host differ by several
#: percent without any stall, and such a profile must not be thrown away for it.
CONTRADICTION_MIN_PCT = 10.0


def off_profile(model: CapCurve, cap_w: float, measured: IterationStats) -> str | None:
    """Why iterations measured at ``cap_w`` (their robust statistics) cannot be this profile's job running
    undisturbed, or None when they can:

    - *far outside its spread*: their mean is at least :data:`FAR_MIN_RATIO` times, and :data:`FAR_SPREADS`
      spreads of the nearest measured point, away from what the curve says at ``cap_w`` (slower: a stall, contention
      or another job; faster: a profile measured while disturbed, or another job);
    - *faster than uncapped*: at a cap below the reference cap, their mean undercuts the reference time by more
      than ``MARGIN_Z`` standard errors of the two, than the reference's own spread, and than
      :data:`CONTRADICTION_MIN_PCT`: no cap makes a job faster, so one of the two measurements was disturbed.

    What such a run measured must teach the curve nothing (the closed loop, the history); the reason is one phrase.
    """
    expected = model.at(cap_w).iter_time_s
    nearest = min(model.points, key=lambda p: abs(p.power_cap_w - cap_w))
    spread = FAR_SPREADS * (nearest.iter_time_cv_pct or 0.0) / 100.0
    ratio = measured.mean_s / expected
    if max(ratio, 1.0 / ratio) >= max(FAR_MIN_RATIO, 1.0 + spread):
        how = f"{ratio:.3g} times" if ratio >= 1 else f"1/{1.0 / ratio:.3g} of"
        return (f"{measured.mean_s * 1e3:.4g} ms per iteration at {cap_w:.0f} W is {how} the profile's "
                f"{expected * 1e3:.4g} ms there (spread {nearest.iter_time_cv_pct or 0.0:.2g} %)")
    return undercuts_reference(model, cap_w, measured)


def contradiction(points: Sequence[CapPoint]) -> str | None:
    """Why a job's measured points contradict each other, or None: a lower cap measured faster than uncapped
    (:func:`undercuts_reference`), or than a higher measured cap, beyond the error of both (the same test: at least
    :data:`CONTRADICTION_MIN_PCT`, both points' spreads, ``MARGIN_Z`` standard errors of the two). Such a curve was
    measured while disturbed (a stall under one cap's window), and read as it stands it would promise low caps that
    cost nothing, or a slowdown between two caps that no cap causes."""
    found = _contradiction(points)
    return None if found is None else found[0]


def contradicted_cap(points: Sequence[CapPoint]) -> float | None:
    """The cap whose window :func:`contradiction` reads as disturbed, or None: the higher cap of the first pair that
    contradicts (no lower cap runs faster, so the higher one's window read slow: a stall), the uncapped reference when
    a lower cap undercuts it. Measuring that cap once more is what can clear the contradiction."""
    found = _contradiction(points)
    return None if found is None else found[1]


def _contradiction(points: Sequence[CapPoint]) -> tuple[str, float] | None:
    if not points:
        return None
    model = fit_curve(points)
    for p in model.points:
        if (why := undercuts_reference(model, p.power_cap_w, point_stats(p))) is not None:
            return why, model.reference_cap_w
    measured = sorted((p for p in model.points if p.power_cap_w < model.reference_cap_w - _EPS),
                      key=lambda p: p.power_cap_w)
    for i, low in enumerate(measured):
        for high in measured[i + 1:]:
            error = max(CONTRADICTION_MIN_PCT, low.iter_time_cv_pct or 0.0, high.iter_time_cv_pct or 0.0,
                        MARGIN_Z * math.hypot(low.se_pct, high.se_pct))
            faster = 100.0 * (1.0 - low.iter_time_s / high.iter_time_s)
            if faster > error:
                return (f"{low.iter_time_s * 1e3:.4g} ms per iteration at {low.power_cap_w:.0f} W is {faster:.0f} % "
                        f"faster than {high.iter_time_s * 1e3:.4g} ms at {high.power_cap_w:.0f} W, which no lower "
                        "cap does"), high.power_cap_w
    return None


def undercuts_reference(model: CapCurve, cap_w: float, measured: IterationStats) -> str | None:
    """The second test of :func:`off_profile` alone (the profiler's check of its own points): why iterations at
    ``cap_w`` below the reference cap are faster than the reference time beyond both measurements' error, or None."""
    if cap_w >= model.reference_cap_w - _EPS:
        return None
    ref = model.reference_iter_time_s
    # the reference's own spread too: windows of a jittery job (a loaded host) differ by a part of it, stall or not
    spread = model.points[-1].iter_time_cv_pct or 0.0
    error = max(CONTRADICTION_MIN_PCT, spread, MARGIN_Z * math.hypot(reference_se_pct(model), measured.se_pct))
    undercut = 100.0 * (1.0 - measured.mean_s / ref)
    if undercut <= error:
        return None
    return (f"{measured.mean_s * 1e3:.4g} ms per iteration at {cap_w:.0f} W is {undercut:.0f} % faster than "
            f"{ref * 1e3:.4g} ms uncapped, which no cap does")


def cap_margin_pct(model: CapCurve, cap_w: float, z: float = MARGIN_Z) -> float:
    """Slowdown (percentage points) kept back from the bound at ``cap_w``: ``z`` standard errors of the
    predicted slowdown, from what was measured.

    Three independent parts: the standard error of the uncapped reference time (its points' spread over their
    iteration counts, and the window error :data:`WINDOW_ERROR_PCT`: :func:`reference_se_pct`), that of the
    measured cap nearest ``cap_w``, and the curve model's held-out error at the distance from that cap (zero at a
    measured cap; :data:`MODEL_ERROR_PP_PER_U` per unit of ``u`` in between; at least
    :data:`EXTRAPOLATION_ERROR_PP` below the lowest measured cap). Points without a known spread (a trace, a table)
    contribute only the model error. Never less than :data:`MIN_MARGIN_PP`.
    """
    if z <= 0:
        return 0.0
    points = model.points
    se_ref = reference_se_pct(model)
    nearest = min(points, key=lambda p: (abs(p.power_cap_w - cap_w), -p.power_cap_w))
    se_cap = 0.0 if nearest is points[-1] else nearest.se_pct
    distance_u = abs(nearest.power_cap_w - cap_w) / model.reference_power_w
    error = MODEL_ERROR_PP_PER_U * distance_u
    if cap_w < points[0].power_cap_w - _EPS and cap_w < NON_BINDING_RATIO * model.reference_power_w:
        error = max(error, EXTRAPOLATION_ERROR_PP)
    return max(MIN_MARGIN_PP, z * math.sqrt(se_ref ** 2 + se_cap ** 2 + error ** 2))


def reference_se_pct(model: CapCurve, *, window: bool = True) -> float:
    """Standard error (% of it) of the job's uncapped reference time, the time measured at its top cap
    (:func:`~ecolaunch.jobmodel.capcurve.fit_curve`): its spread over its iterations, and, when it was measured (its
    spread known) and ``window``, :data:`WINDOW_ERROR_PCT` (the window's own error); 0 when its spread is not known
    (a trace, a table: nothing measured by ecolaunch). A predicted curve (:class:`~ecolaunch.policy.gnn.GnnFirstCurve`:
    an exact top, its points' uncertainty as their spread) measured no window. The closed loop's test of a live
    reading leaves the window error out (``window=False``): the cap it runs at was chosen with it kept back, and a loop
    that held its readings to it too would raise caps its own choice had just found room for."""
    top = model.points[-1]
    if not top.iterations:
        return 0.0
    se = (top.iter_time_cv_pct or 0.0) / math.sqrt(top.iterations)
    if not window or not _spread_known(top):
        return se
    return math.hypot(se, window_error_pct(top))


def window_error_pct(point: CapPoint) -> float:
    """The error (% of it) of a measured point's mean beyond its iterations' standard error, from the windows it
    pools (docs/profiling.md#pooled-windows-of-repeated-runs): the part of its profiling windows' error that repeats
    from run to run (:data:`REPEATING_WINDOW_ERROR_PCT`, weighed by the share of its iterations they measured), and
    the part that does not (:data:`WINDOW_ERROR_PCT`), which shrinks as the root of its windows. One profiled window:
    2.46 %; with a loop's window inside a run of as many iterations beside it, 1.35 %; four of them, 0.66 %."""
    repeating = REPEATING_WINDOW_ERROR_PCT * point.profiled_share
    return math.hypot(repeating, WINDOW_ERROR_PCT / math.sqrt(max(1, point.window_count)))


def reference_window_due(points: Sequence[CapPoint], top_cap_w: float) -> bool:
    """Whether a run should measure the job's uncapped reference (its time at ``top_cap_w``) for a window inside the
    run: the reference was measured (its spread known) by fewer than :data:`REFERENCE_RUN_ITERS` iterations of closed
    loops inside runs. Every slowdown is a ratio to that reference, and a profiled window's error repeats from run to
    run; a window inside a run does not repeat it."""
    top = pooled_at(points, top_cap_w)
    return top is not None and _spread_known(top) and top.run_iterations < REFERENCE_RUN_ITERS


def pooled_at(points: Sequence[CapPoint], cap_w: float) -> CapPoint | None:
    """The points measured at ``cap_w`` pooled as one (:func:`~ecolaunch.jobmodel.capcurve.merge_points`), None
    when none was."""
    at = merge_points([p for p in points if abs(p.power_cap_w - cap_w) < 1e-6])
    return at[0] if at else None


def _spread_known(point: CapPoint) -> bool:
    return point.iterations > 0 and point.iter_time_cv_pct is not None


def choose_cap(model: CapCurve, caps_w: Sequence[float], allowed_slowdown_pct: float | None,
               eta: float, max_power_w: float, *, z: float = MARGIN_Z,
               min_saving_pct: float = MIN_SAVING_PCT) -> CapChoice:
    """The one objective: least ``eta*E + (1-eta)*max_power_w*T`` per iteration over ``caps_w`` whose predicted
    slowdown plus its margin (:func:`cap_margin_pct` with ``z``) stays within the bound.

    With ``eta = 1`` (the default of the admin policy) that is the least energy per iteration; ``eta < 1`` is
    the admin's alternative, Zeus's ``ZeusCost`` (time weighted by the maximum power). Slowdown is against the
    predicted time at ``max_power_w`` (the top cap, i.e. uncapped). A cap that saves less than
    ``min_saving_pct`` of the top cap's cost is not worth setting: the top cap is chosen then (a job that no
    cap binds runs uncapped). When no cap meets the bound, the fastest one is chosen and the reason says so.
    ``z = 0`` and ``min_saving_pct = 0`` give Zeus's plain rule (the baseline).
    """
    if not caps_w:
        raise ConfigError("no candidate caps to choose from", hint="pass at least one cap, e.g. cap_grid(min, max)")
    if not 0.0 <= eta <= 1.0:
        raise ConfigError(f"eta must be in [0, 1], got {eta!r}", hint="1 = energy only, 0 = time only")
    if not (max_power_w > 0 and math.isfinite(max_power_w)):
        raise ConfigError(f"max_power_w must be a positive number of watts, got {max_power_w!r}")
    if allowed_slowdown_pct is not None and not (allowed_slowdown_pct >= 0 and math.isfinite(allowed_slowdown_pct)):
        raise ConfigError(f"allowed slowdown must be >= 0 %, got {allowed_slowdown_pct!r}",
                          hint="pass None for no bound")
    top = model.predict(max_power_w)
    ref = top.iter_time_s
    top_cost = eta * top.iter_time_s * top.power_w + (1.0 - eta) * max_power_w * top.iter_time_s
    bound = math.inf if allowed_slowdown_pct is None else allowed_slowdown_pct
    rows = []
    for cap in sorted(set(caps_w)):
        pred = model.predict(cap)
        energy = pred.iter_time_s * pred.power_w
        cost = eta * energy + (1.0 - eta) * max_power_w * pred.iter_time_s
        slow = 100.0 * (pred.iter_time_s / ref - 1.0)
        margin = cap_margin_pct(model, cap, z) if cap < max_power_w - _EPS else 0.0
        rows.append((cap, pred, energy, cost, slow, margin))
    feasible = [r for r in rows if r[4] + r[5] <= bound + 1e-6]
    bound_txt = "" if allowed_slowdown_pct is None else f" (bound {bound:g} %"
    if feasible:
        best = min(r[3] for r in feasible)
        row = min(r for r in feasible if r[3] <= best * (1 + 1e-9))
        if 100.0 * (1.0 - row[3] / top_cost) < min_saving_pct:
            row = max(feasible, key=lambda r: r[0])  # saves next to nothing: do not cap for it
        cap, pred, energy, _, slow, margin = row
        saving = 100.0 * (1.0 - energy / (top.iter_time_s * top.power_w))
        if cap >= max_power_w - _EPS:
            return CapChoice(cap, pred.iter_time_s, pred.power_w, energy, slow,
                             f"no cap below {max_power_w:.0f} W: " + (
                                 "the job is not bound by any cap" if model.is_flat else
                                 f"none saves {min_saving_pct:g} % of the energy per iteration within the "
                                 f"{bound:g} % bound" if allowed_slowdown_pct is not None else
                                 f"none saves {min_saving_pct:g} % of the cost"), margin, saving)
        why = (f"cap {cap:.0f} W: predicted {energy:.4g} J/iter ({saving:.1f} % less than at {max_power_w:.0f} W), "
               f"slowdown {slow:.1f} %" + (bound_txt + (f", {margin:.1f} points kept back for what is not known)"
                                                        if margin > 0.05 else ")") if bound_txt else "")
               + ("" if eta == 1.0 else f", eta {eta:g}") + (", job is not bound by any cap" if model.is_flat else ""))
    else:
        cap, pred, energy, _, slow, margin = min(rows, key=lambda r: (r[1].iter_time_s, -r[0]))
        saving = 100.0 * (1.0 - energy / (top.iter_time_s * top.power_w))
        why = (f"cap {cap:.0f} W: no candidate cap meets the {bound:g} % slowdown bound; "
               f"chose the fastest ({slow:.1f} %)")
    return CapChoice(cap, pred.iter_time_s, pred.power_w, energy, slow, why, margin, saving)


def queue_eta(eta: float, wait_weight: float, waiting: float) -> float:
    """The objective's weight with the jobs waiting behind counted: caps that weigh the queue.

    A job slowed by its cap keeps its GPUs longer, and the jobs waiting for GPUs start later. Each second of that
    delay is charged at ``wait_weight`` seconds of the GPU at its maximum power, per waiting job it delays
    (``waiting``: the jobs queued on the host times this job's share of its GPUs,
    :meth:`~ecolaunch.state.graph.StateGraph.waiting_share`), on top of the admin's objective:
    ``eta*E + (1 - eta + wait_weight*waiting)*P_max*T``, which is Zeus's cost with ``eta / (1 + wait_weight *
    waiting)`` (what this returns, for :func:`choose_cap`). No queue, or ``wait_weight = 0`` (the default): ``eta``.
    ``waiting`` counts up to :data:`MAX_WAITING`.
    """
    if not (0.0 <= eta <= 1.0):
        raise ConfigError(f"eta must be in [0, 1], got {eta!r}", hint="1 = energy only, 0 = time only")
    if not (wait_weight >= 0 and math.isfinite(wait_weight)) or not (waiting >= 0 and math.isfinite(waiting)):
        raise ConfigError(f"wait_weight and waiting must be numbers >= 0, got {wait_weight!r} and {waiting!r}")
    return eta / (1.0 + wait_weight * min(waiting, MAX_WAITING))


def job_cap_choice(points: Sequence[CapPoint], bounds_w: tuple[float, float], allowed_slowdown_pct: float | None,
                   eta: float = 1.0, *, step_w: float = CHOICE_STEP_W, prior: CapPrior | None = None,
                   z: float = MARGIN_Z) -> CapChoice | None:
    """The cap for a job alone on its GPUs from its measured points: the one choice every path makes.

    The profiler (first run), the placement policy (a repeat run from history, and the simulator, which runs
    the same policy) and the closed loop (during the run) all call this with the job's points and its cap
    bounds ``(min, max)`` under the admin policy (the max is "uncapped": slowdown is against it). None when the
    points say nothing about cap (no points).
    """
    if not points:
        return None
    return model_cap_choice(fit_curve(points, prior or DEFAULT_PRIOR), bounds_w, allowed_slowdown_pct, eta,
                            step_w=step_w, z=z)


def model_cap_choice(model: CapCurve, bounds_w: tuple[float, float], allowed_slowdown_pct: float | None,
                     eta: float = 1.0, *, step_w: float = CHOICE_STEP_W, z: float = MARGIN_Z) -> CapChoice:
    """:func:`job_cap_choice` on a curve already fitted (the closed loop fits it once per look)."""
    lo, hi = bounds_w
    return choose_cap(model, cap_grid(lo, hi, step_w), allowed_slowdown_pct, eta, hi, z=z)
