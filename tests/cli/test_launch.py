"""End-to-end launches on a simulated 4-GPU workstation: real launcher processes, real torch elastic workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, REPO, clean_env, ecolaunch_cmd

ENV_DUMP = str(BIN / "env_dump.py")
SLEEPER = str(BIN / "sleeper.py")


def run(args: list[str], env: dict[str, str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=kw.pop("cwd", REPO), capture_output=True, text=True,
                          timeout=timeout, **kw)


def status(env: dict[str, str]) -> dict:
    out = run(["status", "--json"], env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_dry_run_json_prints_the_decision_and_launches_nothing(sim_env, tmp_path: Path) -> None:
    env = sim_env()
    out = run(["--dry-run", "--json", "--nproc-per-node", "2", ENV_DUMP, str(tmp_path)], env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["placed"] is True and doc["cuda_visible_devices"] == "0,1"
    assert len(doc["gpus"]) == 2 and all(u.startswith("GPU-") for u in doc["gpus"])
    assert set(doc["power_caps_w"]) == set(doc["gpus"]) and set(doc["colocated_with"]) == set(doc["gpus"])
    assert doc["reasons"] and doc["policy"] == "curve"  # the default policy
    assert not list(tmp_path.glob("rank-*"))
    assert status(env)["jobs"] == []


def test_workers_see_torchruns_environment_plus_their_gpus(sim_env, tmp_path: Path) -> None:
    env = sim_env()
    out = run(["--nproc-per-node", "2", ENV_DUMP, str(tmp_path)], env)
    assert out.returncode == 0, out.stderr
    assert "on GPU 0,1 (NVIDIA A100-SXM4-80GB), policy curve" in out.stderr
    seen = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for rank, s in enumerate(seen):
        assert s["RANK"] == str(rank) and s["LOCAL_RANK"] == str(rank) and s["WORLD_SIZE"] == "2"
        assert s["CUDA_VISIBLE_DEVICES"] == "0,1" and s["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert s["is_torchelastic_launched"] is True and s["TORCHELASTIC_RUN_ID"]
        assert len(s["ECOLAUNCH_JOB_ID"]) == 8
    assert status(env)["jobs"] == []


def test_python_prefix_form_runs_one_worker(sim_env, tmp_path: Path) -> None:
    out = run(["python", ENV_DUMP, str(tmp_path)], sim_env())
    assert out.returncode == 0, out.stderr
    seen = json.loads((tmp_path / "rank-0.json").read_text())
    assert seen["WORLD_SIZE"] == "1" and seen["CUDA_VISIBLE_DEVICES"] == "0"


def test_auto_takes_every_free_gpu(sim_env, tmp_path: Path) -> None:
    out = run(["--nproc-per-node", "auto", ENV_DUMP, str(tmp_path)], sim_env())
    assert out.returncode == 0, out.stderr
    seen = json.loads((tmp_path / "rank-3.json").read_text())
    assert seen["WORLD_SIZE"] == "4" and seen["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_worker_failure_exits_with_the_workers_code(sim_env) -> None:
    out = run(["--nproc-per-node", "2", str(BIN / "fail.py"), "1", "7"], sim_env())
    assert out.returncode == 7, out.stderr
    assert "Root Cause (first observed failure)" in out.stderr
    assert "exitcode  : 7" in out.stderr


def test_script_named_like_a_subcommand_runs_with_dot_slash(sim_env, tmp_path: Path) -> None:
    (tmp_path / "status").write_text("import pathlib; pathlib.Path('ran').write_text('yes')\n")
    out = run(["./status"], sim_env(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ran").read_text() == "yes"


def test_without_a_driver_it_launches_like_torchrun(state_dir: Path, tmp_path: Path) -> None:
    env = clean_env(ECOLAUNCH_STATE_DIR=str(state_dir))
    out = run(["--nproc-per-node", "2", ENV_DUMP, str(tmp_path)], env)
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stderr.splitlines() if line.startswith("ecolaunch:")]
    assert len(notes) == 1, notes
    assert "NVIDIA driver not found" in notes[0] and "launching like torchrun" in notes[0]
    assert "HINT" in notes[0] and "ECOLAUNCH_SIMULATE" in notes[0]
    seen = json.loads((tmp_path / "rank-1.json").read_text())
    assert seen["WORLD_SIZE"] == "2" and seen.get("CUDA_VISIBLE_DEVICES") is None


def _start_sleeper(env, out_dir: Path, nproc: int, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(ecolaunch_cmd("--nproc-per-node", str(nproc), SLEEPER, str(out_dir), str(seconds)),
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _worker_pids(out_dir: Path) -> list[int]:
    return [int(p.name.rsplit("-", 1)[1]) for p in out_dir.glob("started-*")]


def test_no_wait_fails_fast_with_75_when_all_gpus_are_busy(sim_env, tmp_path: Path) -> None:
    env = sim_env()
    holder = _start_sleeper(env, tmp_path, 4, 60)
    try:
        wait_for(lambda: len(_worker_pids(tmp_path)) == 4, what="4 workers")
        out = run(["--wait-timeout", "0", ENV_DUMP, str(tmp_path)], env)
        assert out.returncode == 75, out.stderr
        assert out.stderr.startswith("Error: no GPUs fit job")
        assert "HINT:" in out.stderr
        doc = status(env)
        assert [len(g["jobs"]) for g in doc["gpus"]] == [1, 1, 1, 1] and doc["queue"] == []
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(60)


def test_sigterm_stops_workers_and_frees_gpus_with_143(sim_env, tmp_path: Path) -> None:
    env = sim_env()
    launcher = _start_sleeper(env, tmp_path, 2, 60)
    pids = wait_for(lambda: len(_worker_pids(tmp_path)) == 2 and _worker_pids(tmp_path), what="2 workers")
    assert len(status(env)["jobs"]) == 1
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(60) == 143
    wait_for(lambda: not any(psutil.pid_exists(p) for p in pids), timeout=30, what="workers to exit")
    assert status(env)["jobs"] == []


def test_sigkilled_launcher_frees_its_gpus_for_the_next_launch(sim_env, tmp_path: Path) -> None:
    env = sim_env()
    launcher = _start_sleeper(env, tmp_path, 4, 60)
    pids = wait_for(lambda: len(_worker_pids(tmp_path)) == 4 and _worker_pids(tmp_path), what="4 workers")
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    try:
        out = run(["--nproc-per-node", "4", "--wait-timeout", "0", ENV_DUMP, str(tmp_path)], env)
        assert out.returncode == 0, out.stderr
    finally:
        for pid in pids:  # torch's workers outlive a SIGKILLed agent (documented); clean them up here
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow  # ~40 s; tests/state/test_store.py covers concurrent processes in the default run
def test_sixteen_concurrent_launches_never_share_a_gpu(sim_env, tmp_path: Path) -> None:
    env = sim_env()
    procs = [_start_sleeper(env, tmp_path, 1, 0.5) for _ in range(16)]
    codes = [p.wait(300) for p in procs]
    assert codes == [0] * 16, [p.stderr.read() for p in procs]
    intervals: dict[str, list[tuple[float, float]]] = {}
    for started in tmp_path.glob("started-*"):
        done = tmp_path / started.name.replace("started-", "done-")
        gpu = started.read_text()
        intervals.setdefault(gpu, []).append((started.stat().st_mtime, done.stat().st_mtime))
    assert sum(len(v) for v in intervals.values()) == 16
    assert set(intervals) <= {"0", "1", "2", "3"}
    for gpu, spans in intervals.items():
        spans.sort()
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            assert s2 >= e1, f"GPU {gpu} ran two jobs at once: {(s1, e1)} and {(s2, e2)}"
    assert status(env)["jobs"] == [] and status(env)["queue"] == []


@pytest.mark.skipif(not os.path.exists("/proc/self/comm"), reason="reads the launcher's name from /proc (Linux)")
def test_ps_shows_the_launcher_as_ecolaunch(sim_env) -> None:
    """Issue 41: torch names its launcher thread ``pt_elastic``, which ``ps -o comm`` showed for the launcher; a
    worker reads its parent's (the launcher's) name."""
    out = run(["--nproc-per-node", "1", str(BIN / "parent_comm.py")], sim_env())
    assert out.returncode == 0, out.stderr
    assert "launcher comm: ecolaunch\n" in out.stdout, out.stdout
