"""The curves a first launch can be told before it runs (ecolaunch.sim.first_curves; the pessimistic and exact ones,
which only the benchmarks run, in benchmarks/_first_curves.py): the pessimistic rule reads only the other folds'
types, the exact one the truth, the history one another user's measurement of the same type; a policy decides a
first launch with the supplied curve while a repeat keeps its own; the margins' coverage."""

from __future__ import annotations

import dataclasses

from benchmarks._first_curves import ExactFirstCurve, PessimisticFirstCurve
from ecolaunch.admin.rules import Rules
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.budgeted import BudgetedPolicy
from ecolaunch.policy.curve import CurvePolicy
from ecolaunch.policy.firstcurve import FirstLaunchCurves
from ecolaunch.sim.first_curves import HistoryFirstCurve
from ecolaunch.sim.measured import BOARD, MeasuredWorld
from ecolaunch.state.graph import GpuNode, Host, StateGraph
from ecolaunch.devices.catalogue import lookup


def machine(n: int = 4) -> StateGraph:
    graph = StateGraph()
    graph.hosts["h"] = Host("h", {f"GPU-{i}": GpuNode.from_model(lookup(BOARD), uuid=f"GPU-{i}", index=i)
                                  for i in range(n)})
    return graph


def request(jid: str, profile=None) -> JobRequest:
    return JobRequest(jid, "u", "h", 1, memory_mib=1000, allowed_slowdown_pct=10.0, profile=profile)


def test_the_pessimistic_curve_bounds_every_type_of_the_other_folds_and_reads_none_of_its_own() -> None:
    world = MeasuredWorld()
    kinds = sorted(world.kinds)
    mine = kinds[0]
    fold = world.fold_of(mine)
    curve = PessimisticFirstCurve({"j": mine})(machine(), request("j"))
    others = [world.job_kind(k) for k in kinds if world.fold_of(k) != fold]
    own = [world.job_kind(k) for k in kinds if world.fold_of(k) == fold]
    t0 = curve.iter_time_s
    for p in curve.cap_points:
        ratio = p.iter_time_s / t0
        assert ratio >= max(k.time_ratio(p.power_cap_w) for k in others) - 1e-9
        assert ratio == max(k.time_ratio(p.power_cap_w) for k in others)  # the maximum, not a margin over it
    # its own fold's types do not move it: the same curve for any type of the fold, another for another fold's
    same = PessimisticFirstCurve({"j": own[-1].name})(machine(), request("j"))
    assert same.cap_points == curve.cap_points
    other = next(k for k in kinds if world.fold_of(k) != fold)
    assert PessimisticFirstCurve({"j": other})(machine(), request("j")).cap_points != curve.cap_points


def test_the_exact_curve_is_the_truth_and_a_mixed_host_gets_none() -> None:
    world = MeasuredWorld()
    kind = sorted(world.kinds)[3]
    assert ExactFirstCurve({"j": kind})(machine(), request("j")) == world.true_profile(kind)
    mixed = machine(1)
    mixed.hosts["h"].gpus["GPU-9"] = GpuNode.from_model(lookup("P100-PCIE-16GB"), uuid="GPU-9", index=9)
    assert ExactFirstCurve({"j": kind})(mixed, request("j")) is None


def test_a_first_launch_is_capped_from_the_supplied_curve_and_a_repeat_from_its_own() -> None:
    world = MeasuredWorld()
    kind = sorted(world.kinds)[3]
    rules = Rules(power_max_total_w=4 * 100.0 + 60.0)  # room for one job only 60 W above the board's minimum
    policy = FirstLaunchCurves(BudgetedPolicy(CurvePolicy(name="exact-first-curve")), ExactFirstCurve({"j": kind}),
                               "exact-first-curve")
    plain = BudgetedPolicy(CurvePolicy())
    assert plain.decide(machine(), request("j"), rules) is None  # no curve: it cannot be lowered, so it waits
    decision = policy.decide(machine(), request("j"), rules)
    assert decision is not None and decision.policy == "exact-first-curve"
    assert decision.predicted["first_curve"] == "exact"
    assert next(iter(decision.power_caps_w.values())) <= 160.0
    # a repeat launch reads its own measurements: nothing is supplied
    repeat = policy.decide(machine(), request("j", world.true_profile(kind)), Rules())
    assert repeat is not None and "first_curve" not in repeat.predicted


def test_the_history_curve_is_another_users_measured_profile_of_the_type_else_the_fallback() -> None:
    world = MeasuredWorld(seed=3)
    kind = sorted(world.kinds)[5]
    rule = PessimisticFirstCurve({"j": kind})
    supply = HistoryFirstCurve({"j": kind}, rule)
    supply.bind_world(world)
    state = machine()
    assert supply(state, request("j")) == rule(state, request("j"))  # nobody ran it yet: the rule's curve
    alices = world.profile_inline("alice", kind)  # alice's first launch of the type, profiled inline
    told = supply(state, request("j"))  # u's first launch of it now reads alice's measurement
    assert told == alices and told.cap_points and told.knows_power
    assert world.machine_history_profile("alice", kind) is None  # her own runs are hers, not a colleague's
    other = sorted(world.kinds)[6]
    assert world.machine_history_profile("u", other) is None  # another type is not the same job
    assert supply.told == {"history": 1, "fallback": 1}


def test_coverage_says_whether_the_truth_stayed_within_the_curve_and_its_margin() -> None:
    world = MeasuredWorld(seed=1)
    kind = sorted(world.kinds)[5]
    bounds = (100.0, 250.0)
    assert world.record_coverage("u", kind, 150.0, bounds) is None  # no history: nothing predicted
    world.profile_inline("u", kind)
    assert world.record_coverage("u", kind, 250.0, bounds) is None  # uncapped: nothing predicted
    covered = world.record_coverage("u", kind, 150.0, bounds)
    assert isinstance(covered, bool) and len(world.coverage) == 1 and world.coverage[0][:2] == (kind, covered)
    # a history that says the type loses nothing at 100 W is not covered where the truth slows down
    truth = world.job_kind(kind)
    flat = [CapPoint(c, truth.iter_time_s, 100.0) for c in (100.0, 175.0, 250.0)]
    world._history[("v", kind, BOARD)] = dataclasses.replace(world._history[("u", kind, BOARD)], points=flat)
    assert truth.time_ratio(100.0) > 1.05 and world.record_coverage("v", kind, 100.0, bounds) is False
    assert world.coverage[-1][:3] == (kind, False, True)  # 100 W is a point its history measured
    world.record_coverage("v", kind, 130.0, bounds)
    assert world.coverage[-1][2] is False  # 130 W lies between measured caps


def test_a_told_first_launch_starts_its_closed_loop_from_its_own_profilers_choice() -> None:
    # the launcher's profiler sets its own choice when it finishes, whatever cap a told curve placed the job at
    kind = "LM (batch size 20)"  # its profile finds no cap worth setting; a loop started at 100 W stays there
    gpus = list(machine(1).hosts["h"].gpus.values())
    ends = []
    for cap, first in ((None, True), (100.0, True), (100.0, False)):
        world = MeasuredWorld(seed=2)
        world.profile_inline("u", kind)
        ends.append(world.settle_cap("u", kind, cap, Rules(), gpus, 10.0, first=first))
    assert ends[0] is None and ends[1] is None  # told to start at 100 W: its own profile's choice (uncapped)
    assert ends[2] == 100.0  # a repeat placed at 100 W starts its loop there
