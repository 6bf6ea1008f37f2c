"""The shipped fitted parameters equal a fresh fit, and simulated GPUs answer through the measured models."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ecolaunch.devices.catalogue import lookup
from ecolaunch.devices.simulated import ProcessLoad, SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim import fitted
from ecolaunch.sim.node import shared_gpu
from ecolaunch.sim.reading import measured_reading
from tests.conftest import REPO


def _close(a, b, path: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9), (path, a, b)
    else:
        assert a == b, path


def test_shipped_parameters_equal_a_fresh_fit(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from refit_models import fit

    shipped = json.loads(fitted.FITTED_PATH.read_text())
    _close(shipped, fit())  # if this fails: python benchmarks/refit_models.py


def test_measured_reading_is_the_shared_gpu_model() -> None:
    a100 = lookup("A100-SXM4-80GB")
    loads = [ProcessLoad(1, 8000, util_gpu_pct=40.0, util_mem_pct=20.0, power_w=220.0),
             ProcessLoad(2, 4000, util_gpu_pct=30.0, power_w=180.0), ProcessLoad(3, 1000)]
    reading = measured_reading(a100, a100.power_limit_max_w, loads)
    expected = shared_gpu([Profile(sm_util_pct=40.0, mem_bw_util_pct=20.0, power_w=220.0),
                           Profile(sm_util_pct=30.0, power_w=180.0)], a100, None)
    assert reading.power_w == pytest.approx(expected.power_w)
    assert reading.memory_used_mib == 13000 and reading.util_gpu_pct == 70.0
    capped = measured_reading(a100, 250.0, loads)
    assert capped.power_w < reading.power_w and capped.power_w <= 250.0
    idle = measured_reading(a100, a100.power_limit_max_w, [ProcessLoad(3, 1000)])
    assert idle.power_w == pytest.approx(a100.idle_power_w)


def test_a_simulated_backend_with_the_measured_reading(tmp_path: Path) -> None:
    import os

    spec = parse_spec("2xA100-SXM4-80GB", hostname="h").hosts[0]
    backend = SimulatedBackend(spec, tmp_path / "gpus.json", reading=measured_reading)
    uuid = backend.gpus()[0].uuid
    backend.attach(uuid, os.getpid(), 8000, util_gpu_pct=90.0, power_w=360.0)
    busy, idle = backend.gpus()
    assert busy.power_w == pytest.approx(shared_gpu([Profile(sm_util_pct=90.0, power_w=360.0)],
                                                    lookup("A100-SXM4-80GB")).power_w)
    assert idle.power_w == pytest.approx(lookup("A100-SXM4-80GB").idle_power_w)
