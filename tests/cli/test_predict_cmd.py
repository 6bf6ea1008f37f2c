"""``ecolaunch predict``: outputs for objects and arrays, the table, and whole error messages."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ecolaunch.cli.predict_cmd import INPUT_HINT, predict

USAGE = "Usage: ecolaunch predict [OPTIONS]\nTry 'ecolaunch predict --help' for help.\n\n"
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
    # issue 41: "cap max: 383.0 W" read as a cap of 383 W; the cap and the predicted power are apart
    assert lines[0].startswith("V100-SXM2-32GB uncapped (the board's maximum, 300 W): predicted GPU power ")
    assert lines[0].endswith(" W, memory fits")
    capped = invoke({**SCENARIO, "power_cap_w": 200}).output.splitlines()[0]
    assert capped.startswith("V100-SXM2-32GB capped at 200 W: predicted GPU power ") and capped.endswith(" W, memory fits")
    assert lines[1] == "JOB  NORMALIZED THROUGHPUT ± SD"
    assert all(" ± " in line for line in lines[2:])
    assert [line.split()[0] for line in lines[2:]] == ["a", "b"]


@pytest.mark.parametrize(("doc", "message"), [
    ({**SCENARIO, "jobs": [{**JOB, "iter_time_s": None}]},
     "jobs[0].iter_time_s: missing (its uncapped iteration time in seconds; every job needs it)"),
    ({**SCENARIO, "jobs": [{**JOB, "iter_time_s": -1}]}, "jobs[0]: iter_time_s = -1: expected `float` > 0.0"),
    ({**SCENARIO, "jobs": [{**JOB, "iter_time_s": True}]},
     "jobs[0]: iter_time_s = true: expected `float | null`, got `bool`"),
    ({**SCENARIO, "jobs": [JOB, {**HEAVY, "sm_util_pct": 140}]},
     "jobs[1]: sm_util_pct = 140: expected `float` <= 100.0"),
    ({**SCENARIO, "jobs": [{**JOB, "memory_mib": "6GB"}]},
     'jobs[0]: memory_mib = "6GB": expected `int | null`, got `str`'),
    ({**SCENARIO, "jobs": [{**HEAVY, "cap_points": [{"power_cap_w": 200, "iter_time_s": 0.3}]}]},
     "jobs[0].cap_points[0].power_w: missing (a cap point is power_cap_w, iter_time_s, power_w)"),
    ({**SCENARIO, "jobs": [{**HEAVY, "cap_points": [{"power_cap_w": 200, "iter_time_s": 0.3, "power_w": None}]}]},
     "jobs[0]: cap_points[0].power_w = null: expected `float`, got `null`"),
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
def test_bad_input_names_the_field_and_is_a_usage_error(doc, message: str) -> None:
    result = invoke(doc, "--json")
    assert result.exit_code == 2, result.output  # issue 41: bad input is a usage error, as a bad option (was 1)
    assert result.output == f"{USAGE}Error: {message}\nHINT: {INPUT_HINT}\n"


def test_unknown_gpu_lists_close_names() -> None:
    result = invoke({**SCENARIO, "gpu": "V100-SXM2"})
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"{USAGE}Error: gpu: unknown GPU model 'V100-SXM2'; did you mean V100-SXM2-32GB")


def test_not_json_is_a_usage_error() -> None:
    result = invoke(None, raw='{"gpu": ')
    assert result.exit_code == 2, result.output
    assert result.output == f"{USAGE}Error: stdin is not JSON: Expecting value at line 1 column 9\nHINT: {INPUT_HINT}\n"


def test_unknown_option_is_a_usage_error() -> None:
    result = invoke(SCENARIO, "--jsn")
    assert result.exit_code == 2, result.output
    assert result.output == ("Usage: ecolaunch predict [OPTIONS]\nTry 'ecolaunch predict --help' for help.\n\n"
                             "Error: No such option '--jsn'. Did you mean '--json'?\n")


MEASURED = {"id": "m", "iter_time_s": 0.2, "sm_util_pct": 90, "mem_bw_util_pct": 45, "memory_mib": 8000,
            "power_w": 330.0, "cap_points": [{"power_cap_w": 400, "iter_time_s": 0.2, "power_w": 330},
                                             {"power_cap_w": 275, "iter_time_s": 0.212, "power_w": 262},
                                             {"power_cap_w": 225, "iter_time_s": 0.26, "power_w": 218}]}


@pytest.mark.parametrize("job", [MEASURED, HEAVY], ids=["profiled", "one-cap-measured"])
def test_alone_at_a_measured_cap_the_answer_is_the_measurement(job) -> None:
    """Time (uncapped time / normalized throughput) within 1 %, power within 2 % (the review found 8-13 % off)."""
    gpu = "A100-SXM4-80GB" if job is MEASURED else "V100-SXM2-32GB"
    points = job["cap_points"]
    result = invoke([{"gpu": gpu, "power_cap_w": p["power_cap_w"], "jobs": [job]} for p in points], "--json")
    assert result.exit_code == 0, result.output
    for p, res in zip(points, json.loads(result.output)):
        (answer,) = res["jobs"]
        assert job["iter_time_s"] / answer["normalized_throughput"] == pytest.approx(p["iter_time_s"], rel=0.01)
        assert res["gpu_power_w"] == pytest.approx(p["power_w"], rel=0.02)
        assert answer["throughput_sd"] == 0.0


def test_between_measured_caps_the_answer_moves_monotonically_between_the_measurements() -> None:
    caps = list(range(225, 401, 5))
    result = invoke([{"gpu": "A100-SXM4-80GB", "power_cap_w": c, "jobs": [MEASURED]} for c in caps], "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    speed = [r["jobs"][0]["normalized_throughput"] for r in out]
    power = [r["gpu_power_w"] for r in out]
    assert all(b >= a for a, b in zip(speed, speed[1:])) and all(b >= a for a, b in zip(power, power[1:]))
    at = dict(zip(caps, speed))
    assert all(0.2 / 0.26 - 1e-4 <= at[c] <= 0.2 / 0.212 + 1e-4 for c in range(230, 275, 5))
    assert all(0.2 / 0.212 - 1e-4 <= at[c] <= 1.0 for c in range(280, 400, 5))


def test_sharing_slows_a_measured_job_below_its_speed_alone_and_says_how_unsure() -> None:
    other = {**JOB, "id": "o", "sm_util_pct": 80}
    result = invoke([{"gpu": "A100-SXM4-80GB", "power_cap_w": 275, "jobs": [MEASURED]},
                     {"gpu": "A100-SXM4-80GB", "power_cap_w": 275, "jobs": [MEASURED, other]}], "--json")
    alone, shared = (r["jobs"][0] for r in json.loads(result.output))
    assert shared["normalized_throughput"] < alone["normalized_throughput"] == round(0.2 / 0.212, 4)
    assert shared["throughput_sd"] > 0.0 == alone["throughput_sd"]


def test_a_measurement_above_the_cap_stays_the_measurement_and_a_prediction_never_exceeds_it() -> None:
    """The H200 drew 714.6 W at its 700 W limit (../shared/data/h200-2026-11-30); sharing is a prediction."""
    mm = {"id": "mm", "iter_time_s": 0.164389, "sm_util_pct": 99.8, "mem_bw_util_pct": 24.5, "memory_mib": 1000,
          "power_w": 714.58, "cap_points": [{"power_cap_w": 700, "iter_time_s": 0.164389, "power_w": 714.58},
                                            {"power_cap_w": 550, "iter_time_s": 0.186794, "power_w": 556.33}]}
    result = invoke([{"gpu": "H200-SXM-141GB", "power_cap_w": 700, "jobs": [mm]},
                     {"gpu": "H200-SXM-141GB", "power_cap_w": 550, "jobs": [mm, {**mm, "id": "mm2"}]}], "--json")
    alone, shared = json.loads(result.output)
    assert alone["gpu_power_w"] == 714.6 and alone["jobs"][0]["normalized_throughput"] == 1.0
    assert shared["gpu_power_w"] <= 550.0


# --- the real command line: what a user typing a scenario by hand meets ------------------------------------------
@pytest.mark.parametrize(("doc", "message"), [
    ({"jobs": [JOB]}, 'gpu: missing (a catalogue GPU name such as "V100-SXM2-32GB")'),
    ({"gpu": "A40"}, "jobs: missing (a non-empty list of jobs)"),
    ({"gpu": "A40", "jobs": [{"iter_time_s": 0.1, "memory_mib": 100}]}, "jobs[0].id: missing (a non-empty string)"),
    ({"gpu": None, "jobs": [JOB]}, 'gpu: expected a catalogue GPU name such as "V100-SXM2-32GB", got null'),
], ids=["no-gpu", "no-jobs", "no-id", "null-gpu"])
def test_a_missing_key_reads_missing_and_every_error_has_the_hint(doc, message: str, tmp_path) -> None:
    import subprocess

    from tests.conftest import REPO, clean_env, ecolaunch_cmd

    out = subprocess.run(ecolaunch_cmd("predict"), input=json.dumps(doc), env=clean_env(
        ECOLAUNCH_STATE_DIR=str(tmp_path)), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    assert out.stderr == f"{USAGE}Error: {message}\nHINT: {INPUT_HINT}\n"
    assert "predict --help" in INPUT_HINT and '"memory_mib": 6000' in INPUT_HINT
    help_text = subprocess.run(ecolaunch_cmd("predict", "--help"), env=clean_env(), cwd=REPO, capture_output=True,
                               text=True, timeout=120).stdout
    assert all(field in help_text for field in ("power_cap_w", "iter_time_s", "memory_mib", "sm_util_pct",
                                                "mem_bw_util_pct", "power_w", "cap_points"))
