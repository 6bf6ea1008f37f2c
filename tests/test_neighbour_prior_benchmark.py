"""benchmarks/neighbour_prior.py, a first launch's cap-curve prior from its neighbours in the history, replayed on
the Zeus sweeps the package ships: which curves count as a job's neighbours, what each prior predicts, and the
report's pairing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ecolaunch.jobmodel.capcurve import CapPrior
from ecolaunch.sim.truth import vendored_zeus_curves
from tests.conftest import REPO, clean_env

sys.path.insert(0, str(REPO / "benchmarks"))
import neighbour_prior as np_bench  # noqa: E402

CURVES = [c for c in vendored_zeus_curves() if len(c.points) >= 3]


def _curve(gpu: str, workload: str, batch: int):
    return next(c for c in CURVES if (c.gpu, c.workload, c.batch_size) == (gpu, workload, batch))


def test_the_neighbours_are_the_same_workload_at_other_batch_sizes_or_on_other_boards() -> None:
    job = _curve("V100", "imagenet/resnet50", 64)
    sizes = np_bench.neighbours(job, CURVES, "batch-sizes")
    assert {(c.gpu, c.workload) for c in sizes} == {("V100", "imagenet/resnet50")}
    assert sorted(c.batch_size for c in sizes) == [8, 16, 32, 128, 192, 256, 360]
    # the nearest other batch size, in log ratio: 32 and 128 are as near; the smaller is taken
    assert [c.batch_size for c in np_bench.neighbours(job, CURVES, "nearest-batch")] == [32]
    boards = np_bench.neighbours(job, CURVES, "other-boards")
    assert sorted(c.gpu for c in boards) == ["A40", "P100", "RTX6000"]
    assert {c.batch_size for c in boards} == {64}
    assert len(np_bench.neighbours(job, CURVES, "all")) == len(sizes) + len(boards)
    assert np_bench.neighbours(job, CURVES, "none") == []
    # squad and sentiment140 both train BERT: one network, but not one workload (a different script)
    bert = _curve("V100", "squad/bert_base_uncased", 16)
    assert np_bench.network(bert) == np_bench.network(_curve("V100", "sentiment140/bert_base_uncased", 16))
    assert all(c.workload == bert.workload for c in np_bench.neighbours(bert, CURVES, "all"))


def test_the_siblings_rule_is_the_launchers_prior_fit_on_the_neighbours_and_flat_when_no_cap_binds() -> None:
    near = np_bench.neighbours(_curve("V100", "imagenet/resnet50", 64), CURVES, "batch-sizes")
    assert np_bench.pooled(near, "s").time_ratio == CapPrior.fit([c.points for c in near], min_curves=1).time_ratio
    flat = next(c for c in CURVES if c.points[0].power_cap_w > 1.5 * c.points[-1].power_w)
    assert set(np_bench.shape(flat).time_ratio) == {1.0} and set(np_bench.shape(flat).power_ratio) == {1.0}


def test_a_curves_own_shape_as_its_prior_predicts_it_better_than_a_prior_without_its_network() -> None:
    job = _curve("V100", "imagenet/resnet50", 64)
    held = CapPrior.fit([c.points for c in CURVES if np_bench.network(c) != "resnet50"])
    for mode in np_bench.MODES:
        own, other = np_bench.score(job, np_bench.shape(job), mode), np_bench.score(job, held, mode)
        assert own.time_err_pct < other.time_err_pct
        assert own.loss_pct <= other.loss_pct + 1e-9


def test_the_graph_network_reads_the_neighbours_and_its_ablation_does_not() -> None:
    train = [c for c in CURVES if c.gpu in ("V100", "P100") and np_bench.network(c) in ("shufflenetv2", "ncf")]
    job = _curve("V100", "imagenet/resnet50", 64)
    near = np_bench.neighbours(job, CURVES, "all")
    gnn = np_bench.train_gnn(train, seed=0, epochs=20, alone=False)
    alone = np_bench.train_gnn(train, seed=0, epochs=20, alone=True)
    assert gnn(job, near).time_ratio != gnn(job, []).time_ratio
    assert alone(job, near) == alone(job, [])
    for prior in (gnn(job, near), alone(job, near)):  # monotone, as CapPrior.fit makes a median
        assert all(a >= b for a, b in zip(prior.time_ratio, prior.time_ratio[1:])) and min(prior.time_ratio) >= 1.0
        assert all(a <= b for a, b in zip(prior.power_ratio, prior.power_ratio[1:]))


@pytest.mark.slow  # a benchmark smoke test: the report end to end, on two networks
def test_the_report_pairs_every_prior_with_the_held_out_prior_on_the_same_jobs() -> None:
    small = [c for c in CURVES if c.gpu in ("V100", "P100") and c.workload in ("imagenet/resnet50", "cifar100/shufflenetv2")]
    doc = np_bench.run(seeds=2, epochs=20, curves=small)
    assert doc["networks"] == ["resnet50", "shufflenetv2"] and doc["seeds"] == 2
    assert set(doc["scenarios"]) == set(np_bench.SCENARIOS)
    for s, row in doc["scenarios"].items():
        assert row["jobs"] == sum(1 for c in small if np_bench.neighbours(c, small, s))
        for mode in np_bench.MODES:
            assert set(row[mode]) == set(np_bench.PRIORS)
            assert row[mode]["held-out"]["loss_vs_held_out_pp"] == [0.0, 0.0, 0.0]
            assert row[mode]["exact"]["time_err_pct"] <= row[mode]["held-out"]["time_err_pct"]
            assert "gnn_seed_sd" in row[mode]["gnn"]
            d = row[mode]["siblings"]["loss_vs_held_out_pp"]
            assert d[1] <= d[0] <= d[2]


def test_the_command_line_refuses_no_seeds() -> None:
    ran = subprocess.run([sys.executable, str(REPO / "benchmarks" / "neighbour_prior.py"), "--seeds", "0"],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and "--seeds and --epochs must be >= 1, got 0" in ran.stderr

