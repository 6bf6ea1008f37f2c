"""``ecolaunch status``: the set power limit, and the limit in force beside it when the driver lags."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ecolaunch.cli.status_cmd import status

SPEC = "4xA100-SXM4-80GB"


def _env(state_dir: Path) -> dict[str, str]:
    return {"ECOLAUNCH_SIMULATE": SPEC, "ECOLAUNCH_STATE_DIR": str(state_dir), "ECOLAUNCH_POLICY": ""}


@pytest.fixture
def lagging_gpu_1(monkeypatch: pytest.MonkeyPatch):
    """Simulated GPUs whose GPU 1 is set to 250 W while 400 W is still in force (the idle H200's lag)."""
    import ecolaunch.runtime as context

    real_open = context.open_gpus

    def open_gpus(environment):
        backend = real_open(environment)
        real_gpus = backend.gpus

        def gpus():
            snaps = real_gpus()
            snaps[1] = dataclasses.replace(snaps[1], power_limit_w=250.0, power_limit_enforced_w=400.0)
            return snaps

        backend.gpus = gpus
        return backend

    monkeypatch.setattr(context, "open_gpus", open_gpus)


def test_the_enforced_limit_is_shown_only_where_it_differs(state_dir: Path, lagging_gpu_1) -> None:
    result = CliRunner().invoke(status, [], env=_env(state_dir))
    assert result.exit_code == 0, result.output
    table = result.output.splitlines()[2:]
    assert table == [
        "GPU NAME                      MEMORY (MiB)   UTIL          POWER/CAP (W)  JOBS",
        "0   NVIDIA A100-SXM4-80GB          0/81920    0 %                 50/400  -",
        "1   NVIDIA A100-SXM4-80GB          0/81920    0 %  50/250 (enforced 400)  -",
        "2   NVIDIA A100-SXM4-80GB          0/81920    0 %                 50/400  -",
        "3   NVIDIA A100-SXM4-80GB          0/81920    0 %                 50/400  -",
    ]


def test_json_carries_both_limits(state_dir: Path, lagging_gpu_1) -> None:
    result = CliRunner().invoke(status, ["--json"], env=_env(state_dir))
    assert result.exit_code == 0, result.output
    gpus = json.loads(result.output)["gpus"]
    assert [(g["power_limit_w"], g["power_limit_enforced_w"]) for g in gpus] == [
        (400.0, 400.0), (250.0, 400.0), (400.0, 400.0), (400.0, 400.0)]


def test_agreeing_limits_keep_the_narrow_table(state_dir: Path) -> None:
    result = CliRunner().invoke(status, [], env=_env(state_dir))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[3] == (
        "0   NVIDIA A100-SXM4-80GB          0/81920    0 %          50/400  -")


@pytest.mark.parametrize("limit, enforced, shown", [
    (350.0, 700.0, "350 (enforced 700)"),
    (350.0, 350.4, "350"),  # within NVML's rounding: not worth a word
    (350.0, None, "350"),
    (None, 700.0, "N/A"),
])
def test_cap_cell(limit, enforced, shown) -> None:
    from ecolaunch.cli.hostview import cap_text

    assert cap_text({"power_limit_w": limit, "power_limit_enforced_w": enforced}) == shown
