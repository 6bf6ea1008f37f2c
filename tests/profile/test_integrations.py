"""The framework callbacks, against stand-in framework modules (neither Lightning nor transformers is installed
here: the boundary a test cannot otherwise reach)."""

from __future__ import annotations

import sys
import types

import pytest

import ecolaunch
from ecolaunch.errors import ConfigError
from ecolaunch.profile import integrations


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(integrations, "step", lambda: calls.append(1))
    return calls


def _fake(monkeypatch: pytest.MonkeyPatch, name: str, base_attr: str) -> None:
    module = types.ModuleType(name)
    setattr(module, base_attr, type(base_attr, (), {}))
    monkeypatch.setitem(sys.modules, name, module)


def test_lightning_callback_marks_each_batch(monkeypatch: pytest.MonkeyPatch, counted: list[int]) -> None:
    _fake(monkeypatch, "lightning.pytorch", "Callback")
    monkeypatch.setitem(sys.modules, "lightning", types.ModuleType("lightning"))
    cb = ecolaunch.lightning_callback()
    assert isinstance(cb, sys.modules["lightning.pytorch"].Callback)
    for i in range(3):
        cb.on_train_batch_end(None, None, None, None, i)
    assert counted == [1, 1, 1]


def test_hf_callback_marks_each_step(monkeypatch: pytest.MonkeyPatch, counted: list[int]) -> None:
    _fake(monkeypatch, "transformers", "TrainerCallback")
    cb = ecolaunch.hf_callback()
    cb.on_step_end(None, None, None, model=None)
    cb.on_step_end(None, None, None)
    assert counted == [1, 1]


def test_missing_framework_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning", "transformers"):
        monkeypatch.setitem(sys.modules, name, None)  # makes the import raise ImportError
    with pytest.raises(ConfigError, match="lightning is not installed") as exc:
        ecolaunch.lightning_callback()
    assert exc.value.hint == "pip install lightning"
    with pytest.raises(ConfigError, match="transformers is not installed"):
        ecolaunch.hf_callback()
