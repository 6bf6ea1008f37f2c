"""ecolaunch.validate: what a number is, the errors it raises, and a scan that keeps hand-written checks out."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from ecolaunch.errors import ConfigError, DeviceError
from ecolaunch.validate import integer, is_integer, is_number, is_real, number, number_or_none

PACKAGE = Path(__file__).resolve().parents[1] / "ecolaunch"

#: the hand-written forms of "a number, not a bool" that ecolaunch.validate replaces
HAND_CHECKS = (
    re.compile(r"isinstance\(.*, bool\) or not isinstance"),
    re.compile(r"not isinstance\(.*, int\) or isinstance\(.*, bool\)"),
    re.compile(r"isinstance\([^)]*, (int|\(int, float\))\) and not isinstance\([^)]*, bool\)"),
)
#: the one module allowed to spell the check out
EXEMPT = {"validate.py"}


def _hand_checks(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if any(p.search(line) for p in HAND_CHECKS)]


def test_no_module_checks_a_number_by_hand() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in EXEMPT:
            found += [f"{rel}:{n}" for n in _hand_checks(path.read_text(encoding="utf-8"))]
    assert not found, f"use ecolaunch.validate (is_number, is_integer, number, integer, ...): {found}"


@pytest.mark.parametrize("line", [
    "    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:",
    "    if not isinstance(pid, int) or isinstance(pid, bool):",
    "    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)",
    "    return isinstance(value, int) and not isinstance(value, bool)",
])
def test_the_scan_sees_a_check_written_by_hand(line: str) -> None:
    assert _hand_checks(f"x = 1\n{line}\n") == [2]


@pytest.mark.parametrize("value, real, finite, whole", [
    (3, True, True, True), (-2.5, True, True, False), (0.0, True, True, False),
    (math.inf, True, False, False), (-math.inf, True, False, False), (math.nan, True, False, False),
    (True, False, False, False), (False, False, False, False),
    ("3", False, False, False), (None, False, False, False), ([1], False, False, False), (2.0, True, True, False),
])
def test_predicates(value, real, finite, whole) -> None:
    assert (is_real(value), is_number(value), is_integer(value)) == (real, finite, whole)


def test_number_or_none_keeps_the_range() -> None:
    assert number_or_none(5) == 5.0 and isinstance(number_or_none(5), float)
    assert number_or_none(0, positive=True) is None
    assert number_or_none(0, lo=0.0) == 0.0
    assert number_or_none(-0.1, lo=0.0) is None
    assert number_or_none(100, hi=100.0) == 100.0
    assert number_or_none(100.5, hi=100.0) is None
    assert number_or_none(math.nan) is None
    assert number_or_none(True) is None
    assert number_or_none("1") is None


def test_number_returns_a_float_or_names_what_the_value_and_the_range() -> None:
    assert number(7, what="x", lo=0) == 7.0
    with pytest.raises(ConfigError) as e:
        number(-1, what="power.max_total_w", lo=0, hint="give watts")
    assert str(e.value) == "power.max_total_w must be a number >= 0, got -1"
    assert e.value.hint == "give watts"
    with pytest.raises(ConfigError, match=r"^x must be a number > 0 and <= 10, got 0$"):
        number(0, what="x", positive=True, hi=10)
    with pytest.raises(ConfigError, match=r"^x must be a number, got inf$"):
        number(math.inf, what="x")
    with pytest.raises(DeviceError, match=r"^x must be a number, got True$"):
        number(True, what="x", error=DeviceError)


def test_integer_refuses_floats_and_bools() -> None:
    assert integer(4, what="n", lo=4) == 4
    with pytest.raises(ConfigError, match=r"^n must be an integer >= 1, got 2\.0$"):
        integer(2.0, what="n", lo=1)
    with pytest.raises(ConfigError, match=r"^n must be an integer >= 1 and <= 8, got 9$"):
        integer(9, what="n", lo=1, hi=8)
    with pytest.raises(ConfigError, match=r"^n must be an integer, got False$"):
        integer(False, what="n")
    with pytest.raises(ConfigError, match=r"^n must be an integer > 0, got 0$"):
        integer(0, what="n", positive=True)


def test_the_module_is_base_layer() -> None:
    text = (PACKAGE / "validate.py").read_text(encoding="utf-8")
    imports = re.findall(r"^(?:from|import) (\S+)", text, re.MULTILINE)
    assert {m for m in imports if m.startswith("ecolaunch")} == {"ecolaunch.errors"}
