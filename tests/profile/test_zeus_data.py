"""Loaders for the Zeus power-limit traces and profiling windows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ecolaunch.errors import ConfigError
from ecolaunch.profile import zeus_data as zd
from ecolaunch.sim.models import DATA_DIR

#: the loaders' tests of the upstream folder's full layout (summary_train.csv and every profiling window are not in
#: the package); what the package's own copies hold is tested below without it
needs_upstream = pytest.mark.skipif(not (zd.DEFAULT_DATA_DIR / "summary_train.csv").exists(),
                                    reason="the full Zeus folder (../shared/data/zeus-nsdi23) is not beside the "
                                           "repository; the vendored copies are tested without it")


@needs_upstream
def test_power_traces_one_curve_per_gpu_workload_batch() -> None:
    curves = zd.load_power_traces()
    assert Counter(c.gpu for c in curves) == {"V100": 58, "A40": 53, "P100": 45, "RTX6000": 52}
    keys = [(c.gpu, c.workload, c.batch_size) for c in curves]
    assert len(keys) == len(set(keys))
    cifar_v100 = {c.optimizer for c in curves if c.gpu == "V100" and c.workload == "cifar100/shufflenetv2"}
    assert cifar_v100 == {"adadelta"}  # the optimizer summary_train.csv uses, not V100's extra adam rows
    (row,) = [c for c in curves if (c.gpu, c.workload, c.batch_size) == ("A40", "cifar100/shufflenetv2", 1024)]
    assert row.time_unit == "epoch"
    assert row.points[0].power_cap_w == 100 and row.points[0].iter_time_s == pytest.approx(27.13)
    assert row.points[0].power_w == pytest.approx(106.888812)
    assert [p.power_cap_w for p in row.points] == sorted(p.power_cap_w for p in row.points)


def test_the_vendored_profile_window_loads_as_measured() -> None:
    (curve,) = zd.load_profile_windows(DATA_DIR)  # ecolaunch/sim/data/profile_windows: V100 ResNet-18, one GPU
    assert (curve.gpu, curve.workload, curve.num_gpus, curve.key) == ("V100", "resnet18", 1, "V100 resnet18")
    assert [p.power_cap_w for p in curve.points] == [100 + 25 * i for i in range(7)]
    top = curve.points[-1]  # the 250 W window: 9.991 s, 1900.333 J
    assert top.iter_time_s == pytest.approx(9.991050186916254 / zd.ZEUS_WINDOW_ITERS)
    assert top.power_w == pytest.approx(1900.3329999999842 / 9.991050186916254)


@needs_upstream
def test_profile_windows() -> None:
    curves = zd.load_profile_windows()
    assert len(curves) == 12
    (four,) = [c for c in curves if c.gpu == "A40" and c.workload == "resnet50" and c.num_gpus == 4]
    assert [p.power_cap_w for p in four.points] == [100 + 25 * i for i in range(9)]
    top = four.points[-1]  # 300 W window: 8.226 s, energies 1067.5 + 1072.4 + 1049.2 + 1129.6 J
    assert top.iter_time_s == pytest.approx(8.226085375994444 / zd.ZEUS_WINDOW_ITERS)
    assert top.power_w == pytest.approx((1067.513 + 1072.433 + 1049.198 + 1129.595) / 4 / 8.226085375994444, rel=1e-5)


def test_missing_data_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        zd.load_power_traces(tmp_path)
    assert info.value.hint
    with pytest.raises(ConfigError):
        zd.load_profile_windows(tmp_path)
