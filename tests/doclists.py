"""The docs' lists, generated from the registries: the README's option table, policy table and trace list, and the state
directory's tree in docs/architecture.md.

A tool of the repository, not of the package (it reads and writes the checkout's docs), run from the checkout's
root: ``python -m tests.doclists`` rewrites each region of README.md and docs/architecture.md between
``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` (README.md's ``options``:
:func:`~ecolaunch.launch.options.option_table`, each option's declaration; ``policies``:
:func:`~ecolaunch.policy.registry.policy_summaries`, the default from :data:`ecolaunch.config.DEFAULT_PLACEMENT_POLICY`;
``traces``: :data:`ecolaunch.sim.trace_registry.TRACES`; architecture.md's ``state-tree``:
:func:`ecolaunch.statedir.tree`); ``--check`` changes nothing and exits 1 naming the regions that differ (``tests/test_doclists.py``
runs it, so a list typed by hand fails the suite). Given a file, it works on that file with the regions of the page of
that name. What is not generated: the prose around the regions.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from ecolaunch.config import DEFAULT_PLACEMENT_POLICY
from ecolaunch.launch.options import option_table
from ecolaunch.policy.registry import policy_summaries
from ecolaunch.sim.trace_registry import MEASURED, MODEL, trace_names
from ecolaunch.statedir import tree

README = Path(__file__).resolve().parents[1] / "README.md"
ARCHITECTURE = README.parent / "docs" / "architecture.md"
#: prose lines of the README wrap at this width
WIDTH = 115


def policy_table() -> str:
    """The policy table: the default first, then the registry's order."""
    summaries = policy_summaries()
    order = [DEFAULT_PLACEMENT_POLICY, *(n for n in summaries if n != DEFAULT_PLACEMENT_POLICY)]
    rows = [f"| `{n}`{' (default)' if n == DEFAULT_PLACEMENT_POLICY else ''} | {summaries[n]} |" for n in order]
    return "\n".join(["| policy | what it does |", "|---|---|", *rows])


def trace_list() -> str:
    """The traces of each world, and the trace file, as one paragraph."""
    def names(world: str) -> str:
        return ", ".join(f"`{n}`" for n in trace_names(world))

    text = (f"Traces of the model world (on `--gpus`): {names(MODEL)}; of the measured world (on their own "
            f"machine): {names(MEASURED)}; or a JSON/CSV trace file (format in `ecolaunch/sim/traces.py`).")
    return textwrap.fill(text, WIDTH, break_on_hyphens=False, break_long_words=False)


def state_tree() -> str:
    """The state directory's tree: every path :class:`ecolaunch.statedir.StateLayout` names, and what it holds."""
    rows = [f"| `{path}` | {what.replace('``', '`')} |" for path, what in tree()]
    return "\n".join(["| path (in the state directory) | what it holds; who writes it |", "|---|---|", *rows])


#: README.md's regions: region name -> its generator
REGIONS: dict[str, Callable[[], str]] = {"options": option_table, "policies": policy_table, "traces": trace_list}
#: every generated page: its file name -> its regions
PAGES: dict[str, dict[str, Callable[[], str]]] = {README.name: REGIONS, ARCHITECTURE.name: {"state-tree": state_tree}}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {name}:begin -->\n)(.*?)(<!-- {name}:end -->)", re.DOTALL)


def regenerate(text: str, regions: dict[str, Callable[[], str]] = REGIONS,
               page: str = "README") -> tuple[str, list[str]]:
    """``text`` with every region of ``regions`` (default: the README's) regenerated, and the names of the regions
    that changed.

    Raises:
        ValueError: a region's markers are missing (or appear twice).
    """
    changed = []
    for name, generate in regions.items():
        pattern = _pattern(name)
        found = pattern.findall(text)
        if len(found) != 1:
            raise ValueError(f"{page}: expected one <!-- {name}:begin --> ... <!-- {name}:end --> region, "
                             f"found {len(found)}")
        body = generate() + "\n"
        if found[0][1] != body:
            changed.append(name)
            text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
    return text, changed


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [Path(a) for a in args if a != "--check"] or [README, ARCHITECTURE]
    stale = False
    for path in paths:
        text, changed = regenerate(path.read_text(encoding="utf-8"), PAGES.get(path.name, REGIONS), path.name)
        if check:
            if changed:
                stale = True
                print(f"{path}: regions {', '.join(changed)} differ from the registries; run "
                      "`python -m tests.doclists`", file=sys.stderr)
        elif changed:
            path.write_text(text, encoding="utf-8")
            print(f"{path}: regenerated {', '.join(changed)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
