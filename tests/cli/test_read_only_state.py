"""A state directory on a read-only mount: the error says so, instead of suggesting a group membership."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env

# remount the state directory read-only inside a private user and mount namespace, then run the command there
_READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _read_only(state: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-rm", "sh", "-c", _READ_ONLY, str(state), *command], cwd=REPO,
                          env=clean_env(ECOLAUNCH_SIMULATE="4xA100-SXM4-80GB", ECOLAUNCH_STATE_DIR=str(state)),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def read_only_state(state_dir: Path) -> Path:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    probe = _read_only(state_dir, "sh", "-c", 'touch "$0/probe"', str(state_dir))
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"cannot mount read-only in a user namespace here: {probe.stderr.strip()}")
    return state_dir


@pytest.mark.parametrize("args", [["status"], ["--dry-run", "examples/ddp_train.py"]], ids=["status", "launch"])
def test_a_read_only_state_directory_says_it_is_read_only(read_only_state: Path, args: list[str]) -> None:
    out = _read_only(read_only_state, sys.executable, "-m", "ecolaunch", *args)
    assert out.returncode == 1, out.stderr
    assert out.stderr == (
        f"Error: the state directory {str(read_only_state)!r} is on a read-only file system\n"
        "HINT: set ECOLAUNCH_STATE_DIR to a directory on a writable file system, or ask the lab admin to mount it "
        "read-write\n")
