"""Training-framework callbacks that mark iterations for ecolaunch: PyTorch Lightning and Hugging Face ``Trainer``.

What lives here: :func:`lightning_callback` and :func:`hf_callback`, each of which imports its framework only when
called. What they do and how they fail: docs/python-api.md#the-iteration-hooks-and-the-jobs-hints.
"""

from __future__ import annotations

import importlib
from typing import Any

from ecolaunch.errors import ConfigError
from ecolaunch.profile.hooks import step

#: Lightning's package names, newest first (``lightning`` since 2.0, ``pytorch_lightning`` before)
_LIGHTNING_MODULES = ("lightning.pytorch", "pytorch_lightning")


def _import_first(names: tuple[str, ...], install: str) -> Any:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ConfigError(f"{names[0].split('.')[0]} is not installed", hint=f"pip install {install}")


def lightning_callback() -> Any:
    """A ``lightning.pytorch.Callback`` that marks one ecolaunch iteration per training batch."""
    pl = _import_first(_LIGHTNING_MODULES, "lightning")

    class EcolaunchLightningCallback(pl.Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step()

    return EcolaunchLightningCallback()


def hf_callback() -> Any:
    """A ``transformers.TrainerCallback`` that marks one ecolaunch iteration per optimizer step."""
    transformers = _import_first(("transformers",), "transformers")

    class EcolaunchTrainerCallback(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step()

    return EcolaunchTrainerCallback()
