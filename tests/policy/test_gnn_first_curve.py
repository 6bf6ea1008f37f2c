"""The GNN's curve of a first launch (ecolaunch.policy.gnn.GnnFirstCurve): what it predicts for a job nothing is known
of, how its uncertainty becomes the cap margin, and the registry's ``gnn`` policy deciding a first launch with it
(learned), a repeat with its own measurements (not), under a power budget that holds a curve-less job back."""

from __future__ import annotations

import pytest

from benchmarks._first_curves import FirstCurveError, first_curve_errors, first_curve_z
from ecolaunch.caps.limits import profile_floor_w
from ecolaunch.admin.rules import Rules
from ecolaunch.devices.catalogue import lookup
from ecolaunch.jobmodel.capcurve import fit_curve
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.gnn import FIRST_CURVE_Z, GnnFirstCurve
from ecolaunch.policy.registry import GNN_FIRST_CURVE_WHY, get_policy
from ecolaunch.jobmodel.capchoice import MARGIN_Z, cap_margin_pct
from ecolaunch.sim.truth import h200_truths
from ecolaunch.state.graph import GpuNode, Host, StateGraph

BOARD = "V100-PCIE-16GB"


def machine(n: int = 4, board: str = BOARD) -> StateGraph:
    graph = StateGraph()
    graph.hosts["h"] = Host("h", {f"GPU-{i}": GpuNode.from_model(lookup(board), uuid=f"GPU-{i}", index=i)
                                  for i in range(n)})
    return graph


def request(jid: str = "j", profile: Profile | None = None, bound: float = 10.0) -> JobRequest:
    return JobRequest(jid, "u", "h", 1, memory_mib=1000, allowed_slowdown_pct=bound, profile=profile)


def test_the_curve_of_a_job_nothing_is_known_of_spans_the_board_and_carries_its_uncertainty() -> None:
    curve = GnnFirstCurve()(machine(), request())
    model = lookup(BOARD)
    caps = [p.power_cap_w for p in curve.cap_points]
    assert caps[0] == model.power_limit_min_w and caps[-1] == model.power_limit_max_w
    assert all(b - a == pytest.approx(5.0) for a, b in zip(caps, caps[1:]))  # the cap choice's grid
    times = [p.iter_time_s for p in curve.cap_points]
    assert all(a >= b for a, b in zip(times, times[1:]))  # a lower cap never makes it faster
    assert times[0] > 1.2 * times[-1]  # at the board's minimum, a job drawing up to its max slows down
    top = curve.cap_points[-1]
    assert top.se_pct == 0.0 and curve.iter_time_s == top.iter_time_s  # uncapped is exact by definition
    assert all(p.se_pct > 0 for p in curve.cap_points[:-1])
    assert curve.knows_power and curve.memory_mib == 1000
    assert all(p.power_w <= p.power_cap_w * 1.01 for p in curve.cap_points)


def test_z_standard_deviations_are_what_the_margin_keeps_back() -> None:
    state = machine()
    wide, narrow = (GnnFirstCurve(z=z)(state, request()) for z in (FIRST_CURVE_Z, FIRST_CURVE_Z / 2))
    cap = 200.0
    rows = {c: (speed, sd) for c, speed, sd, _ in GnnFirstCurve().speeds(state.hosts["h"].gpus["GPU-0"])}
    speed, sd = rows[cap]
    # the margin at a grid cap is MARGIN_Z standard errors of the point: FIRST_CURVE_Z standard deviations of the speed
    margin = cap_margin_pct(fit_curve(wide.cap_points), cap)
    assert margin == pytest.approx(FIRST_CURVE_Z * 100.0 * sd / speed, rel=1e-6)
    assert cap_margin_pct(fit_curve(narrow.cap_points), cap) == pytest.approx(margin / 2, rel=1e-6)
    assert MARGIN_Z > FIRST_CURVE_Z > 0
    # fewer standard deviations kept back: a floor at least as low
    rules = Rules()
    nodes = list(state.hosts["h"].gpus.values())[:1]
    assert profile_floor_w(narrow, 10.0, nodes, rules) <= profile_floor_w(wide, 10.0, nodes, rules)
    with pytest.raises(ValueError):
        GnnFirstCurve(z=-1.0)


def test_a_host_of_mixed_boards_is_told_nothing() -> None:
    mixed = machine(1)
    mixed.hosts["h"].gpus["GPU-9"] = GpuNode.from_model(lookup("P100-PCIE-16GB"), uuid="GPU-9", index=9)
    assert GnnFirstCurve()(mixed, request()) is None


def test_the_gnn_policy_decides_a_first_launch_with_its_curve_and_says_it_learned() -> None:
    policy = get_policy("gnn")
    decision = policy.decide(machine(), request(bound=30.0), Rules())
    assert decision is not None and decision.policy == "gnn"
    assert decision.predicted["first_curve"] == "gnn" and decision.predicted["learned"] is True
    assert decision.reasons[0] == GNN_FIRST_CURVE_WHY
    cap = next(iter(decision.power_caps_w.values()))
    assert cap is not None and cap < lookup(BOARD).power_limit_max_w  # a 30 % bound leaves room for a cap
    # a repeat launch reads its own measurements: nothing is predicted for it
    own = Profile(0.1, 90.0, 40.0, 1000, 200.0, (CapPoint(250.0, 0.1, 200.0), CapPoint(150.0, 0.13, 150.0)))
    repeat = policy.decide(machine(), request(profile=own), Rules())
    assert repeat is not None and "first_curve" not in repeat.predicted and not repeat.predicted.get("learned")
    # the curve policy has no learned part: its first launch is decided as it is
    plain = get_policy("curve").decide(machine(), request(bound=30.0), Rules())
    assert plain is not None and "first_curve" not in plain.predicted


def test_under_a_budget_a_first_launch_is_admitted_where_a_curve_less_one_waits() -> None:
    rules = Rules(power_max_total_w=4 * 100.0 + 60.0)  # room for one job only 60 W above the board's minimum
    assert get_policy("curve").decide(machine(), request(bound=50.0), rules) is None  # no curve: it waits
    decision = get_policy("gnn").decide(machine(), request(bound=50.0), rules)
    assert decision is not None and decision.predicted["learned"] is True
    assert next(iter(decision.power_caps_w.values())) <= 160.0


def test_the_calibration_counts_the_points_below_the_prediction_minus_z_sd() -> None:
    errors = [FirstCurveError("c", 0.5, 0.9, 0.1, m) for m in (0.9, 0.85, 0.8, 0.7, 0.95)]
    assert sorted(e.z for e in errors) == pytest.approx([-0.5, 0.0, 0.5, 1.0, 2.0])
    z = first_curve_z(errors, coverage=0.8)
    assert z == pytest.approx(1.2)  # numpy's linear quantile: 1.0 + 0.2 x (2.0 - 1.0)
    assert sum(e.measured >= e.predicted - z * e.sd for e in errors) >= 0.8 * len(errors)
    assert first_curve_z([FirstCurveError("c", 0.5, 0.9, 0.1, 0.95)]) == 0.0  # never a negative margin
    with pytest.raises(ValueError):
        first_curve_z([FirstCurveError("c", 0.5, 0.9, 0.0, 0.95)])


def test_the_errors_are_read_at_every_measured_cap_below_the_top() -> None:
    truths = [t for t in h200_truths() if t.name.endswith("mm")] or h200_truths()[:1]
    errors = first_curve_errors(GnnFirstCurve(), truths)
    truth = truths[0]
    below = [p for p in truth.points if p.power_cap_w < truth.uncapped_cap_w and p.power_cap_w % 5 == 0]
    assert len([e for e in errors if e.curve == truth.name]) == len(below) > 0
    for e in errors:
        assert 0 < e.cap_frac < 1 and e.sd > 0 and 0 < e.predicted <= 1.0
