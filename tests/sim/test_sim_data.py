"""The vendored measured data (ecolaunch/sim/data) and the job profile record."""

from __future__ import annotations

import ast
import fnmatch
import json
import tomllib
from pathlib import Path

import pytest

from ecolaunch.errors import ConfigError
from ecolaunch.sim import models

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "zeus-nsdi23").is_dir(), reason="the repository's shared/data is not present")
@pytest.mark.parametrize("gpu", sorted(models.ZEUS_GPUS))
def test_vendored_zeus_files_are_unchanged_copies(gpu: str) -> None:
    name = f"summary_power_{gpu}.csv"
    assert (models.DATA_DIR / name).read_bytes() == (SHARED / "zeus-nsdi23" / name).read_bytes()


@pytest.mark.skipif(not (SHARED / "gavel").is_dir(), reason="the repository's shared/data is not present")
def test_vendored_gavel_subset_matches_the_json() -> None:
    doc = json.loads((SHARED / "gavel" / "simulation_throughputs.json").read_text())
    solo = models.gavel_solo()
    for gpu in models.GAVEL_GPUS:
        expected = {}
        for key, entry in doc[gpu].items():
            job, sf = ast.literal_eval(key)
            if sf != 1:
                continue
            assert solo[(gpu, job)] == entry["null"]  # bit-identical
            for k2, (a, b) in ((k, v) for k, v in entry.items() if k != "null"):
                other, sf2 = ast.literal_eval(k2)
                if sf2 == 1 and a > 0 and b > 0:
                    expected[frozenset((job, other))] = {(job, a), (other, b)}
        got = {frozenset((p.job_a, p.job_b)): {(p.job_a, p.shared_a), (p.job_b, p.shared_b)}
               for p in models.gavel_pairs(gpu)}
        assert got == expected


def test_every_vendored_data_file_is_package_data() -> None:
    """A clean install reads ecolaunch/sim/data: every file there must match a package-data glob of pyproject."""
    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ecolaunch"]
    files = [p.relative_to(root / "ecolaunch").as_posix() for p in models.DATA_DIR.rglob("*") if p.is_file()]
    assert "sim/data/profile_windows/V100+resnet18+gpu0.csv" in files
    assert [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)] == []


def test_eaco_tables_are_vendored() -> None:
    exclusive, colocated = models.eaco_tables()
    assert [r["job_id"] for r in exclusive] == ["J1", "J2", "J3", "J4"]
    assert len(colocated) == 6


def test_unknown_zeus_gpu_raises() -> None:
    with pytest.raises(ConfigError):
        models.zeus_rows("h100")
