"""Property tests: random TOML-ish text and random policy documents never crash the loader.

Whatever the input, ``parse_rules`` returns rules that satisfy the schema's invariants, or raises a
ConfigError that names the file; no other exception escapes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ecolaunch.admin.rules import Rules, cap_bounds_w, parse_rules
from ecolaunch.admin.schema import CAP_KEYS, SCALAR_KEYS
from ecolaunch.errors import ConfigError

FRAGMENTS = [
    "[", "]", "[[", "]]", "=", " ", "\n", ".", '"', "'", '"""', "#", ",", "{", "}", "-", "0", "1", "2.5", "1e400",
    "nan", "inf", "true", "false", '"x"', "slowdown", "max_pct", "default_pct", "energy", "eta", "colocation",
    "enabled", "caps", "index", "A40", "min_w", "max_w", "min_fraction", "max_fraction", "reserve", "users",
    "groups", "max_gpus", "profiling", "max_caps", "state", "dir", "group", '"/var/lib"', "*", "\\", "\t", "é",
]

names = st.sampled_from(["alice", "bob", "vision-lab", "x y", "", "*"]) | st.text(max_size=6)
numbers = st.integers(-5, 2000) | st.floats(-1.0, 2000.0) | st.sampled_from([0, 0.5, 1, math.nan, math.inf])
anything = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | names
    | st.lists(names | st.integers(), max_size=3)
    | st.sampled_from(["/var/lib/ecolaunch", "relative/dir", "gpu-users"])
)
values = numbers | numbers | anything


def body(keys: list[str], value: st.SearchStrategy[Any] = values) -> st.SearchStrategy[dict[str, Any]]:
    """A table with mostly known keys (sometimes one unknown) and plausible or arbitrary values."""
    return st.dictionaries(st.sampled_from([*keys, "zz"]), value, max_size=len(keys))


bounds = body(list(CAP_KEYS), numbers | numbers | anything)
policy_tables = {
    **{table: body(list(keys)) for table, keys in SCALAR_KEYS.items()},
    "caps": st.tuples(
        st.dictionaries(st.sampled_from(["A40", "A100-SXM4-80GB", "nvidia a40", " "]), bounds | anything, max_size=3),
        st.none() | st.dictionaries(st.sampled_from(["0", "1", "01", "x"]), bounds | anything, max_size=2) | anything,
    ).map(lambda t: t[0] if t[1] is None else {**t[0], "index": t[1]}),
    "reserve": st.dictionaries(
        st.sampled_from(["0", "01", "3", "GPU-ab", "gpu-AB", "gpu0"]),
        body(["users", "groups"], st.lists(names, max_size=3) | anything),
        max_size=3,
    ),
    "users": st.dictionaries(names, body(["max_gpus"]) | anything, max_size=3),
}
documents = st.fixed_dictionaries({}, optional=policy_tables)


def to_toml(value: Any) -> str:
    """A value as a TOML inline value (tables as inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, (int, str)):
        return str(value) if isinstance(value, int) else json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(to_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {to_toml(v)}" for k, v in value.items()) + "}"


def check(text: str) -> None:
    try:
        rules, sources = parse_rules(text, "p.toml")
    except ConfigError as e:
        assert str(e).startswith("p.toml"), str(e)
        assert e.hint
        return
    assert 0 <= rules.default_slowdown_pct <= rules.max_slowdown_pct
    assert 0 <= rules.eta <= 1 and rules.max_jobs_per_gpu >= 1 and rules.memory_margin_mib >= 0
    assert set(Rules.__dataclass_fields__) <= set(sources)
    for name in ("cap_bounds_model", "cap_bounds_index"):
        for bounds in getattr(rules, name).values():
            lo, hi = cap_bounds_w(Rules(cap_bounds_index={0: bounds}), "X", 0, 100.0, 300.0)
            assert 100.0 <= lo <= hi <= 300.0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40))
def test_random_text_never_crashes(parts: list[str]) -> None:
    check("".join(parts))


@settings(max_examples=300, deadline=None)
@given(documents)
def test_random_documents_never_crash(doc: dict[str, Any]) -> None:
    lines = []
    for table, content in doc.items():
        lines.append(f"[{table}]")
        lines += [f"{json.dumps(k, ensure_ascii=False)} = {to_toml(v)}" for k, v in content.items()]
    check("\n".join(lines) + "\n")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_unicode_never_crashes(text: str) -> None:
    check(text)
