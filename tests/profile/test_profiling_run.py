"""``ECOLAUNCH_PROFILE_STEPS``: a pre-launch profiling run's workers stop with status 0 after N step marks.

The exit is ``os._exit(0)`` (see ``ecolaunch.profile.hooks``), so these tests run the hooks in subprocesses.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ecolaunch.profile import channel, hooks
from tests.conftest import clean_env

STEPS = """
    import atexit, ecolaunch
    atexit.register(lambda: print("atexit ran"))
    try:
        for i in range(100):
            ecolaunch.step()
        print("ran to the end")
    finally:
        print("cleanup ran")
"""

TRACK = """
    import ecolaunch
    for item in ecolaunch.track(range(10)):
        print("item", item)  # block-buffered into a pipe: the hooks must flush it
"""


def run(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=clean_env(**env),
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_profiling_run_stops_after_n_steps_without_running_cleanup(tmp_path: Path) -> None:
    proc = run(STEPS, tmp_path, ECOLAUNCH_HOOK_DIR=str(tmp_path), ECOLAUNCH_PROFILING="1",
               ECOLAUNCH_PROFILE_STEPS="7")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # neither the rest of the loop nor the script's clean-up ran
    assert len(channel.read_steps(tmp_path)[0]) == 7


@pytest.mark.parametrize("env", [
    {"ECOLAUNCH_PROFILE_STEPS": "7"},  # not a profiling run: a real run is never cut short
    {"ECOLAUNCH_PROFILING": "1", "ECOLAUNCH_PROFILE_STEPS": "seven"},
    {"ECOLAUNCH_PROFILING": "1", "ECOLAUNCH_PROFILE_STEPS": "0"},
])
def test_the_limit_applies_only_to_valid_profiling_runs(tmp_path: Path, env: dict[str, str]) -> None:
    proc = run(STEPS, tmp_path, ECOLAUNCH_HOOK_DIR=str(tmp_path), **env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == ["ran to the end", "cleanup ran", "atexit ran", ""]
    assert len(channel.read_steps(tmp_path)[0]) == 100
    if env.get("ECOLAUNCH_PROFILING"):
        assert "is not an integer >= 1" in proc.stderr


def test_steps_are_counted_even_when_the_step_file_cannot_be_written(tmp_path: Path) -> None:
    proc = run(STEPS, tmp_path, ECOLAUNCH_HOOK_DIR=str(tmp_path / "gone"), ECOLAUNCH_PROFILING="1",
               ECOLAUNCH_PROFILE_STEPS="3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "ecolaunch step hooks turned off" in proc.stderr


def test_track_stops_inside_the_loop_and_flushes_output(tmp_path: Path) -> None:
    proc = run(TRACK, tmp_path, ECOLAUNCH_HOOK_DIR=str(tmp_path), ECOLAUNCH_PROFILING="1",
               ECOLAUNCH_PROFILE_STEPS="4")
    assert proc.returncode == 0, proc.stderr
    # the 4th mark ends item 3's iteration (as step() at the end of its body would): item 4 never runs
    assert proc.stdout.split() == ["item", "0", "item", "1", "item", "2", "item", "3"]
    assert hooks.ENV_PROFILE_STEPS == channel.ENV_PROFILE_STEPS
