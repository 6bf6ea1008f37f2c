"""``ecolaunch predict``: outputs for objects and arrays, the table, and whole error messages."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ecolaunch.cli.predict_cmd import predict

JOB = {"id": "a", "iter_time_s": 0.12, "sm_util_pct": 45, "mem_bw_util_pct": 30, "memory_mib": 6000, "power_w": None}
HEAVY = {"id": "b", "iter_time_s": 0.3, "sm_util_pct": 90, "mem_bw_util_pct": 60, "memory_mib": 20000,
         "power_w": 280.0, "cap_points": [{"power_cap_w": 200, "iter_time_s": 0.34, "power_w": 195}]}
SCENARIO = {"gpu": "V100-SXM2-32GB", "power_cap_w": None, "jobs": [JOB, HEAVY]}


def invoke(doc, *args: str, raw: str | None = None):
    text = raw if raw is not None else json.dumps(doc)
    return CliRunner().invoke(predict, list(args), input=text, prog_name="ecolaunch predict")


def test_one_scenario_gives_one_object() -> None:
    result = invoke(SCENARIO, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert set(out) == {"jobs", "gpu_power_w", "fits_memory"}
    assert [j["id"] for j in out["jobs"]] == ["a", "b"]
    assert all(0.0 < j["normalized_throughput"] < 1.0 for j in out["jobs"])
    assert 40.0 < out["gpu_power_w"] <= 300.0 and out["fits_memory"] is True


def test_an_array_gives_an_array_in_the_same_order() -> None:
    alone = {"gpu": "A100-SXM4-80GB", "power_cap_w": None, "jobs": [JOB]}
    capped = {"gpu": "A100-SXM4-80GB", "power_cap_w": 150, "jobs": [{**HEAVY, "memory_mib": 90000}]}
    result = invoke([alone, SCENARIO, capped], "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out) == 3
    assert [j["id"] for j in out[0]["jobs"]] == ["a"] and out[0]["jobs"][0]["normalized_throughput"] > 0.97
    assert out[2]["fits_memory"] is False and out[2]["gpu_power_w"] <= 150.0
    single = json.loads(invoke(SCENARIO, "--json").output)
    assert out[1] == single  # a scenario's answer does not depend on its neighbours in the array


def test_table_without_json() -> None:
    result = invoke(SCENARIO)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("V100-SXM2-32GB, cap max: ") and lines[0].endswith(" W, memory fits")
    assert lines[1] == "JOB  NORMALIZED THROUGHPUT"
    assert [line.split()[0] for line in lines[2:]] == ["a", "b"]


@pytest.mark.parametrize(("doc", "message"), [
    ({**SCENARIO, "jobs": [{**JOB, "iter_time_s": None}]},
     "jobs[0].iter_time_s: expected a number > 0, got null"),
    ({**SCENARIO, "jobs": [JOB, {**HEAVY, "sm_util_pct": 140}]},
     "jobs[1].sm_util_pct: expected a number >= 0 and <= 100 or null, got 140"),
    ({**SCENARIO, "jobs": [{**JOB, "memory_mib": "6GB"}]}, 'jobs[0].memory_mib: expected a number >= 0, got "6GB"'),
    ({**SCENARIO, "jobs": [{**HEAVY, "cap_points": [{"power_cap_w": 200, "iter_time_s": 0.3}]}]},
     "jobs[0].cap_points[0].power_w: expected a number > 0, got null"),
    ({**SCENARIO, "jobs": [{**JOB, "sm_util": 45}]},
     "jobs[0].sm_util: unknown field (known: id, iter_time_s, sm_util_pct, mem_bw_util_pct, memory_mib, power_w, "
     "cap_points)"),
    ({**SCENARIO, "jobs": [JOB, JOB]}, "jobs[1].id: 'a' appears twice"),
    ({**SCENARIO, "jobs": []}, "jobs: expected a non-empty list of jobs, got []"),
    ({**SCENARIO, "power_cap_w": 100}, "power_cap_w: expected a number >= 150 and <= 300 or null, got 100"),
    ({**SCENARIO, "gpu": 7}, 'gpu: expected a catalogue GPU name such as "V100-SXM2-32GB", got 7'),
    ([SCENARIO, {**SCENARIO, "jobs": [{**JOB, "id": ""}]}], '[1].jobs[0].id: expected a non-empty string, got ""'),
    ([], "input: expected a scenario object or a non-empty array of them, got []"),
    ("V100", 'input: expected an object, got "V100"'),
])
def test_bad_input_names_the_field_and_exits_1(doc, message: str) -> None:
    result = invoke(doc, "--json")
    assert result.exit_code == 1, result.output
    assert result.output == f"Error: {message}\n"


def test_unknown_gpu_lists_close_names() -> None:
    result = invoke({**SCENARIO, "gpu": "V100-SXM2"})
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: gpu: unknown GPU model 'V100-SXM2'; did you mean V100-SXM2-32GB")


def test_not_json_exits_1() -> None:
    result = invoke(None, raw='{"gpu": ')
    assert result.exit_code == 1, result.output
    assert result.output == "Error: stdin is not JSON: Expecting value at line 1 column 9\n"


def test_unknown_option_is_a_usage_error() -> None:
    result = invoke(SCENARIO, "--jsn")
    assert result.exit_code == 2, result.output
    assert result.output == ("Usage: ecolaunch predict [OPTIONS]\nTry 'ecolaunch predict --help' for help.\n\n"
                             "Error: No such option '--jsn'. Did you mean '--json'?\n")
