"""The profiling state machine on virtual time: caps inside the bounds and restored, the choice, budgets,
uninstrumented jobs, late stamps, and the early-stage check."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from ecolaunch.admin.rules import Rules, profiler_settings
from ecolaunch.jobmodel.gpu import CapBounds
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.devices.backend import GpuSnapshot
from ecolaunch.errors import ConfigError, DeviceError, PermissionDenied
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.modes import ProfilerSettings
from ecolaunch.profile.profiler import Phase, Profiler, check_early
from ecolaunch.caps.job import RunCaps
from ecolaunch.profile.sampler import Sampler
from tests.profile.conftest import SyntheticJob, iter_time_at

UUIDS = ["GPU-0", "GPU-1"]


def make(backend, vclock, *, rules=Rules(), set_cap="backend", slowdown=10.0, eta=0.5, settings=None):
    for g in backend.gpus_:
        g.limit_w = 350.0  # the cap the GPUs had before profiling (e.g. set by the decision)
    sampler = Sampler(backend, UUIDS, clock=vclock)
    bounds = job_cap_bounds(rules, backend.gpus())
    setter = backend.set_power_limit if set_cap == "backend" else set_cap
    profiler = Profiler(UUIDS, sampler, clock=vclock, bounds_w=bounds,
                        caps=RunCaps("job", UUIDS, setter, found={u: 350.0 for u in UUIDS}),
                        allowed_slowdown_pct=slowdown, eta=eta, settings=settings)
    return profiler, sampler, bounds


def drive(profiler, sampler, job, n, poll_every=1):
    """Run ``n`` iterations, polling (sample + update) every ``poll_every`` of them."""
    phases = []
    sampler.sample_once()
    profiler.update(job.stamps)
    for i in range(n):
        job.run(1)
        if (i + 1) % poll_every == 0:
            sampler.sample_once()
            phases.append(profiler.update(job.stamps))
        if profiler.phase is Phase.DONE:
            break
    return phases


def test_full_profile_sets_caps_within_bounds_and_restores_them(backend, vclock) -> None:
    profiler, sampler, bounds = make(backend, vclock, eta=1.0)
    assert bounds == (100.0, 400.0)
    job = SyntheticJob(vclock, backend, "GPU-0")
    phases = drive(profiler, sampler, job, 200)
    assert profiler.phase is Phase.DONE and Phase.MEASURE in phases
    res = profiler.result
    assert res is not None and res.complete
    caps = [w for _, w in backend.calls]
    assert caps[:2] == [400.0, 400.0]  # cap 0 = top of the bounds, on both GPUs
    assert all(100.0 <= w <= 400.0 for w in caps)
    assert caps[-2:] == [350.0, 350.0] and all(g.limit_w == 350.0 for g in backend.gpus_)  # restored
    points = res.profile.cap_points
    assert [p.power_cap_w for p in points] == [400.0, 250.0, 200.0]  # max, then ~85 % and ~65 % of 300 W
    for p in points:  # each point measured under its own cap only
        assert p.iter_time_s == pytest.approx(iter_time_at(p.power_cap_w, 300.0))
        assert p.power_w == pytest.approx(min(300.0, p.power_cap_w))
    assert res.profile.iter_time_s == pytest.approx(0.1)
    assert res.profile.power_w == pytest.approx(300.0)
    assert (res.profile.sm_util_pct, res.profile.mem_bw_util_pct, res.profile.memory_mib) == (80.0, 40.0, 10_000)
    assert 65 <= res.iterations <= 70  # 10 warm-up + 15 + 2 x (5 + 15), plus one straddling iteration per change
    choice = res.choice
    assert choice is not None and 100.0 <= choice.cap_w <= 400.0
    assert choice.slowdown_pct <= 10.0
    true_slowdown = 100 * (iter_time_at(choice.cap_w, 300.0) / 0.1 - 1)
    assert true_slowdown <= 10.5  # the model's choice also holds on the synthetic job's real curve
    assert choice.cap_w < 400.0  # energy-only: it does cap the job (a first run keeps its reference's error back)
    assert res.recommended_cap_w == choice.cap_w


def test_admin_bounds_are_respected(backend, vclock) -> None:
    rules = Rules(cap_bounds_model={"A100-SXM4-80GB": CapBounds(min_w=200.0, max_w=300.0)})
    profiler, sampler, bounds = make(backend, vclock, rules=rules)
    assert bounds == (200.0, 300.0)
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    caps = [w for _, w in backend.calls]
    assert caps[0] == 300.0
    assert all(200.0 <= w <= 300.0 for w in caps[:-2]) and caps[-2:] == [350.0, 350.0]
    assert 200.0 <= profiler.result.choice.cap_w <= 300.0


def test_an_input_bound_job_costs_one_cap(backend, vclock) -> None:
    for g in backend.gpus_:
        g.demand_w = 70.0  # below the GPU's lowest cap (100 W): no cap can bind it
    profiler, sampler, _ = make(backend, vclock)
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    assert [p.power_cap_w for p in profiler.result.profile.cap_points] == [400.0]
    assert [w for _, w in backend.calls] == [400.0, 400.0, 350.0, 350.0]


def test_a_low_power_job_is_measured_at_a_cap_that_binds_it(backend, vclock) -> None:
    for g in backend.gpus_:
        g.demand_w = 150.0  # fractions of the board's 400 W would never bind it; of its own 150 W they do
    profiler, sampler, _ = make(backend, vclock)
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    points = profiler.result.profile.cap_points
    assert [p.power_cap_w for p in points] == [400.0, 125.0, 100.0]
    assert points[1].iter_time_s > points[0].iter_time_s


def test_without_a_cap_setter_it_measures_at_the_found_cap(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock, set_cap=None)
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    res = profiler.result
    assert backend.calls == []
    assert [p.power_cap_w for p in res.profile.cap_points] == [350.0]
    assert res.choice is not None  # still a recommendation, from the prior's shape


@pytest.mark.parametrize(("error", "level"), [
    (PermissionDenied("no privilege", hint="run the cap agent"), logging.INFO),  # the cap owner said it once
    (DeviceError("NVML: unknown error"), logging.WARNING),                      # a surprise: the user sees it
], ids=["refused", "failed"])
def test_a_refused_cap_change_degrades_to_the_current_cap(error, level, backend, vclock, caplog) -> None:
    def refuse(uuid, watts):
        raise error

    profiler, sampler, _ = make(backend, vclock, set_cap=refuse)
    with caplog.at_level(logging.INFO):
        drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    assert profiler.phase is Phase.DONE
    assert [p.power_cap_w for p in profiler.result.profile.cap_points] == [350.0]
    assert [r.levelno for r in caplog.records if "cannot set the power cap" in r.message] == [level]


def test_stamps_from_before_a_cap_change_are_not_counted_for_the_new_cap(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock)
    job = SyntheticJob(vclock, backend, "GPU-0")
    sampler.sample_once()
    profiler.update(job.stamps)
    job.run(40)  # the launcher polled late: 40 iterations at cap 0
    sampler.sample_once()
    assert profiler.update(job.stamps) is Phase.WARMUP  # cap 0 measured, cap 1 set after all 40 stamps
    assert backend.gpu("GPU-0").limit_w == 250.0
    assert profiler.update(job.stamps) is Phase.WARMUP  # no stamp after the change yet
    drive(profiler, sampler, job, 200)
    second = profiler.result.profile.cap_points[1]
    assert second.iter_time_s == pytest.approx(iter_time_at(250.0, 300.0))


def test_uninstrumented_job_is_profiled_by_a_time_window(backend, vclock) -> None:
    settings = ProfilerSettings(uninstrumented_after_s=5.0, window_warmup_s=2.0, window_measure_s=3.0)
    profiler, sampler, _ = make(backend, vclock, settings=settings)
    phases = []
    for _ in range(40):
        sampler.sample_once()
        phases.append(profiler.update([]))
        vclock.advance(0.5)
        if profiler.phase is Phase.DONE:
            break
    assert [p for i, p in enumerate(phases) if i == 0 or p is not phases[i - 1]] == [
        Phase.WAITING, Phase.WARMUP, Phase.MEASURE, Phase.DONE]
    res = profiler.result
    assert profiler.instrumented is False
    assert res.profile.iter_time_s is None and res.profile.cap_points == () and not res.profile.instrumented
    assert res.profile.power_w == pytest.approx(300.0)
    assert res.choice is None
    assert res.recommended_cap_w == 400.0  # lowest grid cap >= 1.3 x 300 W
    assert "no slowdown can be measured" in res.reason
    assert backend.gpu("GPU-0").limit_w == 350.0  # restored


def test_a_slow_starter_is_profiled_by_iterations_after_all(backend, vclock) -> None:
    settings = ProfilerSettings(uninstrumented_after_s=1.0, window_warmup_s=30.0)
    profiler, sampler, _ = make(backend, vclock, settings=settings)
    sampler.sample_once()
    profiler.update([])
    vclock.advance(2.0)
    sampler.sample_once()
    profiler.update([])
    assert profiler.instrumented is False
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    assert profiler.instrumented is True and len(profiler.result.profile.cap_points) == 3


@pytest.mark.parametrize("settings, points", [
    (ProfilerSettings(max_iterations=30), 1),
    (ProfilerSettings(max_caps=2), 2),
    (ProfilerSettings(max_time_s=3.0), 1),
    (ProfilerSettings(max_iterations=0), 0),
])
def test_budgets_stop_early_and_restore_caps(backend, vclock, settings, points) -> None:
    profiler, sampler, _ = make(backend, vclock, settings=settings)
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    assert profiler.phase is Phase.DONE
    got = profiler.result.profile.cap_points if profiler.result.profile else ()
    assert len(got) == points
    assert all(g.limit_w == 350.0 for g in backend.gpus_)


def test_final_update_ends_profiling_without_new_caps(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock)
    job = SyntheticJob(vclock, backend, "GPU-0")
    drive(profiler, sampler, job, 20)  # still warming up at cap 0
    job.run(10)  # then the run ends
    sampler.sample_once()
    assert profiler.update(job.stamps, final=True) is Phase.DONE
    res = profiler.result
    assert not res.complete and len(res.profile.cap_points) == 1
    assert [w for _, w in backend.calls] == [400.0, 400.0, 350.0, 350.0]
    assert "ended before profiling completed" in res.reason


def test_final_update_with_nothing_measured(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock)
    sampler.sample_once()
    profiler.update([], final=True)
    assert profiler.result.profile is None and profiler.result.choice is None
    profiler.abort()  # already done: nothing happens


def test_settings_validation_and_rules() -> None:
    rules = Rules(profiling_max_caps=2, profiling_max_iterations=40, profiling_max_time_s=60.0)
    s = profiler_settings(rules, max_caps=3, max_iterations=100)
    assert (s.max_caps, s.max_iterations, s.max_time_s) == (2, 40, 60.0)
    assert ProfilerSettings().planned_steps() == 1 + 10 + 15 + 2 * (5 + 15)
    for bad in [dict(warmup_iters=-1), dict(measured_iters=0), dict(window_measure_s=0.0), dict(max_time_s=-1.0),
                dict(max_iterations=-2), dict(max_caps=True)]:
        with pytest.raises(ConfigError):
            ProfilerSettings(**bad)


def test_job_cap_bounds(backend) -> None:
    snaps = backend.gpus()
    assert job_cap_bounds(Rules(), snaps) == (100.0, 400.0)
    rules = Rules(cap_bounds_index={1: CapBounds(min_w=150.0, max_w=250.0)})
    assert job_cap_bounds(rules, snaps) == (150.0, 250.0)
    other = dataclasses.replace(snaps[1], power_limit_min_w=300.0, power_limit_max_w=500.0)
    assert job_cap_bounds(Rules(cap_bounds_index={0: CapBounds(max_w=200.0)}), [snaps[0], other]) is None
    unknown = dataclasses.replace(snaps[0], power_limit_max_w=None)
    assert job_cap_bounds(Rules(), [unknown]) is None
    assert job_cap_bounds(Rules(), []) is None
    assert isinstance(snaps[0], GpuSnapshot)


# --- early-stage check -------------------------------------------------------------------------------
SOLO = Profile(0.100, 80.0, 40.0, 10_000, 300.0)


def test_early_check_passes_within_the_bound() -> None:
    assert check_early(SOLO, [0.108] * 10, 10.0, cap_w=250.0, max_cap_w=400.0) is None


def test_early_check_flags_and_suggests_raising_the_cap() -> None:
    f = check_early(SOLO, [0.115] * 9 + [0.5], 10.0, cap_w=250.0, max_cap_w=400.0)  # one outlier: median
    assert f is not None
    assert f.slowdown_pct == pytest.approx(15.0)
    assert f.suggested_cap_w == 400.0
    assert "250 W power cap that ecolaunch may not change here (up to 400 W would lift it)" in f.message


def test_early_check_at_the_top_cap_only_reports() -> None:
    f = check_early(SOLO, [0.13] * 10, 10.0, cap_w=400.0, max_cap_w=400.0)
    assert f is not None and f.suggested_cap_w is None and "no cap to raise" in f.message


def test_early_check_cannot_tell_without_data() -> None:
    assert check_early(None, [1.0] * 10, 10.0) is None
    assert check_early(Profile(None, None, None, None, 300.0), [1.0] * 10, 10.0) is None
    assert check_early(SOLO, [1.0] * 3, 10.0) is None


def test_a_cap_refused_midway_keeps_the_points_so_far(backend, vclock) -> None:
    def flaky(uuid, watts):
        if watts < 300.0 and uuid == "GPU-1":
            raise PermissionDenied("agent refused", hint="-")
        backend.set_power_limit(uuid, watts)

    profiler, sampler, _ = make(backend, vclock, set_cap=flaky)
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 200)
    assert profiler.phase is Phase.DONE
    assert [p.power_cap_w for p in profiler.result.profile.cap_points] == [400.0]
    assert all(g.limit_w == 350.0 for g in backend.gpus_)  # GPU-0 went to 250 W and came back


def test_a_zero_budget_never_touches_the_caps(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock, settings=ProfilerSettings(max_time_s=0.0))
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 50)
    assert profiler.result.profile is None and backend.calls == []


def test_max_caps_zero_measures_without_changing_caps(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock, settings=ProfilerSettings(max_caps=0))
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 100)
    assert backend.calls == []
    assert [p.power_cap_w for p in profiler.result.profile.cap_points] == [350.0]


class LateAgent:
    """A cap agent that applies each wish ``delay_s`` after it was made (``None``: never)."""

    def __init__(self, backend, vclock, delay_s: float | None) -> None:
        self.backend, self.vclock, self.delay_s = backend, vclock, delay_s
        self.wanted: dict[str, tuple[float, float]] = {}

    def set_cap(self, uuid: str, watts: float) -> None:
        self.wanted[uuid] = (watts, self.vclock.now())

    def tick(self, _now: float | None = None) -> None:
        for uuid, (watts, since) in list(self.wanted.items()):
            if self.delay_s is not None and self.vclock.now() - since >= self.delay_s:
                self.backend.set_power_limit(uuid, watts)
                del self.wanted[uuid]


def test_a_cap_applied_late_is_waited_for(backend, vclock) -> None:
    agent = LateAgent(backend, vclock, delay_s=1.0)  # about ten iterations late
    profiler, sampler, _ = make(backend, vclock, set_cap=agent.set_cap)
    job = SyntheticJob(vclock, backend, "GPU-0")
    sampler.sample_once()
    profiler.update(job.stamps)
    for _ in range(300):
        job.run(1, on_stamp=agent.tick)
        sampler.sample_once()
        if profiler.update(job.stamps) is Phase.DONE:
            break
    points = profiler.result.profile.cap_points
    assert [p.power_cap_w for p in points] == [400.0, 250.0, 200.0]  # max, then ~85 % and ~65 % of 300 W
    for p in points:  # no iteration run under the previous cap is counted for the next one
        assert p.iter_time_s == pytest.approx(iter_time_at(p.power_cap_w, 300.0))


def test_a_cap_never_applied_ends_profiling(backend, vclock) -> None:
    agent = LateAgent(backend, vclock, delay_s=None)
    for g in backend.gpus_:
        g.limit_w = 400.0
    sampler = Sampler(backend, UUIDS, clock=vclock)
    profiler = Profiler(UUIDS, sampler, clock=vclock, bounds_w=(100.0, 400.0),
                        caps=RunCaps("job", UUIDS, agent.set_cap, found={u: 400.0 for u in UUIDS}),
                        allowed_slowdown_pct=10.0, eta=0.5)
    drive(profiler, sampler, SyntheticJob(vclock, backend, "GPU-0"), 1000)
    assert profiler.phase is Phase.DONE
    assert "was not seen on the GPUs 60 s after it was set" in profiler.result.reason
    assert [p.power_cap_w for p in profiler.result.profile.cap_points] == [400.0]
    assert all(w == 400.0 for w, _ in agent.wanted.values())  # the wish is taken back


class _SlowAtTheTop(SyntheticJob):
    """A job whose iterations under cap ``at_w`` (the top) take ``factor`` times longer while ``slow(n)`` holds for
    the n-th iteration (a warm-up that is not over, or a disturbance exactly while that cap is measured)."""

    def __init__(self, *args, slow, factor: float = 2.0, at_w: float = 400.0, **kw) -> None:
        super().__init__(*args, **kw)
        self.slow, self.factor, self.at_w = slow, factor, at_w

    def run(self, n: int, on_stamp=None) -> None:
        for _ in range(n):
            g = self.backend.gpu(self.uuid)
            t = iter_time_at(g.limit_w, g.demand_w, self.base_s)
            hit = abs(g.limit_w - self.at_w) < 1e-6 and self.slow(len(self.stamps))
            self.clock.advance(t * (self.factor if hit else 1.0))
            self.stamps.append(self.clock.now())


def test_a_top_cap_measured_while_the_job_still_sped_up_is_measured_again(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock, eta=1.0)
    job = _SlowAtTheTop(vclock, backend, "GPU-0", slow=lambda n: n < 30)  # the first window at 400 W: twice as slow
    drive(profiler, sampler, job, 300)
    res = profiler.result
    assert res is not None and res.complete and res.profile is not None
    caps = [w for _, w in backend.calls]
    assert caps.count(400.0) == 4  # the top cap set twice on both GPUs: first, and once more at the end
    top = next(p for p in res.profile.cap_points if p.power_cap_w == 400.0)
    assert top.iter_time_s == pytest.approx(0.1) and res.profile.iter_time_s == pytest.approx(0.1)  # the second window
    assert res.choice is not None and res.choice.slowdown_pct >= 0.0


def test_a_lower_cap_whose_window_stalled_is_measured_again(backend, vclock) -> None:
    # caps 400, 250, 200 W; a stall while 250 W is first measured reads it slower than 200 W, which no cap does:
    # 250 W (not the top) is measured once more, and the profile is kept with the second window
    profiler, sampler, _ = make(backend, vclock, eta=1.0)
    job = _SlowAtTheTop(vclock, backend, "GPU-0", slow=lambda n: n < 60, at_w=250.0)
    drive(profiler, sampler, job, 300)
    res = profiler.result
    assert res is not None and res.complete and res.profile is not None, res.reason
    caps = [w for _, w in backend.calls]
    assert caps.count(250.0) == 4 and caps.count(400.0) == 2  # 250 W set twice on both GPUs, the top once
    at = {p.power_cap_w: p.iter_time_s for p in res.profile.cap_points}
    assert sorted(at) == [200.0, 250.0, 400.0]
    assert at[250.0] == pytest.approx(iter_time_at(250.0, 300.0))  # the second, undisturbed window


def test_a_profile_that_contradicts_itself_is_not_kept(backend, vclock) -> None:
    profiler, sampler, _ = make(backend, vclock, eta=1.0)
    job = _SlowAtTheTop(vclock, backend, "GPU-0", slow=lambda n: True)  # every window at 400 W disturbed
    drive(profiler, sampler, job, 300)
    res = profiler.result
    assert res is not None and res.profile is None and res.choice is None and res.recommended_cap_w is None
    assert "faster than" in res.reason and "which no cap does" in res.reason
    assert "not kept; the job runs uncapped and its next launch profiles it again" in res.reason
    assert all(g.limit_w == 350.0 for g in backend.gpus_)  # restored


def test_a_cap_held_under_a_budget_ceiling_is_measured_where_it_is_held(backend, vclock) -> None:
    def under_ceiling(uuid: str, watts: float) -> float:  # the job's cap owner under a 320 W budget ceiling
        held = min(watts, 320.0)
        backend.set_power_limit(uuid, held)
        return held

    profiler, sampler, _ = make(backend, vclock, set_cap=under_ceiling, eta=1.0)
    job = SyntheticJob(vclock, backend, "GPU-0")
    drive(profiler, sampler, job, 300)
    res = profiler.result
    assert profiler.phase is Phase.DONE and res.complete, res.reason  # not stuck waiting for 400 W to show
    points = res.profile.cap_points
    assert points[0].power_cap_w == 320.0  # the reference, measured at the ceiling and labelled so
    assert [p.power_cap_w for p in points[1:]] and all(p.power_cap_w < 320.0 for p in points[1:])
    for p in points:
        assert p.iter_time_s == pytest.approx(iter_time_at(p.power_cap_w, 300.0))
