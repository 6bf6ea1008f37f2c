"""A queue users can steer (issue 23, item 9), through the real CLI on a simulated 2-GPU machine: ``--name``, why a
job waits (in ``status``, in the waiting launcher's lines and in ``--dry-run --explain``), ``ecolaunch cancel`` of
queued and running jobs by name or id and what it refuses (another user's job: a real second uid), and a request the
power budget can never fit."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from ecolaunch.state.layout import init_state
from tests.cli.test_launch import SLEEPER, run, status, wait_for
from tests.conftest import REPO, clean_env, ecolaunch_cmd
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir, start_as

SPEC = "2xA100-SXM4-80GB"


def start(env: dict[str, str], out_dir: Path, nproc: int, seconds: float, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(ecolaunch_cmd(*extra, "--nproc-per-node", str(nproc), SLEEPER, str(out_dir), str(seconds)),
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def running(env: dict[str, str], name: str) -> dict:
    return wait_for(lambda: next((j for j in status(env)["jobs"] if j["name"] == name), None), what=f"job {name}")


def test_status_and_the_queue_lines_say_why_a_job_waits_and_cancel_stops_it(sim_env, tmp_path: Path) -> None:
    env = sim_env(SPEC)
    hog = start(env, tmp_path, 2, 120, "--name", "hog")
    waiter = None
    try:
        hog_id = running(env, "hog")["id"]
        busy = f"0 of the 1 GPU(s) the job needs are free; GPU 0,1 run job {hog_id} (root: hog)"
        # --explain says that, and why, a launch now would wait; --json carries it too
        dry = run(["--dry-run", "--explain", "--nproc-per-node", "1", SLEEPER, str(tmp_path), "1"], env)
        assert dry.returncode == 0, dry.stderr
        # the hog's length is unknown (no history): so is the start
        assert dry.stdout.splitlines() == ["ecolaunch: no GPUs fit now: the job would wait in the queue (start "
                                           "unknown, at position 1 in the queue)",
                                           f"ecolaunch:   would wait at position 1 in the queue: Resources ({busy})"]
        doc = json.loads(run(["--dry-run", "--json", "--nproc-per-node", "1", SLEEPER, str(tmp_path), "1"], env).stdout)
        assert doc["placed"] is False and doc["waiting"] == {"position": 1, "reason": "Resources", "detail": busy,
                                                             "starts_in_s": None}
        now = run(["--wait-timeout", "0", "--nproc-per-node", "1", SLEEPER, str(tmp_path), "1"], env)
        assert now.returncode == 75 and f"(queue position 1): Resources ({busy})" in now.stderr.splitlines()[0]

        waiter = start(env, tmp_path, 1, 1, "--name", "second")
        row = wait_for(lambda: next((q for q in status(env)["queue"] if q["reason"]), None), what="a judged queue row")
        assert {k: row[k] for k in ("position", "name", "user", "nproc", "reason", "reason_detail")} == {
            "position": 1, "name": "second", "user": "root", "nproc": 1, "reason": "Resources", "reason_detail": busy}
        shown = run(["status"], env).stdout
        assert re.search(rf"^  1\. {row['id']} root: second, 1 GPU\(s\), waiting \d+ s, start unknown: Resources \({re.escape(busy)}\)$",
                         shown, re.M), shown
        # a job behind it waits for Priority, naming the head and what the head waits for
        behind = run(["--dry-run", "--explain", "--nproc-per-node", "1", SLEEPER, str(tmp_path), "1"], env)
        assert behind.stdout.splitlines()[1] == (f"ecolaunch:   would wait at position 2 in the queue: Priority (1 job(s) "
                                                 f"ahead in this host's queue; the first is {row['id']} (root: second), "
                                                 "which waits for Resources)")

        cancelled = run(["cancel", "second"], env)  # by name
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout == (f"cancelled job {row['id']} (root: second), queued at position 1: its launcher "
                                    f"(pid {row['launcher_pid']}) left the queue\n")
        assert waiter.wait(30) == 143
        lines = waiter.stderr.read().splitlines()
        assert lines[0] == f"ecolaunch: job {row['id']} (second) waiting: position 1 in the queue, 0 s so far: Resources ({busy})"
        assert lines[-1] == (f"ecolaunch: job {row['id']} (second) left the queue without running: stopped by SIGTERM "
                             "(ecolaunch cancel sends it); exit 143")
        assert all(p.read_text() == "0,1" for p in tmp_path.glob("started-*"))  # only the hog's workers ever ran

        stopped = run(["cancel", hog_id], env)  # by id, running: stopped as SIGTERM stops it, its GPUs released
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.startswith(f"cancelled job {hog_id} (root: hog), running on GPU 0,1: its launcher (pid ")
        assert stopped.stdout.endswith("stopped its workers and released its GPUs\n")
        assert hog.wait(30) == 143
        after = status(env)
        assert after["jobs"] == [] and after["queue"] == []
        assert json.loads(run(["history", "--json"], env).stdout)[0]["name"] == "hog"  # --name in the history too
    finally:
        for proc in (hog, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)


def test_cancel_refuses_what_it_cannot_cancel_and_a_shared_name_needs_all(sim_env, tmp_path: Path) -> None:
    env = sim_env(SPEC)
    missing = run(["cancel", "nosuch"], env)
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [f"Error: no job 'nosuch' on host {status(env)['host']}: no queued or running "
                                           "job has that id or name",
                                           "HINT: see 'ecolaunch status' for the jobs and their ids"]
    assert run(["cancel"], env).returncode == 2  # usage: no JOB
    bad = run(["--name", "two words", "--nproc-per-node", "1", SLEEPER, str(tmp_path), "1"], env)
    assert bad.returncode == 2 and "--name (or ECOLAUNCH_JOB_NAME) must be 1 to 64 letters" in bad.stderr

    env = sim_env("1xA100-SXM4-80GB")  # one twin runs, the other waits for its GPU
    twins = [start(env, tmp_path, 1, 120, "--name", "twin")]
    try:
        running(env, "twin")
        twins.append(start(env, tmp_path, 1, 120, "--name", "twin"))
        doc = wait_for(lambda: (d := status(env))["queue"] and d, what="the second twin queued")
        ids = sorted(j["id"] for j in doc["jobs"] + doc["queue"])
        shared = run(["cancel", "twin"], env)
        assert shared.returncode == 2, shared.stderr
        assert "2 jobs are named 'twin': " in shared.stderr and all(i in shared.stderr for i in ids)
        assert "give one id, or --all to cancel them all" in shared.stderr
        assert [len(status(env)[k]) for k in ("jobs", "queue")] == [1, 1]  # nothing was cancelled
        every = run(["cancel", "--all", "twin"], env)
        assert every.returncode == 0, every.stderr
        assert sorted(re.findall(r"^cancelled job (\w+) \(root: twin\), (?:running on GPU 0|queued at position 1)",
                                 every.stdout, re.M)) == ids, every.stdout
        assert [t.wait(30) for t in twins] == [143, 143]
        assert [len(status(env)[k]) for k in ("jobs", "queue")] == [0, 0]
    finally:
        for t in twins:
            if t.poll() is None:
                t.kill()
                t.wait(30)


def test_a_request_the_power_budget_can_never_fit_fails_before_it_is_queued(sim_env, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    # one job's GPU at its [caps] minimum (300 W) and the other idle at 100 W fit; two GPUs at 300 W never can
    policy.write_text("[power]\nmax_total_w = 500.0\n\n[caps.A100-SXM4-80GB]\nmin_w = 300.0\n")
    env = sim_env(SPEC, ECOLAUNCH_POLICY=str(policy))
    out = run(["--nproc-per-node", "2", SLEEPER, str(tmp_path), "1"], env)
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines() == [
        "Error: job asks for 2 GPU(s) and can never fit under the admin policy's power budget of 500 W: even with its "
        "GPUs at the lowest cap the policy allows and every other GPU at its minimum power limit, this host's GPUs "
        "count 600 W",
        "HINT: lower --nproc-per-node, or ask the lab admin to raise [power] max_total_w (or the [caps] minimum of "
        "these GPUs)"]
    assert status(env)["queue"] == [] and not list(tmp_path.glob("started-*"))
    one = run(["--dry-run", "--nproc-per-node", "1", SLEEPER, str(tmp_path), "1"], env)
    assert one.returncode == 0 and one.stdout.startswith("ecolaunch: would run on GPU 0"), one.stdout + one.stderr


#: a uid's real CLI in-process (the interpreter's own directory is not theirs to read, so it is imported first)
CLI = """
os.environ.update(args["env"])
from ecolaunch.cli.main import main
try:
    main(args["argv"])
except SystemExit as e:
    print(json.dumps({"exit": e.code}), flush=True)
"""
CLI_IMPORTS = """
import click, psutil
import ecolaunch.cli.main, ecolaunch.cli.group, ecolaunch.cli.launch_cmd, ecolaunch.cli.cancel_cmd
import ecolaunch.launch.pipeline, ecolaunch.launch.torchrun, ecolaunch.launch.cancel, ecolaunch.launch.session
import ecolaunch.runtime, ecolaunch.sim.reading, ecolaunch.devices.select, ecolaunch.policy.curve
import ecolaunch.caps.job, ecolaunch.profile.history, ecolaunch.profile.modes, ecolaunch.run.observer
import ecolaunch.policy.registry, ecolaunch.policy.gnn, ecolaunch.policy.baselines, ecolaunch.admin.rules
import ecolaunch.launch.argv, ecolaunch.state.queue, ecolaunch.state.store, ecolaunch.policy.waiting
import torch.distributed.run
"""


@contextlib.contextmanager
def alice_queued_behind_root(script: str = CLI) -> Iterator[tuple[dict[str, str], dict, subprocess.Popen, dict]]:
    """A shared state directory (``init-state``) where root's 2-GPU job ``hog`` runs and ALICE's 1-GPU job ``mine``
    waits behind it, in her own job file, launched as her real uid by ``script``. Yields the environment, the hog's
    status row, alice's launcher and her queue row; kills both launchers and removes the directory afterwards."""
    require_root()
    d = shared_dir()
    hog = alice = None
    try:
        init_state(d, GID)
        env = {"ECOLAUNCH_SIMULATE": SPEC, "ECOLAUNCH_STATE_DIR": str(d)}
        (d / "out").mkdir()
        hog = start(clean_env(**env), d / "out", 2, 120, "--name", "hog")
        hog_row = running(clean_env(**env), "hog")
        alice = start_as(ALICE, script, {"env": env, "argv": ["--name", "mine", "--nproc-per-node", "1", SLEEPER,
                                                             str(d / "out"), "1"]}, imports=CLI_IMPORTS)
        row = wait_for(lambda: next(iter(status(clean_env(**env))["queue"]), None), what="alice's job queued")
        yield env, hog_row, alice, row
    finally:
        for proc in (hog, alice):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)
        remove(d)


def test_only_a_jobs_own_user_or_root_may_cancel_it() -> None:
    with alice_queued_behind_root() as (env, _, alice, row):
        assert row["name"] == "mine" and row["user"] == str(ALICE)

        refused = run_as(MALLORY, CLI, {"env": env, "argv": ["cancel", row["id"]]}, imports=CLI_IMPORTS, env=env)
        assert last_json(refused) == {"exit": 77}, refused.stdout + refused.stderr
        assert f"Error: job '{row['id']}' belongs to {ALICE}; user nobody may cancel only their own jobs" in refused.stderr
        assert f"HINT: ask {ALICE} or the lab admin (root: sudo ecolaunch cancel {row['id']})" in refused.stderr
        assert [q["id"] for q in status(clean_env(**env))["queue"]] == [row["id"]]  # still queued

        admin = run(["cancel", "mine"], clean_env(**env))  # root may cancel anyone's job
        assert admin.returncode == 0, admin.stderr
        assert admin.stdout.startswith(f"cancelled job {row['id']} ({ALICE}: mine), queued at position 1")
        out, err = alice.communicate(timeout=30)
        assert json.loads(out.strip().splitlines()[-1]) == {"exit": 143}, out + err
        assert "left the queue without running: stopped by SIGTERM (ecolaunch cancel sends it); exit 143" in err
