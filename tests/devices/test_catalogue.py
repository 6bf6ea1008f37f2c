"""The GPU catalogue: lookups, error messages, and agreement with the measured Zeus power-limit grids."""

from __future__ import annotations

import csv

import pytest

from ecolaunch.devices.catalogue import CATALOGUE, architecture, lookup, measured_for, model_names
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.sim.models import DATA_DIR

REQUIRED = [
    "A100-SXM4-80GB", "A100-SXM4-40GB", "A100-PCIE-40GB", "A100-PCIE-80GB", "H100-SXM5-80GB",
    "H100-PCIE-80GB", "H200-SXM-141GB", "V100-SXM2-32GB", "V100-SXM2-16GB", "V100-PCIE-32GB",
    "V100-PCIE-16GB", "A40", "A6000", "L40S", "L4", "RTX4090", "RTX3090", "RTX6000", "P100-PCIE-16GB", "T4",
]


def test_required_models_present_and_consistent():
    assert set(REQUIRED) <= set(model_names())
    for model in CATALOGUE.values():
        assert model.power_limit_min_w <= model.power_limit_default_w <= model.power_limit_max_w
        assert 0 < model.idle_power_w < model.power_limit_min_w
        assert model.memory_mib % 1024 == 0
        assert model.source
        assert model.nvlink == ("SXM" in model.name)


@pytest.mark.parametrize(("typed", "expected"), [
    ("a100-sxm4-80gb", "A100-SXM4-80GB"),
    ("  A40 ", "A40"),
    ("RTX A6000", "A6000"),
    ("NVIDIA RTX A6000", "A6000"),
    ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ("Quadro RTX 6000", "RTX6000"),
    ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
    ("rtx_3090", "RTX3090"),
])
def test_lookup_is_forgiving(typed, expected):
    assert lookup(typed).name == expected


def test_full_names_map_back_to_their_row():
    for model in CATALOGUE.values():
        assert lookup(model.full_name) is model


def test_unknown_name_lists_close_names():
    with pytest.raises(ConfigError) as info:
        lookup("A100")
    message = str(info.value)
    assert "unknown GPU model 'A100'" in message
    assert "A100-SXM4-80GB" in message and "A100-PCIE-40GB" in message
    assert "T4" in info.value.hint  # the hint lists every name


def test_unrelated_name_has_no_suggestion_but_a_hint():
    with pytest.raises(ConfigError) as info:
        lookup("zzzzzz")
    assert "did you mean" not in str(info.value)
    assert "A100-SXM4-80GB" in info.value.hint


def test_model_validates_its_numbers():
    with pytest.raises(ConfigError, match="min <= default <= max"):
        GpuModel("X", "X", 1024, 300.0, 200.0, 250.0, 10.0, False, "x", "test")
    with pytest.raises(ConfigError, match="memory_mib"):
        GpuModel("X", "X", 0, 100.0, 200.0, 250.0, 10.0, False, "x", "test")


@pytest.mark.parametrize(("gpu", "model"), [
    ("v100", "V100-PCIE-32GB"), ("v100", "V100-PCIE-16GB"), ("a40", "A40"),
    ("p100", "P100-PCIE-16GB"), ("rtx6000", "RTX6000"),
])
def test_ranges_agree_with_zeus_measurements(gpu, model):
    path = DATA_DIR / f"summary_power_{gpu}.csv"  # the package's copies of Zeus's sweeps
    with path.open() as f:
        limits = {float(row["power_limit"]) for row in csv.DictReader(f)}
    entry = CATALOGUE[model]
    assert (entry.power_limit_min_w, entry.power_limit_max_w) == (min(limits), max(limits))
    assert "Zeus" in entry.source


@pytest.mark.parametrize(("name", "arch"), [("V100-SXM2-32GB", "volta"), ("NVIDIA H200", "hopper"),
                                            ("NVIDIA GeForce RTX 3090", "ampere"), ("Tesla K80", "kepler"),
                                            ("Tesla M60", "maxwell"), ("Quadro GP100", "pascal"),
                                            ("Mystery Board 9000", "")])
def test_architecture_from_the_catalogue_or_the_name(name: str, arch: str) -> None:
    assert architecture(name) == arch


def test_a_figure_measured_on_some_architectures_serves_the_newer_ones() -> None:
    measured = {"kepler": 3.0, "pascal": 2.0, "volta": 1.0}
    assert [measured_for(a, measured, 9.0) for a in ("kepler", "maxwell", "pascal", "volta", "hopper", "", "tpu")] \
        == [3.0, 3.0, 2.0, 1.0, 1.0, 9.0, 9.0]
    assert measured_for("maxwell", {"pascal": 2.0}, 9.0) == 2.0  # older than every measurement: the oldest's
    assert measured_for("hopper", {}, 9.0) == 9.0
