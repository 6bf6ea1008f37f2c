from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ecolaunch.state.graph import Job
from ecolaunch.state.store import StateStore


def _job(jid: str, seq: int = 0) -> Job:
    return Job(id=jid, uid=1, user="u", host="h", launcher_pid=1, launcher_start_time=0.0, nproc=1,
               name="x", seq=seq, submitted_at=0.0)


def test_transaction_writes_and_bumps_generation(state_dir: Path) -> None:
    store = StateStore(state_dir)
    with store.transaction() as graph:
        graph.jobs["a"] = _job("a")
    assert store.read().jobs["a"].id == "a"
    assert store.read().generation == 1
    doc = json.loads((state_dir / "state.json").read_text())
    assert doc["schema"] == "ecolaunch.state" and doc["generation"] == 1


def test_unchanged_transaction_does_not_write(state_dir: Path) -> None:
    store = StateStore(state_dir)
    with store.transaction() as graph:
        graph.jobs["a"] = _job("a")
    before = (state_dir / "state.json").stat().st_mtime_ns
    with store.transaction():
        pass
    assert (state_dir / "state.json").stat().st_mtime_ns == before


def test_exception_discards_changes(state_dir: Path) -> None:
    store = StateStore(state_dir)
    with pytest.raises(RuntimeError):
        with store.transaction() as graph:
            graph.jobs["a"] = _job("a")
            raise RuntimeError("boom")
    assert store.read().jobs == {}


@pytest.mark.parametrize(
    "content",
    [b"", b'{"schema": "ecolaunch.state", "vers', b"\x00\xff garbage", b"[1, 2, 3]", b'{"schema": "someone-else"}',
     b'{"schema":"ecolaunch.state","version":1,"generation":0,"next_seq":0,"hosts":{},"jobs":{"x":{"id":"x"}}}'],
    ids=["empty", "truncated", "binary", "list", "foreign", "bad-job"],
)
def test_corrupt_file_is_moved_aside_and_rebuilt(state_dir: Path, content: bytes, caplog) -> None:
    (state_dir / "state.json").write_bytes(content)
    store = StateStore(state_dir)
    with store.transaction() as graph:
        assert graph.jobs == {}
        graph.jobs["a"] = _job("a")
    assert store.read().jobs["a"].id == "a"
    aside = list(state_dir.glob("state.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content
    assert "not a valid state document" in caplog.text


def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    from ecolaunch.errors import StateError

    with pytest.raises(StateError, match="not writable"):
        StateStore(locked).read()


def _increment(directory: str, n: int) -> None:
    store = StateStore(Path(directory))
    for _ in range(n):
        with store.transaction() as graph:
            graph.next_seq += 1


def test_concurrent_processes_lose_no_update(state_dir: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_increment, args=(str(state_dir), 40)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert StateStore(state_dir).read().next_seq == 160


def test_lock_holder_killed_with_sigkill_does_not_block(state_dir: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from ecolaunch.state.store import StateStore\n"
        "s = StateStore(Path(sys.argv[1]))\n"
        "with s.transaction() as g:\n"
        "    print('locked', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(state_dir)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.stdout.readline().strip() == "locked"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    start = time.monotonic()
    with StateStore(state_dir, lock_timeout_s=5).transaction() as graph:
        graph.next_seq = 5
    assert time.monotonic() - start < 5
    assert StateStore(state_dir).read().next_seq == 5
