"""Shared fixtures: a clean environment (no PET_*/ECOLAUNCH_* leaking in, and never the host's admin policy) and a
private state directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(__file__).resolve().parent / "bin"
#: the policy every test runs under unless it names its own: none. Without it, a test (and every process it starts)
#: would read the host's /etc/ecolaunch/policy.toml, and a lab machine's policy would change what the tests see
NO_POLICY = Path(__file__).resolve().parent / "data" / "no-policy.toml"


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without torchrun's PET_* and ecolaunch's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "ECOLAUNCH_", "TORCHELASTIC_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["ECOLAUNCH_POLICY"] = str(NO_POLICY)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def _no_leaking_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith(("PET_", "ECOLAUNCH_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("ECOLAUNCH_POLICY", str(NO_POLICY))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def one_thread():
    """Torch on one thread for the test (on two shared cores its second thread mostly waits; training stays fast)."""
    import torch  # lazy: most tests never load torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def sim_env(state_dir: Path):
    """Environment for a subprocess launch on a simulated 4-GPU workstation with a private state dir."""

    def make(spec: str = "4xA100-SXM4-80GB", **extra: str) -> dict[str, str]:
        return clean_env(ECOLAUNCH_SIMULATE=spec, ECOLAUNCH_STATE_DIR=str(state_dir), **extra)

    return make


def ecolaunch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ecolaunch", *args]
