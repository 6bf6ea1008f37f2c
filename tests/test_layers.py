"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and they bite: an upward import planted in a
copy of the package breaks them. CI runs ``lint-imports`` itself too (.ci/run); here it runs where import-linter is
installed (the ``dev`` extra)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env

LINT_IMPORTS = shutil.which("lint-imports")
pytestmark = pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed (pip install -e '.[dev]')")


def _lint(root: Path) -> subprocess.CompletedProcess:
    # --no-cache: the copy and the checkout share module names; cwd first on sys.path: the tree under test
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, env=clean_env(), capture_output=True, text=True,
                          timeout=120)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(REPO / "ecolaunch", root / "ecolaunch",
                    ignore=lambda d, names: [n for n in names if not n.endswith(".py") and not (Path(d) / n).is_dir()
                                             or n == "__pycache__"])
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_contracts_hold() -> None:
    ran = _lint(REPO)
    assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.mark.parametrize(("module", "planted", "broken"), [
    ("state/graph.py", "import ecolaunch.policy.base", "ecolaunch.state is not allowed to import ecolaunch.policy"),
    ("launch/session.py", "import ecolaunch.sim.engine", "ecolaunch.launch is not allowed to import ecolaunch.sim"),
    ("errors.py", "import ecolaunch.devices.backend", "ecolaunch.errors is not allowed to import ecolaunch.devices"),
    ("policy/packing.py", "import ecolaunch.devices.nvml", "ecolaunch.policy is not allowed to import ecolaunch.devices.nvml"),
    ("sim/fitted.py", "import ecolaunch.sim.power", "No cycles are allowed in ecolaunch.sim"),
])
def test_a_planted_import_breaks_them(tmp_path: Path, module: str, planted: str, broken: str) -> None:
    root = _copy(tmp_path)
    path = root / "ecolaunch" / module
    path.write_text(path.read_text() + f"\n{planted}\n")
    ran = _lint(root)
    assert ran.returncode == 1 and broken in ran.stdout, ran.stdout + ran.stderr


def test_a_module_outside_the_layers_breaks_them(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "ecolaunch" / "stray.py").write_text('"""A module no layer names."""\n')
    ran = _lint(root)
    assert ran.returncode == 1 and "stray" in ran.stdout, ran.stdout + ran.stderr
