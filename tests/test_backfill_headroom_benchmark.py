"""The simulator's EASY backfill and benchmarks/backfill_headroom.py (issue 40): what a launcher knows of a job's
length, the queue's backfill in the simulator, that no decision of the launcher's row reads a true run time, the
trace knobs, and (slow) a short real run."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields

import pytest

from ecolaunch.jobmodel.profile import Profile
from ecolaunch.devices.spec import parse_spec
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.sim.lengths import Declared, LauncherLengths, TrueLengths
from tests.conftest import REPO, clean_env

BENCHMARKS = REPO / "benchmarks"
PROFILE = Profile(iter_time_s=0.1, sm_util_pct=80.0, mem_bw_util_pct=40.0, memory_mib=8000)


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import backfill_headroom

    return backfill_headroom


class Sealed(TraceJob):
    """A trace job whose true run time only the machine may read: the simulator's physics (``ecolaunch.sim.engine``
    outside ``_place``, where the decisions are asked) and ``dataclasses.replace``; any other reader raises."""

    __slots__ = ()

    @property
    def work_s(self) -> float:
        caller = sys._getframe(1)
        module, function = caller.f_globals.get("__name__"), caller.f_code.co_name
        if module not in ("ecolaunch.sim.engine", "dataclasses") or function == "_place":
            raise AssertionError(f"{module}.{function} read job {self.id}'s true run time")
        return TraceJob.work_s.__get__(self)

    @work_s.setter
    def work_s(self, value: float) -> None:
        TraceJob.work_s.__set__(self, value)


def seal(job: TraceJob) -> Sealed:
    return Sealed(**{f.name: getattr(job, f.name) for f in fields(TraceJob)})


def _job(i: str, t: float, nproc: int, work_s: float, kind: str) -> TraceJob:
    return TraceJob(i, t, nproc, work_s, PROFILE, user="ann", kind=kind)


#: each key's first runs complete first (the history); then a 3-GPU job runs, a 4-GPU job waits at the head for it,
#: and a short 1-GPU job behind it fits the free GPU and ends long before the head's promised start
TRACE = Trace("backfill", (
    _job("small-1", 0.0, 1, 100.0, "small"), _job("big-1", 0.0, 3, 1000.0, "big"),
    _job("big-2", 1100.0, 3, 1000.0, "big"), _job("all", 1101.0, 4, 500.0, "all"),
    _job("small-2", 1102.0, 1, 100.0, "small"),
))


def _run(lengths=None, trace: Trace = TRACE, backfill: bool = True):
    sim = Simulation(parse_spec("4xA100-SXM4-80GB", hostname="node0"), ExclusivePolicy(), backfill=backfill,
                     lengths=lengths)
    return {j.id: j for j in sim.run(trace).jobs}


def test_what_the_launcher_knows_is_a_declared_length_else_the_keys_latest_runs() -> None:
    lengths = LauncherLengths({"d": Declared(iterations=500.0, steps=60_000)})
    first = seal(_job("x", 0.0, 1, 60.0, "k"))
    assert lengths.known(first, None) == {}  # never completed here, declares nothing
    assert lengths.known(seal(_job("d", 0.0, 1, 60.0, "k")), None) == {"expected_iterations": 60_000}
    assert lengths.known(seal(_job("d", 0.0, 1, 60.0, "k")), PROFILE) == {"expected_iterations": 60_000,
                                                                           "expected_s": pytest.approx(50.0)}
    for run_s in (10.0, 1000.0, 30.0, 40.0, 50.0, 60.0):  # the latest 5 count: the 10 s run is forgotten
        lengths.ended(first, run_s, int(run_s * 1000))
    assert lengths.known(first, PROFILE) == {"expected_s": 50.0, "expected_iterations": 50_000}


def test_the_margin_is_learned_from_how_the_predictions_at_start_ran_over() -> None:
    lengths = LauncherLengths({})
    assert lengths.margin() == pytest.approx(0.18)  # no predictions yet: Zeus's reruns
    job = seal(_job("x", 0.0, 1, 60.0, "k"))
    lengths.ended(job, 100.0, 1)  # the first run had no prediction: nothing learned
    for run_s in (100.0, 100.0, 110.0, 150.0, 100.0, 90.0):
        lengths.known(job, None)  # predicted at its start: the key's median so far
        lengths.ended(job, run_s, 1)
    # overruns of the medians so far: 0, 0.1, 0.5, 0, 0 and 0 (90 s against 100 s): their 90th percentile
    assert lengths.margin() == pytest.approx(0.5)


def test_backfill_starts_a_short_job_past_the_waiting_head_without_delaying_it() -> None:
    fifo = _run(backfill=False)
    assert fifo["small-2"].start_s == pytest.approx(2600.0)  # behind the head, which waits for big-2, then runs
    for lengths in (TrueLengths(), LauncherLengths({})):
        jobs = _run(lengths)
        assert jobs["small-2"].start_s == pytest.approx(1102.0), lengths.name
        assert jobs["small-2"].backfilled and not fifo["small-2"].backfilled
        assert jobs["all"].start_s == pytest.approx(fifo["all"].start_s), lengths.name
        assert jobs["all"].late_s == 0.0 and fifo["all"].late_s is None  # promised, and kept
    # a job whose key never completed here, and which declares nothing, has no length: it waits its turn
    unknown = Trace("backfill", tuple(j for j in TRACE.jobs if j.id != "small-1"))
    assert _run(LauncherLengths({}), unknown)["small-2"].start_s == pytest.approx(2600.0)
    assert _run(TrueLengths(), unknown)["small-2"].start_s == pytest.approx(1102.0)


def test_the_simulator_backfills_as_the_launcher_does_under_each_policy() -> None:
    from ecolaunch.policy.registry import get_policy

    machine = parse_spec("4xA100-SXM4-80GB", hostname="node0")
    assert not Simulation(machine, ExclusivePolicy()).backfill  # exclusive: the by-hand strict FIFO
    assert Simulation(machine, get_policy("curve")).backfill
    assert isinstance(Simulation(machine, get_policy("curve")).lengths, LauncherLengths)


def test_no_decision_of_the_launchers_row_reads_a_true_run_time() -> None:
    sealed = Trace(TRACE.name, tuple(seal(j) for j in TRACE.jobs))
    jobs = _run(LauncherLengths({}), sealed)
    assert jobs["small-2"].start_s == pytest.approx(1102.0)  # it backfilled, from the key's history alone
    declared = {j.id: Declared(j.work_s / PROFILE.iter_time_s, round(j.work_s * 1000)) for j in TRACE.jobs}
    jobs = _run(LauncherLengths(declared), sealed)
    assert jobs["small-2"].start_s == pytest.approx(1102.0)  # and from what the jobs declare
    with pytest.raises(AssertionError, match="read job .* true run time"):  # the seal holds: the upper bound reads it
        _run(TrueLengths(), sealed)


def test_related_lengths_keep_the_run_times_and_reach_the_spread(bench) -> None:
    headroom = bench
    from ecolaunch.sim.trace_registry import TRACES

    entry = TRACES["workstation-measured"]
    trace = entry.build(entry.machine("", 1), seed=3, jobs=200)
    related, reached = headroom.related_lengths(trace, 0.5, 3)
    assert reached == pytest.approx(0.5, abs=0.05)
    assert headroom.key_spread(trace.jobs) > 1.0  # drawn independently: a key's runs as spread as the trace's
    for nproc in {j.nproc for j in trace.jobs}:  # each GPU count keeps its run times: the offered load is the same
        assert sorted(j.work_s for j in related.jobs if j.nproc == nproc) == \
            sorted(j.work_s for j in trace.jobs if j.nproc == nproc)
    assert [(j.id, j.arrival_s, j.nproc, j.kind, j.user) for j in related.jobs] == \
        [(j.id, j.arrival_s, j.nproc, j.kind, j.user) for j in trace.jobs]
    share_25, share_50 = (set(headroom.declared(trace, pct, 3)) for pct in (25, 50))
    assert share_25 < share_50 and 0.35 < len(share_50) / len(trace.jobs) < 0.65


def test_the_zeus_repeat_spread_is_read_from_the_training_runs(bench) -> None:
    headroom = bench
    from ecolaunch.profile.zeus_data import DEFAULT_DATA_DIR

    if not (DEFAULT_DATA_DIR / "summary_train.csv").is_file():
        pytest.skip("the repository's shared/data is not present")
    zeus = headroom.zeus_repeat_spread()
    assert zeus["configs"] >= 50 and zeus["runs"] >= 5 * zeus["configs"]
    assert 0.0 < zeus["spread"] < zeus["loo_sd"] < 0.5


@pytest.mark.slow
def test_a_short_run_prints_every_row_paired_against_fifo(tmp_path) -> None:
    cmd = [sys.executable, str(BENCHMARKS / "backfill_headroom.py"), "--seeds", "2", "--trace", "workstation-measured",
           "--policy", "exclusive", "--share", "0", "--share", "100", "--jobs", "150", "--json"]
    ran = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    run = json.loads(ran.stdout)["runs"]["workstation-measured"]["exclusive"]["zeus"]
    assert set(run["rows"]) == {"fifo", "backfill-true", "backfill-known-0", "backfill-known-100"}
    assert run["rows"]["fifo"]["out_of_order_pct"] == 0.0  # the strict FIFO starts no job past an earlier one
    assert run["rows"]["fifo"]["reservations"] == 0 and set(run["share_of_true"]) <= {"backfill-known-0",
                                                                                         "backfill-known-100"}
    assert set(run["vs_fifo"]["backfill-true"]) >= {"mean_jct_pct", "p95_jct_pct", "mean_wait_pct", "gpu_idle_h",
                                                    "idle_waiting_h", "node_energy_pct"}
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "backfill_headroom.py"), "--seeds", "1"], env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--seeds must be at least 2" in bad.stderr
    # two runs pooled: their seeds in turn, each row's figures recomputed over all of them
    (tmp_path / "a.json").write_text(ran.stdout)
    pool = subprocess.run([sys.executable, str(BENCHMARKS / "backfill_headroom.py"), "--pool", str(tmp_path / "a.json"),
                           str(tmp_path / "a.json"), "--json"], env=clean_env(), capture_output=True, text=True,
                          timeout=120)
    assert pool.returncode == 0, pool.stderr
    both = json.loads(pool.stdout)
    twice = both["runs"]["workstation-measured"]["exclusive"]["zeus"]
    assert both["seeds"] == [0, 1, 0, 1]
    assert twice["rows"]["fifo"]["per_seed"]["mean_jct_s"] == 2 * run["rows"]["fifo"]["per_seed"]["mean_jct_s"]
    assert twice["vs_fifo"]["backfill-true"]["mean_jct_pct"]["mean"] == \
        pytest.approx(run["vs_fifo"]["backfill-true"]["mean_jct_pct"]["mean"], abs=1e-3)


def test_the_share_of_the_upper_bound_is_the_ratio_of_paired_means_with_a_bootstrap_interval(bench) -> None:
    headroom = bench

    def row(*per_seed):
        return {"mean_jct_pct": {"per_seed": list(per_seed)}}

    run = {"vs_fifo": {"backfill-true": row(-10.0, -6.0, -8.0, -4.0), "backfill-known-100": row(-5.0, -3.0, -4.0, -2.0),
                       "backfill-known-0": row(-10.0, -6.0, -8.0, -4.0), "fifo": row(0.0, 0.0, 0.0, 0.0)}}
    shares = headroom.share_of_true(run, draws=500)
    assert set(shares) == {"backfill-known-100", "backfill-known-0"}
    assert shares["backfill-known-100"] == {"mean": 50.0, "ci95_lo": 50.0, "ci95_hi": 50.0}  # half on every seed
    assert shares["backfill-known-0"]["mean"] == 100.0
    uneven = {"vs_fifo": {"backfill-true": row(-10.0, -2.0), "backfill-known-100": row(-2.0, -2.0)}}
    share = headroom.share_of_true(uneven, draws=500)["backfill-known-100"]
    assert share["mean"] == pytest.approx(100.0 * 2.0 / 6.0, abs=0.1) and share["ci95_lo"] < share["mean"] < \
        share["ci95_hi"]
