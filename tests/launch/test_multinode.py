"""A job over several nodes, with real launchers on localhost: each "node" its own state directory and simulated
GPUs, torch's static and c10d rendezvous, one plan, the whole job's energy, and stop signals while a node waits."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.history import History, fingerprint
from ecolaunch.runtime import current_user
from tests.cli.test_launch import SLEEPER, wait_for
from tests.conftest import REPO, clean_env, ecolaunch_cmd

NODES = ("2xA100-SXM4-80GB", "2xV100-SXM2-16GB")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_env(tmp_path: Path, i: int, **extra: str) -> dict[str, str]:
    state = tmp_path / f"state{i}"
    state.mkdir(exist_ok=True)
    return clean_env(**{"ECOLAUNCH_SIMULATE": NODES[i % len(NODES)], "ECOLAUNCH_STATE_DIR": str(state), **extra})


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def jobs(env: dict[str, str]) -> list:
    out = subprocess.run(ecolaunch_cmd("status", "--json"), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["jobs"]


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    results = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        results.append((p.returncode, err))
    return results


def plan_lines(err: str) -> list[str]:
    return [line.split(": ", 2)[2] for line in err.splitlines() if ": one plan for " in line]


@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_two_nodes_agree_one_plan_and_the_leader_sums_the_jobs_energy(tmp_path: Path, backend: str) -> None:
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    procs = []
    for rank in (0, 1):
        if backend == "static":
            rdzv = ["--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port)]
        else:
            rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job-a"]
        procs.append(start(ecolaunch_cmd("-v", "--nnodes", "2", "--nproc-per-node", "1", *rdzv, SLEEPER, str(out),
                                         "1"), node_env(tmp_path, rank)))
    (code0, err0), (code1, err1) = finish(procs)
    assert (code0, code1) == (0, 0), err0 + err1
    assert sorted(p.name.split("-")[1] for p in out.glob("done-*")) == ["0", "1"]  # both nodes' workers ran
    plans = plan_lines(err0) + plan_lines(err1)
    assert len(plans) == 2
    # the same plan on both nodes, listing both (one leads, the other follows it)
    assert {p.split("; this node")[0] for p in plans} == {
        "one plan for 2 nodes (vm (1x NVIDIA A100-SXM4-80GB), vm (1x Tesla V100-SXM2-16GB))"} or {
        p.split("; this node")[0] for p in plans} == {
        "one plan for 2 nodes (vm (1x Tesla V100-SXM2-16GB), vm (1x NVIDIA A100-SXM4-80GB))"}
    assert sorted("leads" in p for p in plans) == [False, True]
    # different GPUs on the two nodes: one cap would not pace them alike, so each runs at its default limit
    assert all("its nodes have different GPUs (1x NVIDIA A100-SXM4-80GB, 1x Tesla V100-SXM2-16GB)" in p for p in plans)
    for err in (err0, err1):  # matched as the whole job, and then, by the plan, not profiled
        assert "history: script sleeper.py, 2 nodes x 1 worker" in err and "profiling done" not in err
    leader = err0 if "this node leads" in err0 else err1
    totals = [line for line in leader.splitlines() if "the whole job used" in line]
    assert len(totals) == 1 and " over 2 nodes in " in totals[0] and "not counted" not in totals[0], leader
    shares = [line for line in leader.splitlines() if line.startswith("ecolaunch: node ")]
    assert len(shares) == 2, leader  # each node's share with --verbose
    own = [float(line.split(" used ")[1].split(" kJ")[0]) for err in (err0, err1) for line in err.splitlines()
           if line.startswith("ecolaunch: job ") and " used " in line]
    total = float(totals[0].split(" used ")[1].split(" kJ")[0])
    assert total == pytest.approx(sum(own), rel=0.01, abs=0.002)
    assert all("the whole job used" not in line for line in (err1 if leader is err0 else err0).splitlines())
    for rank in (0, 1):
        assert jobs(node_env(tmp_path, rank)) == []


def stop_a_lone_node(env: dict[str, str], tmp_path: Path, sig: int, *, after_s: float,
                     within_s: float) -> tuple[int, str]:
    """Launch node 0 of a 2-node job whose peer never comes; once it booked its GPU and ``after_s`` more passed,
    send it ``sig``; it must end within ``within_s``. Returns its exit code and stderr."""
    proc = start(ecolaunch_cmd("--nnodes", "2", "--nproc-per-node", "1", "--master-port", str(free_port()), SLEEPER,
                               str(tmp_path), "1"), env)
    try:
        wait_for(lambda: jobs(env), what="the node's booking")
        time.sleep(after_s)
        stopped = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=within_s + 20)
        assert time.monotonic() - stopped < within_s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return proc.returncode, err


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_node_waiting_for_its_peers_stops_on_a_signal_and_releases_its_gpus(tmp_path: Path, sig, code) -> None:
    env = node_env(tmp_path, 0)
    returncode, err = stop_a_lone_node(env, tmp_path, sig, after_s=0.5, within_s=5)
    assert returncode == code, err
    assert "stopped while waiting for its other nodes; its GPUs are released" in err
    assert jobs(env) == []


def test_a_node_stopped_inside_torchs_rendezvous_releases_its_gpus(tmp_path: Path) -> None:
    # the plan's wait ends at once: the node is then in torch's own rendezvous, which waits in C++
    env = node_env(tmp_path, 0, ECOLAUNCH_PLAN_TIMEOUT="0.5")
    returncode, err = stop_a_lone_node(env, tmp_path, signal.SIGTERM, after_s=2.0, within_s=10)
    assert returncode == 143, err
    assert "only 1 of 2 nodes answered in time (the others have not started)" in err
    assert "stopped by SIGTERM while waiting for its other nodes at torch's rendezvous; its GPUs are released" in err
    assert jobs(env) == []
    assert not list(tmp_path.glob("started-*"))


def test_a_peer_running_plain_torchrun_is_seen_and_the_job_runs(tmp_path: Path) -> None:
    port = free_port()
    rdzv = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"127.0.0.1:{port}", "--rdzv-id", "mixed"]
    peer = start(["torchrun", *rdzv, SLEEPER, str(tmp_path), "1"], clean_env())
    time.sleep(1.0)
    ours = start(ecolaunch_cmd(*rdzv, SLEEPER, str(tmp_path), "1"), node_env(tmp_path, 0))
    (code_peer, err_peer), (code, err) = finish([peer, ours])
    assert (code_peer, code) == (0, 0), err_peer + err
    assert sorted(p.name.split("-")[1] for p in tmp_path.glob("done-*")) == ["0", "1"]
    assert ("only 1 of 2 nodes run this ecolaunch (the others are already in torch's rendezvous: torchrun or an "
            "older ecolaunch)") in err
    assert jobs(node_env(tmp_path, 0)) == []


def test_a_bad_plan_timeout_is_a_usage_error_before_anything_is_booked(tmp_path: Path) -> None:
    env = node_env(tmp_path, 0, ECOLAUNCH_PLAN_TIMEOUT="soon")
    out = subprocess.run(ecolaunch_cmd("--nnodes", "2", "--nproc-per-node", "1", "--master-port", str(free_port()),
                                       SLEEPER, str(tmp_path), "1"), env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "ECOLAUNCH_PLAN_TIMEOUT='soon' is not a number of seconds > 0" in out.stderr
    assert jobs(env) == []


def test_a_two_node_slurm_step_takes_its_rank_peers_and_gpus_from_the_allocation(tmp_path: Path) -> None:
    port = free_port()
    procs = []
    for node in (0, 1):
        slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NODEID": str(node),
                 "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_GPUS": "1"}
        out = tmp_path / f"out{node}"
        out.mkdir()
        # srun runs the same command on every node: no --nnodes, --node-rank or --master-addr
        procs.append(start(ecolaunch_cmd("--nproc-per-node", "1", "--master-port", str(port), SLEEPER, str(out), "1"),
                           node_env(tmp_path, node, **slurm)))
    results = finish(procs)
    for node, (code, err) in enumerate(results):
        assert code == 0, err
        assert (f"ecolaunch: Slurm job 4242, node {node} of 2; from the allocation: --nnodes 2 --node-rank {node} "
                "--master-addr localhost; placed only on the allocation's GPU 1") in err.splitlines()
        assert "one plan for 2 nodes" in err
        # the worker saw the allocation's GPU; global ranks 0 and 1 are the two nodes' workers
        [started] = (tmp_path / f"out{node}").glob("started-*")
        assert started.read_text() == "1" and started.name.split("-")[1] == str(node)


#: a curve whose cheapest cap within the 10 % bound is 285 W
KNOWN = Profile(0.1, 90.0, 30.0, 1000, 330.0, (CapPoint(250.0, 0.118, 242.0), CapPoint(300.0, 0.106, 285.0),
                                               CapPoint(400.0, 0.1, 330.0)))


def two_nodes_knowing_the_job(tmp_path: Path, seconds: str) -> tuple[list[str], list[dict[str, str]]]:
    """Two nodes with the same GPUs; the leader's (node rank 0's) history holds the 2-node job's profile, KNOWN.
    Returns the sleeper's arguments and the nodes' environments."""
    out = tmp_path / "out"
    out.mkdir()
    args = [str(out), seconds]
    envs = [node_env(tmp_path, rank, ECOLAUNCH_SIMULATE="2xA100-SXM4-80GB") for rank in (0, 1)]
    fp = fingerprint(SLEEPER, args, "1", current_user(), "NVIDIA A100-SXM4-80GB", nnodes=2)
    History(Path(envs[0]["ECOLAUNCH_STATE_DIR"])).store_profile(fp, KNOWN)
    assert fp != fingerprint(SLEEPER, args, "1", current_user(), "NVIDIA A100-SXM4-80GB")  # not the 1-node job's
    return args, envs


ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a launcher applies caps itself only as root")


@ROOT_ONLY
def test_the_leaders_caps_from_the_whole_jobs_history_are_every_nodes(tmp_path: Path) -> None:
    # the leader starts the job at the 285 W its history's curve chooses; the follower applies it too
    args, envs = two_nodes_knowing_the_job(tmp_path, "2")
    port = free_port()
    procs = [start(ecolaunch_cmd("-v", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                                 "--master-port", str(port), "--nproc-per-node", "1", SLEEPER, *args), envs[rank])
             for rank in (0, 1)]
    (code0, err0), (code1, err1) = finish(procs)
    assert (code0, code1) == (0, 0), err0 + err1
    assert "history: script sleeper.py, 2 nodes x 1 worker, NVIDIA A100-SXM4-80GB, its arguments" in err0
    assert "this node leads: every node runs at the leader's caps" in err0
    assert "this node follows vm: every node runs at the leader's caps" in err1
    assert "GPU 0 capped at 285 W (original 400 W)" in err0, err0
    assert "ecolaunch: caps 285 W, as the job's leader set them" in err1.splitlines(), err1
    assert "ecolaunch: GPU 0 capped at 285 W (original 400 W)" in err1.splitlines()
    for env in envs:
        assert jobs(env) == []


@ROOT_ONLY
def test_a_sigkilled_node_gets_its_cap_back_and_the_leader_stops_on_sigterm(tmp_path: Path) -> None:
    from ecolaunch.runtime import open_gpus, resolve

    args, envs = two_nodes_knowing_the_job(tmp_path, "60")
    gpus = [open_gpus(resolve(env)[0]) for env in envs]
    port = free_port()
    procs = [subprocess.Popen(ecolaunch_cmd("--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                                            "--master-port", str(port), "--nproc-per-node", "1", SLEEPER, *args),
                              env=envs[rank], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for rank in (0, 1)]
    try:
        wait_for(lambda: all(g.gpus()[0].power_limit_w == 285.0 for g in gpus), 60, "both nodes at the leader's cap")
        orphans = psutil.Process(procs[1].pid).children(recursive=True)  # its workers run on (torch's own session)
        os.kill(procs[1].pid, signal.SIGKILL)  # the follower's launcher only, as a real SIGKILL of it
        wait_for(lambda: gpus[1].gpus()[0].power_limit_w == 400.0, 10, "the killed node's cap restored")
        wait_for(lambda: jobs(envs[1]) == [], 30, "the killed node's booking released")
        assert gpus[0].gpus()[0].power_limit_w == 285.0  # the leader runs on, at its cap
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(30) == 143
        assert gpus[0].gpus()[0].power_limit_w == 400.0 and jobs(envs[0]) == []
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for child in locals().get("orphans", []):
            with contextlib.suppress(psutil.Error):
                child.kill()
        for p in procs:
            p.communicate(timeout=60)


def test_three_nodes_over_c10d_follow_one_leader(tmp_path: Path) -> None:
    # three "hosts" with the same GPUs, c10d: the first to arrive leads, the two others follow its caps
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    envs = [node_env(tmp_path, rank, ECOLAUNCH_SIMULATE="2xA100-SXM4-80GB") for rank in range(3)]
    procs = [start(ecolaunch_cmd("-v", "--nnodes", "3", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "three", SLEEPER, str(out), "1"),
                   env) for env in envs]
    results = finish(procs)
    assert [code for code, _ in results] == [0, 0, 0], "".join(err for _, err in results)
    assert sorted(p.name.split("-")[1] for p in out.glob("done-*")) == ["0", "1", "2"]
    plans = [plan_lines(err) for _, err in results]
    assert all(len(p) == 1 for p in plans)
    assert len({p[0].split("; this node")[0] for p in plans}) == 1  # one plan, the same on every node
    assert plans[0][0].startswith("one plan for 3 nodes (")
    assert sorted("this node leads" in p[0] for p in plans) == [False, False, True]
    leader = next(err for _, err in results if "this node leads" in err)
    assert "over 3 nodes in" in leader and "not counted" not in leader
    for env in envs:
        assert jobs(env) == []


@ROOT_ONLY
def test_the_fast_node_is_paced_to_the_slow_nodes_rank_and_its_cap_restored(tmp_path: Path) -> None:
    # an A100 node and a V100 node: each at its default limit by the plan; the V100 node's rank is made 30 ms slower
    # per step, so the A100 node's rank waits at the all-reduce and its GPU is lowered, against the V100 node's
    # waits shared through the store; the slow node lowers nothing
    from ecolaunch.runtime import open_gpus, resolve

    envs = [node_env(tmp_path, rank) for rank in (0, 1)]
    port = free_port()
    procs = [start(ecolaunch_cmd("-v", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                                 "--master-port", str(port), "--nproc-per-node", "1", str(REPO / "tests" / "bin" /
                                                                                           "ddp_waiter.py"),
                                 "150", "0.03"), envs[rank]) for rank in (0, 1)]
    (code0, err0), (code1, err1) = finish(procs)
    assert (code0, code1) == (0, 0), err0 + err1
    assert "its nodes have different GPUs" in err0 and "lowers the GPUs whose ranks wait for the slowest node" in err0
    moves = re.findall(r"pace: GPU 0 \(rank 0\) to (\d+) W: it waited (\d+) % of each step for the slowest rank, on "
                       r"another node", err0)
    assert moves, err0
    caps = [int(w) for w, _ in moves]
    assert caps == sorted(caps, reverse=True) and caps[0] < 400  # A100: 400 W board, lowered 20 W a move
    assert all(int(share) >= 10 for _, share in moves)
    assert re.search(r"power cap: pace: GPU 0 ended at \d+ W after \d+ move\(s\)", err0), err0
    assert "pace:" not in err1, err1  # the node that holds the slowest rank
    for env in envs:
        assert [g.power_limit_w for g in open_gpus(resolve(env)[0]).gpus()] in ([400.0, 400.0], [300.0, 300.0])
        assert jobs(env) == []


def test_an_elastic_job_agrees_again_when_a_node_joins(tmp_path: Path) -> None:
    # `--nnodes 1:2` over c10d: the first node starts alone (its first round, one node); the second joins later, so
    # torch restarts the first node's workers in a new round of two, and both nodes agree that round's plan; the
    # first node's launcher, the job's leader, adds up both nodes' energy
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    envs = [node_env(tmp_path, rank) for rank in (0, 1)]

    def node(env: dict[str, str]) -> subprocess.Popen:
        return start(ecolaunch_cmd("-v", "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "grow", "--rdzv-conf",
                                   "last_call_timeout=1", "--monitor-interval", "0.2", SLEEPER, str(out), "6"), env)

    first = node(envs[0])
    try:
        wait_for(lambda: list(out.glob("started-0-*")), 90, "the first node's round of one")
        second = node(envs[1])
    except BaseException:
        first.kill()
        raise
    (code0, err0), (code1, err1) = finish([first, second])
    assert (code0, code1) == (0, 0), err0 + err1
    # the first round's worker was stopped when the second node joined; the round of two ran to its end
    assert len(list(out.glob("started-*"))) == 3 and sorted(p.name.split("-")[1] for p in out.glob("done-*")) == [
        "0", "1"], sorted(p.name for p in out.iterdir())
    rounds = [[line.split(": a new rendezvous round: ", 1)[1] for line in err.splitlines()
               if ": a new rendezvous round: " in line]
              for err in (err0, err1)]
    assert [len(r) for r in rounds] == [1, 1], err0 + err1
    # one plan for the round, listing both nodes, on both; the nodes' boards differ, so each paces its own GPUs
    plans = {r[0].split("; this node")[0] for r in rounds}
    assert len(plans) == 1 and plans.pop() in (
        "one plan for 2 nodes (vm (1x NVIDIA A100-SXM4-80GB), vm (1x Tesla V100-SXM2-16GB))",
        "one plan for 2 nodes (vm (1x Tesla V100-SXM2-16GB), vm (1x NVIDIA A100-SXM4-80GB))")
    assert all("the job's nodes changed at a rendezvous round" in r[0] and "different GPUs" in r[0] for r in rounds)
    totals = [line for line in err0.splitlines() if "the whole job used" in line]
    assert len(totals) == 1 and " over 2 nodes in " in totals[0] and "not counted" not in totals[0], err0
    for env in envs:
        assert jobs(env) == []
