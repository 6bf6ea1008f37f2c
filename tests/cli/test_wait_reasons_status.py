"""Why a job waits, as ``ecolaunch status`` shows it, for the reasons the queue test does not reach through real
launchers: the user's GPU limit (``UserLimit``) and the host's power budget (``PowerBudget``), each with a real job
holding a GPU and a real launcher waiting behind it on a simulated 2-GPU machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_launch import run, status, wait_for
from tests.cli.test_queue import running, start

SPEC = "2xA100-SXM4-80GB"
CASES = {
    # root may hold one GPU: the hog holds it, the second GPU is free but not to root
    "UserLimit": ('[users."*"]\nmax_gpus = 1\n', "user root holds 1 of the 1 GPU(s) [users] max_gpus allows"),
    # an uncapped job (no curve: it cannot be lowered) and the idle GPU at its minimum already use the 500 W
    "PowerBudget": ("[power]\nmax_total_w = 500\n", "500 W power budget"),
}


@pytest.mark.parametrize("reason", sorted(CASES))
def test_status_says_why_a_job_waits(reason: str, sim_env, tmp_path: Path) -> None:
    policy_text, words = CASES[reason]
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text)
    env = sim_env(SPEC, ECOLAUNCH_POLICY=str(policy))
    out = tmp_path / "out"
    out.mkdir()
    hog = start(env, out, 1, 120, "--name", "hog", "--policy", "exclusive")
    waiter = None
    try:
        running(env, "hog")
        waiter = start(env, out, 1, 1, "--name", "second", "--policy", "exclusive")
        row = wait_for(lambda: next((q for q in status(env)["queue"] if q["reason"]), None), what="a judged queue row")
        assert (row["name"], row["position"], row["reason"]) == ("second", 1, reason), row
        assert words in row["reason_detail"], row
        shown = run(["status"], env).stdout
        assert re.search(rf"^  1\. {row['id']} root: second, 1 GPU\(s\), waiting \d+ s, start unknown: {reason} \(", shown, re.M), shown
    finally:
        for proc in (hog, waiter):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
