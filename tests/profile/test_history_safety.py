"""Issue 11, item 5: the job history is per user, its reads bounded, and no member can touch another's records.

A real second uid (``nobody``) and a third one (a uid without an account) store records in the admin's layout;
``nobody`` then tries the review's attacks: a record that is a link to ``/dev/zero``, a FIFO, an oversize file,
a record naming root, a look-alike user directory, and overwriting or renaming root's records.
"""

from __future__ import annotations

import stat
import time

from ecolaunch.profile.history import History
from ecolaunch.state.layout import init_state
from ecolaunch.state.userdirs import user_dir_name
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir
from tests.profile.test_history import FP, PROFILE, make_record

IMPORTS = """
from ecolaunch.profile.history import History
from tests.profile.test_history import FP, PROFILE, make_record
"""

ATTACKS = """
h = History(Path(args["d"]))
h.record(make_record("mine", user="nobody"))
h.record(make_record("fake", user="root"))  # a record in root's name, in my own directory
mine = h.jobs_dir
os.symlink("/dev/zero", mine / "zero.json")
os.mkfifo(mine / "fifo.json")
with open(mine / "big.json", "wb") as f:
    f.truncate(64 * 1024 * 1024)
root = Path(args["d"]) / "history" / "root"
out = {}
def attempt(name, fn):
    try:
        fn(); out[name] = "ok"
    except OSError as e:
        out[name] = type(e).__name__
attempt("overwrite", lambda: open(root / "jobs" / "rootjob.json", "w"))
attempt("rename_dir", lambda: os.rename(root, root.with_name("root-old")))
attempt("fifo_at_root_fingerprint", lambda: os.mkfifo(root / "profiles" / f"{'cd' * 32}.json"))  # root's next job
attempt("plant_in_root_dir", lambda: (root / "jobs" / "x.json").write_text("{}"))
os.mkdir(Path(args["d"]) / "history" / "daemon")  # a look-alike directory for another account
print(json.dumps(out))
"""


def test_members_keep_their_own_records_and_cannot_touch_anyone_elses() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        root = History(d)
        root.record(make_record("rootjob", user="root"))
        root.store_profile(FP, PROFILE, profile_safe=True)
        out = last_json(run_as(MALLORY, ATTACKS, {"d": str(d)}, imports=IMPORTS))
        assert out == {"overwrite": "PermissionError", "rename_dir": "PermissionError",
                       "fifo_at_root_fingerprint": "PermissionError", "plant_in_root_dir": "PermissionError"}
        # a later member stores records too (history/ was created by the admin, not by the first user)
        run_as(ALICE, 'History(Path(args["d"])).record(make_record("alices", user=str(os.getuid())))',
               {"d": str(d)}, imports=IMPORTS)
        mine = d / "history" / user_dir_name(MALLORY) / "jobs" / "mine.json"
        assert stat.S_IMODE(mine.stat().st_mode) == 0o640 and mine.stat().st_uid == MALLORY
        start = time.monotonic()
        records = History(d).list()
        assert time.monotonic() - start < 10  # the link to /dev/zero, the FIFO and 64 MiB are refused, not read
        assert sorted(r.job_id for r in records) == ["alices", "mine", "rootjob"]  # "fake" named root: skipped
        assert History(d).get("rootjob").user == "root" and History(d).get("fake") is None
        assert root.lookup(FP).profile == PROFILE  # root's profile, untouched
    finally:
        remove(d)


def test_without_the_admin_layout_the_first_user_does_not_lock_the_others_out() -> None:
    """No init-state: ``history/`` is created by whoever runs first; the next user still stores records."""
    require_root()
    d = shared_dir()  # 3775 root:<group>, empty
    try:
        for uid, name in ((MALLORY, "first"), (ALICE, "second")):
            run_as(uid, 'h = History(Path(args["d"])); h.record(make_record(args["id"], user=h._tree.user)); '
                        'h.store_profile(FP, PROFILE)', {"d": str(d), "id": name}, imports=IMPORTS)
        assert (d / "history").stat().st_mode & stat.S_ISVTX  # the first user made it sticky
        assert sorted(r.job_id for r in History(d).list()) == ["first", "second"]
    finally:
        remove(d)
