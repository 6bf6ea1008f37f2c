"""``priors``: the curve prior a policy, the budget and the registry are given is the one every curve they read is
fitted with (the measured world passes one per job, held out for its type), and the launcher's default is
:data:`~ecolaunch.jobmodel.capcurve.DEFAULT_PRIOR`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ecolaunch.caps.limits import cap_table, host_demands
from ecolaunch.admin.rules import Rules
from ecolaunch.jobmodel.codec import profile_from_json
from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR, CapPrior, default_prior
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.policy.registry import get_policy
from ecolaunch.sim.policies import get_sim_policy
from ecolaunch.state.graph import Job, JobState

from tests.policy.test_curve_policy import STEEP, _job, _state

# a prior under which a cap costs no time until it is about half the job's power
LATE = CapPrior((0.3, 0.5, 0.55, 1.5), (3.0, 1.4, 1.0, 1.0), (0.3, 0.5, 0.55, 1.0), source="test")
UNCAPPED = {"iter_time_s": 0.1, "power_w": 240.0, "memory_mib": 1000}
PROFILED = {**UNCAPPED, "cap_points": STEEP}


def _cap(policy, profile) -> float | None:
    decision = policy.decide(_state(), _job(profile), Rules())
    return decision.power_caps_w["GPU-0"]


def test_the_default_is_the_shipped_prior_whatever_the_job():
    assert default_prior("any") is default_prior("other") is DEFAULT_PRIOR
    for name in ("curve", "zeus"):
        assert _cap(get_policy(name), PROFILED) == _cap(get_policy(name, priors=default_prior), PROFILED)


@pytest.mark.parametrize(("name", "profile"), [("curve", PROFILED), ("no-gnn", PROFILED), ("zeus", UNCAPPED)])
def test_a_policys_cap_is_read_on_the_curve_fitted_with_the_jobs_prior(name: str, profile: dict):
    asked: list[str] = []

    def late(job_id: str) -> CapPrior:
        asked.append(job_id)
        return LATE

    default, given = _cap(get_sim_policy(name), profile), _cap(get_sim_policy(name, priors=late), profile)
    assert default is not None and given is not None and given != default
    assert set(asked) == {"new"}  # asked by the job's id


def test_the_gnn_policys_own_curve_and_cap_read_the_jobs_prior():
    assert _cap(get_policy("gnn"), PROFILED) != _cap(get_policy("gnn", priors=lambda _: LATE), PROFILED)


def test_the_budget_reads_each_running_jobs_curve_with_its_prior():
    state = _state(n=2)
    state.jobs["r"] = Job(id="r", uid=0, user="u", host="h", launcher_pid=1, launcher_start_time=0.0, nproc=1,
                          name="x", seq=0, submitted_at=0.0, state=JobState.RUNNING, gpus=["GPU-0"],
                          request={"memory_mib": 1000}, profile=profile_from_json(PROFILED, where="test"))
    rules = replace(Rules(), power_max_total_w=300.0)
    floors = {}
    for label, priors in (("default", default_prior), ("late", {"r": LATE}.__getitem__)):
        floors[label] = {d.uuid: d.floor_w for d in host_demands(state, state.hosts["h"], rules, priors=priors)}
    assert floors["default"]["GPU-1"] == floors["late"]["GPU-1"]  # idle: no curve
    assert floors["default"]["GPU-0"] != floors["late"]["GPU-0"]
    # the table is cached by its prior too: one prior's floor is never served for another's
    points = tuple(CapPoint(*p) for p in sorted(STEEP))
    assert cap_table(points, (100.0, 250.0), 10.0, LATE) != cap_table(points, (100.0, 250.0), 10.0, DEFAULT_PRIOR)
    assert cap_table(points, (100.0, 250.0), 10.0) == cap_table(points, (100.0, 250.0), 10.0, DEFAULT_PRIOR)
