"""``curve``, the default policy: GPUs of its own, the cap its measured curve chooses, no GNN, never sharing."""

from __future__ import annotations

import subprocess
import sys

from ecolaunch.admin.rules import Rules
from ecolaunch.config import DEFAULT_PLACEMENT_POLICY
from ecolaunch.jobmodel.codec import profile_from_json
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.policy.energy import alone_cap
from ecolaunch.state.graph import GpuNode, Host, Job, JobState, StateGraph

STEEP = [[250.0, 0.100, 240.0], [200.0, 0.104, 200.0], [150.0, 0.125, 150.0]]


def _state(n: int = 2, busy: int = 0) -> StateGraph:
    host = Host(name="h")
    for i in range(n):
        u = f"GPU-{i}"
        host.gpus[u] = GpuNode(uuid=u, index=i, name="Tesla V100-PCIE-16GB", memory_total_mib=16384,
                               power_limit_min_w=100.0, power_limit_default_w=250.0, power_limit_max_w=250.0,
                               power_limit_w=250.0, power_w=30.0)
    state = StateGraph(hosts={"h": host})
    for i in range(busy):
        state.jobs[f"r{i}"] = Job(id=f"r{i}", uid=0, user="u", host="h", launcher_pid=1, launcher_start_time=0.0,
                                  nproc=1, name="x", seq=i, submitted_at=0.0, state=JobState.RUNNING,
                                  gpus=[f"GPU-{i}"], request={"memory_mib": 1000},
                                  profile=Profile(memory_mib=1000, sm_util_pct=5.0))
    return state


def _job(profile=None, nproc: int = 1) -> JobRequest:
    return JobRequest(id="new", user="u", host="h", nproc=nproc, memory_mib=1000, allowed_slowdown_pct=10.0,
                      profile=None if profile is None else profile_from_json(profile, where="test"))


def test_curve_is_the_default_and_caps_by_the_measured_curve():
    assert DEFAULT_PLACEMENT_POLICY == "curve"
    state = _state()
    job = _job({"iter_time_s": 0.1, "power_w": 240.0, "memory_mib": 1000, "cap_points": STEEP})
    decision = get_policy("curve").decide(state, job, Rules())
    gpus = [state.hosts["h"].gpus[u] for u in decision.gpus]
    assert decision.policy == "curve" and decision.predicted["learned"] is False
    assert list(decision.power_caps_w.values()) == [alone_cap(job, gpus, Rules())[0]]
    assert list(decision.power_caps_w.values())[0] < 250.0  # the steep curve saves energy within 10 %


def test_it_never_shares_even_where_the_admin_allows_it():
    state = _state(n=1, busy=1)  # the one GPU runs a light job with plenty of memory left
    assert get_policy("curve").decide(state, _job({"iter_time_s": 0.1, "memory_mib": 1000}), Rules()) is None
    assert get_policy("first-fit").decide(state, _job({"iter_time_s": 0.1, "memory_mib": 1000}), Rules()) is not None


def test_an_unknown_job_runs_uncapped_on_the_best_free_gpus():
    decision = get_policy("curve").decide(_state(n=3, busy=1), _job(None, nproc=2), Rules())
    assert decision.gpus == ("GPU-1", "GPU-2") and set(decision.power_caps_w.values()) == {None}


def test_deciding_imports_no_torch():
    code = ("import sys\nfrom ecolaunch.admin.rules import Rules\nfrom ecolaunch.policy.registry import get_policy\n"
            "from tests.policy.test_curve_policy import _job, _state\n"
            "get_policy('curve').decide(_state(), _job({'iter_time_s': 0.1, 'power_w': 240.0, 'memory_mib': 1000,"
            " 'cap_points': [[250.0, 0.1, 240.0], [150.0, 0.125, 150.0]]}), Rules())\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
