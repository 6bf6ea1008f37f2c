"""The measured truth of the cap-control replay: loaders, interpolation, monotonicity, and the hindsight oracle."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.profile import zeus_data
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.sim import truth as tr
from ecolaunch.sim.models import DATA_DIR

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
H200_DIR = SHARED / "h200-2026-11-30"
needs_shared = pytest.mark.skipif(not (SHARED / "zeus-nsdi23" / "summary_train.csv").is_file()
                                  or not (H200_DIR / "cap_sweep.csv").is_file(),
                                  reason="the repository's shared/data is not present")


def truth(name: str) -> tr.TruthCurve:
    return next(t for t in tr.h200_truths(include_mlp=True) if t.name.startswith(name))


def all_truths() -> list[tr.TruthCurve]:
    return tr.h200_truths(include_mlp=True) + tr.zeus_truths()


def sweep_rows(workload: str) -> list[dict[str, str]]:
    with (DATA_DIR / tr.H200_SWEEP_CSV).open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["workload"] == workload]


# --- truth curves ----------------------------------------------------------------------------------------

@needs_shared
def test_vendored_h200_sweep_is_an_unchanged_copy() -> None:
    assert (DATA_DIR / tr.H200_SWEEP_CSV).read_bytes() == (H200_DIR / "cap_sweep.csv").read_bytes()


@needs_shared
def test_vendored_zeus_curves_equal_the_loader_on_shared_data() -> None:
    assert tr.vendored_zeus_curves() == zeus_data.load_power_traces(SHARED / "zeus-nsdi23")
    from_shared = tr.zeus_truths(SHARED / "zeus-nsdi23")
    assert [t.name for t in from_shared] == [t.name for t in tr.zeus_truths()]


@needs_shared
def test_vendored_zeus_window_is_an_unchanged_copy_and_loads_as_measured() -> None:
    name = "V100+resnet18+gpu0.csv"
    assert (DATA_DIR / "profile_windows" / name).read_bytes() == \
        (SHARED / "zeus-nsdi23" / "profile_windows" / name).read_bytes()
    (c,) = tr.zeus_window_truths()
    (shared,) = [w for w in zeus_data.load_profile_windows(SHARED / "zeus-nsdi23") if w.key == c.name]
    assert c.points == shared.points and c.name == "V100 resnet18"
    m = lookup(c.gpu_model)
    assert (c.min_cap_w, c.max_cap_w) == (m.power_limit_min_w, m.power_limit_max_w) == (100.0, 250.0)
    assert c.power_w(250.0) == pytest.approx(1900.333 / 9.991050186916254)  # energy / elapsed of the 250 W window


def test_h200_loader_keeps_mm_and_bw_and_mlp_only_when_asked() -> None:
    assert [t.name for t in tr.h200_truths()] == ["H200 mm", "H200 bw"]
    mlp = tr.h200_truths(include_mlp=True)[-1]
    assert mlp.noisy and "noisy" in mlp.name
    mm = truth("H200 mm")
    assert (mm.min_cap_w, mm.default_cap_w, mm.max_cap_w, mm.time_unit) == (200.0, 700.0, 700.0, "iteration")
    assert (mm.sm_util_pct, mm.mem_util_pct) == (99.8, 24.5)  # the uncapped row


def test_every_curve_range_is_its_catalogue_boards_range() -> None:
    zeus = tr.zeus_truths()
    assert len(zeus) == 207 and {t.time_unit for t in zeus} == {"epoch"}
    assert len(tr.zeus_truths(min_points=1)) == 208  # RTX 6000's one 250-260 W curve is dropped by default
    for t in tr.h200_truths() + zeus:
        m = lookup(t.gpu_model)
        assert (t.min_cap_w, t.max_cap_w) == (m.power_limit_min_w, m.power_limit_max_w), t.name


def test_interpolation_reproduces_every_measured_point_of_a_monotone_sweep() -> None:
    mm = truth("H200 mm")
    assert mm.monotone == mm.points  # mm is monotone as measured
    for r in sweep_rows("mm"):
        cap = float(r["power_cap_w"])
        assert mm.iter_time_s(cap) == float(r["iter_time_s"]) and mm.power_w(cap) == float(r["power_w"])
    assert mm.iter_time_s(675.0) == pytest.approx((0.164389 + 0.170665) / 2)
    assert mm.power_w(675.0) == pytest.approx((714.58 + 626.41) / 2)


def test_every_curve_reproduces_its_points_where_they_are_already_in_order() -> None:
    for t in all_truths():
        for i, (raw, mono) in enumerate(zip(t.points, t.monotone)):
            above = t.points[i:]
            assert mono.power_cap_w == raw.power_cap_w
            assert t.iter_time_s(raw.power_cap_w) == mono.iter_time_s
            assert t.power_w(raw.power_cap_w) == mono.power_w
            if raw.iter_time_s >= max(p.iter_time_s for p in above):
                assert mono.iter_time_s == raw.iter_time_s, t.name
            if raw.power_w <= min(p.power_w for p in above):
                assert mono.power_w == raw.power_w, t.name
        assert t.monotone[-1] == t.points[-1]  # the uncapped reference is kept as measured


def test_bw_noise_is_smoothed_to_the_uncapped_power() -> None:
    bw = truth("H200 bw")
    assert bw.power_w(550.0) == 412.04  # measured 433.15 W under a cap that cannot bind (412 W uncapped)
    assert bw.iter_time_s(500.0) == 0.060809  # measured 0.060786 s, faster than at 550 W


def test_time_is_non_increasing_and_power_non_decreasing_in_the_cap() -> None:
    for t in all_truths():
        caps = [t.min_cap_w * 0.8 + k * (t.max_cap_w * 1.1 - t.min_cap_w * 0.8) / 400 for k in range(401)]
        times = [t.iter_time_s(c) for c in caps]
        powers = [t.power_w(c) for c in caps]
        assert all(a >= b for a, b in zip(times, times[1:])), t.name
        assert all(a <= b for a, b in zip(powers, powers[1:])), t.name


def test_outside_the_measured_caps() -> None:
    t = tr.TruthCurve("toy", "A40", 100.0, 300.0, 300.0,
                          (CapPoint(200.0, 1.2, 190.0), CapPoint(300.0, 1.0, 250.0)))
    assert (t.iter_time_s(300.0), t.power_w(300.0)) == (1.0, 250.0)
    assert (t.iter_time_s(400.0), t.power_w(400.0)) == (1.0, 250.0)  # held above the highest cap
    # below the lowest: power-bound at the lowest point's energy per iteration
    assert t.iter_time_s(100.0) == pytest.approx(2.4) and t.power_w(100.0) == pytest.approx(95.0)
    assert tr.true_energy_per_iter(t, 100.0) == pytest.approx(tr.true_energy_per_iter(t, 200.0))


@pytest.mark.parametrize("points, caps", [
    ((), (100.0, 300.0, 300.0)),
    ((CapPoint(300.0, 1.0, 250.0), CapPoint(200.0, 1.2, 190.0)), (100.0, 300.0, 300.0)),
    ((CapPoint(200.0, 0.0, 190.0),), (100.0, 300.0, 300.0)),
    ((CapPoint(200.0, 1.0, 190.0),), (100.0, 350.0, 300.0)),
])
def test_bad_curves_raise(points, caps) -> None:
    with pytest.raises(ConfigError):
        tr.TruthCurve("bad", "A40", caps[0], caps[2], caps[1], points)


# --- the hindsight oracle --------------------------------------------------------------------------------

def measured(workload: str, cap_w: float) -> tuple[float, float]:
    """(slowdown %, saving %) at a measured cap, straight from the sweep's rows."""
    rows = {float(r["power_cap_w"]): (float(r["iter_time_s"]), float(r["power_w"])) for r in sweep_rows(workload)}
    (t, p), (t0, p0) = rows[cap_w], rows[700.0]
    return 100.0 * (t / t0 - 1.0), 100.0 * (1.0 - t * p / (t0 * p0))


def test_oracle_on_h200_mm_at_a_10_pct_bound_is_near_650_w() -> None:
    slowdown, saving = measured("mm", 650.0)
    assert slowdown == pytest.approx(3.8, abs=0.05) and saving == pytest.approx(9.0, abs=0.05)  # SOURCE.md
    best = tr.oracle_cap(truth("H200 mm"), 10.0)
    assert 640.0 <= best.cap_w <= 660.0 and best.slowdown_pct <= 10.0
    assert best.saving_pct == pytest.approx(saving, abs=0.3)
    # 600 W is within the bound but saves less (its reading includes settling), 550 W is past the bound
    assert measured("mm", 600.0)[1] < saving and measured("mm", 550.0)[0] > 10.0


def test_oracle_on_h200_bw_at_a_10_pct_bound_is_near_300_w() -> None:
    slowdown, saving = measured("bw", 300.0)
    best = tr.oracle_cap(truth("H200 bw"), 10.0)
    assert 295.0 <= best.cap_w <= 305.0 and best.slowdown_pct <= 10.0 and measured("bw", 250.0)[0] > 10.0
    assert best.saving_pct == pytest.approx(saving, abs=0.5)


def test_oracle_respects_the_bound_and_a_zero_bound_means_uncapped() -> None:
    for t in all_truths():
        for bound in (0.0, 5.0, 10.0, 25.0):
            best = tr.oracle_cap(t, bound)
            assert best.slowdown_pct <= bound + 1e-9 and best.saving_pct >= 0.0
            assert best.slowdown_pct == pytest.approx(tr.true_slowdown_pct(t, best.cap_w))
            assert t.min_cap_w <= best.cap_w <= t.max_cap_w
    assert tr.oracle_cap(truth("H200 mm"), 0.0) == tr.OracleChoice(700.0, 0.0, 0.0)
    loose = [tr.oracle_cap(truth("H200 mm"), b).saving_pct for b in (5.0, 10.0, 20.0, 50.0)]
    assert loose == sorted(loose)  # a looser bound never saves less
    with pytest.raises(ConfigError):
        tr.oracle_cap(truth("H200 mm"), -1.0)
