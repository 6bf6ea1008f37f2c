"""Running test code as another real uid, as ``tests/state/test_store_safety.py`` does with ``nobody``.

The tests run as root; a child process imports what it needs first (the interpreter lives where ``nobody``
may not read), then drops to the other uid for good (``setgroups``/``setgid``/``setuid``) and runs the test's
code, so the kernel enforces everything a real colleague would meet. A second member is ``nobody``'s uid minus
one, a uid without an account (the kernel needs none), in ``nobody``'s group: no user is created.

Every shared directory lives under one root-owned lab directory (:func:`lab`), which also holds the lab admin's
policy for it (``policy.toml``, root's, ``[state] dir`` naming the lab): the members' processes run under it, as the
admin's policy for that directory (``ecolaunch.admin.binding``), so that no test reads the host's own
``/etc/ecolaunch/policy.toml``.
"""

from __future__ import annotations

import atexit
import functools
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
#: a user outside the lab: a uid without an account, in a group of its own (neither nobody's nor root's)
OUTSIDER = NOBODY.pw_uid - 2
OUTSIDER_GID = NOBODY.pw_gid - 2

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


@functools.cache
def lab() -> Path:
    """The root-owned directory (``0755``) that holds every :func:`shared_dir` of this test session, and the admin's
    policy for them (:func:`lab_policy`); removed when the session ends."""
    path = Path(tempfile.mkdtemp(prefix="ecolaunch-lab-"))
    os.chmod(path, 0o755)
    policy = path / "policy.toml"
    policy.write_text(f"# the lab admin's policy for the tests' shared directories: no limits\n[state]\ndir = {json.dumps(str(path))}\n")
    os.chmod(policy, 0o644)
    atexit.register(remove, path)
    return path


def lab_policy() -> Path:
    """The admin's policy for every shared directory of the tests (see :func:`lab`)."""
    return lab() / "policy.toml"


def member_env(**extra: str) -> dict[str, str]:
    """The environment a member's process starts with: the repository, ``PATH``, no home, the lab's policy."""
    return {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent",
            "ECOLAUNCH_POLICY": str(lab_policy()), **extra}


def shared_dir(mode: int = 0o3770) -> Path:
    """A fresh directory ``root:<the lab's group>`` with ``mode`` (the admin guide's layout: 3770), in the lab
    directory (:func:`lab`), which every uid may enter. The caller removes it (``remove``)."""
    path = Path(tempfile.mkdtemp(prefix="ecolaunch-multiuser-", dir=lab()))
    os.chown(path, 0, GID)
    os.chmod(path, mode)
    return path


def remove(path: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=False)


def script(body: str, imports: str = "") -> str:
    return _PRELUDE.format(imports=textwrap.dedent(imports)) + textwrap.dedent(body)


def run_as(uid: int, body: str, args: object = None, *, imports: str = "", env: dict[str, str] | None = None,
           timeout: float = 120, check: bool = True, gid: int = GID) -> subprocess.CompletedProcess:
    """Run ``body`` as ``uid`` (group ``gid``: the lab's by default) with ``args`` (JSON) as ``args``; ``imports``
    run before the drop.

    Returns the finished process; with ``check`` its exit status must be 0.
    """
    argv = [sys.executable, "-c", script(body, imports), str(uid), str(gid), json.dumps(args)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd="/", env=member_env(**(env or {})))
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def start_as(uid: int, body: str, args: object = None, *, imports: str = "", gid: int = GID) -> subprocess.Popen:
    """Start ``body`` as ``uid`` (group ``gid``) and leave it running (for a live launcher pid of that uid); it should
    print one line when ready and exit when its stdin closes."""
    argv = [sys.executable, "-c", script(body, imports), str(uid), str(gid), json.dumps(args)]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd="/", env=member_env())


def last_json(out: subprocess.CompletedProcess) -> object:
    return json.loads(out.stdout.strip().splitlines()[-1])
