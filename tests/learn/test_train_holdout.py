"""``train(holdout_types=..., holdout_zeus=...)``: held-out job types reach no data source (labels, the interference
refit, the cap model of synthetic labels), unknown names are refused, and a seed gives the same weights."""

from __future__ import annotations

import json
import re
import math

import numpy as np
import pytest
import torch

from ecolaunch.errors import ConfigError
from ecolaunch.policy.infer import load_model
from ecolaunch.learn.train import (
    GAVEL_BOARDS,
    _zeus_held,
    build_dataset,
    gavel_types,
    pairs_involving,
    train,
    type_folds,
    zeus_key,
    zeus_keys,
)
from ecolaunch.sim.interference import fit_gavel, gavel_set
from ecolaunch.sim.models import ZEUS_GPUS, zeus_rows
from ecolaunch.sim.power import default_power_model

HELD = "ResNet-18 (batch size 32)"


def test_folds_partition_the_job_types() -> None:
    folds = type_folds()
    names = [n for f in folds for n in f]
    assert len(folds) == 5 and sorted(names) == list(gavel_types()) and len(names) == 26
    assert type_folds() == folds  # seeded


def test_a_held_out_type_reaches_no_gavel_sample_and_no_interference_refit() -> None:
    ds = build_dataset(0, 20, holdout_types=[HELD])
    data = gavel_set()
    involved = pairs_involving([HELD])
    assert involved.sum() > 50 and not (ds.gavel_train & involved).any() and ds.gavel_train.sum() == (~involved).sum()
    assert ds.data["gavel_train_pairs"] == int((~involved).sum()) and ds.data["holdout_types"] == [HELD]
    # every Gavel sample's jobs: none has the held-out type's solo iteration time on that board
    held = {(GAVEL_BOARDS[gpu].power_limit_max_w, round(math.log10(float(data.iter_time_s[i]) / 0.1), 5))
            for i, (gpu, job) in enumerate(data.keys) if job == HELD}
    seen = {(float(s.graph.gpu_max_power_w[0]), round(float(v), 5))
            for s in ds.samples if s.source == "gavel" for v in s.graph.x["job"][:, 0]}
    assert len(held) == 3 and len(seen) > 60 and not (seen & held)
    # the interference prior (and the synthetic labels) come from a refit without those pairs
    refit = fit_gavel(train=~involved)
    assert ds.gavel_fit.switch_overhead_s == refit.switch_overhead_s != fit_gavel().switch_overhead_s


def test_a_held_out_zeus_curve_reaches_no_sample_and_no_cap_model() -> None:
    key = "v100:resnet50:128"
    rows = sum(1 for r in zeus_rows("v100") if zeus_key("v100", r.workload, r.batch_size) == key)
    full, held = build_dataset(0, 0), build_dataset(0, 0, holdout_zeus=[key])
    assert rows > 0 and held.data["zeus_rows"] == full.data["zeus_rows"] - rows
    assert held.power.shapes["v100"] != default_power_model().shapes["v100"]  # refitted without it
    is_held = _zeus_held([key])
    assert is_held("v100", "imagenet/resnet50", 128) and not is_held("a40", "imagenet/resnet50", 128)
    assert len(zeus_keys()) == len({zeus_key(g, r.workload, r.batch_size) for g in ZEUS_GPUS for r in zeus_rows(g)})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"holdout_types": ["ResNet-18 (batch 32)"]}, "not a Gavel job type: 'ResNet-18 (batch 32)'"),
    ({"holdout_zeus": ["v100:resnet-50:128"]}, "not a Zeus curve key: 'v100:resnet-50:128'"),
])
def test_an_unknown_name_is_refused_rather_than_holding_out_nothing(kwargs, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        train(0, None, fast=True, **kwargs)


def test_fast_training_with_a_holdout_is_seeded_and_reports_the_held_out_pairs(tmp_path, one_thread) -> None:
    a, b = tmp_path / "a" / "gnn.pt", tmp_path / "b" / "gnn.pt"
    manifest = train(3, a, fast=True, holdout_types=[HELD], holdout_zeus=["a40:ncf:1024"])
    train(3, b, fast=True, holdout_types=[HELD], holdout_zeus=["a40:ncf:1024"])
    wa, wb = load_model(a), load_model(b)
    assert all(torch.equal(x, y) for x, y in zip(wa._enc["job"], wb._enc["job"]))
    refit = fit_gavel(train=~pairs_involving([HELD])).switch_overhead_s
    assert wa.config == wb.config and wa.config.switch_overhead_s == pytest.approx(refit["v100"])
    assert wa.config.switch_overhead_by_arch_s == pytest.approx(
        {"kepler": refit["k80"], "pascal": refit["p100"], "volta": refit["v100"]})
    on_disk = json.loads((a.parent / "manifest.json").read_text())
    assert on_disk["data"]["holdout_types"] == [HELD] and on_disk["data"]["holdout_zeus"] == ["a40:ncf:1024"]
    held = manifest["metrics"]["gavel_heldout"]
    assert held["pairs"] == int((pairs_involving([HELD]) & np.logical_and(*gavel_set().usable("values"))).sum())
    assert manifest["fast"] and manifest["epochs"] < 10
