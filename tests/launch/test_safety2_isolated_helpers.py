"""Issue 17, item 1: root never runs a member's code.

A member (a real second uid, ``tests/multiuser.py``) plants ``ecolaunch/__init__.py``, ``torch/``, ``psutil.py``,
``sitecustomize.py`` and ``usercustomize.py`` in a shared directory, each of which leaves a mark when imported. Root
runs ecolaunch from there (its working directory), with ``PYTHONSTARTUP`` and, where the helpers are ecolaunch's own,
``PYTHONPATH`` pointing there: a launch that starts a cap guard, ``ecolaunch calibrate`` (its workers and guard) and
``benchmarks/gpu_check.py``'s child commands. No mark may appear. Root's own process is started the way the
``ecolaunch`` console script runs (its working directory is not on ``sys.path``).

And the warning: root running ecolaunch from a directory a member owns says so once, with the fix.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ecolaunch.admin.interpreter import helper_argv, helper_env, settings_argv, unsafe_paths
from ecolaunch.runtime import open_gpus, resolve
from tests.conftest import BIN, REPO
from tests.multiuser import GID, MALLORY, remove, require_root, run_as, shared_dir

SPEC = "1xA100-SXM4-80GB"
PLANTS = ("ecolaunch/__init__.py", "torch/__init__.py", "psutil.py", "sitecustomize.py", "usercustomize.py",
          "startup.py")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: root's helpers, a second real uid")


@pytest.fixture
def planted():
    """A shared directory in which mallory planted modules that mark ``<dir>/marks/`` when imported."""
    require_root()
    top = shared_dir()
    run_as(MALLORY, """
        top = Path(args["top"])
        marks = top / "marks"
        marks.mkdir()
        os.chmod(marks, 0o777)
        for rel in args["plants"]:
            path = top / rel
            path.parent.mkdir(exist_ok=True)
            path.write_text(
                "import os\\n"
                f"open(os.path.join({str(marks)!r}, f'{rel.replace('/', '_')}-uid{{os.getuid()}}-pid{{os.getpid()}}'),"
                " 'w').close()\\n")
    """, {"top": str(top), "plants": list(PLANTS)})
    assert (top / "ecolaunch" / "__init__.py").stat().st_uid == MALLORY
    yield top
    remove(top)


def marks(top: Path) -> list[str]:
    return sorted(os.listdir(top / "marks"))


def as_root_cli(*args: str, pkg_root: Path = REPO) -> list[str]:
    """Root's ``ecolaunch``, started as the console script runs it: ``pkg_root`` first on the path, not the working
    directory (``-I`` also keeps this test's own ``PYTHON*`` variables from the parent; its children inherit them)."""
    boot = f"import sys; sys.path.insert(0, {str(pkg_root)!r}); from ecolaunch.cli.main import main; main()"
    return [sys.executable, "-I", "-c", boot, *args]


def test_a_root_launch_and_its_cap_guard_import_nothing_from_the_working_directory(planted, sim_env, tmp_path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[caps."A100-SXM4-80GB"]\nmax_w = 300.0\n')  # profiling lowers the cap: a guard is started
    env = sim_env(SPEC, ECOLAUNCH_POLICY=str(policy), PYTHONSTARTUP=str(planted / "startup.py"))
    backend = open_gpus(resolve(env)[0])
    ran = subprocess.run(as_root_cli("--profile", "inline", "--nproc-per-node", "1", str(BIN / "stepper.py"), "60",
                                     "0.02"), env=env, cwd=planted, capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stderr
    assert marks(planted) == []
    assert backend.gpus()[0].power_limit_w == 400.0  # the launcher (and its guard) put the cap back
    assert "guard" not in ran.stderr  # the guard started, was told done, and said nothing
    assert "non-root user can write" not in ran.stderr  # root's own install here is root's


def test_root_calibrate_and_its_workers_import_nothing_planted(planted, sim_env, state_dir) -> None:
    env = sim_env(SPEC, PYTHONSTARTUP=str(planted / "startup.py"))
    env["PYTHONPATH"] = os.pathsep.join([str(planted), env["PYTHONPATH"]])  # inherited by every child
    ran = subprocess.run(as_root_cli("calibrate", "--seconds", "0.1", "--settle-s", "0.05", "--workloads", "mm",
                                     "--json"), env=env, cwd=planted, capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stderr
    assert marks(planted) == []
    assert "'by': 'root'" in repr(__import__("json").loads(ran.stdout)[0]["caps"])  # caps set as root (a guard ran)
    assert (state_dir / "calibration" / "nvidia-a100-sxm4-80gb.simulated.json").is_file()


def test_gpu_check_children_import_nothing_planted(planted, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gpu_check

    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(planted), "PYTHONSTARTUP": str(planted / "startup.py")}
    commands = {"ecolaunch": gpu_check.ecolaunch_cmd("--version"), "torchrun": gpu_check.torchrun_cmd("--help"),
                "pytest": gpu_check.pytest_cmd("--version"), "sweep": gpu_check.sweep_cmd("--help")}
    for name, argv in commands.items():
        assert argv[1] == "-I", name
        ran = subprocess.run(argv, env=env, cwd=planted, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, f"{name}: {ran.stderr}"
        assert marks(planted) == [], name


def test_helpers_get_their_settings_on_the_command_line_not_from_the_environment(tmp_path) -> None:
    env = {"ECOLAUNCH_SIMULATE": SPEC, "ECOLAUNCH_STATE_DIR": "state", "ECOLAUNCH_POLICY": "p.toml",
           "PYTHONPATH": "/x", "PYTHONSTARTUP": "/x/s.py", "CUDA_VISIBLE_DEVICES": "GPU-1", "PATH": "/bin"}
    assert helper_env(env) == {"CUDA_VISIBLE_DEVICES": "GPU-1", "PATH": "/bin"}
    assert settings_argv(env, cwd=str(tmp_path)) == [f"--state-dir={tmp_path}/state", f"--simulate={SPEC}",
                                                     f"--policy={tmp_path}/p.toml"]
    (tmp_path / "p.toml").write_text("")
    env["ECOLAUNCH_POLICY"] = str(tmp_path / "p.toml")
    del env["ECOLAUNCH_STATE_DIR"]  # then resolved as every command does: the policy's, else a simulated default
    assert settings_argv(env, cwd=str(tmp_path))[0] == f"--state-dir={resolve(env)[0].state_dir}"
    argv = helper_argv("ecolaunch.cli.guard_cmd", "--launcher-pid", "1")
    assert argv[:3] == [sys.executable, "-I", "-c"] and argv[-3:] == ["ecolaunch.cli.guard_cmd", "--launcher-pid", "1"]


def test_nothing_in_ecolaunch_spawns_python_but_through_the_isolated_helper() -> None:
    """The registry of Python spawners is one function: a new ``sys.executable`` spawn elsewhere fails here."""
    allowed = {"ecolaunch/admin/interpreter.py", "ecolaunch/launch/argv.py"}  # argv.py: torchrun's -m parsing only
    found = []
    for path in sorted((REPO / "ecolaunch").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        text = path.read_text(encoding="utf-8")
        if rel not in allowed and re.search(r"sys\.executable|[\"']-m[\"']", text):
            found.append(rel)
    assert found == []


# --- the warning -----------------------------------------------------------------------------------------------


def test_paths_a_member_can_write_are_named(planted) -> None:
    mine = planted / "ecolaunch"  # mallory's directory
    run_as(MALLORY, "os.mkdir(args['d'], 0o755)", {"d": str(planted / "venv")})
    assert unsafe_paths([planted / "venv"], trees=[]) == [(str(planted / "venv"), f"owned by uid {MALLORY}")]
    assert unsafe_paths([], trees=[mine])[0] == (str(mine), f"owned by uid {MALLORY}")
    # the shared directory itself: root's, but the group may add entries (a module beside root's package)
    assert unsafe_paths([planted], trees=[]) == [(str(planted), f"writable by group {GID}")]
    # as a mere parent, a sticky directory is safe: nobody renames root's entries in it
    root_dir = planted / "rootdir"
    root_dir.mkdir(mode=0o755)
    assert unsafe_paths([root_dir], trees=[]) == []
    assert unsafe_paths([REPO / "ecolaunch"], trees=[REPO / "ecolaunch"]) == []


def test_root_running_a_package_a_member_owns_is_warned_once_with_the_fix(planted, sim_env) -> None:
    pkg = planted / "venv"  # mallory's "venv": a directory of hers holding ecolaunch
    run_as(MALLORY, "os.mkdir(args['d'], 0o755); os.symlink(args['pkg'], os.path.join(args['d'], 'ecolaunch'))",
           {"d": str(pkg), "pkg": str(REPO / "ecolaunch")})
    env = sim_env(SPEC)
    runs = {"agent": ["agent", "--once"], "launch": ["--dry-run", "--nproc-per-node", "1", str(BIN / "sleeper.py")],
            "calibrate": ["calibrate", "--gpu", "7"]}
    for name, args in runs.items():
        ran = subprocess.run(as_root_cli(*args, pkg_root=pkg), env=env, cwd="/", capture_output=True, text=True,
                             timeout=120)
        assert ran.stderr.count("non-root user can write") == 1, f"{name}: {ran.stderr}"
        assert f"{pkg} (owned by uid {MALLORY})" in ran.stderr, name
        assert "HINT: install ecolaunch into a root-owned environment" in ran.stderr, name
        assert "WARNING" in ran.stderr, name
