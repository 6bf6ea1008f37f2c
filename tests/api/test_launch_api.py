"""``ecolaunch.launch()`` and ``ecolaunch.measure()``: real driver processes calling the API on simulated GPUs, real
torch elastic workers on CPU (gloo), the same state directory the command line uses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ecolaunch
from tests.conftest import BIN, REPO, clean_env, ecolaunch_cmd

ENV_DUMP = str(BIN / "env_dump.py")
FAIL = str(BIN / "fail.py")


def drive(code: str, env: dict[str, str], timeout: float = 120) -> tuple[dict, str]:
    """Run ``code`` (a script that calls the API and prints one JSON line last) in a fresh interpreter; returns the
    JSON and the script's stderr (the launch's own lines)."""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def jobs_left(env: dict[str, str]) -> list:
    out = subprocess.run(ecolaunch_cmd("status", "--json"), env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["jobs"]


LAUNCH_FUNCTION = """
import json, ecolaunch
from tests.api import workers
if __name__ == "__main__":
    result = ecolaunch.launch(workers.ranked, 10, 30, nproc=2)
    print(json.dumps({"values": {str(r): v for r, v in result.items()}, "energy_j": result.energy_j,
                      "gpu_energy_j": result.gpu_energy_j, "time_s": result.time_s, "job_id": result.job_id,
                      "iterations": result.summary.iterations}))
"""


def test_a_function_runs_on_two_workers_and_each_rank_returns_its_value(sim_env) -> None:
    env = sim_env("4xA100-SXM4-80GB")
    doc, err = drive(LAUNCH_FUNCTION, env)
    values = doc["values"]
    assert sorted(values) == ["0", "1"]
    assert [values[r]["value"] for r in ("0", "1")] == [10, 11]  # each rank's own return value
    assert all(v["rank_sum"] == 1.0 and v["world"] == 2 for v in values.values())  # one gloo group of two
    # placed as the command line places: the decision line, two GPUs, the job's summary
    assert f"job {doc['job_id']} runs on GPU 0,1 (NVIDIA A100-SXM4-80GB)" in err
    assert f"job {doc['job_id']} used" in err
    assert all(v["gpus"] == "0,1" for v in values.values())
    # the hooks of a function worker stamp as its own rank: rank 0's 30 steps, not both ranks' 60 in one file
    assert doc["iterations"] == 30
    # the job's energy and time: simulated idle A100s draw 50 W each
    assert doc["time_s"] > 0.3 and doc["energy_j"] == pytest.approx(2 * 50.0 * doc["time_s"], rel=0.2)
    # measure() inside a worker reads the job's two GPUs, by index, over the block's 0.3 s
    for v in values.values():
        assert v["measured_gpus"] == [0, 1] and sorted(v["gpu_energy_j"]) == ["0", "1"]
        assert v["time_s"] >= 0.3 and v["energy_j"] == pytest.approx(2 * 50.0 * v["time_s"], rel=0.05)
        assert v["energy_j"] == pytest.approx(sum(v["gpu_energy_j"].values()))
    assert jobs_left(env) == []


LAUNCH_SCRIPT = """
import json, sys, ecolaunch
result = ecolaunch.launch(sys.argv[1], sys.argv[2], 0.2, nproc=2, policy="exclusive")
print(json.dumps({"values": dict(result), "energy_j": result.energy_j, "time_s": result.time_s}))
"""


def test_a_script_runs_with_its_arguments_on_its_gpus(sim_env, tmp_path: Path) -> None:
    env = sim_env("4xA100-SXM4-80GB")
    doc, err = drive(LAUNCH_SCRIPT.replace("sys.argv[1], sys.argv[2]", f"{ENV_DUMP!r}, {str(tmp_path)!r}"), env)
    assert doc["values"] == {}  # a script returns nothing
    assert doc["energy_j"] > 0 and doc["time_s"] >= 0.2
    assert "policy exclusive" in err
    seen = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [s["argv"] for s in seen] == [[str(tmp_path), "0.2"]] * 2
    assert all(s["CUDA_VISIBLE_DEVICES"] == "0,1" and s["ECOLAUNCH_JOB_ID"] for s in seen)
    assert jobs_left(env) == []


LAUNCH_FAILING = """
import json, sys, ecolaunch
from tests.api import workers
if __name__ == "__main__":
    caught = []
    for target, args in ((workers.fail_on, (1,)), (sys.argv[1], ("0", "7", "0.5"))):
        try:
            ecolaunch.launch(target, *args, nproc=2)
        except ecolaunch.WorkerFailed as e:
            caught.append({"rank": e.rank, "exit_code": e.exit_code, "failure": e.failure, "text": e.render()})
    print(json.dumps(caught))
"""


def test_a_failing_worker_raises_with_its_rank_and_exit_code_and_frees_the_gpus(sim_env) -> None:
    env = sim_env("4xA100-SXM4-80GB")
    caught, err = drive(LAUNCH_FAILING.replace("sys.argv[1]", repr(FAIL)), env)
    raised, exited = caught
    assert (raised["rank"], raised["exit_code"]) == (1, 1)
    assert raised["failure"] == "ValueError: rank 1 could not load its shard"
    assert raised["text"].startswith("Error: worker rank 1 failed with exit code 1: ValueError: rank 1 could not")
    assert "\nHINT: " in raised["text"]
    assert "could not load its shard" in err  # the worker's traceback, in torch's failure report
    assert (exited["rank"], exited["exit_code"], exited["failure"]) == (0, 7, None)  # the script's own exit code
    assert jobs_left(env) == []


@pytest.mark.parametrize(("entrypoint", "options", "message"), [
    (ENV_DUMP, {"nproc": 0}, "nproc must be a worker count >= 1"),
    (ENV_DUMP, {"nproc": "two"}, "got 'two'"),
    (ENV_DUMP, {"nproc": True}, "got True"),
    (lambda: 1, {}, "cannot be sent to the workers"),
    (42, {}, "entrypoint must be a function, a script's path"),
    (print, {"module": True}, "module=True names a module"),
    (ENV_DUMP, {"policy": "magic"}, "must be a placement policy, got 'magic'"),
    (ENV_DUMP, {"explain": "yes"}, "explain must be True or False"),
    (ENV_DUMP, {"share_if_sooner": "yes"}, "share_if_sooner must be True, False or None"),
    ("no-such-script.py", {}, "training script 'no-such-script.py' does not exist"),
])
def test_a_bad_argument_raises_value_error_before_anything_is_booked(sim_env, state_dir, monkeypatch, entrypoint,
                                                                     options, message) -> None:
    for key, value in sim_env().items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=message) as caught:
        ecolaunch.launch(entrypoint, **options)
    assert "HINT: " in str(caught.value) or "(check the path" in str(caught.value) or "(use one of" in str(caught.value)
    assert not (state_dir / "jobs").exists() or not list((state_dir / "jobs").iterdir())


MEASURE = """
import json, time, ecolaunch
with ecolaunch.measure("eval") as m:
    time.sleep(0.25)
print(json.dumps({"name": m.name, "time_s": m.time_s, "energy_j": m.energy_j, "gpus": list(m.gpus),
                  "gpu_energy_j": m.gpu_energy_j, "why": m.why_no_energy}))
"""


def test_measure_outside_a_launch_reads_the_visible_simulated_gpus(sim_env) -> None:
    doc, _ = drive(MEASURE, sim_env("2xRTX4090+2xA6000"))
    assert doc["name"] == "eval" and doc["gpus"] == [0, 1, 2, 3] and doc["why"] is None
    assert doc["time_s"] >= 0.25
    assert doc["energy_j"] == pytest.approx(sum(doc["gpu_energy_j"].values())) and doc["energy_j"] > 0
    one, _ = drive(MEASURE, sim_env("2xRTX4090+2xA6000", CUDA_VISIBLE_DEVICES="2"))
    assert one["gpus"] == [2] and list(one["gpu_energy_j"]) == ["2"]
    # one idle A6000 over the block's time: its simulated idle power, and a quarter of what all four used
    assert one["energy_j"] < doc["energy_j"] / 2


def test_measure_without_gpus_times_the_block_and_says_why_there_is_no_energy(sim_env) -> None:
    doc, _ = drive(MEASURE, sim_env("2xA100-SXM4-80GB", CUDA_VISIBLE_DEVICES=""))
    assert doc["time_s"] >= 0.25 and doc["energy_j"] is None and doc["gpus"] == []
    assert doc["why"] == "no GPUs to measure: CUDA_VISIBLE_DEVICES lists none"
    if not Path("/dev/nvidiactl").exists():  # no driver here: without a simulation there is nothing to read
        bare, _ = drive(MEASURE, clean_env())
        assert bare["energy_j"] is None and bare["why"].startswith("no GPUs to measure: ")


def test_ecolaunch_launch_stays_the_function_once_the_launcher_is_loaded() -> None:
    import ecolaunch.launch.pipeline  # noqa: F401 - the subpackage of the same name

    assert callable(ecolaunch.launch) and ecolaunch.launch.__module__ == "ecolaunch"


LAUNCH_SLEEPER = """
import json, ecolaunch
from tests.api import workers
if __name__ == "__main__":
    try:
        ecolaunch.launch(workers.sleep, 60, nproc=2)
    except KeyboardInterrupt:
        print(json.dumps("KeyboardInterrupt"))
"""


def test_ctrl_c_stops_the_workers_frees_the_gpus_and_raises_keyboard_interrupt(sim_env) -> None:
    env = sim_env("4xA100-SXM4-80GB")
    driver = subprocess.Popen([sys.executable, "-c", LAUNCH_SLEEPER], env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(j["state"] == "running" for j in jobs_left(env)):
            assert time.monotonic() < deadline and driver.poll() is None, "the job never ran"
            time.sleep(0.2)
        time.sleep(1.0)  # the workers are up: torch's run() holds the signal handlers now
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
    assert driver.returncode == 0 and json.loads(out.strip().splitlines()[-1]) == "KeyboardInterrupt", out + err
    assert jobs_left(env) == []


LAUNCH_PLAIN = """
import json, ecolaunch
from tests.api import workers
if __name__ == "__main__":
    result = ecolaunch.launch(workers.fail_on, 5, nproc=2)
    print(json.dumps({"values": {str(r): v for r, v in result.items()}, "energy_j": result.energy_j,
                      "job_id": result.job_id, "time_s": result.time_s}))
"""


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="an NVIDIA driver is present: the launch is placed")
def test_without_gpus_a_function_runs_like_torchrun_and_has_no_energy() -> None:
    doc, err = drive(LAUNCH_PLAIN, clean_env())
    assert doc["values"] == {"0": "done", "1": "done"} and doc["energy_j"] is None and doc["job_id"] is None
    assert doc["time_s"] >= 2.0
    assert "launching like torchrun without GPU placement" in err


MAIN_SCRIPT = """
import json, ecolaunch

def square(x):
    return x * x

if __name__ == "__main__":
    result = ecolaunch.launch(square, 3, nproc=2)
    print(json.dumps({str(r): v for r, v in result.items()}))
"""


def test_a_function_of_the_main_script_runs_and_one_of_python_c_is_refused(sim_env, tmp_path: Path) -> None:
    env = sim_env("2xA100-SXM4-80GB")
    script = tmp_path / "train_main.py"
    script.write_text(MAIN_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"0": 9, "1": 9}
    history = subprocess.run(ecolaunch_cmd("history", "--json"), env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert [r["name"] for r in json.loads(history.stdout)] == ["train_main.py:square"], history.stderr
    refused = subprocess.run([sys.executable, "-c", MAIN_SCRIPT.replace('if __name__ == "__main__":', "if True:")],
                             env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "ValueError: the function square belongs to an interactive session" in refused.stderr
    assert "HINT: define it in a module or a script file" in refused.stderr


NAMED = """
import json, ecolaunch
stepper = STEPPER
first = ecolaunch.launch(stepper, "60", "0.01", name="nightly", job_key="k1")
again = ecolaunch.launch(stepper, "60", "0.01", name="nightly", job_key="k1", fresh_profile=True)
print(json.dumps([first.job_id, again.job_id]))
"""


def test_name_job_key_and_fresh_profile_are_the_command_lines(sim_env) -> None:
    """``name``, ``job_key`` and ``fresh_profile`` do what ``--name``, ``--job-key`` and ``--fresh-profile`` do: the
    job is named, matched by its key, and the second launch measures its profile afresh."""
    env = sim_env("2xA100-SXM4-80GB")
    (first, again), _ = drive(NAMED.replace("STEPPER", repr(str(BIN / "stepper.py"))), env, timeout=240)
    history = subprocess.run(ecolaunch_cmd("history", "--json"), env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    records = {r["job_id"]: r for r in json.loads(history.stdout)}
    assert {records[first]["name"], records[again]["name"]} == {"nightly"}
    assert records[first]["history_match"].startswith("job key 'k1'"), records[first]
    assert records[again]["profile_action"] == "inline" and records[again]["profile_from"] is None, records[again]
    assert records[again]["history_match"].endswith("; --fresh-profile: its stored profile not used")
    with pytest.raises(ValueError, match="fresh_profile must be True or False"):
        ecolaunch.launch(str(BIN / "stepper.py"), fresh_profile="yes")
