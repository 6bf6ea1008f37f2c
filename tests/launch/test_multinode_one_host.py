"""Two launchers of one multi-node job on one host (a way to try multi-node code on a workstation): they run
together, the later sharing the first's GPUs as torchrun's workers would, and say so; never a wait for each other
until the rendezvous times out (issue 38 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_launch import SLEEPER, wait_for
from tests.conftest import clean_env, ecolaunch_cmd
from tests.launch.test_multinode import finish, free_port, jobs, start

#: two GPUs: two nodes of two workers each cannot both book GPUs of their own
HOST = "2xA100-SXM4-80GB"


def host_env(tmp_path: Path) -> dict[str, str]:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    # a plan timeout far below the test's own: a launcher left waiting for its peer fails the test, not hangs it
    return clean_env(ECOLAUNCH_SIMULATE=HOST, ECOLAUNCH_STATE_DIR=str(state), ECOLAUNCH_PLAN_TIMEOUT="60")


def rendezvous(backend: str, rank: int, port: int) -> list[str]:
    if backend == "static":
        return ["--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port)]
    return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "one-host"]


@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_two_nodes_of_one_job_on_one_host_share_its_gpus_and_run(tmp_path: Path, backend: str) -> None:
    env, port, out = host_env(tmp_path), free_port(), tmp_path / "out"
    out.mkdir()
    procs = [start(ecolaunch_cmd("--nnodes", "2", "--nproc-per-node", "2", *rendezvous(backend, rank, port), SLEEPER,
                                 str(out), "1"), env) for rank in (0, 1)]
    (code0, err0), (code1, err1) = finish(procs)
    assert (code0, code1) == (0, 0), err0 + err1
    # all four workers ran, each node's pair on the host's two GPUs in the same order (as torchrun's local ranks)
    started = {p.name.split("-")[1]: p.read_text() for p in out.glob("started-*")}
    assert sorted(started) == ["0", "1", "2", "3"] and set(started.values()) == {"0,1"}, started
    said = [line for line in (err0 + err1).splitlines() if "another node of this job runs on this host" in line]
    assert len(said) == 1 and "policy same-job" in said[0], err0 + err1
    assert "its workers share that node's GPUs, as torchrun's would" in said[0]
    assert jobs(env) == []


def test_a_node_with_more_workers_than_its_sibling_has_gpus_fails_at_once(tmp_path: Path) -> None:
    env, port, out = host_env(tmp_path), free_port(), tmp_path / "out"
    out.mkdir()
    first = start(ecolaunch_cmd("--nnodes", "2", "--nproc-per-node", "1", *rendezvous("static", 0, port), SLEEPER,
                                str(out), "1"), env)
    try:
        wait_for(lambda: [j for j in jobs(env) if j.get("state") == "running"], what="the first node's booking")
        second = start(ecolaunch_cmd("--nnodes", "2", "--nproc-per-node", "2", *rendezvous("static", 1, port),
                                     SLEEPER, str(out), "1"), env)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1, err
        assert "Error: this node's 2 workers need 2 GPUs, but job" in err and "has 1" in err, err
        assert "HINT: give every node of the job the same --nproc-per-node" in err
        assert len(jobs(env)) == 1  # the second left nothing booked; the first still holds its GPU
    finally:
        first.kill()
        first.communicate(timeout=60)
