"""Co-location interference (ecolaunch.sim.interference): behaviour, Gavel held-out error, determinism."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.sim import interference as itf
from ecolaunch.jobmodel.profile import UNKNOWN_DEMAND, Profile


def job(util: float, iter_time_s: float = 0.2, memory_mib: int | None = 4000) -> Profile:
    return Profile(iter_time_s=iter_time_s, sm_util_pct=util, mem_bw_util_pct=util / 2, memory_mib=memory_mib)


@pytest.fixture(scope="module")
def model() -> itf.InterferenceModel:
    return itf.default_interference_model()


def test_alone_is_solo_speed(model: itf.InterferenceModel) -> None:
    assert itf.predict([job(80)], "V100") == [1.0]
    assert itf.predict([], "V100") == []


def test_light_pair_pays_only_the_switching_cost(model: itf.InterferenceModel) -> None:
    delta = model.switch_overhead_for("V100")
    x = itf.predict([job(20, 0.1), job(30, 0.4)], "V100")  # demands 0.2 and 0.3
    assert x[0] == pytest.approx(0.1 / (0.1 + delta * 0.3))  # each pays for the time its co-runner holds the GPU
    assert x[1] == pytest.approx(0.4 / (0.4 + delta * 0.2))
    assert sum(x) > 1.0  # packing helps


def test_an_idle_co_runner_costs_nothing() -> None:
    busy, idle = itf.predict([job(80, 0.05), job(0)], "V100")
    assert busy == 1.0
    assert idle < 1.0  # the busy one holds the GPU 80 % of the time: the idle one's rare kernels wait for it


def test_each_board_switches_at_the_cost_of_its_generation(model: itf.InterferenceModel) -> None:
    fit = itf.fit_gavel()
    # one cost per Gavel board, falling with each generation (K80 about 58 ms, P100 20 ms, V100 5 ms)
    assert fit.switch_overhead_s["k80"] > fit.switch_overhead_s["p100"] > fit.switch_overhead_s["v100"] > 0.0
    assert model.switch_overhead_for("Tesla K80") == pytest.approx(fit.switch_overhead_s["k80"])
    assert model.switch_overhead_for("Tesla M60") == model.switch_overhead_for("K80")  # Maxwell: the older fit
    assert model.switch_overhead_for("P100-PCIE-16GB") == pytest.approx(fit.switch_overhead_s["p100"])
    newest = fit.switch_overhead_s["v100"]
    for board in ("V100", "A100-SXM4-80GB", "NVIDIA H200", "RTX3090", None, "Mystery Board 9000"):
        assert model.switch_overhead_for(board) == pytest.approx(newest), board
    slow, fast = itf.predict([job(50, 0.05), job(50)], "K80")[0], itf.predict([job(50, 0.05), job(50)], "H100")[0]
    assert slow < fast < 1.0


def test_saturated_pair_shares_the_gpu(model: itf.InterferenceModel) -> None:
    c = itf.colocate([job(100, 0.5), job(100, 0.5)], "V100")
    assert c.saturated
    assert all(x < 0.5 for x in c.throughputs)  # each gets at most half of the GPU, minus switching
    assert c.combined_throughput < 1.0  # packing hurts


@settings(max_examples=100, deadline=None)
@given(own=st.floats(0, 100), a=st.floats(0, 100), b=st.floats(0, 100), t=st.floats(0.005, 2.0))
def test_a_busier_co_runner_never_helps(own: float, a: float, b: float, t: float) -> None:
    lo, hi = sorted((a, b))
    x_lo = itf.predict([job(own, t), job(lo)], "V100")[0]
    x_hi = itf.predict([job(own, t), job(hi)], "V100")[0]
    assert x_hi <= x_lo + 1e-12
    assert 0.0 < x_hi <= 1.0


def test_more_co_runners_slow_everyone_by_composition() -> None:
    two = itf.predict([job(10), job(10)], "V100")[0]
    three = itf.predict([job(10), job(10), job(10)], "V100")[0]
    four = itf.predict([job(10)] * 4, "V100")[0]
    assert 1.0 > two > three > four


def test_a_synchronous_multi_gpu_job_slows_more_than_a_single_gpu_one(model: itf.InterferenceModel) -> None:
    synced = dataclasses.replace(model, sync_wait_s=0.027)
    pair = [job(40, 0.28), job(30, 0.28)]
    one = synced.predict(pair, "V100")
    assert synced.predict(pair, "V100", [1, 1]) == one == model.predict(pair, "V100")  # k = 1: unchanged
    two, eight = synced.predict(pair, "V100", [2, 1]), synced.predict(pair, "V100", [8, 1])
    assert eight[0] < two[0] < one[0]  # waits for its slowest rank: more ranks, longer waits
    assert eight[1] == two[1] == one[1]  # its single-GPU co-runner pays as before
    assert model.predict(pair, "V100", [8, 8]) == one  # no wait, no synchronization cost
    assert synced.predict([job(40, 0.28), job(0)], "V100", [8, 1])[0] == 1.0  # an idle co-runner blocks nobody


@pytest.mark.parametrize("demands, gpus", [([0.05], 8), ([0.4], 2), ([0.1, 0.4], 8), ([0.3, 0.3, 0.2], 4)])
def test_the_synchronization_wait_is_the_expected_slowest_rank(demands: list[float], gpus: int) -> None:
    rng = np.random.default_rng(0)
    held = rng.random((200_000, gpus, len(demands))) < np.array(demands)
    sampled = held.sum(axis=2).max(axis=1).mean() - sum(demands)
    assert itf.sync_wait_overhead_s(demands, gpus, 1.0) == pytest.approx(sampled, abs=0.01)
    assert itf.sync_wait_overhead_s(demands, 1, 1.0) == 0.0


def test_gpu_counts_must_match_the_jobs(model: itf.InterferenceModel) -> None:
    with pytest.raises(ConfigError):
        model.predict([job(40), job(30)], "V100", [8])
    with pytest.raises(ConfigError):
        model.predict([job(40), job(30)], "V100", [0, 1])


def test_unknown_fields_count_as_a_busy_job_of_median_speed(model: itf.InterferenceModel) -> None:
    speeds = itf.predict([Profile(iter_time_s=0.2, sm_util_pct=30), Profile()], "A100")
    # unknown utilization counts as a busy job (demand 1), unknown iteration time as Gavel's median
    assert Profile().demand == UNKNOWN_DEMAND
    t = model.default_iter_time_s
    assert speeds[1] == pytest.approx(t / (t * 1.3 + model.switch_overhead_for("A100") * 0.3))


def test_colocate_reports_memory_and_extrapolation() -> None:
    a100 = lookup("A100-SXM4-80GB")  # 81920 MiB

    fits = itf.colocate([job(20, memory_mib=40000), job(20, memory_mib=40000)], a100)
    too_big = itf.colocate([job(20, memory_mib=50000), job(20, memory_mib=40000)], a100)
    unknown = itf.colocate([job(20, memory_mib=None), job(20)], a100)
    assert (fits.memory_fits, too_big.memory_fits, unknown.memory_fits) == (True, False, None)
    assert fits.extrapolated
    assert not itf.colocate([job(20), job(20)], "Tesla V100-SXM2-32GB").extrapolated


def test_suspect_v100_rows_are_the_documented_ones() -> None:
    data = itf.gavel_set()
    both = data.copy_a & data.copy_b
    gpus = {data.keys[i][0] for i in data.a[data.copy_a | data.copy_b]}
    assert gpus == {"v100"}  # only V100 has values copied from the solo run
    self_pairs = int((both & (data.a == data.b)).sum())
    assert 2 * int(both.sum()) - self_pairs == 25  # SOURCE.md: 25 ordered V100 pairs equal solo for both jobs
    assert int(data.copy_a.sum() + data.copy_b.sum()) == 83
    fit = itf.fit_gavel("values")
    assert fit.switch_overhead_s["v100"] > itf.fit_gavel("keep").switch_overhead_s["v100"]  # copies pull it to 0


def test_held_out_error_by_pair() -> None:
    # Measured (benchmarks/model_fit.py, 5 folds by unordered pair, seed 0, suspect values dropped): MAE 0.104,
    # pack accuracy 0.806, against a model-free baseline (training median / always pack) of 0.131 / 0.781.
    # The bound sits between the two: a model that stops explaining the pairs (no saturation, or a wrong
    # switching cost) drifts to the baseline and fails, while refactoring noise does not.
    h = itf.holdout_errors("pair", seed=0)
    assert h.n_values == 1869 and h.n_pairs == 907
    assert h.mae < 0.115
    assert h.mae < h.baseline_mae - 0.02
    assert h.pack_accuracy > h.baseline_pack_accuracy
    assert h.by_gpu["p100"][0] < 0.09 and h.by_gpu["k80"][0] < 0.09  # V100 is the noisy one (0.16)


def test_a_model_without_switching_cost_fails_the_bound() -> None:
    data = itf.gavel_set()
    fit = itf.fit_gavel()
    d = np.array([fit.demands[k] for k in data.keys])
    use_a, use_b = data.usable("values")
    xa, xb = itf.pair_throughputs(data, d, np.zeros(len(data.gpus)))
    mae = np.concatenate([np.abs(xa - data.obs_a)[use_a], np.abs(xb - data.obs_b)[use_b]]).mean()
    assert mae > 0.115  # even in-sample: the switching cost is what the pairs need


def test_same_seed_same_numbers_other_seed_other_folds() -> None:
    a = itf.holdout_errors("pair", seed=3)
    b = itf.holdout_errors("pair", seed=3)
    c = itf.holdout_errors("pair", seed=4)
    assert a == b
    assert a.switch_overhead_s != c.switch_overhead_s
    assert itf.fit_gavel() == itf.fit_gavel()


def test_bad_policy_names_raise() -> None:
    with pytest.raises(ConfigError):
        itf.fit_gavel("drop-everything")
    with pytest.raises(ConfigError):
        itf.holdout_errors("gpu")
