"""One objective on every path: the cap the profiler chooses on a job's first run is the cap the placement policy
gives the same job and profile on its repeat run (and the simulator, which runs that policy), and the closed loop
starts from it."""

from __future__ import annotations

import dataclasses
import random

import pytest

from ecolaunch.admin.rules import Rules, job_cap_bounds
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.gnn import gnn_policy
from ecolaunch.profile.profiler import Profiler
from ecolaunch.profile.runcaps import RunCaps
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
