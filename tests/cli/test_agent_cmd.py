"""``ecolaunch agent``: one pass, restore, and the privilege check with its hint."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ecolaunch.admin.safety import require_cap_privilege
from ecolaunch.cli.agent_cmd import agent
from ecolaunch.devices.select import open_backend
from ecolaunch.errors import PermissionDenied

SPEC = "4xA100-SXM4-80GB"


def _env(state_dir: Path, **extra: str) -> dict[str, str]:
    return {"ECOLAUNCH_SIMULATE": SPEC, "ECOLAUNCH_STATE_DIR": str(state_dir), "ECOLAUNCH_POLICY": "", **extra}


def test_once_with_nothing_to_do_says_so(state_dir: Path) -> None:
    result = CliRunner().invoke(agent, ["--once"], env=_env(state_dir))
    assert result.exit_code == 0, result.output
    assert result.output == "ecolaunch agent: set nothing; restored nothing\n"


def test_restore_puts_back_what_the_ledger_recorded(state_dir: Path) -> None:
    backend = open_backend(SPEC, state_dir)
    gpu = backend.gpus()[0]
    host = backend.hostname()
    (state_dir / "caps.json").write_text(
        '{"schema": "ecolaunch.jobcaps", "version": 1, "host": "%s", "gpus": {"%s": {"original_w": 275.0}}}' % (host, gpu.uuid))
    result = CliRunner().invoke(agent, ["--restore"], env=_env(state_dir))
    assert result.exit_code == 0, result.output
    assert result.output == f"ecolaunch agent: restored {gpu.uuid} 275 W\n"
    assert backend.gpus()[0].power_limit_w == 275.0


def test_a_bad_interval_is_a_usage_error(state_dir: Path) -> None:
    result = CliRunner().invoke(agent, ["--interval", "0"], env=_env(state_dir))
    assert result.exit_code == 2 and "--interval" in result.output


class _RealGpus:
    kind = "nvml"


def test_real_gpus_need_root_with_a_hint() -> None:
    with pytest.raises(PermissionDenied, match="must run as root") as e:
        require_cap_privilege(_RealGpus(), euid=1000)
    assert "ecolaunch-agent.service" in e.value.hint
    require_cap_privilege(_RealGpus(), euid=0)


def test_the_cli_reports_the_privilege_error(state_dir: Path, monkeypatch) -> None:
    import ecolaunch.admin.safety as safety

    monkeypatch.setattr(safety.os, "geteuid", lambda: 1000)
    monkeypatch.setattr("ecolaunch.devices.select.SimulatedBackend.kind", "nvml")
    result = CliRunner().invoke(agent, ["--once"], env=_env(state_dir))
    assert result.exit_code == 1
    assert "Error: the cap agent must run as root" in result.output and "HINT: start it with sudo" in result.output
