"""Issue 41, item 1: the tests never read the host's admin policy.

The proof runs a slice of the suite (a 2-GPU launch, the Python API, a member's launch against ``max_gpus``) in a
private mount namespace where ``/etc/ecolaunch/policy.toml`` is a hostile one (one GPU per user, no sharing, a state
directory nobody can use), and checks first that the hostile policy is live there: a plain ``ecolaunch`` without
the tests' environment obeys it. The host's own ``/etc`` is never read or changed; a mount point the host lacks is
made for the namespace and removed after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN, REPO

HOSTILE = """# what a lab's admin might have installed
[users."*"]
max_gpus = 1
[colocation]
enabled = false
[state]
dir = "/nonexistent/ecolaunch-hostile"
"""
SLICE = [
    "tests/cli/test_launch.py::test_dry_run_json_prints_the_decision_and_launches_nothing",
    "tests/cli/test_launch.py::test_auto_takes_every_free_gpu",
    "tests/api/test_launch_api.py::test_a_function_runs_on_two_workers_and_each_rank_returns_its_value",
    "tests/policy/test_safety2_uid_counts.py::test_a_request_over_max_gpus_fails_before_it_is_queued_and_blocks_nobody",
]
ETC = Path("/etc/ecolaunch")


def _namespace(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    """Run ``command`` (sh) in a private mount namespace whose /etc/ecolaunch holds the hostile policy, in this
    environment less ecolaunch's variables (the tests' own conftest must set what they need)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOLAUNCH_")}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"mount --bind {tmp_path / 'etc'} {ETC} && {command}"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)


def test_the_suite_passes_under_a_hostile_admin_policy(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to give a private mount namespace its own /etc/ecolaunch")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "policy.toml").write_text(HOSTILE)
    made = not ETC.exists()
    if made:
        ETC.mkdir(mode=0o755)
    try:
        probe = _namespace(tmp_path, "true")
        if probe.returncode != 0:
            pytest.skip(f"no private mount namespace here: {probe.stderr.strip()}")
        live = _namespace(tmp_path, f"ECOLAUNCH_SIMULATE=2xA100-SXM4-80GB ECOLAUNCH_STATE_DIR={tmp_path / 'state'} "
                                    f"{sys.executable} -m ecolaunch --dry-run --nproc-per-node 2 {BIN / 'fail.py'} 0")
        assert live.returncode == 1 and "your limit is 1 GPU" in live.stderr, live.stdout + live.stderr
        run = _namespace(tmp_path, f"{sys.executable} -m pytest -q -p no:cacheprovider " + " ".join(SLICE))
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
        assert f"{len(SLICE)} passed" in run.stdout
    finally:
        if made:
            ETC.rmdir()
