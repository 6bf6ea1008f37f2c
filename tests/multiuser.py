"""Running test code as another real uid, as ``tests/state/test_store_safety.py`` does with ``nobody``.

The tests run as root; a child process imports what it needs first (the interpreter lives where ``nobody``
may not read), then drops to the other uid for good (``setgroups``/``setgid``/``setuid``) and runs the test's
code, so the kernel enforces everything a real colleague would meet. A second member is ``nobody``'s uid minus
one, a uid without an account (the kernel needs none), in ``nobody``'s group: no user is created.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

NOBODY = pwd.getpwnam("nobody")
#: the lab's group in these tests, and two of its members: nobody and a uid without an account
GID = NOBODY.pw_gid
MALLORY = NOBODY.pw_uid
ALICE = NOBODY.pw_uid - 1

_PRELUDE = """
import json, os, sys
from pathlib import Path
{imports}
__uid, __gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([__gid]); os.setgid(__gid); os.setuid(__uid)
assert os.getuid() == os.geteuid() == __uid
args = json.loads(sys.argv[3])
"""


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as a second uid")


def shared_dir(mode: int = 0o3775) -> Path:
    """A fresh directory ``root:<the lab's group>`` with ``mode`` (the admin guide's layout: 3775), outside any
    directory the other uids cannot enter. The caller removes it (``remove``)."""
    path = Path(tempfile.mkdtemp(prefix="ecolaunch-multiuser-"))
    os.chown(path, 0, GID)
    os.chmod(path, mode)
    return path


def remove(path: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=False)


def script(body: str, imports: str = "") -> str:
    return _PRELUDE.format(imports=textwrap.dedent(imports)) + textwrap.dedent(body)


def run_as(uid: int, body: str, args: object = None, *, imports: str = "", env: dict[str, str] | None = None,
           timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``body`` as ``uid`` (group: the lab's) with ``args`` (JSON) as ``args``; ``imports`` run before the drop.

    Returns the finished process; with ``check`` its exit status must be 0.
    """
    base = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"}
    argv = [sys.executable, "-c", script(body, imports), str(uid), str(GID), json.dumps(args)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd="/", env={**base, **(env or {})})
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def start_as(uid: int, body: str, args: object = None, *, imports: str = "") -> subprocess.Popen:
    """Start ``body`` as ``uid`` and leave it running (for a live launcher pid of that uid); it should print one line
    when ready and exit when its stdin closes."""
    base = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"}
    argv = [sys.executable, "-c", script(body, imports), str(uid), str(GID), json.dumps(args)]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd="/", env=base)


def last_json(out: subprocess.CompletedProcess) -> object:
    return json.loads(out.stdout.strip().splitlines()[-1])
