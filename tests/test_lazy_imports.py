"""Every function-level import of an ecolaunch module says why it is lazy (a comment on its line or the line above),
the scan that checks it catches one that does not, and ``import ecolaunch`` (what a training script runs) loads
neither torch, click, msgspec nor the simulator."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, clean_env


def unexplained_imports(root: Path) -> list[str]:
    """``path:line`` of each import of an ecolaunch module inside a function, under ``root``, that has no comment
    on its line or on the line above."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), filename=str(path))
        nested = {node for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))}
        for node in sorted(nested, key=lambda n: n.lineno):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if not any(n == "ecolaunch" or n.startswith("ecolaunch.") for n in names):
                continue
            line, above = lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""
            if "#" not in line and not above.strip().startswith("#"):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_every_lazy_import_says_why() -> None:
    assert unexplained_imports(REPO / "ecolaunch") == []


def test_the_scan_catches_an_unexplained_import(tmp_path: Path) -> None:
    (tmp_path / "planted.py").write_text(
        "import ecolaunch\n"
        "\n"
        "def explained():\n"
        "    # lazy: a reason on the line above\n"
        "    from ecolaunch.sim import engine\n"
        "    from ecolaunch.policy import infer  # lazy: a reason on the line\n"
        "    import json\n"
        "    return engine, infer, json\n"
        "\n"
        "def unexplained():\n"
        "    x = 1\n"
        "    if x:\n"
        "        import ecolaunch.sim.engine\n"
        "    from ecolaunch.policy.infer import score\n"
        "    return score\n")
    assert unexplained_imports(tmp_path) == ["planted.py:13", "planted.py:14"]


def test_import_ecolaunch_stays_light() -> None:
    ran = subprocess.run([sys.executable, "-c", "import sys, ecolaunch; print('\\n'.join(sorted(sys.modules)))"],
                         cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60, check=True)
    loaded = ran.stdout.split()
    assert "ecolaunch.profile.hooks" in loaded  # the listing is that of an interpreter that imported ecolaunch
    heavy = [m for m in loaded if m.split(".")[0] in ("torch", "torch_geometric", "click", "msgspec")
             or m == "ecolaunch.sim" or m.startswith("ecolaunch.sim.")]
    assert heavy == []
