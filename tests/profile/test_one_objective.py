"""One objective on every path: the cap the profiler chooses on a job's first run is the cap the placement policy
gives the same job and profile on its repeat run (and the simulator, which runs that policy), and the closed loop
starts from it."""

from __future__ import annotations

import dataclasses
import random

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.errors import ConfigError
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.gnn import gnn_policy
from ecolaunch.jobmodel.capchoice import MAX_WAITING, job_cap_choice, queue_eta
from ecolaunch.profile.profiler import Profiler
from ecolaunch.caps.job import RunCaps
from ecolaunch.profile.sampler import Sampler
from ecolaunch.state.graph import GpuNode, Host, StateGraph
from tests.profile.conftest import iter_time_at
from tests.profile.test_profiler import drive

UUIDS = ["GPU-0", "GPU-1"]


class NoisyJob:
    """The scripted job of tests/profile/conftest with per-iteration noise (seeded)."""

    def __init__(self, clock, backend, noise: float, seed: int) -> None:
        self.clock, self.backend, self.noise, self.rng = clock, backend, noise, random.Random(seed)
        self.stamps: list[float] = []

    def run(self, n: int) -> None:
        for _ in range(n):
            g = self.backend.gpu("GPU-0")
            self.clock.advance(iter_time_at(g.limit_w, g.demand_w) * max(0.2, 1 + self.rng.gauss(0, self.noise)))
            self.stamps.append(self.clock.now())


def idle_graph(backend) -> StateGraph:
    """The host as a launcher's state graph sees it after the first run: the same GPUs, idle, uncapped."""
    host = Host(name="h")
    for snap in backend.gpus():
        host.gpus[snap.uuid] = dataclasses.replace(GpuNode.from_snapshot(snap), power_limit_w=snap.power_limit_max_w,
                                                   memory_used_mib=0, util_gpu_pct=0.0, power_w=50.0)
    return StateGraph(hosts={"h": host})


@pytest.mark.parametrize(("noise", "seed"), [(0.0, 0), (0.01, 1), (0.03, 2), (0.03, 3)])
@pytest.mark.parametrize("eta", [1.0, 0.5])
def test_first_run_and_repeat_run_choose_the_same_cap(backend, vclock, noise: float, seed: int, eta: float) -> None:
    rules = Rules(eta=eta)
    sampler = Sampler(backend, UUIDS, clock=vclock)
    profiler = Profiler(UUIDS, sampler, clock=vclock, bounds_w=job_cap_bounds(rules, backend.gpus()),
                        caps=RunCaps("job", UUIDS, backend.set_power_limit, found={u: 400.0 for u in UUIDS}),
                        allowed_slowdown_pct=10.0, eta=rules.eta)
    drive(profiler, sampler, NoisyJob(vclock, backend, noise, seed), 300)
    first = profiler.result.choice
    assert first is not None and (first.cap_w < 400.0 or eta < 1.0)  # Zeus's cost with eta 0.5 keeps this job fast
    if noise and first.cap_w < 400.0:
        assert first.margin_pct > 0  # the measured spread is kept back
    profile = profiler.result.profile
    request = JobRequest(id="again", user="u", host="h", nproc=2, memory_mib=profile.memory_mib,
                         allowed_slowdown_pct=10.0, profile=profile)
    repeat = gnn_policy().decide(idle_graph(backend), request, rules)
    # the policy records no cap for "the top of the bounds" (the GPU keeps its limit): the same choice
    assert set(repeat.power_caps_w.values()) == {None if first.cap_w >= 400.0 else first.cap_w}


def test_a_repeat_run_with_jobs_waiting_behind_it_weighs_their_delay(backend, vclock) -> None:
    # caps that weigh the queue: the placement's choice is the same objective with the waiting jobs' delay counted
    # (queue_eta), so it is the cap the closed loop would move to, and never below the choice with nobody waiting
    rules = Rules(wait_weight=1.0)
    sampler = Sampler(backend, UUIDS, clock=vclock)
    bounds = job_cap_bounds(rules, backend.gpus())
    profiler = Profiler(UUIDS, sampler, clock=vclock, bounds_w=bounds,
                        caps=RunCaps("job", UUIDS, backend.set_power_limit, found={u: 400.0 for u in UUIDS}),
                        allowed_slowdown_pct=10.0, eta=rules.eta)
    drive(profiler, sampler, NoisyJob(vclock, backend, 0.0, 0), 300)
    profile = profiler.result.profile
    caps, reasons = {}, {}
    for waiting in (0.0, 0.3, 3.0):
        request = JobRequest(id="again", user="u", host="h", nproc=2, memory_mib=profile.memory_mib,
                             allowed_slowdown_pct=10.0, profile=profile, waiting_share=waiting)
        decision = gnn_policy().decide(idle_graph(backend), request, rules)
        choice = job_cap_choice(profile.curve_points(bounds[1]), bounds, 10.0, queue_eta(1.0, 1.0, waiting))
        assert set(decision.power_caps_w.values()) == {None if choice.cap_w >= bounds[1] else choice.cap_w}
        caps[waiting], reasons[waiting] = choice.cap_w, " ".join(decision.reasons)
    # nobody waiting: the profiler's own choice; a few waiting: no lower (a first run's margin keeps its cap near
    # where the job draws, so here the same), and the reason says why; many: uncapped
    assert caps[0.0] == profiler.result.choice.cap_w <= caps[0.3] < caps[3.0] == bounds[1]
    assert "0.3 waiting job(s) weighed (wait_weight 1)" in reasons[0.3] and "waiting" not in reasons[0.0]


def test_queue_eta_counts_the_waiting_jobs_on_top_of_the_admins_eta() -> None:
    assert queue_eta(1.0, 0.0, 5.0) == 1.0 and queue_eta(0.7, 2.0, 0.0) == 0.7  # no weight, or nobody waiting
    assert queue_eta(1.0, 1.0, 1.0) == pytest.approx(0.5)  # one waiting job at weight 1: Zeus's eta 0.5
    assert queue_eta(0.5, 1.0, 2.0) == pytest.approx(0.5 / 3.0)
    assert queue_eta(1.0, 1.0, 1e6) == pytest.approx(1.0 / (1.0 + MAX_WAITING))  # a forged queue does no more
    for bad in ((1.0, -1.0, 1.0), (1.0, 1.0, float("nan")), (1.5, 1.0, 1.0)):
        with pytest.raises(ConfigError):
            queue_eta(*bad)
