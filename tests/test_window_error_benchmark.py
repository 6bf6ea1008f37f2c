"""benchmarks/window_error.py, the size of the measured world's repeating window error, on the Zeus window the
package ships (``ecolaunch/sim/data/profile_windows``): each job's spread of window times at caps that cannot bind it,
and the repeating part as the median less the world's independent part, in quadrature."""

from __future__ import annotations

import csv
import json
import math
import statistics
import subprocess
import sys

import pytest

from ecolaunch.sim.measured import Noise
from tests.conftest import REPO, clean_env

DATA = REPO / "ecolaunch" / "sim" / "data"


@pytest.mark.slow  # a benchmark smoke test: the benchmark's figures, end to end
def test_the_repeating_part_is_what_the_independent_part_leaves_of_the_windows_spread() -> None:
    ran = subprocess.run([sys.executable, str(REPO / "benchmarks" / "window_error.py"), "--data", str(DATA), "--json"],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    # by hand from the CSV: windows whose limit is at least 1.1 x their mean per-GPU power
    rows = list(csv.DictReader((DATA / "profile_windows" / "V100+resnet18+gpu0.csv").open()))
    loose = [float(r["elapsed_time"]) for r in rows
             if float(r["window_name"].rsplit("_", 1)[1]) >= 1.1 * float(r["gpu0_energy"]) / float(r["elapsed_time"])]
    spread = 100 * statistics.stdev(loose) / statistics.fmean(loose)
    assert [j["windows"] for j in doc["jobs"]] == [len(loose)] and len(loose) >= 2
    assert doc["median_time_spread_pct"] == pytest.approx(spread, abs=0.01)
    assert doc["independent_pct"] == 100 * Noise().time
    assert doc["persistent_pct"] == pytest.approx(math.sqrt(spread ** 2 - doc["independent_pct"] ** 2), abs=0.01)


def test_a_ratio_below_one_is_a_usage_error() -> None:
    ran = subprocess.run([sys.executable, str(REPO / "benchmarks" / "window_error.py"), "--ratio", "0.5"],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and "--ratio must be a number >= 1, got 0.5" in ran.stderr
