"""The power budget's core: allocation, the policy wrapper, rebalancing, what the graph records. Pure, no devices."""

from __future__ import annotations

import random

import pytest

from ecolaunch.admin.rules import Rules, parse_rules
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.caps.limits import (GRID_W, GpuDemand, allocate, budget_ceilings, budgeted_gpus, host_demands,
                                    rebalance)
from ecolaunch.policy.budgeted import BudgetedPolicy, book_budget
from ecolaunch.policy.registry import get_policy, policy_names
from ecolaunch.jobmodel.codec import profile_from_json
from ecolaunch.jobmodel.capchoice import cap_margin_pct
from ecolaunch.jobmodel.capcurve import fit_curve
from ecolaunch.state.graph import GpuNode, Host, Job, StateGraph

#: a compute-bound job: 6 % slower at 300 W, 18 % at 250 W (of 330 W drawn uncapped)
STEEP = {"iter_time_s": 0.1, "power_w": 330.0, "memory_mib": 1000,
         "cap_points": [[400.0, 0.1, 330.0], [300.0, 0.106, 285.0], [250.0, 0.118, 242.0]]}
#: an input-bound job: draws 180 W, no cap down to 200 W slows it
FLAT = {"iter_time_s": 0.2, "power_w": 180.0, "memory_mib": 1000,
        "cap_points": [[400.0, 0.2, 180.0], [250.0, 0.2, 179.0], [200.0, 0.2005, 175.0]]}


def gpu(i: int, limit: float = 400.0) -> GpuNode:
    return GpuNode(f"GPU-{i}", i, "NVIDIA A100-SXM4-80GB", 81920, power_limit_min_w=100.0,
                   power_limit_default_w=400.0, power_limit_max_w=400.0, power_limit_w=limit)


def machine(n: int = 4) -> StateGraph:
    graph = StateGraph()
    graph.hosts["h"] = Host("h", {f"GPU-{i}": gpu(i) for i in range(n)})
    return graph


def request(jid: str, profile: dict | None = STEEP, nproc: int = 1, bound: float = 10.0) -> JobRequest:
    return JobRequest(jid, "u", "h", nproc, memory_mib=1000, allowed_slowdown_pct=bound,
                      profile=None if profile is None else profile_from_json(profile, where="test"))


def place(graph: StateGraph, policy, req: JobRequest, rules: Rules) -> Decision | None:
    """What the launcher's booking does: decide, then record the job running and the budget's caps."""
    decision = policy.decide(graph, req, rules)
    if decision is None:
        return None
    graph.jobs[req.id] = Job(req.id, 0, "u", "h", 1, 0.0, req.nproc, req.id, len(graph.jobs), 0.0,
                             request={"allowed_slowdown_pct": req.allowed_slowdown_pct, "memory_mib": 1000})
    graph.book(req.id, list(decision.gpus), dict(decision.power_caps_w), decision.to_dict(), req.profile, 0.0)
    book_budget(graph, decision)
    return decision


def total_w(graph: StateGraph, rules: Rules) -> float:
    """The budget's count of the host: each busy GPU at its budget cap, each idle one at its minimum limit."""
    host = graph.hosts["h"]
    return sum(graph.budget_caps_w.get(u, g.power_limit_min_w) if graph.jobs_on(u) else g.power_limit_min_w
               for u, g in host.gpus.items())


def within_bound(profile: dict, cap_w: float, bound: float) -> bool:
    """The job's predicted slowdown at ``cap_w`` plus capchoice's margin, computed here from its points."""
    model = fit_curve(profile_from_json(profile, where="test").cap_points)
    slow = 100.0 * (model.predict(cap_w).iter_time_s / model.predict(400.0).iter_time_s - 1.0)
    return slow + (cap_margin_pct(model, cap_w) if cap_w < 400.0 else 0.0) <= bound + 1e-6


# --- allocate ------------------------------------------------------------------------------------------------
def test_allocate_fits_the_budget_with_every_gpu_between_its_floor_and_its_wanted_cap() -> None:
    rng = random.Random(7)
    for _ in range(200):
        gpus = []
        for i in range(rng.randint(1, 8)):
            wanted = rng.choice([150.0, 250.0, 297.5, 400.0])
            floor = wanted if rng.random() < 0.3 else rng.uniform(100.0, wanted)
            curve = tuple((c, max(0.0, (wanted - c) / 10.0), 1.0) for c in range(100, 401, 5))
            gpus.append(GpuDemand(f"G{i}", wanted, floor, group=f"j{i // 2}" if rng.random() < 0.3 else None,
                                  curve=curve))
        budget = rng.uniform(0.5, 1.2) * sum(g.wanted_w for g in gpus)
        caps = allocate(gpus, budget)
        floors = {}
        for g in gpus:  # a group's floor is its highest
            key = g.group or g.uuid
            floors[key] = max(floors.get(key, 0.0), g.floor_w)
        if sum(floors[g.group or g.uuid] for g in gpus) > budget:
            assert caps is None
            continue
        assert caps is not None and sum(caps.values()) <= budget + 1e-6
        for g in gpus:
            top = max(h.wanted_w for h in gpus if (h.group or h.uuid) == (g.group or g.uuid))
            assert floors[g.group or g.uuid] - 1e-9 <= caps[g.uuid] <= top + 1e-9
            # the 5 W grid: a cap is on it, or is a floor or a wanted cap as given
            assert caps[g.uuid] % GRID_W == 0 or caps[g.uuid] in (g.floor_w, top, floors[g.group or g.uuid])
        for g in gpus:
            if g.group is not None:
                assert len({caps[h.uuid] for h in gpus if h.group == g.group}) == 1  # one cap per job


def test_allocate_lowers_first_where_a_watt_costs_the_least_slowdown() -> None:
    steep = tuple((float(c), (400 - c) * 0.1, 1.0) for c in range(100, 401, 5))  # 0.1 % per W
    flat = tuple((float(c), (400 - c) * 0.01, 1.0) for c in range(100, 401, 5))  # 0.01 % per W
    gpus = [GpuDemand("A", 400.0, 200.0, curve=steep), GpuDemand("B", 400.0, 200.0, curve=flat),
            GpuDemand("idle", 100.0, 100.0)]
    caps = allocate(gpus, 800.0)
    assert caps == {"A": 400.0, "B": 300.0, "idle": 100.0}
    caps = allocate(gpus, 600.0)  # B is at its floor: the rest comes from A
    assert caps == {"A": 300.0, "B": 200.0, "idle": 100.0}
    assert allocate(gpus, 999.0) == {"A": 400.0, "B": 400.0, "idle": 100.0}  # room: everyone at its wish


def test_allocate_is_none_when_the_floors_do_not_fit() -> None:
    gpus = [GpuDemand("A", 400.0, 300.0), GpuDemand("B", 400.0, 300.0), GpuDemand("idle", 100.0, 100.0)]
    assert allocate(gpus, 699.0) is None
    assert allocate(gpus, 700.0) == {"A": 300.0, "B": 300.0, "idle": 100.0}


# --- the policy wrapper --------------------------------------------------------------------------------------
def test_without_a_budget_the_inner_decision_passes_through_untouched() -> None:
    graph = machine()
    inner = get_policy("exclusive").inner
    decision = inner.decide(graph, request("a"), Rules())

    class Fixed:
        name = "fixed"

        def decide(self, state, job, rules):
            return decision

    assert BudgetedPolicy(Fixed()).decide(graph, request("a"), Rules()) is decision
    assert BudgetedPolicy(Fixed()).rebalance(graph, Rules()) == {}


def test_get_policy_puts_every_policy_under_the_budget() -> None:
    for name in policy_names():
        policy = get_policy(name)
        # gnn's first launches are told its predicted curve outside the budget, which then reads that curve
        budgeted = policy.policy if name == "gnn" else policy
        assert isinstance(budgeted, BudgetedPolicy) and policy.name == name
    assert get_policy("zeus").inner.__class__.__name__ == "ZeusPolicy"


def test_a_newcomer_lowers_running_jobs_jointly_each_within_its_bound_by_its_curve() -> None:
    rules = Rules(power_max_total_w=1000.0)
    graph, policy = machine(), get_policy("exclusive")
    a = place(graph, policy, request("a"), rules)
    b = place(graph, policy, request("b"), rules)
    assert a.recaps_w == {} and b.recaps_w == {} and graph.budget_caps_w == {"GPU-0": 400.0, "GPU-1": 400.0}
    c = place(graph, policy, request("c"), rules)  # 3 x 400 + 100 idle > 1000: everyone comes down
    assert c is not None
    assert c.recaps_w == {"GPU-0": 300.0, "GPU-1": 300.0}
    assert c.power_caps_w == {"GPU-2": 300.0}
    assert c.predicted["budget"]["wanted_w"] == {"GPU-2": 400.0}
    assert c.predicted["budget"]["total_w"] == pytest.approx(1000.0)
    assert graph.budget_caps_w == {"GPU-0": 300.0, "GPU-1": 300.0, "GPU-2": 300.0}  # the recaps are booked
    assert total_w(graph, rules) <= 1000.0
    for cap in graph.budget_caps_w.values():
        assert within_bound(STEEP, cap, 10.0)
    # the floor: 285 W keeps the bound by the curve, margin included; 280 W would not. A fourth job would need
    # 4 x 285 W, the others' floors and its own: it waits
    assert within_bound(STEEP, 285.0, 10.0) and not within_bound(STEEP, 280.0, 10.0)
    assert any("job a on GPU 0 to 300 W" in r for r in c.reasons)
    # a fourth job cannot fit: its floor, the others' floors and the idle GPU's minimum exceed the budget
    assert policy.decide(graph, request("d"), rules) is None


def test_input_bound_jobs_give_their_watts_first() -> None:
    rules = Rules(power_max_total_w=1000.0)
    graph, policy = machine(), get_policy("exclusive")
    place(graph, policy, request("steep"), rules)
    place(graph, policy, request("flat", FLAT), rules)
    place(graph, policy, request("steep2"), rules)
    # the flat job runs as fast at 200 W (its floor): it gives its watts before the compute-bound jobs give theirs
    assert graph.budget_caps_w == {"GPU-0": 350.0, "GPU-1": 200.0, "GPU-2": 350.0}


def test_rebalance_raises_caps_back_when_a_job_leaves() -> None:
    rules = Rules(power_max_total_w=1000.0)
    graph, policy = machine(), get_policy("exclusive")
    for jid in "abc":
        place(graph, policy, request(jid), rules)
    assert set(graph.budget_caps_w.values()) == {300.0}
    del graph.jobs["c"]
    caps = rebalance(graph, rules)
    assert caps == {"GPU-0": 400.0, "GPU-1": 400.0}  # 2 x 400 + 2 idle x 100 = 1000
    assert rebalance(graph, Rules()) == {}


def test_a_job_whose_measured_floor_rose_keeps_its_booked_cap_rather_than_break_the_budget() -> None:
    """A first launch admitted from a supplied curve (here: FLAT's, floor 200 W) is measured steeper once it runs
    (STEEP: floor 285 W); rebalancing holds it at the cap it was booked at instead of exceeding the budget."""
    rules = Rules(power_max_total_w=880.0)  # 2 x 285 (STEEP's floors) + 200 + 100 idle, and 10 W to spare
    graph, policy = machine(), get_policy("exclusive")
    place(graph, policy, request("a"), rules)
    place(graph, policy, request("b"), rules)
    place(graph, policy, request("first", FLAT), rules)
    booked = graph.budget_caps_w["GPU-2"]
    assert booked < 250.0 and total_w(graph, rules) <= 880.0
    graph.jobs["first"].profile = profile_from_json(STEEP, where="test")  # what its profiler measured
    caps = rebalance(graph, rules)
    # the others at their floors, the newcomer at its booked cap plus the 10 W left; GPU-3 idle at its minimum
    assert caps == {"GPU-0": 285.0, "GPU-1": 285.0, "GPU-2": booked + 10.0} and sum(caps.values()) + 100.0 <= 880.0


def test_floors_over_the_budget_are_said_once_and_only_while_jobs_run(caplog) -> None:
    """The admin lowered the budget under two running jobs: each is held at its floor, said once however often the
    caps are rebalanced, and again only after the caps fitted in between; a host with no job running says nothing here
    (admission refuses such a budget itself)."""
    import logging

    from ecolaunch.caps import limits as budget

    budget._OVER_BUDGET_SAID.clear()  # once per process: start this test's process-wide record afresh
    graph, policy = machine(), get_policy("exclusive")
    place(graph, policy, request("a"), Rules(power_max_total_w=1600.0))
    place(graph, policy, request("b"), Rules(power_max_total_w=1600.0))
    rules = Rules(power_max_total_w=600.0)  # below 2 x 285 (STEEP's floors) + 2 idle x 100
    with caplog.at_level(logging.WARNING, logger="ecolaunch"):
        assert rebalance(graph, rules) == {"GPU-0": 285.0, "GPU-1": 285.0}
        rebalance(graph, rules)
        said = [r.getMessage() for r in caplog.records if "power budget" in r.getMessage()]
        assert said == ["the running jobs' floors on host h need more than the 600 W power budget; each job is held "
                        "at its floor"]
        caplog.clear()
        rebalance(machine(), Rules(power_max_total_w=300.0))  # no job running: 4 idle GPUs x 100 W > 300 W
        assert [r for r in caplog.records if "power budget" in r.getMessage()] == []
        # the admin raises the budget (it fits), then lowers it again: a long-running agent says it again
        rebalance(graph, Rules(power_max_total_w=1600.0))
        rebalance(graph, rules)
        assert len([r for r in caplog.records if "power budget" in r.getMessage()]) == 1


def test_a_job_without_a_curve_keeps_what_it_asked_and_the_others_make_room() -> None:
    rules = Rules(power_max_total_w=1100.0)
    graph, policy = machine(), get_policy("exclusive")
    place(graph, policy, request("blind", profile=None), rules)  # no profile: cannot be lowered
    place(graph, policy, request("b"), rules)
    c = place(graph, policy, request("c"), rules)
    assert graph.budget_caps_w == {"GPU-0": 400.0, "GPU-1": 300.0, "GPU-2": 300.0} and "GPU-0" not in c.recaps_w
    assert place(graph, policy, request("d", profile=None), rules) is None  # its 400 W cannot fit


def test_a_multi_gpu_job_takes_one_cap() -> None:
    rules = Rules(power_max_total_w=1050.0)
    graph, policy = machine(), get_policy("exclusive")
    d = place(graph, policy, request("pair", nproc=2), rules)
    assert d.power_caps_w == {"GPU-0": None, "GPU-1": None}  # 800 + 2 x 100 idle: fits as it asked
    e = place(graph, policy, request("one"), rules)
    caps = graph.budget_caps_w
    assert e is not None and caps["GPU-0"] == caps["GPU-1"] < 400.0 and total_w(graph, rules) <= 1050.0
    assert set(e.recaps_w) == {"GPU-0", "GPU-1"}


def test_a_shared_gpu_keeps_its_budget_cap() -> None:
    rules = Rules(power_max_total_w=1000.0)
    graph = machine(2)
    a = place(graph, get_policy("exclusive"), request("a"), rules)

    class ShareGpu0:
        name = "share"

        def decide(self, state, job, rules):
            return Decision("share", ("GPU-0",), {"GPU-0": 250.0}, {"GPU-0": ["a"]}, ["test"])

    b = place(graph, BudgetedPolicy(ShareGpu0()), request("b"), rules)
    assert a is not None and b is not None
    assert b.recaps_w == {} and graph.budget_caps_w == {"GPU-0": 400.0}  # the newcomer does not move its cap
    by_uuid = {d.uuid: d for d in host_demands(graph, graph.hosts["h"], rules)}
    assert by_uuid["GPU-0"].fixed and by_uuid["GPU-0"].wanted_w == 400.0


def test_gpus_ecolaunch_may_not_cap_count_at_their_limit_and_get_no_budget_cap() -> None:
    for budget, placed in ((1000.0, False), (1100.0, True)):
        rules = parse_rules(f"[agent]\ngpus = [0]\n[power]\nmax_total_w = {budget}\n")[0]
        graph, policy = machine(3), get_policy("exclusive")
        graph.hosts["h"].gpus["GPU-2"].foreign_pids = [4242]  # a colleague's plain python on GPU 2, at 400 W
        a = place(graph, policy, request("a"), rules)  # GPU 0: 400 W + GPU 1 idle at 100 W + GPU 2 at 400 W
        assert a is not None and graph.budget_caps_w == {"GPU-0": 400.0}
        # GPU 1 is not ecolaunch's to cap: it counts at its 400 W limit, so GPU 0 must give 300 W (its floor is
        # 285 W: no) or 200 W
        b = place(graph, policy, request("b"), rules)
        assert (b is not None) is placed
        assert graph.budget_caps_w == ({"GPU-0": 300.0} if placed else {"GPU-0": 400.0})
        assert budgeted_gpus(graph, rules) == {"GPU-0"}


def test_booking_records_what_a_fresh_allocation_gives() -> None:
    rules = Rules(power_max_total_w=1100.0)
    graph, policy = machine(), get_policy("exclusive")
    for jid, profile in (("a", STEEP), ("b", FLAT), ("c", STEEP), ("d", FLAT)):
        place(graph, policy, request(jid, profile), rules)
        assert graph.budget_caps_w == rebalance(graph, rules)
        assert total_w(graph, rules) <= 1100.0


def test_ceilings_share_what_the_budget_leaves_over_and_keep_the_sum() -> None:
    rules = Rules(power_max_total_w=1000.0)
    graph, policy = machine(), get_policy("exclusive")
    place(graph, policy, request("a"), rules)
    place(graph, policy, request("b", FLAT), rules)
    # booked: a 400, b 400; idle 2 x 100: nothing left over
    assert budget_ceilings(graph, rules) == {"GPU-0": 400.0, "GPU-1": 400.0}
    graph.budget_caps_w = {"GPU-0": 300.0, "GPU-1": 260.0}  # the file's copy is every member's: never read
    assert budget_ceilings(graph, rules) == {"GPU-0": 400.0, "GPU-1": 400.0}
    ceilings = budget_ceilings(graph, rules, graph.budget_caps_w)  # 240 W left over: 120 W each, on the grid
    assert ceilings == {"GPU-0": 400.0, "GPU-1": 380.0}  # 420 W is above what [caps] allows on GPU 0
    assert sum(ceilings.values()) + 2 * 100.0 <= 1000.0
    assert budget_ceilings(graph, Rules()) == {}


def test_the_graph_keeps_its_budget_caps_in_its_json_form_and_refuses_bad_ones() -> None:
    graph = machine(2)
    graph.budget_caps_w = {"GPU-1": 250.0, "GPU-0": 300.0}
    doc = graph.to_dict(include_jobs=False)
    assert doc["budget_caps_w"] == {"GPU-0": 300.0, "GPU-1": 250.0}
    assert StateGraph.from_dict(doc).budget_caps_w == {"GPU-0": 300.0, "GPU-1": 250.0}
    del doc["budget_caps_w"]  # a state file written before budgets existed
    assert StateGraph.from_dict(doc).budget_caps_w == {}
    for bad in ({"GPU-0": "300"}, {"GPU-0": float("nan")}, {"GPU-0": -1.0}, {"GPU-0": True}, ["GPU-0"]):
        doc["budget_caps_w"] = bad
        with pytest.raises(ValueError, match="budget_caps_w"):
            StateGraph.from_dict(doc)
