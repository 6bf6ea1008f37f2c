"""Issue 11, item 1: root never writes through a link a member planted in ``hooks/`` or ``history/``.

Each test lets a real second uid (``nobody``, a member of the lab's group) prepare the attack the review found,
then runs root's side (the launcher creating the hook directory, the worker writing its hints and step marks,
the launcher storing the history) and checks that the root-owned victim file is untouched.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ecolaunch.errors import StateError
from ecolaunch.profile import channel
from ecolaunch.profile.history import History
from ecolaunch.safefs import RefusedFile
from ecolaunch.state.layout import init_state
from tests.multiuser import GID, MALLORY, last_json, remove, require_root, run_as, shared_dir
from tests.profile.test_history import make_record

PLANT = """
def plant(args):
    # the review's attack: a world-writable directory full of links named like the worker's files, put where
    # the victim's run directory was (or where a guessable one would be)
    target = Path(args["target"])
    target.mkdir()
    os.chmod(target, 0o777)
    for pid in range(args["pid"] - 50, args["pid"] + 250):  # the review used thousands
        os.symlink(args["victim"], target / f".hints-0.json.{pid}.tmp")
    os.symlink(args["victim"], target / "hints-0.json")
    os.symlink(args["victim"], target / "steps-0.bin")
"""


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "root-only"
    path.write_text("precious")
    os.chmod(path, 0o600)
    return path


def _untouched(victim: Path) -> None:
    assert victim.read_text() == "precious" and stat.S_IMODE(victim.stat().st_mode) == 0o600 and not victim.is_symlink()


def test_a_member_can_neither_rename_nor_enter_a_root_run_hook_directory(victim: Path) -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        run_dir = channel.create_hook_dir(d / "hooks" / "job1")
        assert run_dir.parent == d / "hooks" and run_dir.name.startswith("job1-") and run_dir.name != "job1"
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700 and run_dir.stat().st_uid == 0
        out = last_json(run_as(MALLORY, """
            out = {}
            run_dir, hooks = Path(args["run_dir"]), Path(args["run_dir"]).parent
            for name, fn in [("rename", lambda: os.rename(run_dir, hooks / "moved")),
                             ("write_inside", lambda: open(run_dir / "hints-0.json", "w")),
                             ("remove", lambda: os.rmdir(run_dir))]:
                try:
                    fn(); out[name] = "ok"
                except OSError as e:
                    out[name] = type(e).__name__
            plant(args)  # at the guessable name of the old layout: it achieves nothing any more
            print(json.dumps(out))
            """, {"run_dir": str(run_dir), "target": str(d / "hooks" / "job1"), "victim": str(victim),
                  "pid": os.getpid()}, imports=PLANT))
        assert out == {"rename": "PermissionError", "write_inside": "PermissionError", "remove": "PermissionError"}
        # root's workers write their hints and step marks into the real run directory
        channel.write_hints(run_dir, 0, {"max_slowdown_pct": None})
        writer = channel.StepWriter(run_dir, 0)
        writer.stamp()
        writer.close()
        assert channel.read_hints(run_dir) == {"max_slowdown_pct": None} and len(channel.read_steps(run_dir)[0]) == 1
        _untouched(victim)
    finally:
        remove(d)


def test_the_worker_refuses_a_run_directory_a_member_swapped_in(victim: Path) -> None:
    """An old layout: ``hooks/`` group-writable without the sticky bit, so the member *can* swap the directory."""
    require_root()
    d = shared_dir(0o2775)
    try:
        (d / "hooks").mkdir()
        os.chown(d / "hooks", 0, GID)
        os.chmod(d / "hooks", 0o2775)
        run_dir = d / "hooks" / "job1-0123456789abcdef"
        run_dir.mkdir(mode=0o700)
        run_as(MALLORY, """
            os.rename(args["target"], args["target"] + ".gone")  # allowed: the directory is not sticky
            plant(args)
            """, {"target": str(run_dir), "victim": str(victim), "pid": os.getpid()}, imports=PLANT)
        assert (run_dir / "steps-0.bin").is_symlink()
        with pytest.raises(OSError) as hints:
            channel.write_hints(run_dir, 0, {"max_slowdown_pct": None})
        writer = channel.StepWriter(run_dir, 0)
        with pytest.raises(OSError) as steps:
            writer.stamp()
        assert isinstance(hints.value, RefusedFile) and "owned by uid" in str(hints.value)
        assert isinstance(steps.value, RefusedFile)
        _untouched(victim)
        # and the launcher itself refuses to create run directories in a hooks/ that is not sticky and not its own
        os.chown(d / "hooks", MALLORY, GID)
        with pytest.raises(RefusedFile):
            channel.create_hook_dir(d / "hooks" / "job2")
    finally:
        remove(d)


def test_root_never_writes_history_through_a_planted_link(tmp_path: Path) -> None:
    require_root()
    d = shared_dir(0o2775)  # no init-state: history/ does not exist yet, and the directory is not sticky
    target = tmp_path / "elsewhere"
    target.mkdir()
    try:
        run_as(MALLORY, """
            os.symlink(args["target"], Path(args["d"]) / "history")
            """, {"d": str(d), "target": str(target)})
        history = History(d)
        with pytest.raises(StateError, match="symbolic link"):
            history.record(make_record("j1"))
        with pytest.raises(StateError, match="symbolic link"):
            history.store_profile("ab" * 32, None, profile_safe=True)
        assert history.list() == [] and history.lookup("ab" * 32) is None
        assert list(target.iterdir()) == []  # nothing created under the link's target
    finally:
        remove(d)
