"""The README's option table, policy table and trace list, and architecture.md's state tree, are what the
registries generate (tests/doclists.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ecolaunch.config import DEFAULT_PLACEMENT_POLICY
from ecolaunch.policy.registry import policy_names, policy_summaries
from ecolaunch.sim.trace_registry import trace_names
from ecolaunch.statedir import tree
from tests.conftest import REPO
from tests.doclists import ARCHITECTURE, PAGES, README, policy_table, regenerate, state_tree, trace_list


def test_the_readme_lists_are_the_generated_ones() -> None:
    out = subprocess.run([sys.executable, "-m", "tests.doclists", "--check"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    _, changed = regenerate(README.read_text(encoding="utf-8"))
    assert changed == []


def _typed_by_hand_is_found_and_regenerated(tmp_path: Path, page: Path, region: str, generated: str,
                                           by_hand: str) -> None:
    """``page`` with ``generated`` typed over as ``by_hand`` in its ``region``: ``--check`` names the region and exits 1,
    and regenerating gives the page back."""
    text = page.read_text(encoding="utf-8").replace(generated, by_hand)
    assert by_hand in text
    stale = tmp_path / page.name
    stale.write_text(text, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "tests.doclists", "--check", str(stale)], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    said = f"{stale}: regions {region} differ from the registries; run `python -m tests.doclists`\n"
    assert (out.returncode, out.stderr) == (1, said)
    assert regenerate(text, PAGES[page.name], page.name) == (page.read_text(encoding="utf-8"), [region])


def test_a_list_typed_by_hand_is_found_and_regenerated(tmp_path: Path) -> None:
    _typed_by_hand_is_found_and_regenerated(tmp_path, README, "policies", "| `lucid` |", "| `lucid-by-hand` |")


def test_a_missing_region_is_an_error() -> None:
    with pytest.raises(ValueError, match="expected one <!-- traces:begin -->"):
        regenerate("<!-- options:begin -->\n<!-- options:end -->\n<!-- policies:begin -->\n<!-- policies:end -->\n")


def test_every_registered_policy_and_trace_is_listed() -> None:
    assert sorted(policy_summaries()) == policy_names()
    table = policy_table()
    assert table.splitlines()[2].startswith(f"| `{DEFAULT_PLACEMENT_POLICY}` (default) |")
    assert all(f"| `{name}`" in table for name in policy_names())
    text = " ".join(trace_list().split())
    assert all(f"`{name}`" in text for name in trace_names())


def test_every_launch_option_is_in_the_readme_table_as_declared() -> None:
    from ecolaunch.launch.options import declarations, option_table

    table = option_table()
    assert table in README.read_text(encoding="utf-8")
    for _, spec in declarations():
        row = next(line for line in table.splitlines() if f"`{spec.flag}" in line)
        assert f"`{spec.env}`" in row and spec.text().replace("|", "\\|") in row


def test_a_state_tree_typed_by_hand_is_found_and_regenerated(tmp_path: Path) -> None:
    _typed_by_hand_is_found_and_regenerated(tmp_path, ARCHITECTURE, "state-tree", "| `caps.json` |", "| `ledger.json` |")
    assert all(f"| `{path}` |" in state_tree() for path, _ in tree())
