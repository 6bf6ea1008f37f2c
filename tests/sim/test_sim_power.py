"""Power cap -> time and power (ecolaunch.sim.power): monotonicity, exactness at the max cap, fit bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.sim import power as pw
from ecolaunch.sim.models import ZEUS_GPUS
from ecolaunch.sim.truth import ZEUS_MODELS

V100_PCIE = lookup("V100-PCIE-32GB")
A100 = lookup("A100-SXM4-80GB")
H200 = lookup("H200-SXM-141GB")


@pytest.fixture(scope="module")
def model() -> pw.BoardPowerModel:
    return pw.default_power_model()


@settings(max_examples=150, deadline=None)
@given(gpu=st.sampled_from(sorted(ZEUS_GPUS)), u=st.floats(0.1, 1.05), c1=st.floats(0.2, 1.0), c2=st.floats(0.2, 1.0))
def test_lower_cap_is_never_faster_nor_more_power(gpu: str, u: float, c1: float, c2: float) -> None:
    shape = pw.default_power_model().shapes[gpu]
    lo, hi = sorted((c1, c2))
    t_lo, p_lo = shape.ratios(u, lo)
    t_hi, p_hi = shape.ratios(u, hi)
    assert t_lo >= t_hi - 1e-12
    assert p_lo <= p_hi + 1e-12


@settings(max_examples=100, deadline=None)
@given(gpu=st.sampled_from(sorted(ZEUS_GPUS)), u1=st.floats(0.1, 1.0), u2=st.floats(0.1, 1.0), c=st.floats(0.2, 1.0))
def test_hungrier_job_is_slowed_at_least_as_much(gpu: str, u1: float, u2: float, c: float) -> None:
    shape = pw.default_power_model().shapes[gpu]
    small, big = sorted((u1, u2))
    assert shape.ratios(big, c)[0] >= shape.ratios(small, c)[0] - 1e-9


@pytest.mark.parametrize("gpu", sorted(ZEUS_GPUS))
def test_max_cap_reproduces_the_uncapped_measurement(model: pw.BoardPowerModel, gpu: str) -> None:
    pred = model.predict(180.0, ZEUS_GPUS[gpu], lookup(ZEUS_MODELS[gpu.upper()]), iter_time_s=0.2)
    assert pred.time_ratio == pytest.approx(1.0, abs=1e-12)
    assert pred.power_w == pytest.approx(180.0, rel=1e-9)
    assert pred.iter_time_s == pytest.approx(0.2)


def test_a_binding_cap_slows_a_hungry_job_and_not_an_idle_one(model: pw.BoardPowerModel) -> None:
    hungry = model.predict(225.0, 100.0, V100_PCIE)  # Zeus V100 BERT/ResNet-50: ~1.9-2.0x at 100 W
    idle = model.predict(38.0, 100.0, V100_PCIE)  # input-bound NCF: flat
    assert 1.6 < hungry.time_ratio < 2.4
    assert hungry.power_w <= 105.0
    assert idle.time_ratio == pytest.approx(1.0, abs=0.01)
    assert idle.power_w == pytest.approx(38.0, rel=0.02)


def test_swept_board_is_measured_and_modern_boards_are_extrapolated(model: pw.BoardPowerModel) -> None:
    assert model.predict(200.0, 150.0, V100_PCIE).extrapolated is False
    assert model.predict(200.0, 150.0, V100_PCIE).shape_gpu == "v100"
    for gpu in (A100, H200):
        pred = model.predict(300.0, 250.0, gpu)
        assert pred.extrapolated is True
        assert pred.shape_gpu == "a40"
    v100_sxm = lookup("V100-SXM2-32GB")  # 150-300 W: same chip, a power envelope Zeus did not sweep
    assert model.predict(250.0, 200.0, v100_sxm).extrapolated is True
    assert pw.shape_family("Quadro RTX 6000") == ("rtx6000", False)
    assert pw.shape_family("NVIDIA RTX 6000 Ada Generation", "Ada Lovelace")[1] is True
    assert pw.shape_family("NVIDIA RTX A4000", "Ampere") == ("a40", True)  # "A40" inside "A4000" is not an A40


def test_below_the_swept_range_energy_per_iteration_is_held(model: pw.BoardPowerModel) -> None:
    # A100's 100 W minimum is 0.25 of its max, below the A40 sweep's lowest 0.333: extrapolated, continuous
    at_edge = model.predict(300.0, 400.0 / 3.0, A100)
    below = model.predict(300.0, 100.0, A100)
    assert below.extrapolated
    assert below.time_ratio * below.power_w == pytest.approx(at_edge.time_ratio * at_edge.power_w, rel=1e-6)
    assert below.time_ratio > at_edge.time_ratio


def test_active_idle_power_is_the_lowest_zeus_reading(model: pw.BoardPowerModel) -> None:
    watts, extrapolated = model.active_idle_power_w(V100_PCIE)
    assert watts == pytest.approx(34.75, abs=0.1)  # NCF batch 16384 at 150 W, the lowest V100 row
    assert not extrapolated
    assert model.active_idle_power_w(A100)[1] is True


@pytest.mark.parametrize("gpu", sorted(ZEUS_GPUS))
def test_leave_one_workload_out_error_is_bounded(gpu: str) -> None:
    # Measured (benchmarks/model_fit.py): time MAPE 2.5 (P100) - 6.0 % (A40), power 1.9 - 3.2 %. Row-to-row
    # noise of the traces at non-binding caps is ~3-5 %. The bounds sit 1 point above the worst GPU: a shape
    # with one peak ratio for time and power (the first version of this model) gave A40 7.4 % and fails.
    cs = pw.zeus_curves(gpu)
    wl = np.array(cs.workload)
    t_err, p_err = [], []
    for w in sorted(set(cs.workload)):
        held = wl == w
        shape = pw.fit_shape([cs], [~held])
        t, p = shape.ratios_array(cs.u[held], cs.c[held])
        t_err.append(np.abs(t - cs.time_ratio[held]) / cs.time_ratio[held])
        p_err.append(np.abs(p - cs.power_frac[held]) / cs.power_frac[held])
    assert np.concatenate(t_err).mean() < 0.07
    assert np.concatenate(p_err).mean() < 0.042


def test_energy_optimal_cap_respects_the_slowdown_bound(model: pw.BoardPowerModel) -> None:
    free = pw.energy_optimal_cap(225.0, V100_PCIE, model=model)
    bounded = pw.energy_optimal_cap(225.0, V100_PCIE, allowed_slowdown_pct=10.0, model=model)
    with_host = pw.energy_optimal_cap(225.0, V100_PCIE, allowed_slowdown_pct=10.0, static_power_w=300.0, model=model)
    assert bounded.time_ratio <= 1.10
    assert free.power_cap_w <= bounded.power_cap_w <= with_host.power_cap_w
    # GPU-only energy is lowest well below max (DESIGN.md §5: ~50-60 % of max)
    assert free.power_cap_w <= 0.7 * V100_PCIE.power_limit_max_w


def test_bad_inputs_raise_typed_errors(model: pw.BoardPowerModel) -> None:
    with pytest.raises(ConfigError):
        model.predict(0.0, 100.0, V100_PCIE)


def test_the_catalogue_rows_of_the_zeus_boards_are_the_swept_boards(model: pw.BoardPowerModel) -> None:
    for gpu, name in ZEUS_MODELS.items():
        board = lookup(name)
        assert model.shape_for(board) == (model.shapes[gpu.lower()], False)
        assert model.active_idle_power_w(board)[0] >= board.idle_power_w


def test_fit_is_deterministic() -> None:
    a = pw.BoardPowerModel.fit()
    b = pw.BoardPowerModel.fit()
    assert a.shapes == b.shapes
    assert a.active_idle_frac == b.active_idle_frac
