"""benchmarks/json_identity.py's comparison alone (no benchmark runs): equal documents pass, a changed figure fails
with its key path, a changed volatile value passes on its structure, a missing key or another argv fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO

VOLATILE = {"wall_s": "wall clock", "cases.*.p50_ms": "latency"}
BEFORE = {"jobs": 40, "wall_s": 1.5, "cases": [{"gpus": 8, "p50_ms": 9.5}, {"gpus": 64, "p50_ms": 65.9}],
          "ratio": float("nan")}


@pytest.fixture
def identity(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import json_identity

    return json_identity


def changed(**edits: object) -> dict:
    doc = json.loads(json.dumps(BEFORE))
    doc.update(edits)
    return doc


def test_identical_documents_pass(identity) -> None:
    assert identity.compare_docs(BEFORE, changed(), VOLATILE) == {"verdict": "identical", "where": None}


def test_a_changed_figure_fails_with_its_key_path(identity) -> None:
    after = changed(cases=[{"gpus": 8, "p50_ms": 9.5}, {"gpus": 65, "p50_ms": 65.9}])
    assert identity.compare_docs(BEFORE, after, VOLATILE) == {"verdict": "DIFFERENT", "where": "cases.1.gpus (64 -> 65)"}
    assert identity.compare_docs(BEFORE, changed(jobs=40.0), VOLATILE)["verdict"] == "DIFFERENT"  # int -> float


def test_a_changed_volatile_value_passes_on_structure(identity) -> None:
    after = changed(wall_s=2.25, cases=[{"gpus": 8, "p50_ms": 12.0}, {"gpus": 64, "p50_ms": 70}])
    assert identity.compare_docs(BEFORE, after, VOLATILE) == {"verdict": "structure-only", "where": None}


def test_a_volatile_value_of_another_kind_fails(identity) -> None:
    assert identity.compare_docs(BEFORE, changed(wall_s=None), VOLATILE) == {
        "verdict": "DIFFERENT", "where": "wall_s (1.5 -> null)"}


def test_a_missing_key_or_element_fails(identity) -> None:
    after = changed()
    del after["jobs"]
    assert identity.compare_docs(BEFORE, after, VOLATILE) == {"verdict": "DIFFERENT", "where": "jobs (missing after)"}
    after = changed(cases=BEFORE["cases"][:1])
    assert identity.compare_docs(BEFORE, after, VOLATILE)["where"] == "cases (length 2 -> 1)"


def test_compare_dirs_reads_snapshots_and_their_argv(identity, tmp_path: Path) -> None:
    bench = identity.Benchmark("demo", ("demo.py", "--json"), VOLATILE)
    for side, doc, argv in (("a", BEFORE, ["demo.py", "--json"]), ("b", changed(wall_s=3.0), ["demo.py", "--json"]),
                            ("c", BEFORE, ["demo.py", "--seeds", "1", "--json"])):
        (tmp_path / side).mkdir()
        (tmp_path / side / "demo.json").write_text(json.dumps(doc))
        (tmp_path / side / "manifest.json").write_text(json.dumps({"benchmarks": {"demo": {"argv": argv,
                                                                                           "seconds": 1.0}}}))
    assert identity.compare_dirs(tmp_path / "a", tmp_path / "b", (bench,))[0]["verdict"] == "structure-only"
    assert identity.compare_dirs(tmp_path / "a", tmp_path / "c", (bench,))[0]["where"].startswith("<argv ")
    (tmp_path / "b" / "demo.json").unlink()
    assert identity.compare_dirs(tmp_path / "a", tmp_path / "b", (bench,))[0]["verdict"] == "DIFFERENT"


def test_null_passes_for_a_number_only_where_declared_nullable(identity) -> None:
    before, after = {"restore_p50_s": 0.12, "jobs": 4}, {"restore_p50_s": None, "jobs": 4}
    volatile = {"restore_p50_s": "timing"}
    assert identity.compare_docs(before, after, volatile)["verdict"] == "DIFFERENT"
    assert identity.compare_docs(before, after, volatile, frozenset({"restore_p*_s"})) == {
        "verdict": "structure-only", "where": None}
