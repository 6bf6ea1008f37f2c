"""``ecolaunch init-state``: the admin's layout, created and repaired; refused to a member (a real second uid)."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from click.testing import CliRunner

from ecolaunch.cli.init_state_cmd import init_state
from ecolaunch.state.store import StateStore
from tests.multiuser import GID, MALLORY, last_json, remove, require_root, run_as, shared_dir

GROUP = grp.getgrgid(GID).gr_name


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(init_state, list(args), env=env, prog_name="ecolaunch init-state")


def _mode(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


def test_creates_the_layout_then_has_nothing_to_change(tmp_path: Path) -> None:
    require_root()
    d = tmp_path / "state"
    result = invoke("--group", GROUP, "--dir", str(d))
    assert result.exit_code == 0, result.output
    members = sorted({(p.pw_name, p.pw_uid) for p in pwd.getpwall()
                      if p.pw_gid == GID or p.pw_name in grp.getgrgid(GID).gr_mem or p.pw_uid == 0})
    assert result.output == "".join(f"ecolaunch init-state: created {p} (mode {m}, owner {u}:{GID}{e})\n" for p, m, u, e in [
        (d, "3770", 0, ""), (f"{d}/jobs/", "3770", 0, ""), (f"{d}/hooks/", "3770", 0, ""),
        (f"{d}/history/", "3770", 0, ""), (d / "state.lock", "660", 0, ""), (d / "state.json", "660", 0, ""),
        *((f"{d}/history/{name}/", "750", uid, "") for name, uid in members),
        (f"{d}/gnn/", "750", 0, ""), (f"{d}/calibration/", "750", 0, ""),
        (d / "caps.json", "640", 0, ": an empty ledger")]) + f"ecolaunch init-state: {d} is ready for group {GROUP}\n"
    for name in ("", "jobs", "hooks", "history"):
        assert _mode(d / name) == (0o3770, 0, GID)
    assert _mode(d / "state.lock") == _mode(d / "state.json") == (0o660, 0, GID)
    assert _mode(d / "gnn") == _mode(d / "calibration") == (0o750, 0, GID) and _mode(d / "caps.json") == (0o640, 0, GID)
    assert all(_mode(d / "history" / name) == (0o750, uid, GID) for name, uid in members)
    assert StateStore(d).read().jobs == {}  # the store accepts it as it is
    again = invoke("--group", GROUP, "--dir", str(d))
    assert again.output == f"ecolaunch init-state: {d} is ready for group {GROUP} (nothing to change)\n"


def test_repairs_what_a_member_planted() -> None:
    require_root()
    d = shared_dir()
    try:
        run_as(MALLORY, """
            d = Path(args["d"])
            os.symlink("/etc", d / "hooks")
            os.mkdir(d / "jobs")
            os.chmod(d / "jobs", 0o777)
            os.mkfifo(d / "state.lock")
            """, {"d": str(d)})
        result = invoke("--group", GROUP, "--dir", str(d))
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert any(line.startswith(f"ecolaunch init-state: moved {d}/hooks (not a directory, owned by uid {MALLORY})")
                   for line in lines)
        assert any(line.startswith(f"ecolaunch init-state: moved {d}/state.lock (not a regular file") for line in lines)
        assert f"ecolaunch init-state: fixed {d}/jobs: owner {MALLORY}:{GID} -> 0:{GID}, mode 777 -> 3770" in lines
        assert _mode(d / "hooks") == _mode(d / "jobs") == (0o3770, 0, GID) and _mode(d / "state.lock")[0] == 0o660
    finally:
        remove(d)


def test_a_member_may_not_run_it() -> None:
    require_root()
    d = shared_dir()
    try:
        out = last_json(run_as(MALLORY, """
            r = CliRunner().invoke(init_state, ["--group", args["group"], "--dir", args["d"]])
            print(json.dumps([r.exit_code, r.output]))
            """, {"d": str(d), "group": GROUP}, imports="""
            from click.testing import CliRunner
            from ecolaunch.cli.init_state_cmd import init_state
            import ecolaunch.runtime, ecolaunch.state.layout, ecolaunch.admin.rules, grp
            """))
        assert out == [1, "Error: init-state must run as root: it gives the shared directories to root\n"
                          f"HINT: sudo ecolaunch init-state --group {GROUP}\n"]
    finally:
        remove(d)


def test_without_a_group_it_is_a_usage_error(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("")
    result = invoke("--dir", str(tmp_path / "s"), env={"ECOLAUNCH_POLICY": str(policy)})
    assert result.exit_code == 2 and "Error: name the lab's group: --group NAME, or [state] group" in result.output


def test_the_help_says_the_simulated_gpus_files_are_made_only_without_dir() -> None:
    """Issue 41: the help said init-state creates the simulated GPUs' files; it does only without --dir."""
    import subprocess

    from tests.conftest import REPO, clean_env, ecolaunch_cmd

    out = subprocess.run(ecolaunch_cmd("init-state", "--help"), env=clean_env(), cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert " ".join(out.stdout.split()).count(
        "With ECOLAUNCH_SIMULATE and without --dir it also creates the simulated GPUs' shared files, in the "
        "simulated machine's own directory; with --dir it lays out that directory only, and creates no simulated "
        "GPU files.") == 1, out.stdout
