"""The workload catalogue is built from the measured data (Gavel, Zeus) and the population data loads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.sim.interference import fit_gavel
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.models import DATA_DIR, gavel_solo
from ecolaunch.sim.workloads import (
    ASSUMED_MEMORY_MIB,
    alibaba_pods,
    gavel_vc,
    memory_agreement,
    sample_runtimes,
    workload_catalogue,
    workload_names,
    workload_profile,
    workload_profiles,
)


def test_catalogue_has_every_gavel_type() -> None:
    names = workload_names()
    assert len(names) == 26
    assert set(names) == {job for gpu, job in gavel_solo() if gpu == "v100"}
    assert set(workload_profiles()) == set(names)


@pytest.mark.parametrize("name", ["ResNet-18 (batch size 64)", "Transformer (batch size 256)", "A3C"])
def test_iter_time_is_one_over_gavel_v100_solo_throughput(name: str) -> None:
    assert workload_profiles()[name].iter_time_s == pytest.approx(1.0 / gavel_solo()[("v100", name)], rel=1e-12)


def test_sm_util_is_the_fitted_v100_demand() -> None:
    demands = fit_gavel().demands
    for name, profile in workload_profiles().items():
        assert profile.sm_util_pct == pytest.approx(100.0 * demands[("v100", name)])
        assert 0.0 <= profile.sm_util_pct <= 100.0
        assert profile.mem_bw_util_pct is None


def test_power_is_zeus_resnet50_only_and_scales_with_the_board() -> None:
    v100 = workload_profiles()
    grounded = {name for name, p in v100.items() if p.power_w is not None}
    assert grounded == {f"ResNet-50 (batch size {b})" for b in (16, 32, 64, 128)}
    # Zeus imagenet/resnet50, batch 64, V100 PCIe at its 250 W maximum limit: 222.9 W
    assert v100["ResNet-50 (batch size 64)"].power_w == pytest.approx(222.8975, abs=1e-3)
    a100 = lookup("A100-SXM4-80GB")
    scaled = workload_profiles(a100)["ResNet-50 (batch size 64)"].power_w
    assert scaled == pytest.approx(222.8975 / 250.0 * a100.power_limit_max_w, rel=1e-6)
    for w in workload_catalogue():
        assert w.power_source.startswith("Zeus ") == (w.power_frac is not None)


def test_memory_is_the_labelled_assumption() -> None:
    for name, profile in workload_profiles().items():
        assert profile.memory_mib == ASSUMED_MEMORY_MIB[name] > 0
    # the two types Gavel could most often not pair on a 16 GiB V100 cannot pair with themselves either
    for name in ("ResNet-50 (batch size 128)", "Transformer (batch size 256)"):
        assert 2 * ASSUMED_MEMORY_MIB[name] > 16384
    agree, total = memory_agreement()
    assert total == 676 and agree / total >= 0.95


def test_profiles_are_valid_and_fresh_dicts() -> None:
    a, b = workload_profiles(), workload_profiles()
    assert a == b and a is not b
    for p in a.values():
        assert isinstance(p, Profile)
        assert p.iter_time_s is not None and math.isfinite(p.iter_time_s) and p.iter_time_s > 0


def test_unknown_workload_names_close_matches() -> None:
    with pytest.raises(ConfigError, match="unknown workload 'ResNet-50 \\(batch size 65\\)'") as e:
        workload_profile("ResNet-50 (batch size 65)")
    assert "ResNet-50 (batch size 64)" in (e.value.hint or "")


def test_population_data_loads() -> None:
    ws, cl = gavel_vc("6214e9"), gavel_vc("0e4a51")
    assert (len(ws), len(cl)) == (2000, 1181)
    assert sum(j.nproc == 1 for j in ws) == 1928
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(cl, cl[1:]))
    assert {j.job_type for j in ws} <= set(workload_names())
    pods = alibaba_pods()
    assert len(pods) == 6203 and all(p.num_gpu >= 1 and 0 < p.gpu_milli <= 1000 for p in pods)
    with pytest.raises(ConfigError, match="no vendored Gavel trace"):
        gavel_vc("11cb48")


def test_runtime_sampling_respects_the_range_and_the_distribution() -> None:
    x = sample_runtimes(np.random.default_rng(3), 20000, 120.0, 48 * 3600.0)
    assert x.min() >= 120.0 and x.max() <= 48 * 3600.0
    # Philly runtimes >= 2 min: median 2020 s, 2.6 % longer than 48 h (cut to 48 h)
    assert 1700 < np.median(x) < 2400
    assert 0.015 < np.mean(x == 48 * 3600.0) < 0.04
    again = sample_runtimes(np.random.default_rng(3), 20000, 120.0, 48 * 3600.0)
    assert np.array_equal(x, again)
    with pytest.raises(ConfigError):
        sample_runtimes(np.random.default_rng(0), 1, 100.0, 10.0)


def test_vendored_population_data_is_small() -> None:
    files = ["philly_runtime_quantiles.csv", "gavel_vc_6214e9.csv", "gavel_vc_0e4a51.csv",
             "alibaba2023_gpu_pods.csv", "LICENSE-CC-BY-4.0.txt"]
    assert sum((DATA_DIR / f).stat().st_size for f in files) < 500_000
