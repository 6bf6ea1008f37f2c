"""``ecolaunch calibrate --links`` on simulated GPUs: a real calibrator books each pair in a real state store and
starts the probe's two real ranks (torch.distributed, gloo on CPU), one per GPU; then ``ecolaunch simulate
--link-slowdown calibrated`` plays the figure in the measured world. On simulated GPUs the figures are the host's
CPU and memory, not a link: the tests check what is measured, booked, written and read, not its size."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from ecolaunch.admin.rules import parse_rules
from ecolaunch.calibrate.booking import Occupant
from ecolaunch.calibrate.links import choose_pairs, penalty
from ecolaunch.calibrate.results import validate
from ecolaunch.errors import ConfigError
from ecolaunch.launch.session import Session
from ecolaunch.learn.calibration_data import calibration_samples
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.sim.measured import MeasuredWorld
from ecolaunch.state.store import StateStore
from tests.cli.test_calibrate import backend_of, book_for, calibrate, jobs
from tests.conftest import REPO, ecolaunch_cmd

FOUR = "4xA40"  # the default topology: 0+1 and 2+3 behind one PCIe switch each, the rest through the host bridge
FILE = "calibration/links-nvidia-a40.simulated.json"


def _host(env: dict[str, str]):
    backend = backend_of(env)
    session = Session(StateStore(Path(env["ECOLAUNCH_STATE_DIR"])), backend, ExclusivePolicy(), parse_rules("")[0])
    return session.snapshot().hosts[backend.hostname()]


def _probes() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if "ecolaunch.calibrate.linkprobe" in (p.info["cmdline"] or []):
            out.append(p)
    return out


def test_links_measures_the_best_and_the_worst_linked_pair_and_simulate_plays_it(sim_env, state_dir: Path) -> None:
    env = sim_env(FOUR)
    done = calibrate(env, "--links", "--seconds", "0.5", "--json")
    assert done.returncode == 0, done.stderr
    (doc,) = json.loads(done.stdout)
    assert doc["kind"] == "links" and doc["simulated"] is True and doc["note"]
    assert [(p["gpus"], p["link"]) for p in doc["pairs"]] == [([0, 1], "pcie_switch"), ([0, 2], "pcie_host")]
    for p in doc["pairs"]:
        assert p["backend"] == "gloo" and p["iterations"] >= 5 and p["bucket_mib"] == 25
        assert p["step_ms"] > 0 and p["allreduce_ms"] > 0 and p["compute_ms"] > 0 and p["busbw_gb_s"] > 0
        assert p["forced"] is False and p["occupants"] == []
    assert doc["penalty"] == penalty(*doc["pairs"])
    assert "GPUs 0+1 (NVIDIA A40, pcie_switch): a 2-worker data-parallel step" in done.stderr
    path = state_dir / FILE
    assert doc["path"] == str(path) and stat.S_IMODE(path.stat().st_mode) == 0o640
    validate(json.loads(path.read_text()))
    assert jobs(env) == [] and _probes() == []  # both bookings released, both ranks gone

    shown = calibrate(env, "--show")
    assert shown.returncode == 0 and "NVIDIA A40 links (simulated)" in shown.stdout, shown.stderr
    data = calibration_samples(state_dir, simulated=True)  # policy train: nothing of one GPU's workloads to learn
    assert data.samples == [] and data.files == [] and data.skipped == {}

    played = subprocess.run(ecolaunch_cmd("simulate", "--trace", "workstation-topology", "--jobs", "20",
                                          "--policy", "curve-link", "--link-slowdown", "calibrated", "--json"),
                            env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert played.returncode == 0, played.stderr
    slowdown = max(0.0, doc["penalty"]["step_slowdown_pct"])
    assert json.loads(played.stdout)["link_speed"] == pytest.approx(1 / (1 + slowdown / 100))
    text = subprocess.run(ecolaunch_cmd("simulate", "--trace", "workstation-topology", "--jobs", "20",
                                        "--link-slowdown", "calibrated"),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert (f"links: a worse-linked set runs every multi-GPU job {slowdown:.1f} % slower ({path}, made on simulated "
            "GPUs: not a measurement)") in text.stdout


def test_the_pairs_leave_out_busy_and_reserved_gpus_and_say_why_when_none_is_left(sim_env) -> None:
    host = _host(sim_env(FOUR))
    by_index = {g.index: g for g in host.gpus.values()}
    pairs = lambda busy=(), closed=(): [  # noqa: E731
        tuple(g.index for g in p) for p in choose_pairs(host, {by_index[i].uuid: [Occupant("alice")] for i in busy},
                                                         [by_index[i].uuid for i in closed]).pairs]
    assert pairs() == [(0, 1), (0, 2)]
    assert pairs(busy=[0]) == [(2, 3), (1, 2)]
    assert pairs(closed=[0, 1]) == []  # 2+3 alone: one link
    none = choose_pairs(host, {by_index[0].uuid: [Occupant("alice")]}, [by_index[2].uuid, by_index[3].uuid])
    assert none.pairs == [] and "linked differently (some GPUs are in use or reserved for others)" in none.why


def test_busy_gpus_are_left_out_nothing_to_compare_and_usage_errors(sim_env, state_dir: Path, tmp_path: Path) -> None:
    nvlinked = {**sim_env("4xA100-SXM4-80GB"), "ECOLAUNCH_STATE_DIR": str(tmp_path / "nvlinked")}
    alike = calibrate(nvlinked, "--links", "--seconds", "0.2")  # NVLink between every pair
    assert alike.returncode == 1, alike.stderr
    assert alike.stderr.startswith("Error: nothing to compare: every pair of GPUs of one model on host ")
    assert "is linked alike (nvlink)" in alike.stderr

    env = sim_env(FOUR)
    model = subprocess.run(ecolaunch_cmd("simulate", "--link-slowdown", "10"), env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert model.returncode == 2 and "the model world plays no link between GPUs" in model.stderr
    for bad, why in (("-3", "is not a percentage >= 0 or 'calibrated'"), ("fast", "is not a percentage"),
                     ("calibrated", f"no link probe in {state_dir}/calibration/")):
        out = subprocess.run(ecolaunch_cmd("simulate", "--trace", "workstation-topology", "--link-slowdown", bad),
                             env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and why in out.stderr, out.stderr
    job = book_for(env, "alice")  # on GPU 0: the pairs of the other three are measured instead
    around = calibrate(env, "--links", "--seconds", "0.3", "--json")
    assert around.returncode == 0, around.stderr
    assert [p["gpus"] for p in json.loads(around.stdout)[0]["pairs"]] == [[2, 3], [1, 2]]
    assert [j["id"] for j in jobs(env)] == [job]
    gpu = calibrate(env, "--links", "--gpu", "0")
    assert gpu.returncode == 2 and "Invalid value for '--gpu': --links chooses its own pairs" in gpu.stderr
    caps = calibrate(env, "--links", "--no-caps", "--workloads", "mm")
    assert caps.returncode == 2
    assert "Error: --workloads, --no-caps cannot apply to --links, which runs its own step" in caps.stderr


def test_a_stopped_link_probe_releases_both_gpus_and_its_ranks_end(sim_env) -> None:
    env = sim_env(FOUR)
    proc = subprocess.Popen(ecolaunch_cmd("calibrate", "--links", "--seconds", "60"), env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(_probes()) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        assert [len(j["gpus"]) for j in jobs(env)] == [2]  # one booking of both GPUs
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert jobs(env) == [] and _probes() == []
    assert not (Path(env["ECOLAUNCH_STATE_DIR"]) / "calibration").exists()


def test_a_killed_calibrator_leaves_no_rank_behind(sim_env) -> None:
    env = sim_env(FOUR)
    proc = subprocess.Popen(ecolaunch_cmd("calibrate", "--links", "--seconds", "60"), env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(_probes()) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10  # each rank watches its parent every half second
    while _probes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _probes() == []
    assert jobs(env) == []  # the booking's launcher is dead: the next reader frees it


def test_a_rank_that_fails_ends_the_probe_at_once_with_its_stderr(sim_env, monkeypatch) -> None:
    """Rank 1 exits 3 at its start: the probe says so and stops rank 0, which would otherwise wait for it for
    RENDEZVOUS_TIMEOUT_S."""
    import sys

    from ecolaunch.calibrate import links
    from ecolaunch.calibrate.worker import WorkerError

    real = links.helper_argv

    def argv(module: str, *args: str) -> list[str]:
        if "--rank" in args and args[args.index("--rank") + 1] == "1":
            return [sys.executable, "-c", "import sys; print('rank 1 gives up', file=sys.stderr); sys.exit(3)"]
        return real(module, *args)

    monkeypatch.setattr(links, "helper_argv", argv)
    host = _host(sim_env(FOUR))
    pair = tuple(sorted(host.gpus.values(), key=lambda g: g.index)[:2])
    started = time.monotonic()
    with pytest.raises(WorkerError, match="the link probe's rank 1 on GPUs 0\\+1 exited 3:\nrank 1 gives up"):
        links._run_ranks(pair, dict(os.environ), simulated=True, seconds=1.0)
    assert time.monotonic() - started < links.RENDEZVOUS_TIMEOUT_S / 2
    assert _probes() == []  # rank 0 stopped


def test_a_link_document_is_checked_and_the_world_plays_its_figure() -> None:
    pair = {"link": "nvlink", "step_ms": 10.0, "allreduce_ms": 1.0}
    doc = {"format": "ecolaunch-calibration", "version": 1, "kind": "links", "simulated": False,
           "gpu": {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "power_limit_max_w": 700},
           "pairs": [pair, {**pair, "link": "system", "step_ms": 12.0}], "penalty": {"step_slowdown_pct": 20.0}}
    validate(doc)
    for broken, why in (({"pairs": [pair]}, "best- and the worst-linked pair"), ({"penalty": {}}, "penalty"),
                        ({"pairs": [pair, {**pair, "step_ms": 0}]}, r"pairs\[1\]\.step_ms = 0 is not")):
        with pytest.raises(ConfigError, match=why):
            validate({**doc, **broken})

    gavel, lab = MeasuredWorld(), MeasuredWorld(link_speed=0.8)
    kind = "ResNet-50 (batch size 64)"
    assert gavel.link_factor(kind, 2, best=False) < 1.0  # Gavel's across-server figure of the type
    assert lab.link_factor(kind, 2, best=False) == 0.8 and lab.link_factor(kind, 4, best=False) == 0.8
    assert lab.link_factor(kind, 2, best=True) == 1.0 and lab.link_factor(kind, 1, best=False) == 1.0
    with pytest.raises(ConfigError, match="share of speed must be in"):
        MeasuredWorld(link_speed=0.0)
