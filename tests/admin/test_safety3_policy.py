"""Issue 35 (safety, round three), item 3: the admin's policy binds every member.

A member with a policy file of her own (``ECOLAUNCH_POLICY``) on the lab's shared state directory may only tighten
the admin's rules: every setting that would loosen one is ignored and one warning names them. On a directory of
her own her file is the policy. Run as a real second uid; the admin's policy file (``/etc/ecolaunch/policy.toml`` in
production) is the test's own, so that nothing here reads the host's (the one constant patched in the child).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from ecolaunch.admin.binding import binding_policy, private_state_dir, tightened
from ecolaunch.admin.rules import load_rules, parse_rules
from ecolaunch.state.layout import init_state
from tests.multiuser import GID, MALLORY, last_json, lab, remove, require_root, run_as, shared_dir

ADMIN = """
[slowdown]
default_pct = 10.0
max_pct = 20.0
[colocation]
enabled = false
[reserve.3]
users = ["root"]
[users."*"]
max_gpus = 1
[power]
max_total_w = 1200
"""
HERS = """
[slowdown]
max_pct = 15.0
[colocation]
enabled = true
[reserve.3]
users = ["root", "nobody"]
[reserve.2]
users = ["nobody"]
[users."*"]
max_gpus = 4
[power]
max_total_w = 5000
"""

BIND = """
import ecolaunch.admin.binding as binding
binding.DEFAULT_POLICY_FILE = Path(args["admin"])  # the admin's file: the test's, never the host's
out = {}
for where in ("shared", "own"):
    b = binding.binding_policy({"ECOLAUNCH_POLICY": args["hers"], "ECOLAUNCH_STATE_DIR": args[where]})
    out[where] = {"max_gpus": b.rules.user_gpu_limit, "colocation": b.rules.allow_colocation,
                  "max_pct": b.rules.max_slowdown_pct, "reserved": {k: list(v) for k, v in b.rules.reserved.items()},
                  "budget": b.rules.power_max_total_w, "ignored": list(b.ignored)}
print(json.dumps(out))
"""


def _admins_file() -> Path:
    """The admin's policy of these tests (root's, ``0644``), in the lab directory every member may read."""
    admin = lab() / "admin-policy.toml"
    admin.write_text(ADMIN)
    os.chmod(admin, 0o644)
    return admin


def test_a_members_own_policy_only_tightens_the_admins_on_a_shared_directory() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        admin = _admins_file()
        out = run_as(MALLORY, textwrap.dedent("""
            hers = Path(args["home"]) / "p.toml"
            own = Path(args["home"]) / "state"
            os.makedirs(own, mode=0o700)
            hers.write_text(args["text"])
            args.update(hers=str(hers), own=str(own), shared=args["d"])
            """) + BIND, {"d": str(d), "admin": str(admin), "home": str(d / "hooks" / "mallory"), "text": HERS},
            imports="import ecolaunch.admin.binding")
        seen = last_json(out)
        assert seen["shared"] == {
            "max_gpus": {"*": 1}, "colocation": False, "max_pct": 15.0, "budget": 1200.0,
            "reserved": {"3": ["root"], "2": ["nobody"]},  # her own extra reservation tightens: kept
            "ignored": [f"allow_colocation = True ({d}/hooks/mallory/p.toml:5)",
                        f"power_max_total_w ({d}/hooks/mallory/p.toml:13: only the admin sets it)",
                        f"user_gpu_limit[*] = 4 ({d}/hooks/mallory/p.toml:11)",
                        f"reserved[3] ({d}/hooks/mallory/p.toml:6: opens a GPU the admin reserved)"]}
        assert seen["own"] == {"max_gpus": {"*": 4}, "colocation": True, "max_pct": 15.0, "budget": 5000.0,
                               "reserved": {"3": ["root", "nobody"], "2": ["nobody"]}, "ignored": []}
        # the one warning line, as every command prints it
        assert out.stderr.count("may only tighten the admin's policy on the shared state directory") == 1, out.stderr
    finally:
        remove(d)


def test_the_admins_policy_written_for_a_directory_binds_there_and_a_members_copy_does_not() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        admin = _admins_file()
        policy = d / "policy.toml"  # root's, in root's sticky directory, naming it: the admin's word for it
        policy.write_text(f'[state]\ndir = "{d}"\n[users."*"]\nmax_gpus = 3\n')
        os.chmod(policy, 0o644)
        seen = last_json(run_as(MALLORY, """
            import shutil
            import ecolaunch.admin.binding as binding
            binding.DEFAULT_POLICY_FILE = Path(args["admin"])
            copy = Path(args["d"]) / "hooks" / "copy.toml"
            shutil.copy(args["policy"], copy)  # the same words, in a file of hers
            out = [binding.binding_policy({"ECOLAUNCH_POLICY": p, "ECOLAUNCH_STATE_DIR": args["d"]}).rules.user_gpu_limit
                   for p in (args["policy"], str(copy))]
            print(json.dumps(out))
            """, {"d": str(d), "policy": str(policy), "admin": str(admin)}, imports="import ecolaunch.admin.binding"))
        assert seen == [{"*": 3}, {"*": 1}]
    finally:
        remove(d)


def test_tightening_keeps_what_is_tighter_and_names_what_is_not() -> None:
    admin, _ = parse_rules(ADMIN, "admin.toml")
    mine, sources = parse_rules('[slowdown]\ndefault_pct = 22\n[energy]\neta = 0.5\n[profiling]\nmax_caps = 2\n'
                                '[users.bob]\nmax_gpus = 0\n[colocation]\nmax_jobs_per_gpu = 1\n', "mine.toml")
    rules, ignored = tightened(admin, mine, sources)
    assert (rules.default_slowdown_pct, rules.eta, rules.profiling_max_caps, rules.user_gpu_limit) == \
        (20.0, 1.0, 2, {"*": 1, "bob": 0})
    assert rules.max_jobs_per_gpu == 1
    assert ignored == ["eta = 0.5 (mine.toml:4)", "default_slowdown_pct = 22.0 (mine.toml:2: above the admin's maximum)"]


def test_root_and_a_private_directory_take_the_named_file_as_it_is(tmp_path: Path) -> None:
    mine = tmp_path / "p.toml"
    mine.write_text('[users."*"]\nmax_gpus = 7\n')
    env = {"ECOLAUNCH_POLICY": str(mine), "ECOLAUNCH_STATE_DIR": str(tmp_path / "state")}
    assert binding_policy(env, euid=0).rules == load_rules(mine)[0]
    assert private_state_dir(tmp_path / "state", os.geteuid())  # missing: judged by the directory above
    os.chmod(tmp_path, 0o777)
    assert not private_state_dir(tmp_path / "state", os.geteuid())


def test_a_member_may_turn_colleagues_profiles_off_but_not_back_on() -> None:
    # [profiling] colleagues: whether a first launch starts from another user's profile of the same job
    on, _ = parse_rules("", "admin.toml")
    off, off_sources = parse_rules("[profiling]\ncolleagues = false\n", "mine.toml")
    assert on.profiling_colleagues is True and off.profiling_colleagues is False
    assert tightened(on, off, off_sources)[0].profiling_colleagues is False
    back, back_sources = parse_rules("[profiling]\ncolleagues = true\n", "mine.toml")
    rules, ignored = tightened(off, back, back_sources)
    assert rules.profiling_colleagues is False and ignored == ["profiling_colleagues = True (mine.toml:2)"]
