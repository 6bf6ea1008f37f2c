"""Issue 17, items 2, 12 and the init-state half of 9: what a member plants at the state directory's own path, in
colleagues' and root's names under ``history/``, at ``gnn/``, ``calibration/`` and ``caps.json``.

The attacker is a real second uid (``nobody``, "mallory"); the victim a third (a uid without an account, "alice",
whose history directory is named by her number) and root. Root's ``ecolaunch init-state`` then refuses (a link
or a member's directory at the state directory's path) or repairs (everything else), and the victims' history
records, ``policy train`` and the cap ledger work again.
"""

from __future__ import annotations

import grp
import logging
import os
import socket
import stat
from pathlib import Path

from click.testing import CliRunner

from ecolaunch.caps.ledger import load_ledger_entries
from ecolaunch.cli.history_cmd import history as history_cmd
from ecolaunch.cli.init_state_cmd import init_state
from ecolaunch.cli.policy_cmd import policy
from ecolaunch.errors import StateError
from ecolaunch.profile.history import SQUAT_HINT, History
from ecolaunch.state.layout import init_state as make_layout
from tests.conftest import BIN
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir
from tests.profile.test_history import make_record

GROUP = grp.getgrgid(GID).gr_name
IMPORTS = """
import logging
from ecolaunch.profile.history import History
from ecolaunch.errors import StateError
from tests.profile.test_history import make_record
"""


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(init_state, list(args), env=env, prog_name="ecolaunch init-state")


def _mode(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


# --- item 2: the state directory's own path -------------------------------------------------------
def test_a_link_or_a_members_directory_at_the_state_directorys_path_is_refused_untouched() -> None:
    require_root()
    d = shared_dir()  # 3770 root:<group>, as /var/lib would be for a lab that keeps it shared
    victim = shared_dir(0o755)  # a root directory, e.g. /etc
    try:
        run_as(MALLORY, """
            d = Path(args["d"])
            os.symlink(args["victim"], d / "state")
            os.mkdir(d / "hers", 0o755)
            """, {"d": str(d), "victim": str(victim)})
        result = invoke("--group", GROUP, "--dir", str(d / "state"))
        assert result.exit_code == 1, result.output
        assert result.output == (f"Error: the state directory {str(d / 'state')!r} is a symbolic link to "
                                 f"{str(victim)!r}, made by uid {MALLORY}; init-state does not follow it\n"
                                 f"HINT: remove the link (rm {d / 'state'}) and run init-state again, or name the "
                                 "real directory with --dir\n")
        assert _mode(victim) == (0o755, 0, GID) and list(victim.iterdir()) == []  # not 3770, nothing created
        hers = _mode(d / "hers")
        result = invoke("--group", GROUP, "--dir", str(d / "hers"))
        assert result.exit_code == 1, result.output
        assert result.output.startswith(f"Error: the state directory {str(d / 'hers')!r} belongs to uid {MALLORY}, "
                                        "not to uid 0: its owner could remove or replace every file in it")
        assert f"HINT: check what is in it, then give it to root (chown 0 {d / 'hers'})" in result.output
        assert _mode(d / "hers") == hers and hers[1] == MALLORY and list((d / "hers").iterdir()) == []
    finally:
        remove(d)
        remove(victim)


def test_a_parent_a_member_may_write_is_warned_about(tmp_path: Path) -> None:
    require_root()
    d = shared_dir(0o2775)  # group-writable without the sticky bit: any member may rename what is in it
    try:
        run_as(MALLORY, 'os.mkdir(Path(args["d"]) / "mine", 0o755)', {"d": str(d)})
        for parent, why in ((d, f"is writable by group {GROUP} (mode 2775)"),
                            (d / "mine", f"belongs to uid {MALLORY}")):
            result = CliRunner().invoke(init_state, ["--group", GROUP, "--dir", str(parent / "s")])
            assert result.exit_code == 0, result.output + result.stderr
            assert f"Warning: {parent} {why}: whoever may write there can rename {parent / 's'} away" in result.stderr
            assert result.stderr.count("\nHINT: keep the state directory below directories only root may write") == 1
            assert _mode(parent / "s") == (0o3770, 0, GID)  # still set up: the warning is the admin's to act on
        quiet = CliRunner().invoke(init_state, ["--group", GROUP, "--dir", str(tmp_path / "s")])
        assert quiet.exit_code == 0 and quiet.stderr == ""  # a root-only path: nothing to say
    finally:
        remove(d)


# --- item 12: squatting ---------------------------------------------------------------------------
SQUAT = """
d = Path(args["d"])
for name in args["names"]:
    os.mkdir(d / "history" / name, 0o755)
os.mkdir(d / "gnn", 0o755)
(d / "gnn" / "weights.pt").write_bytes(b"mallory's weights")
os.mkdir(d / "calibration", 0o755)
(d / "calibration" / "A100.json").write_text("{}")
"""

#: alice's launch-side history: the lookup a launch makes first, then the record it stores at the end
ALICE_RECORDS = """
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("ecolaunch").addHandler(Keep())
h = History(Path(args["d"]))
out = {"lookup": h.lookup("ab" * 32)}
try:
    h.record(make_record("alices", user=str(os.getuid())))
    out["record"] = "ok"
except StateError as e:
    out["record"] = [str(e), e.hint]
out["lines"] = lines
print(json.dumps(out))
"""


def test_squatted_history_gnn_and_calibration_directories_are_repaired_by_init_state() -> None:
    require_root()
    d = shared_dir()
    try:
        make_layout(d, GID)
        names = [str(ALICE), "root", "daemon"]
        for made in (d / "history" / "root", d / "gnn", d / "calibration"):
            made.rmdir()  # as a layout before issue 17 left it: none of these made by the admin
        run_as(MALLORY, SQUAT, {"d": str(d), "names": names})
        # before: alice is told once, with the fix; her record cannot be written
        before = last_json(run_as(ALICE, ALICE_RECORDS, {"d": str(d)}, imports=IMPORTS))
        squat = f"{d}/history/{ALICE} belongs to uid {MALLORY}, not to you (uid {ALICE})"
        assert before["lookup"] is None
        assert before["lines"] == [f"your history directory is not your own: {squat}, so your jobs and profiles are "
                                   f"not recorded\nHINT: {SQUAT_HINT}"], before
        assert before["record"] == [f"cannot write the history file '{d}/history/{ALICE}/jobs/alices.json': {squat}",
                                    SQUAT_HINT]
        try:
            History(d).record(make_record("rootjob", user="root"))
            raise AssertionError("root's record was written into mallory's directory")
        except StateError as e:
            assert f"{d}/history/root belongs to uid {MALLORY}" in str(e)
            assert e.hint == "run `ecolaunch init-state`: it moves the directory aside and makes you a fresh one"
        env = {"ECOLAUNCH_STATE_DIR": str(d), "ECOLAUNCH_SIMULATE": "1xA100-SXM4-80GB"}
        listed = CliRunner().invoke(history_cmd, [], env=env)
        assert listed.exit_code == 0, listed.output
        assert [line for line in listed.stderr.splitlines() if line.startswith("Warning:")] == [
            f"Warning: {d}/history/{name} belongs to uid {MALLORY}, not to its user (uid {uid}): that user's jobs "
            "are neither recorded nor shown" for name, uid in sorted([(str(ALICE), ALICE), ("root", 0), ("daemon", 1)])]
        refused = CliRunner().invoke(policy, ["train", "--epochs", "1", "--synthetic", "0",
                                                              "--no-history"], env=env)
        assert refused.exit_code == 1
        assert f"Warning: {d}/calibration is a directory of uid {MALLORY} with mode 2755" in refused.stderr
        assert (f"Error: cannot write GNN weights into {d}/gnn: gnn: owned by uid {MALLORY}, not by uid 0\n"
                f"HINT: on a shared machine run `sudo ecolaunch init-state`") in refused.stderr, refused.stderr
        # the repair
        result = invoke("--group", GROUP, "--dir", str(d))
        assert result.exit_code == 0, result.output
        moved = [line for line in result.output.splitlines() if " aside to " in line]
        assert len(moved) == 5, result.output
        for name, uid in ((str(ALICE), ALICE), ("root", 0), ("daemon", 1)):
            assert any(line.startswith(f"ecolaunch init-state: moved {d}/history/{name} (a directory of uid {MALLORY},"
                                       f" but it is {name}'s, uid {uid}) aside to {d}/history/.{name}.untrusted-")
                       and line.endswith(f"; made a fresh one (mode 750, owner {uid}:{GID})")
                       for line in moved), result.output
        for name in ("gnn", "calibration"):
            assert any(line.startswith(f"ecolaunch init-state: moved {d}/{name} (a directory, owned by uid {MALLORY})")
                       for line in moved)
            assert _mode(d / name) == (0o750, 0, GID) and list((d / name).iterdir()) == []
        assert _mode(d / "history" / "root") == (0o750, 0, GID)  # root is always given its own
        assert invoke("--group", GROUP, "--dir", str(d)).output.endswith("(nothing to change)\n")
        # after: mallory cannot squat again, alice and root record, policy train writes root's weights
        again = last_json(run_as(MALLORY, """
            out = []
            d = Path(args["d"])
            for name in ("root", "gnn", "calibration"):
                try:
                    os.rename(d / name if name != "root" else d / "history" / name, d / f"x-{name}")
                    out.append("renamed")
                except OSError as e:
                    out.append(type(e).__name__)
            for name in args["names"]:
                try:
                    os.mkdir(d / "history" / name)
                    out.append("made")
                except OSError as e:
                    out.append(type(e).__name__)
            print(json.dumps(out))
            """, {"d": str(d), "names": names}))
        assert again == ["PermissionError"] * 3 + ["FileExistsError"] * 3
        assert _mode(d / "history" / str(ALICE)) == (0o750, ALICE, GID) and _mode(d / "history" / "daemon")[1] == 1
        run_as(ALICE, 'History(Path(args["d"])).record(make_record("alices", user=str(os.getuid())))', {"d": str(d)},
               imports=IMPORTS)
        History(d).record(make_record("rootjob", user="root"))
        assert sorted(r.job_id for r in History(d).list()) == ["alices", "rootjob"]
        trained = CliRunner().invoke(policy, ["train", "--epochs", "1", "--synthetic", "0",
                                                              "--no-history"], env=env)
        assert trained.exit_code == 0, trained.stderr
        assert "Warning" not in trained.stderr and (d / "gnn" / "weights.pt").stat().st_uid == 0
    finally:
        logging.getLogger("ecolaunch").handlers.clear()
        remove(d)


# --- item 9, the init-state half: caps.json --------------------------------------------------------
def test_init_state_repairs_a_planted_cap_ledger_and_creates_one_nobody_can_take() -> None:
    require_root()
    for plant in ('os.mkdir(Path(args["d"]) / "caps.json")',
                  '(Path(args["d"]) / "caps.json").write_text(json.dumps({"schema": "ecolaunch.jobcaps", "version": 1, '
                  '"host": args["host"], "gpus": {"GPU-x": {"original_w": 100}}}))'):
        d = shared_dir()
        try:
            make_layout(d, GID)  # no ledger yet, as before issue 17
            run_as(MALLORY, plant, {"d": str(d), "host": "vm"})
            owner = os.lstat(d / "caps.json").st_uid
            assert owner == MALLORY
            result = invoke("--group", GROUP, "--dir", str(d), env={"ECOLAUNCH_SIMULATE": "1xA100-SXM4-80GB"})
            assert result.exit_code == 0, result.output
            kind = "not a regular file" if "mkdir" in plant else "a regular file"
            assert f"ecolaunch init-state: moved {d}/caps.json ({kind}, owned by uid {MALLORY} with mode" in \
                result.output
            assert f"ecolaunch init-state: created {d}/caps.json (mode 640, owner 0:{GID}: an empty ledger)\n" in \
                result.output
            host = socket.gethostname()  # a one-host simulated spec takes this host's name
            assert load_ledger_entries(d / "caps.json", host, warn=_fail) == {}  # root's, trusted, empty
            out = last_json(run_as(MALLORY, """
                out = []
                for attempt in (lambda: os.unlink(Path(args["d"]) / "caps.json"),
                                lambda: os.rename(Path(args["d"]) / "caps.json", Path(args["d"]) / "c"),
                                lambda: os.mkdir(Path(args["d"]) / "caps.json"),
                                lambda: open(Path(args["d"]) / "caps.json", "w")):
                    try:
                        attempt(); out.append("done")
                    except OSError as e:
                        out.append(type(e).__name__)
                print(json.dumps(out))
                """, {"d": str(d)}))
            assert out == ["PermissionError", "PermissionError", "FileExistsError", "PermissionError"]
        finally:
            remove(d)


def _fail(fmt: str, *args: object) -> None:
    raise AssertionError(fmt % args)


#: a member's launch through the real CLI, in-process (the interpreter's own directory is not hers to read)
LAUNCH = """
from ecolaunch.cli.main import main
try:
    main(args["argv"])
except SystemExit as e:
    print(json.dumps({"exit": e.code}))
"""
LAUNCH_IMPORTS = """
import ecolaunch.cli.main, ecolaunch.cli.launch_cmd, ecolaunch.launch.pipeline, ecolaunch.launch.torchrun
import ecolaunch.runtime, ecolaunch.sim.reading, ecolaunch.devices.select, ecolaunch.policy.curve
import ecolaunch.caps.job, ecolaunch.profile.history, ecolaunch.profile.modes, ecolaunch.run.observer
import ecolaunch.policy.registry, ecolaunch.policy.gnn, ecolaunch.admin.rules, ecolaunch.launch.argv
import torch.distributed.run
"""


def test_a_launch_says_once_that_the_users_history_directory_is_squatted() -> None:
    require_root()
    d = shared_dir()
    try:
        make_layout(d, GID)
        run_as(MALLORY, 'os.mkdir(Path(args["d"]) / "history" / args["name"], 0o755)',
               {"d": str(d), "name": str(ALICE)})
        env = {"ECOLAUNCH_SIMULATE": "4xA100-SXM4-80GB", "ECOLAUNCH_STATE_DIR": str(d)}
        argv = ["--dry-run", "--nproc-per-node", "1", str(BIN / "env_dump.py"), str(d)]
        out = run_as(ALICE, LAUNCH, {"argv": argv}, imports=LAUNCH_IMPORTS, env=env)
        assert last_json(out) == {"exit": 0}, out.stderr
        notice = (f"ecolaunch: your history directory is not your own: {d}/history/{ALICE} belongs to uid {MALLORY}, "
                  f"not to you (uid {ALICE}), so your jobs and profiles are not recorded")
        lines = out.stderr.splitlines()
        assert lines.count(notice) == 1 and lines[lines.index(notice) + 1] == f"HINT: {SQUAT_HINT}", out.stderr
        assert out.stderr.count("init-state") == 1, out.stderr
        assert invoke("--group", GROUP, "--dir", str(d)).exit_code == 0
        again = run_as(ALICE, LAUNCH, {"argv": argv}, imports=LAUNCH_IMPORTS, env=env)
        assert last_json(again) == {"exit": 0} and "history directory" not in again.stderr, again.stderr
    finally:
        remove(d)
