"""Issue 41 item 4: ``ecolaunch calibrate`` and the admin policy's reservations, and a run that measures no capped
point where caps were asked for. Real calibrator and workload processes on simulated GPUs (the simulated backend
honours caps for root), a real state store; the policy file reserves GPU 0 for someone else."""

from __future__ import annotations

import json
from pathlib import Path

from ecolaunch.admin.rules import parse_rules
from ecolaunch.calibrate.plan import Reserved, choose_gpus, closed_gpus
from ecolaunch.state.graph import GpuNode
from tests.cli.test_calibrate import FAST, backend_of, calibrate, jobs

A100 = "NVIDIA A100-SXM4-80GB"
RESERVED = '[reserve.0]\nusers = ["someone"]\n'


def policy(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


def test_root_calibrates_a_reserved_gpu_with_caps_and_says_so_in_one_line(sim_env, tmp_path: Path) -> None:
    env = sim_env("1xA100-SXM4-80GB", ECOLAUNCH_POLICY=policy(tmp_path, RESERVED))
    done = calibrate(env, *FAST, "--workloads", "mm", "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (f"ecolaunch calibrate: calibrating GPU 0 ({A100}), reserved for user someone, as root (root "
                        "may, and may cap it): launches wait for it meanwhile")
    assert not [ln for ln in lines if "WARNING" in ln or "not applied" in ln], done.stderr
    (doc,) = json.loads(done.stdout)
    # the issue: every capped point was skipped, "not applied (the GPU's limit reads 400 W)", and it exited 0
    assert doc["caps"]["measured"] is True and doc["caps"]["points"] == 2, doc["caps"]
    assert sorted({e["power_cap_w"] for e in doc["alone"]}, reverse=True) == [400.0, 325.0, 250.0]
    assert doc["skipped"] == []
    assert backend_of(env).gpus()[0].power_limit_w == 400.0 and jobs(env) == []


def test_by_default_a_reserved_gpu_is_passed_over_for_another_of_its_model(sim_env, tmp_path: Path) -> None:
    env = sim_env("2xA100-SXM4-80GB", ECOLAUNCH_POLICY=policy(tmp_path, RESERVED))
    done = calibrate(env, *FAST, "--workloads", "mm", "--no-caps", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (f"ecolaunch calibrate: left out GPU 0 ({A100}), reserved for user someone: "
                                           "GPU 1 of its model instead")
    (doc,) = json.loads(done.stdout)
    assert doc["gpu"]["index"] == 1


def test_caps_asked_for_and_none_measured_is_an_error_after_the_file_is_written(sim_env, tmp_path: Path) -> None:
    # the admin lets ecolaunch cap GPU 1 only; GPU 0 is calibrated at its current limit
    env = sim_env("2xA100-SXM4-80GB", ECOLAUNCH_POLICY=policy(tmp_path, "[agent]\ngpus = [1]\n"))
    done = calibrate(env, *FAST, "--workloads", "mm", "--gpu", "0")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-2:] == [
        f"Error: GPU 0 ({A100}): caps were asked for and no capped point was measured (the admin policy's [agent] "
        "gpus does not name GPU 0); its results file holds the figures at the current limit only",
        "HINT: see why above; calibrate as root or with the cap agent (`sudo ecolaunch agent`) on a GPU the admin "
        "policy lets ecolaunch cap ([agent] gpus), or add --no-caps to measure the current limit only"]
    assert "wrote " in done.stdout
    doc = json.loads((Path(env["ECOLAUNCH_STATE_DIR"]) / "calibration" /
                      "nvidia-a100-sxm4-80gb.simulated.json").read_text())
    assert doc["caps"]["measured"] is False and doc["caps"]["points"] == 0
    assert calibrate(env, *FAST, "--workloads", "mm", "--gpu", "0", "--no-caps").returncode == 0


def test_a_member_skips_a_gpu_reserved_for_someone_else_says_why_and_exits_77(tmp_path: Path) -> None:
    from tests.multiuser import MALLORY, remove, require_root, run_as, shared_dir

    require_root()
    shared = shared_dir()
    try:
        rules = shared / "reserved.toml"
        rules.write_text(RESERVED)
        rules.chmod(0o644)
        out = run_as(MALLORY, BODY, {"state": str(shared), "policy": str(rules)}, imports=IMPORTS)
    finally:
        remove(shared)
    code, stdout, stderr = json.loads(out.stdout.strip().splitlines()[-1])
    assert code == 77, stdout + stderr
    assert stderr == (
        f"Error: skipped GPU 0 ({A100}), reserved for user someone: the admin policy ([reserve]) keeps it from user "
        "nobody, and a calibration books its GPU\n"
        "HINT: calibrate a GPU you may use (--gpu), or ask the lab admin: root may calibrate a reserved GPU (sudo "
        "ecolaunch calibrate --gpu 0)\n")
    assert stdout == ""


IMPORTS = """
from click.testing import CliRunner
from ecolaunch.cli.calibrate_cmd import calibrate
import ecolaunch.calibrate.run, ecolaunch.calibrate.plan, ecolaunch.calibrate.booking, ecolaunch.calibrate.results
import ecolaunch.runtime
import ecolaunch.caps.job, ecolaunch.launch.session, ecolaunch.policy.baselines, ecolaunch.state.store
import ecolaunch.state.reconcile, ecolaunch.devices.select, ecolaunch.sim.reading, ecolaunch.caps.agent
ecolaunch.policy.baselines.ExclusivePolicy()
"""

BODY = """
env = {"ECOLAUNCH_SIMULATE": "1xA100-SXM4-80GB", "ECOLAUNCH_STATE_DIR": args["state"], "ECOLAUNCH_POLICY": args["policy"]}
r = CliRunner().invoke(calibrate, ["--seconds", "0.1"], env=env, prog_name="ecolaunch calibrate")
print(json.dumps([r.exit_code, r.stdout, r.stderr]))
"""


def _gpu(index: int, name: str = "A") -> GpuNode:
    return GpuNode(uuid=f"GPU-{index}", index=index, name=name, memory_total_mib=1024)


def test_reserved_gpus_are_chosen_only_for_root_and_only_when_no_other_of_the_model_is_free() -> None:
    gpus = [_gpu(0), _gpu(1), _gpu(2, "B")]
    closed = {g.uuid: Reserved(g, ("someone",), ()) for g in (gpus[0], gpus[2])}
    member = choose_gpus(gpus, {}, (), closed)
    assert [g.index for g in member.gpus] == [1] and member.skipped == [closed["GPU-2"]]
    assert member.instead == [(closed["GPU-0"], gpus[1])] and member.as_root == []
    root = choose_gpus(gpus, {}, (), closed, root=True)
    assert [g.index for g in root.gpus] == [1, 2] and root.as_root == [closed["GPU-2"]]
    # root takes a free reserved GPU before a busy open one; a member waits for the open one (refused as busy)
    busy = {"GPU-1": ["someone's job"]}
    assert [g.index for g in choose_gpus(gpus, busy, (), closed, root=True).gpus] == [0, 2]
    assert [g.index for g in choose_gpus(gpus, busy, (), closed).gpus] == [1]
    named = choose_gpus(gpus, {}, ("0", "1"), closed)
    assert [g.index for g in named.gpus] == [1] and named.skipped == [closed["GPU-0"]]
    assert choose_gpus(gpus, {}, ("0",), closed, root=True).as_root == [closed["GPU-0"]]
    assert Reserved(gpus[0], ("a", "b"), ("lab",)).describe() == "GPU 0 (A), reserved for users a, b and group lab"
    assert Reserved(gpus[0], (), ()).describe() == "GPU 0 (A), reserved for nobody"


def test_closed_gpus_are_those_the_reservations_keep_from_the_caller() -> None:
    rules = parse_rules(RESERVED + '[reserve.2]\ngroups = ["lab"]\n')[0]
    gpus = [_gpu(0), _gpu(1), _gpu(2)]
    assert closed_gpus(rules, "bob", ["users"], gpus) == {"GPU-0": Reserved(gpus[0], ("someone",), ()),
                                                          "GPU-2": Reserved(gpus[2], (), ("lab",))}
    assert list(closed_gpus(rules, "someone", ["lab"], gpus)) == []
    assert list(closed_gpus(rules, "root", ["root"], gpus)) == ["GPU-0", "GPU-2"]  # root is told, and may anyway
