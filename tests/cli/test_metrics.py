"""The metrics for dashboards: ``ecolaunch exporter`` serves them over HTTP (scraped with urllib, parsed by
prometheus-client's parser, stopped by a signal), and ``ecolaunch agent --textfile`` writes them for node_exporter.
The state holds a running job of alice's on GPU 0 (this test process is its launcher) and a queued job of bob's."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ecolaunch.devices.select import open_backend
from ecolaunch.state.graph import Job
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import REPO, clean_env

SPEC = "2xA100-SXM4-80GB"
MIB = 1024 * 1024


@pytest.fixture
def booked(state_dir: Path) -> dict[str, str]:
    """GPU 0 runs job j-alice (alice's, 2000 MiB of its memory in use); j-bob waits in the queue. Returns the uuids."""
    backend = open_backend(SPEC, state_dir)
    gpu0, gpu1 = (g.uuid for g in sorted(backend.gpus(), key=lambda g: g.index))
    backend.attach(gpu0, os.getpid(), 2000, util_gpu_pct=80.0)
    me, start, host = os.getpid(), process_start_time(os.getpid()), backend.hostname()
    with StateStore(state_dir).transaction() as graph:
        for jid, user in (("j-alice", "alice"), ("j-bob", "bob")):
            graph.jobs[jid] = Job.queued(jid, user=user, host=host, nproc=1, seq=graph.take_seq(),
                                         submitted_at=time.time(), request={}, launcher_pid=me,
                                         launcher_start_time=start)
        graph.book("j-alice", [gpu0], {}, {}, None, time.time())
    yield {"0": gpu0, "1": gpu1}
    backend.detach(os.getpid())


def env(state_dir: Path) -> dict[str, str]:
    return clean_env(ECOLAUNCH_SIMULATE=SPEC, ECOLAUNCH_STATE_DIR=str(state_dir))


def samples(text: str) -> dict[str, list]:
    """Metric family name -> its samples, as prometheus-client's parser reads the exposition."""
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def check_metrics(found: dict[str, list], uuids: dict[str, str]) -> None:
    power = {s.labels["gpu"]: s for s in found["ecolaunch_gpu_power_watts"]}
    assert set(power) == {"0", "1"}
    assert power["0"].labels == {"gpu": "0", "uuid": uuids["0"], "model": "NVIDIA A100-SXM4-80GB", "job": "j-alice",
                                 "user": "alice"}
    assert power["1"].labels["job"] == "" and power["1"].labels["user"] == ""  # nobody books GPU 1
    assert all(s.value > 0 for s in power.values())
    assert {s.labels["gpu"]: s.value for s in found["ecolaunch_gpu_power_limit_watts"]} == {"0": 400.0, "1": 400.0}
    energy = found["ecolaunch_gpu_energy_joules"]  # the family of ecolaunch_gpu_energy_joules_total, a counter
    assert {s.name for s in energy} == {"ecolaunch_gpu_energy_joules_total"} and all(s.value > 0 for s in energy)
    util = {s.labels["gpu"]: s.value for s in found["ecolaunch_gpu_utilization_ratio"]}
    assert util["0"] == pytest.approx(0.8) and util["1"] == 0.0
    assert {s.labels["gpu"]: s.value for s in found["ecolaunch_gpu_memory_used_bytes"]}["0"] == 2000 * MIB
    assert {(s.labels["state"], s.labels["user"]): s.value for s in found["ecolaunch_jobs"]} == {
        ("running", "alice"): 1.0, ("queued", "bob"): 1.0}
    assert [s.value for s in found["ecolaunch_queue_length"]] == [1.0]
    assert {s.labels["part"]: s.value for s in found["ecolaunch_collect_success"]} == {"gpus": 1.0, "state": 1.0}


def start_exporter(state_dir: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """An exporter on a free port (``--port 0``), and the URL its first line names."""
    proc = subprocess.Popen([sys.executable, "-m", "ecolaunch", "exporter", "--port", "0", *args], env=env(state_dir),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        if not sel.select(timeout=60):
            proc.kill()
            raise AssertionError("the exporter said nothing in 60 s")
    line = proc.stderr.readline()
    assert line.startswith("ecolaunch exporter: serving http://127.0.0.1:"), line + proc.stderr.read()
    return proc, line.split()[3]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_exporter_serves_the_metrics_and_stops_on_a_signal(state_dir: Path, booked: dict[str, str],
                                                               signum: int, code: int) -> None:
    proc, url = start_exporter(state_dir)
    try:
        assert url.endswith("/metrics")
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.status == 200
            check_metrics(samples(response.read().decode()), booked)
    finally:
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert err == f"ecolaunch exporter: stopped ({signal.Signals(signum).name})\n" and out == ""


def test_a_port_in_use_is_an_error_with_a_hint(state_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "ecolaunch", "exporter", "--port", str(port)],
                                env=env(state_dir), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (f"Error: cannot serve on 127.0.0.1 port {port}: Address already in use\n"
                             "HINT: choose another --port (0 picks a free one), or stop what serves there\n")
    missing = subprocess.run([sys.executable, "-m", "ecolaunch", "exporter"], env=env(state_dir), cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "Missing option '--port'" in missing.stderr


def test_the_agent_writes_the_textfile_at_every_pass_and_removes_it_when_stopped(state_dir: Path, tmp_path: Path,
                                                                                 booked: dict[str, str]) -> None:
    collector = tmp_path / "textfile_collector"
    collector.mkdir()
    prom = collector / "ecolaunch.prom"
    agent = subprocess.Popen([sys.executable, "-m", "ecolaunch", "agent", "--interval", "0.1", "--textfile", str(prom)],
                             env=env(state_dir), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not prom.exists():
            assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read() if agent.poll() else "slow"
            time.sleep(0.05)
        seen = {prom.stat().st_mtime_ns}
        while len(seen) < 4:  # rewritten at every pass; each read, even one racing a rewrite, is a whole file
            check_metrics(samples(prom.read_text()), booked)
            seen.add(prom.stat().st_mtime_ns)
            assert time.monotonic() < deadline
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    assert agent.returncode == 143, err  # stopped by SIGTERM: 128 + 15, as the exporter
    assert list(collector.iterdir()) == []  # a stopped agent's readings are not left to look current


def test_agent_once_writes_the_textfile_and_a_bad_path_is_a_usage_error(state_dir: Path, tmp_path: Path,
                                                                        booked: dict[str, str]) -> None:
    prom = tmp_path / "ecolaunch.prom"
    once = subprocess.run([sys.executable, "-m", "ecolaunch", "agent", "--once", "--textfile", str(prom)],
                          env=env(state_dir), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stderr
    check_metrics(samples(prom.read_text()), booked)
    assert prom.stat().st_mode & 0o777 == 0o644  # node_exporter runs as its own user

    for bad, why, hint in ((tmp_path / "metrics.txt", "does not end in .prom, and node_exporter's textfile collector "
                            "reads only *.prom files", f"name it {tmp_path / 'metrics.prom'}"),
                           (tmp_path / "nowhere" / "e.prom", "the directory of", "give a file in node_exporter's "
                            "--collector.textfile.directory")):
        result = subprocess.run([sys.executable, "-m", "ecolaunch", "agent", "--once", "--textfile", str(bad)],
                                env=env(state_dir), cwd=REPO, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert "Error: Invalid value for '--textfile': " in result.stderr and why in result.stderr
        assert result.stderr.endswith(f"HINT: {hint}\n")
