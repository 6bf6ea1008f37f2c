"""The measured world: its truth is the measured tables, the policies read noisy views of it, history and folds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.devices.spec import parse_spec
from ecolaunch.policy.base import Decision
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.sim.measured import (BOARD, BOARDS, FOLDS, PROFILE_ITERS, HeldOutPriors, MeasuredWorld, Noise, _pairs,
                                    held_out_prior, holdout_key, job_kinds, measured_oracle, network_of)
from ecolaunch.jobmodel.capcurve import fit_curve
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.capchoice import WINDOW_ERROR_PCT, reference_se_pct
from ecolaunch.sim.measured_traces import measured_trace
from ecolaunch.sim.models import gavel_pairs, gavel_solo, read_data_csv
from ecolaunch.sim.policies import FoldedPolicy, get_sim_policy
from ecolaunch.sim.trace_registry import MEASURED, trace_names
from ecolaunch.sim.truth import true_slowdown_pct, zeus_truths

LIGHT, HEAVY = "ResNet-18 (batch size 16)", "ResNet-50 (batch size 64)"


def test_pair_truth_is_gavels_measurement():
    world = MeasuredWorld()
    played = [p for p in gavel_pairs("v100") if (p.job_a, p.job_b) in _pairs()]
    assert len(played) > 200
    for p in played:
        x, power, idle, dyn = world.gpu_load([p.job_a, p.job_b], None)
        assert x == pytest.approx([p.shared_a / p.solo_a, p.shared_b / p.solo_b])
        assert idle <= power <= world.model.power_limit_max_w
        assert power == pytest.approx(idle + sum(dyn))


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_no_suspect_value_reaches_the_truth(board):
    """Every ordered pair the world lets share is checked against the raw table: no value that copies the solo
    throughput, no [0, 0]; and it plays the raw values. A pair with a copy in either value cannot share."""
    gpu, world = BOARDS[board], MeasuredWorld(board=board)
    solo = gavel_solo()
    raw = {(r["job_a"], r["job_b"]): (float(r["throughput_a"]), float(r["throughput_b"]))
           for r in read_data_csv("gavel_pairs_sf1.csv") if r["gpu"] == gpu}
    names = sorted(job_kinds())
    suspect = 0
    for a in names:
        for b in names:
            ta, tb = raw[(a, b)]
            copy = ta == solo[(gpu, a)] or tb == solo[(gpu, b)]
            measured = ta > 0 and tb > 0
            suspect += measured and copy
            assert world.feasible([a, b]) == (measured and not copy), (a, b)
            if world.feasible([a, b]):
                x, _, _, _ = world.gpu_load([a, b], None)
                assert x == [ta / solo[(gpu, a)], tb / solo[(gpu, b)]]
    assert suspect == (135 if gpu == "v100" else 0)  # the count: 135 of 636 ordered V100 rows hold a copy


def test_every_types_curve_has_a_source():
    sweeps = {c.name for c in zeus_truths()}
    for gpu in BOARDS.values():
        for name, kind in job_kinds(gpu).items():
            source = kind.curve_source
            assert source.startswith(("measured: ", "rank-matched stand-in: ")) and kind.curve.name in source, name
            if name.startswith("ResNet-18") and gpu == "v100":
                assert source.startswith("measured: ") and kind.curve.name == "V100 resnet18"
            elif name.startswith("ResNet-50"):  # Zeus swept ResNet-50 at every batch size Gavel ran, on both boards
                batch = name.split()[-1].rstrip(")")
                assert source.startswith("measured: ") and kind.curve.name == f"{gpu.upper()} imagenet/resnet50 bs{batch}"
            else:  # no curve of its own network on that board: a sweep of another network stands in
                assert source.startswith("rank-matched stand-in: ") and kind.curve.name in sweeps, name


def test_resnet18_draws_its_measured_power_and_a_cap_binds():
    world = MeasuredWorld()
    kind = job_kinds()[LIGHT]
    assert kind.power_w > 180.0  # Zeus's V100 ResNet-18 window draws ~190 W at 250 W (the NCF stand-in drew ~38 W)
    (x,), power, _, _ = world.gpu_load([LIGHT], 150.0)
    assert x < 0.99 and power <= 150.0
    assert true_slowdown_pct(kind.curve, 150.0) > 1.0


def test_unmeasured_sets_cannot_share():
    world = MeasuredWorld()
    names = sorted(job_kinds())
    missing = next((a, b) for a in names for b in names if (a, b) not in _pairs())
    assert not world.feasible(list(missing))
    assert not world.feasible([LIGHT, LIGHT, LIGHT])  # three jobs were never measured
    assert world.feasible([LIGHT])


def test_folds_partition_the_types():
    world = MeasuredWorld(seed=3)
    seen = [t for k in range(FOLDS) for t in world.fold_types(k)]
    assert sorted(seen) == sorted(job_kinds())
    assert all(world.fold_of(t) == k for k in range(FOLDS) for t in world.fold_types(k))


def test_a_folds_training_set_holds_no_zeus_row_of_a_network_its_types_play_on_the_board():
    from ecolaunch.learn.train import _zeus_held, _zeus_sweeps, build_dataset
    from ecolaunch.sim.models import ZEUS_GPUS, zeus_rows

    world = MeasuredWorld(seed=2)
    for k in range(FOLDS):
        keys = [holdout_key(c) for c in world.fold_curves(k)]
        held = _zeus_held(keys)  # raises on a key that names no training curve
        # every board's network a type of the fold plays (the ResNet-18 window included: no sweep of it exists)
        played = {(world.job_kind(t, b).curve.name.split(" ")[0].lower(), network_of(world.job_kind(t, b).curve))
                  for t in world.fold_types(k) for b in BOARDS}
        kept = [(gpu, rows[0].workload) for gpu in ZEUS_GPUS for rows in _zeus_sweeps(gpu, held)]
        assert kept and not {(g, w.split("/")[-1]) for g, w in kept} & played
        # ... and every other sweep stays: the played networks on the boards the world lacks (A40, RTX 6000) too
        total = {(g, r.workload, r.batch_size) for g in ZEUS_GPUS for r in zeus_rows(g)}
        dropped = {(g, w, b) for g, w, b in total if (g, w.split("/")[-1]) in played}
        assert len({(g, r[0].workload, r[0].batch_size) for g in ZEUS_GPUS for r in _zeus_sweeps(g, held)}) \
            == len(total) - len(dropped)
        assert {g for g, _ in kept} == set(ZEUS_GPUS)
    ds = build_dataset(0, 0, holdout_zeus=[holdout_key(c) for c in world.fold_curves(0)])
    kept_rows = sum(len(rows) for g in ZEUS_GPUS for rows in _zeus_sweeps(g, _zeus_held(ds.data["holdout_zeus"])))
    assert ds.data["zeus_rows"] == kept_rows > 0


def test_every_types_prior_is_fitted_without_the_networks_it_plays():
    from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR, CapPrior
    from ecolaunch.sim.truth import vendored_zeus_curves

    curves = vendored_zeus_curves()  # the package's copies (a clean clone has no ../shared)
    world = MeasuredWorld()
    for kind in job_kinds():
        played = {network_of(world.job_kind(kind, b).curve) for b in BOARDS}
        keep = [c for c in curves if c.workload.split("/")[-1] not in played]
        assert 0 < len(keep) < len(curves) - 20
        prior = held_out_prior(kind)
        refit = CapPrior.fit([c.points for c in keep])
        assert (prior.time_ratio, prior.power_ratio) == (refit.time_ratio, refit.power_ratio)
        assert prior != DEFAULT_PRIOR
    priors = HeldOutPriors({"j1": HEAVY})
    assert world.priors({"j1": HEAVY})("j1") == priors("j1") == held_out_prior(HEAVY)


def test_first_launch_is_unknown_then_history_is_noisy_measurement():
    world = MeasuredWorld(seed=1)
    assert world.request_profile("ann", HEAVY) is None
    prof = world.profile_inline("ann", HEAVY)
    assert world.request_profile("bob", HEAVY) is None  # history is per user
    kind = job_kinds()[HEAVY]
    caps = [p.power_cap_w for p in prof.cap_points]
    assert 3 >= len(caps) >= 2 and max(caps) == world.model.power_limit_max_w
    times = [p.iter_time_s / kind.iter_time_s for p in prof.cap_points]
    truth = [kind.time_ratio(c) for c in caps]
    assert times != truth  # readings carry noise ...
    assert times == pytest.approx(truth, rel=0.06)  # ... around the truth
    exact = MeasuredWorld(seed=1, noise=Noise(0.0, 0.0, 0.0, 0.0, 0.0)).profile_inline("ann", HEAVY)
    assert [p.iter_time_s / kind.iter_time_s for p in exact.cap_points] == pytest.approx(truth)
    # a repeat reads the points as the launcher's history holds them: with how well each was measured, so its
    # margins count the reference window's error (capchoice.WINDOW_ERROR_PCT) as a real launch's do
    again = world.request_profile("ann", HEAVY)
    assert all(p.iterations == PROFILE_ITERS and p.iter_time_cv_pct == pytest.approx(3.0) for p in again.cap_points)
    assert reference_se_pct(fit_curve(again.cap_points)) > WINDOW_ERROR_PCT


def test_part_of_a_windows_error_repeats_in_every_run_of_the_job_on_the_board():
    kind = job_kinds()[HEAVY]
    world = MeasuredWorld(seed=3)
    independent = MeasuredWorld(seed=3, noise=Noise(persistent_time=0.0))
    for user in ("ann", "bob"):  # two runs of one script on one board
        run, same = world.profile_inline(user, HEAVY), independent.profile_inline(user, HEAVY)
        caps = [p.power_cap_w for p in run.cap_points]
        assert caps == [p.power_cap_w for p in same.cap_points]
        # the independent draws are those of a world without it: the repeating part multiplies them, window by window
        repeats = [world.persistent_time_error(HEAVY, None, c) for c in caps]
        assert [p.iter_time_s for p in run.cap_points] == pytest.approx(
            [q.iter_time_s * (1 + e) for q, e in zip(same.cap_points, repeats)], rel=1e-12)
    # the same in every run of that window in this world, another for another window, type, board or seed
    cap = world.model.power_limit_max_w
    repeat = world.persistent_time_error(HEAVY, None, cap)
    assert repeat == MeasuredWorld(seed=3).persistent_time_error(HEAVY, None, cap) != 0.0
    assert abs(repeat) < 5 * Noise().persistent_time
    other = next(k for k in job_kinds() if k != HEAVY)
    assert len({repeat, world.persistent_time_error(HEAVY, None, cap - 25.0), world.persistent_time_error(other, None, cap),
                world.persistent_time_error(HEAVY, "P100", cap),
                MeasuredWorld(seed=4).persistent_time_error(HEAVY, None, cap)}) == 5
    # with every independent part off, what is left is the repeating part, whole: no average of runs removes it
    exact = MeasuredWorld(seed=3, noise=Noise(0.0, 0.0, 0.0, 0.0))
    for user in ("ann", "bob"):
        windows = exact.profile_inline(user, HEAVY).cap_points
        assert [p.iter_time_s for p in windows] == pytest.approx(
            [kind.iter_time_s * kind.time_ratio(p.power_cap_w) * (1 + exact.persistent_time_error(HEAVY, None,
                                                                                               p.power_cap_w))
             for p in windows], rel=1e-12)
    assert world.persistent_time_error(HEAVY, None, cap) != 0.0 and MeasuredWorld(
        noise=Noise(persistent_time=0.0)).persistent_time_error(HEAVY, None, cap) == 0.0


def test_closed_loop_settles_within_the_bound_without_noise():
    world = MeasuredWorld(noise=Noise(0.0, 0.0, 0.0, 0.0, 0.0))
    machine = parse_spec(f"1x{BOARD}", hostname="node0")
    sim = Simulation(machine, get_sim_policy("no-gnn"), world=world, closed_loop=True)
    gpus = list(sim.graph.hosts["node0"].gpus.values())
    world.profile_inline("ann", HEAVY)
    cap = world.settle_cap("ann", HEAVY, 150.0, Rules(), gpus, 10.0)  # starts too low: the loop raises it
    assert cap is not None and cap > 150.0
    assert true_slowdown_pct(job_kinds()[HEAVY].curve, cap) <= 10.0 + 1e-6


def _job(i: str, t: float, kind: str, user: str = "ann", work_s: float = 3600.0, bound: float = 10.0) -> TraceJob:
    return TraceJob(i, t, 1, work_s, Profile(iter_time_s=0.1, memory_mib=1000), bound, user, kind)


class _ShareAll:
    """Puts every job on GPU 0, whoever is there."""

    name = "share-all"

    def decide(self, state, job, rules):
        u = next(iter(state.hosts[job.host].gpus))
        return Decision(self.name, (u,), {u: None}, {u: [j.id for j in state.jobs_on(u)]}, ["test"])


def test_a_pair_gavel_could_not_run_fails_and_runs_alone_later():
    names = sorted(job_kinds())
    a, b = next((a, b) for a in names for b in names if (a, b) not in _pairs())
    trace = Trace("t", (_job("j0", 0.0, a), _job("j1", 1.0, b)))
    world = MeasuredWorld()
    result = Simulation(parse_spec(f"2x{BOARD}", hostname="node0"), _ShareAll(), world=world).run(trace)
    assert world.oom_failures == 1
    second = result.jobs[1]
    assert second.undone and second.end_s is not None


def test_repeats_arrive_known_and_the_engine_counts_launches():
    trace = Trace("t", (_job("j0", 0.0, HEAVY), _job("j1", 4000.0, HEAVY), _job("j2", 8000.0, HEAVY, user="bob")))
    world = MeasuredWorld()
    Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), get_sim_policy("no-gnn"), world=world,
               closed_loop=True).run(trace)
    assert (world.first_launches, world.repeat_launches) == (2, 1)


def test_a_first_launch_starts_from_the_newest_colleagues_profile_as_the_launcher_does():
    # ann runs HEAVY first (profiled inline); cy's first launch starts from ann's, bob's from cy's (stored last)
    trace = Trace("t", (_job("j0", 0.0, HEAVY), _job("j1", 4000.0, HEAVY, user="cy"),
                        _job("j2", 8000.0, HEAVY, user="bob")))
    world = MeasuredWorld()
    sim = Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), get_sim_policy("no-gnn"), world=world,
                     closed_loop=True, colleague_profiles=True)
    adopted = []
    adopt = world.adopt_colleague

    def watched(user, kind, board=None):
        theirs = world._colleague(user, kind, board)
        if theirs is not None:
            adopted.append((user, theirs, list(world.request_profile(theirs, kind, board).cap_points)))
        return adopt(user, kind, board)

    world.adopt_colleague = watched
    sim.run(trace)
    assert (world.first_launches, world.adopted_launches, world.repeat_launches) == (1, 2, 0)
    assert [(u, theirs) for u, theirs, _ in adopted] == [("cy", "ann"), ("bob", "cy")]
    bob = world.request_profile("bob", HEAVY)
    # cy's pooled windows, then what bob's own closed loop measured: a window more where it ran
    cys = adopted[1][2]
    assert {p.power_cap_w for p in cys} <= {p.power_cap_w for p in bob.cap_points}
    assert sum(p.windows for p in bob.cap_points) > sum(p.windows for p in cys)
    assert world.machine_history_profile("ann", HEAVY) == bob  # bob stored last: the newest, as the launcher reads
    # without it (the ablation): every user's first launch is profiled inline
    plain = MeasuredWorld()
    Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), get_sim_policy("no-gnn"), world=plain,
               closed_loop=True).run(trace)
    assert (plain.first_launches, plain.adopted_launches) == (3, 0)



def test_an_adopted_profile_whose_reference_the_run_contradicts_is_dropped_as_the_launcher_drops_it():
    # ann's history claims HEAVY 30 % slower at every cap, its reference measured inside runs; cy adopts it, and cy's
    # loop measures its own reference (CapController(borrowed=True)): ann's points go, cy keeps only what cy measured
    trace = Trace("t", (_job("j1", 0.0, HEAVY, user="cy"),))
    world = MeasuredWorld()
    world.profile_inline("ann", HEAVY)
    known = world._history[("ann", HEAVY, BOARD)]
    known.points = [replace(p, iter_time_s=1.3 * p.iter_time_s, run_iterations=p.iterations) for p in known.points]
    claimed = {(p.power_cap_w, p.iter_time_s) for p in known.points}
    Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), get_sim_policy("no-gnn"), world=world, closed_loop=True,
               colleague_profiles=True).run(trace)
    assert (world.adopted_launches, world.disowned_launches) == (1, 1)
    cys = world.request_profile("cy", HEAVY).cap_points
    assert cys and not claimed & {(p.power_cap_w, p.iter_time_s) for p in cys}
    assert all(p.windows == 1 and p.run_iterations == p.iterations for p in cys)  # the run's own windows only
    top = max(cys, key=lambda p: p.power_cap_w)
    assert top.iter_time_s == pytest.approx(job_kinds()[HEAVY].iter_time_s, rel=0.03)

def test_a_repeat_measures_its_reference_at_the_top_unless_a_budgets_ceiling_holds_it_below():
    # as the launcher's ClosedLoop: a window at the top cap (250 W on this board) only where no ceiling is below it
    def reference_iterations(world: MeasuredWorld) -> int:
        return sum(p.run_iterations for p in world._history[("ann", HEAVY, BOARD)].points if p.power_cap_w == 250.0)

    def repeat(budget_w: float | None) -> tuple[int, int]:
        world = MeasuredWorld()
        for jid, rules in (("j0", Rules()), ("j1", Rules(power_max_total_w=budget_w))):
            Simulation(parse_spec(f"4x{BOARD}", hostname="node0"), get_sim_policy("curve"), rules, world=world,
                       closed_loop=True).run(Trace("t", (_job(jid, 0.0, HEAVY),)))
            if jid == "j0":
                before = reference_iterations(world)
        assert world.repeat_launches == 1
        return before, reference_iterations(world)

    unbudgeted, roomy, held = repeat(None), repeat(560.0), repeat(520.0)  # 3 idle GPUs at 100 W: 260 / 220 W left
    assert unbudgeted[1] > unbudgeted[0] and roomy == unbudgeted
    assert held[1] == held[0] == unbudgeted[0]


def test_lifting_caps_while_jobs_wait_finishes_the_running_job_sooner():
    # one GPU: j0 runs (capped by its profile and closed loop), j1 arrives at 600 s and waits for it; the ablation
    # Simulation(lift_caps_waiting=1) runs j0 uncapped while j1 waits, so j0 ends sooner, and j1 (nobody behind
    # it) runs capped as before
    trace = Trace("t", (_job("j0", 0.0, HEAVY), _job("j1", 600.0, HEAVY, user="bob")))

    def run(lift):
        world = MeasuredWorld(noise=Noise(0.0, 0.0, 0.0, 0.0, 0.0))
        return Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), get_sim_policy("no-gnn"), world=world,
                          closed_loop=True, lift_caps_waiting=lift).run(trace).jobs

    plain, lifted = run(None), run(1)
    assert plain[0].slowdown_pct > 1.0  # its cap binds
    assert lifted[0].end_s < plain[0].end_s and lifted[0].slowdown_pct < plain[0].slowdown_pct
    assert lifted[1].start_s < plain[1].start_s
    assert lifted[1].slowdown_pct == pytest.approx(plain[1].slowdown_pct)  # nobody waits behind it: capped alike
    with pytest.raises(ValueError, match="lift_caps_waiting"):
        Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), get_sim_policy("no-gnn"), lift_caps_waiting=0)


def test_oracle_knows_the_truth_and_caps_within_the_bound():
    trace = Trace("t", (_job("j0", 0.0, HEAVY),))
    world = MeasuredWorld()
    sim = Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), measured_oracle(world, {"j0": HEAVY}),
                     world=world, omniscient=True)
    out = sim.run(trace).jobs[0]
    cap = next(iter(out.caps_w.values()))
    assert cap is not None and true_slowdown_pct(job_kinds()[HEAVY].curve, cap) <= 10.0 + 1e-9
    assert out.slowdown_pct == pytest.approx(true_slowdown_pct(job_kinds()[HEAVY].curve, cap), abs=1e-6)
    assert world.first_launches == 0  # the oracle needs no profiling


def test_folded_policy_asks_the_fold_of_the_new_job():
    asked = []

    class P:
        def __init__(self, k):
            self.k = k

        def decide(self, state, job, rules):
            asked.append((job.id, self.k))

    folded = FoldedPolicy({0: P(0), 1: P(1)}, {"a": 1, "b": 0}, name="gnn")
    from ecolaunch.policy.base import JobRequest

    for i in ("a", "b"):
        folded.decide(None, JobRequest(id=i, user="u", host="h", nproc=1), Rules())
    assert asked == [("a", 1), ("b", 0)]


@pytest.mark.parametrize("name", trace_names(MEASURED))
def test_measured_traces_are_seeded_and_use_measured_types(name):
    machine = parse_spec(f"4x{BOARD}", hostname="node0")
    t1, t2 = measured_trace(name, machine, jobs=60), measured_trace(name, machine, jobs=60)
    assert t1 == t2 and len(t1.jobs) == 60
    assert all(j.kind in job_kinds() for j in t1.jobs)
    assert len({(j.user, j.kind) for j in t1.jobs}) < 60  # some launches repeat
    if name == "workstation-mixed":
        assert any(j.allowed_slowdown_pct > 10.0 for j in t1.jobs)  # fractional pods accept their fraction


def test_a_job_on_a_p100_runs_at_gavels_measured_speed_and_is_slowed_against_the_p100():
    from ecolaunch.sim.models import gavel_solo
    from ecolaunch.sim.policies import get_sim_policy

    kind = "Recommendation (batch size 512)"
    solo = gavel_solo()
    trace = Trace("t", (_job("j0", 0.0, kind, work_s=3600.0),))
    out = Simulation(parse_spec("1xP100-PCIE-16GB", hostname="node0"), get_sim_policy("exclusive"),
                     world=MeasuredWorld()).run(trace).jobs[0]
    factor = solo[("p100", kind)] / solo[("v100", kind)]  # Gavel measured this type faster on the P100
    assert factor > 1.5
    assert out.end_s - out.start_s == pytest.approx(3600.0 / factor)
    assert out.slowdown_pct == pytest.approx(0.0, abs=1e-6)


def test_on_a_host_of_mixed_models_no_launch_knows_its_profile_before_placement():
    machine = parse_spec("1xV100-PCIE-16GB+1xP100-PCIE-16GB", hostname="node0")
    trace = Trace("t", tuple(_job(f"j{i}", 4000.0 * i, HEAVY) for i in range(4)))
    seen = []

    class Spy:
        name = "spy"

        def decide(self, state, job, rules):
            seen.append(job.profile)
            return get_sim_policy("exclusive").decide(state, job, rules)

    world = MeasuredWorld()
    Simulation(machine, Spy(), world=world).run(trace)
    assert seen == [None] * 4
    assert world.first_launches == 1  # profiled once, on the model it got; later runs use that model's history



def test_caps_that_weigh_the_queue_finish_the_running_job_sooner_while_another_waits():
    # [energy] wait_weight: j0 runs capped by its closed loop; from 600 s j1 waits for its GPU, so j0's loop counts
    # j1's delay and raises its cap (never above what it needs: a lower wait weight raises it less), and j1, with
    # nobody behind it, runs at its own cap as before
    trace = Trace("t", (_job("j0", 0.0, HEAVY), _job("j1", 600.0, HEAVY, user="bob")))

    def run(weight):
        world = MeasuredWorld(noise=Noise(0.0, 0.0, 0.0, 0.0, 0.0))
        return Simulation(parse_spec(f"1x{BOARD}", hostname="node0"), get_sim_policy("no-gnn"),
                          Rules(wait_weight=weight), world=world, closed_loop=True).run(trace).jobs

    plain, light, heavy = run(0.0), run(1.5), run(4.0)
    assert plain[0].slowdown_pct > 1.0  # its cap binds
    assert heavy[0].end_s < light[0].end_s < plain[0].end_s
    assert heavy[1].start_s < plain[1].start_s
    assert heavy[1].slowdown_pct == pytest.approx(plain[1].slowdown_pct)  # nobody waits behind it: capped alike


@pytest.mark.parametrize("name", ["curve", "gnn", "no-gnn", "analytic-share", "util-share"])
def test_ecolaunchs_own_rows_run_under_its_closed_loop_and_the_others_do_not(name):
    # a row built like the gnn policy (the pairs it shares chosen otherwise) is ecolaunch's launcher too: its jobs
    # are profiled and capped by the closed loop; without it they would keep their placement's cap
    from ecolaunch.sim.measured_traces import measured_simulation

    machine = parse_spec(f"1x{BOARD}", hostname="node0")
    trace = Trace("t", (_job("j0", 0.0, HEAVY),))
    assert measured_simulation("workstation-measured", machine, trace, name, get_sim_policy("exclusive")).closed_loop
    assert not measured_simulation("workstation-measured", machine, trace, "exclusive",
                                   get_sim_policy("exclusive")).closed_loop


def test_the_rows_told_the_machines_history_start_first_launches_from_a_colleagues_profile():
    # as the launcher reads its history: `curve` (as launched) does; the ablation told nothing and `exclusive` do not
    from ecolaunch.sim.first_curves import as_launched
    from ecolaunch.sim.measured_traces import measured_simulation

    machine = parse_spec(f"1x{BOARD}", hostname="node0")
    trace = Trace("t", (_job("j0", 0.0, HEAVY),))
    sim = lambda name, policy: measured_simulation("workstation-measured", machine, trace, name, policy)  # noqa: E731
    assert sim("curve", as_launched(get_sim_policy("curve"), trace)).colleague_profiles
    assert not sim("curve-untold", get_sim_policy("curve")).colleague_profiles
    assert not sim("exclusive", as_launched(get_sim_policy("exclusive"), trace)).colleague_profiles
