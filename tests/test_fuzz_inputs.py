"""Issue 17's fuzz run (slow): a few hundred generated job files, policy files, ``state.json`` documents and
``ecolaunch predict`` inputs give 0 tracebacks and 0 hangs.

Every input is made by a seeded generator (mutations of valid documents with hostile values: wrong types, huge and
non-finite numbers, deep nesting, garbage text), so a failure is reproducible from its printed seed. Each input
goes through what a user runs: ``ecolaunch status --json`` and a ``--dry-run`` launch over the state directory
holding the job files (a live launcher pid, so nothing is released as dead), ``ecolaunch policy check FILE``, and
``ecolaunch predict`` with the JSON on stdin. A clean refusal (``Error:``, exit 1 or 2, a warning and the file
skipped) is fine; an exception escaping a command, or an ``ecolaunch bug`` line, is a failure.
"""

from __future__ import annotations

import json
import os
import random
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ecolaunch.cli.agent_cmd import agent
from ecolaunch.cli.launch_cmd import launch
from ecolaunch.cli.policy_cmd import policy
from ecolaunch.cli.predict_cmd import predict
from ecolaunch.cli.status_cmd import status
from ecolaunch.state.graph import Job, job_to_dict
from ecolaunch.state.layout import init_state
from ecolaunch.state.reconcile import process_start_time
from tests.conftest import NO_POLICY, REPO

pytestmark = pytest.mark.slow

SPEC = "4xA100-SXM4-80GB"
HOST = socket.gethostname()  # a spec string's simulated host is this host
SLEEPER = REPO / "tests" / "bin" / "sleeper.py"
HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**53, 2**60, 2**63, -(2**63), 1e308, -1e308, 1e-320, 0.5, -0.0,
    "", "x", "NaN", "Infinity", "G0", "GPU-0", "../../etc/passwd", "\u0000", "é" * 300, "a" * 5000,
    [], [1], ["G0", "G0"], [None], {}, {"a": 1}, {"power_cap_w": "x"}, [[[[[]]]]],
]
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 400]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.6 or depth > 3:
        return rng.choice(HOSTILE)
    if roll < 0.8:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["a", "power_cap_w", "iter_time_s", "memory_mib", "0"]): _value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def _mutate(doc: dict[str, Any], rng: random.Random, keys: list[str], most: int = 4) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.randint(1, most)):
        roll = rng.random()
        key = rng.choice(keys)
        if roll < 0.15:
            doc.pop(key, None)
        elif roll < 0.25:
            doc[f"extra_{rng.randint(0, 9)}"] = _value(rng)
        else:
            doc[key] = _value(rng)
    return doc


def _text(doc: Any, rng: random.Random) -> str:
    """JSON text of ``doc``, sometimes with a raw non-JSON number or cut short, as a hand-edited file would be."""
    text = json.dumps(doc)
    roll = rng.random()
    if roll < 0.15:
        text = text.replace("0", rng.choice(RAW_NUMBERS), 1)
    elif roll < 0.2:
        text = text[: rng.randint(0, len(text))]
    elif roll < 0.22:
        text = "[" * 5000
    return text


def _no_traceback(result, what: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{what}: {type(result.exception).__name__}: {result.exception}\n{result.output}")
    assert "ecolaunch bug" not in result.output and "Traceback" not in result.output, f"{what}\n{result.output}"


def _env(state: Path) -> dict[str, str]:
    return {"ECOLAUNCH_STATE_DIR": str(state), "ECOLAUNCH_SIMULATE": SPEC,
            "ECOLAUNCH_POLICY": str(NO_POLICY)}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    init_state(directory, os.getgid(), uid=os.getuid())
    return directory


def test_job_files_and_state_documents_never_crash_status_or_a_launch(state: Path, capfd, monkeypatch) -> None:
    rng = random.Random(17)
    me = os.getpid()
    base = job_to_dict(Job(id="x", uid=os.getuid(), user="root", host=HOST, launcher_pid=me,
                           launcher_start_time=process_start_time(me), nproc=1, name="x", seq=0, submitted_at=0.0))
    base.update(state="running", started_at=1.0, gpus=[], power_caps_w={},
                request={"memory_mib": 1000}, profile={"iter_time_s": 0.1})
    keys = sorted(base)
    jobs = state / "jobs"
    env = _env(state)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    runner = CliRunner()
    first = runner.invoke(status, ["--json"], env=env)
    assert first.exit_code == 0, first.output
    uuids = [g["uuid"] for g in json.loads(first.output)["gpus"]]
    seen = 0
    for batch in range(30):
        for path in jobs.glob("*.json"):
            path.unlink()
        for i in range(10):
            jid = f"f{batch}x{i}"
            own = {"gpus": [uuids[i]]} if i < len(uuids) else {"state": "queued", "gpus": [], "started_at": None}
            body = _mutate(dict(base, id=jid, seq=batch * 10 + i, **own), rng, keys, most=rng.choice([1, 4]))
            doc = {"schema": "ecolaunch.job", "version": 1, "job": body}
            if rng.random() < 0.1:
                doc = _mutate(doc, rng, ["schema", "version", "job"])
            (jobs / f"{jid}.json").write_text(_text(doc, rng))
        if batch % 5 == 1:  # what the rule of trust refuses: a hard link of state.json, an oversize file, a FIFO
            if (state / "state.json").is_file():
                os.link(state / "state.json", jobs / f"link{batch}.json")
            (jobs / f"big{batch}.json").write_text(" " * (300 * 1024) + "{}")
            os.mkfifo(jobs / f"fifo{batch}.json")
        if batch % 3 == 0:  # a member's rewrite of the shared state.json
            current = state / "state.json"
            if current.exists():
                try:
                    doc = json.loads(current.read_text())
                except ValueError:
                    doc = {}
                if isinstance(doc, dict) and doc:
                    current.write_text(_text(_mutate(doc, rng, sorted(doc)), rng))
        result = runner.invoke(status, ["--json"], env=env)
        _no_traceback(result, f"status, batch {batch}")
        if result.exit_code == 0:
            shown = json.loads(result.output)
            seen += len(shown["jobs"]) + len(shown["queue"])
        passed = runner.invoke(agent, ["--once"], env=env)  # the cap agent's pass over the same files
        _no_traceback(passed, f"agent --once, batch {batch}")
        capfd.readouterr()
        code = launch(["--dry-run", "--json", "--wait-timeout", "0", "--nproc-per-node", "1", str(SLEEPER), "0"],
                      os.environ)
        out = capfd.readouterr()
        assert code in (0, 1, 75), f"launch, batch {batch}: exit {code}\n{out.err}"
        assert "ecolaunch bug" not in out.err and "Traceback" not in out.err, f"launch, batch {batch}\n{out.err}"
    assert seen > 0, "no generated job passed validation: the fuzz exercised only the refusals"


POLICY_LINES = [
    "[slowdown]", "max_pct = {v}", "default_pct = {v}", "[energy]", "eta = {v}", "[colocation]", "enabled = {v}",
    "max_jobs_per_gpu = {v}", "[power]", "max_total_w = {v}", "[caps.A100]", "min_w = {v}", "max_w = {v}",
    "[users.alice]", "max_gpus = {v}", "[reserve]", "gpus = {v}", "[profiling]", "max_caps = {v}", "[state]",
    "group = {v}", "dir = {v}", "[[x]]", "= =", "[", "\u0000",
]
TOML_VALUES = ["1", "0", "-5", "1e400", "nan", "inf", "true", '"x"', "[1, 2]", "{a = 1}", "2.5", '"/tmp"', "",
               "9" * 40, "[[[[1]]]]"]


def test_policy_files_never_crash_policy_check(tmp_path: Path) -> None:
    rng = random.Random(18)
    runner = CliRunner()
    for i in range(200):
        lines = [rng.choice(POLICY_LINES).format(v=rng.choice(TOML_VALUES)) for _ in range(rng.randint(1, 12))]
        path = tmp_path / f"policy{i}.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = runner.invoke(policy, ["check", str(path)])
        _no_traceback(result, f"policy check, file {i}:\n" + path.read_text())
        assert result.exit_code in (0, 1, 2), result.output


def test_predict_inputs_never_crash_predict() -> None:
    rng = random.Random(19)
    runner = CliRunner()
    job = {"id": "a", "iter_time_s": 0.12, "sm_util_pct": 45, "mem_bw_util_pct": 30, "memory_mib": 6000,
           "power_w": 250, "cap_points": [{"power_cap_w": 300, "iter_time_s": 0.13, "power_w": 280}]}
    scenario = {"gpu": "V100-SXM2-32GB", "power_cap_w": None, "jobs": [job, dict(job, id="b")]}
    plausible = {"iter_time_s": lambda: rng.uniform(0.001, 5), "sm_util_pct": lambda: rng.uniform(0, 100),
                 "mem_bw_util_pct": lambda: rng.uniform(0, 100), "memory_mib": lambda: rng.uniform(1, 90000),
                 "power_w": lambda: rng.uniform(20, 800)}
    codes = set()
    for i in range(200):
        roll = rng.random()
        if roll < 0.3:  # every field plausible, some at the edges of their ranges
            doc: Any = dict(scenario, power_cap_w=rng.choice([None, 100, 250, 300, 1000]),
                            jobs=[dict(job, id=str(k), **{f: draw() for f, draw in plausible.items()})
                                  for k in range(rng.randint(1, 5))])
        elif roll < 0.6:
            doc = dict(scenario, jobs=[_mutate(job, rng, sorted(job), most=1) for _ in range(rng.randint(0, 3))])
        else:
            doc = _mutate(scenario, rng, ["gpu", "power_cap_w", "jobs"])
        if rng.random() < 0.2:
            doc = [doc, scenario]
        result = runner.invoke(predict, [], input=_text(doc, rng) if roll >= 0.3 else json.dumps(doc))
        _no_traceback(result, f"predict, input {i}")
        assert result.exit_code in (0, 1, 2), result.output
        codes.add(result.exit_code)
    assert codes == {0, 2}, codes  # both answers and refusals (usage errors, issue 41) were exercised
