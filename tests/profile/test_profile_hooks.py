"""The in-process hooks: free when idle, stamps and hints through the channel when launched by ecolaunch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ecolaunch
from ecolaunch.errors import ConfigError
from ecolaunch.profile import channel, hooks
from ecolaunch.profile.history import declared_steps
from ecolaunch.state.graph import MAX_EXPECTED_ITERATIONS
from tests.conftest import clean_env


@pytest.fixture(autouse=True)
def _idle_hooks():
    hooks.reconfigure({})
    yield
    hooks.reconfigure({})


def run_script(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, timeout=60, check=False)


USER_SCRIPT = """
    import sys
    import ecolaunch

    @ecolaunch.job(name="tiny", max_slowdown_pct=10, memory_mib=512, profile_safe=True)
    def main():
        for _ in range(5):
            ecolaunch.step()
        for _ in ecolaunch.track([1, 2, 3]):
            pass
        one = ecolaunch.train_step(lambda: 1)
        one(); one()
        print(ecolaunch.is_profiling(), "torch" in sys.modules, "torch_geometric" in sys.modules)

    main()
"""


def test_idle_path_writes_nothing_and_imports_nothing_heavy(tmp_path: Path) -> None:
    proc = run_script(USER_SCRIPT, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "False"]
    assert list(tmp_path.iterdir()) == []


def test_idle_helpers_return_their_argument() -> None:
    data = [1, 2]

    def f() -> int:
        return 3

    assert ecolaunch.track(data) is data
    assert ecolaunch.train_step(f) is f
    assert ecolaunch.train_step()(f) is f
    assert not hooks.is_active()
    ecolaunch.step()  # no error, nothing to do


def test_active_path_stamps_reach_the_reader(tmp_path: Path) -> None:
    hook_dir = tmp_path / "hooks"
    hook_dir.mkdir()
    proc = run_script(USER_SCRIPT, tmp_path, ECOLAUNCH_HOOK_DIR=str(hook_dir), RANK="2", ECOLAUNCH_PROFILING="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "False"]
    steps = channel.read_steps(hook_dir)
    assert list(steps) == [2]
    stamps = steps[2]
    assert len(stamps) == 5 + 3 + 2  # step() x5, track over 3 items, train_step x2
    assert stamps == sorted(stamps)
    assert len(channel.iteration_times(stamps, warmup=3)) == len(stamps) - 4
    hints = channel.read_hints(hook_dir)
    # the loop over a list of 3 after 5 steps declared 5 + 3
    assert hints == {"name": "tiny", "max_slowdown_pct": 10, "memory_mib": 512, "profile_safe": True, "key": None,
                     "steps": None, "tracked_steps": 8}


def test_reader_drops_a_torn_trailing_record(tmp_path: Path) -> None:
    hook_dir = tmp_path / "hooks"
    hook_dir.mkdir()
    proc = run_script("import ecolaunch\nfor _ in range(4): ecolaunch.step()\n", tmp_path,
                      ECOLAUNCH_HOOK_DIR=str(hook_dir))
    assert proc.returncode == 0, proc.stderr
    path = channel.steps_path(hook_dir, 0)
    with path.open("ab") as f:
        f.write(b"\x01\x02\x03")  # a crash in the middle of a record
    stamps = channel.read_steps(hook_dir)[0]
    assert len(stamps) == 4
    assert all(s > 0 for s in stamps)


def test_step_and_track_in_process(tmp_path: Path) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path), "RANK": "1"})
    assert hooks.is_active()
    tracked = ecolaunch.track(range(3))
    assert len(tracked) == 3
    assert list(tracked) == [0, 1, 2]
    ecolaunch.step()
    hooks.reconfigure({})  # closes the file
    assert len(channel.read_steps(tmp_path)[1]) == 3 + 1


def test_track_counts_one_iteration_per_item_like_step(tmp_path: Path) -> None:
    for name, body in (("track", "for _ in ecolaunch.track(range(10)):\n    pass\n"),
                       ("step", "for _ in range(10):\n    ecolaunch.step()\n"),
                       ("empty", "for _ in ecolaunch.track([]):\n    pass\n")):
        hook_dir = tmp_path / name
        hook_dir.mkdir()
        proc = run_script("import ecolaunch\n" + body, tmp_path, ECOLAUNCH_HOOK_DIR=str(hook_dir))
        assert proc.returncode == 0, proc.stderr
        assert len(channel.read_steps(hook_dir).get(0, [])) == (0 if name == "empty" else 10), name


def test_a_launch_counts_track_over_ten_items_as_ten_iterations(tmp_path: Path) -> None:
    (tmp_path / "tracked.py").write_text("import ecolaunch\nfor _ in ecolaunch.track(range(10)):\n    pass\n")
    (tmp_path / "stepped.py").write_text("import ecolaunch\nfor _ in range(10):\n    ecolaunch.step()\n")
    env = clean_env(ECOLAUNCH_SIMULATE="1xA100-SXM4-80GB", ECOLAUNCH_STATE_DIR=str(tmp_path / "state"))
    for script in ("tracked.py", "stepped.py"):
        proc = subprocess.run([sys.executable, "-m", "ecolaunch", "--profile", "off", "python", script], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "ecolaunch: 10 iterations\n" in proc.stderr, proc.stderr
    listed = subprocess.run([sys.executable, "-m", "ecolaunch", "history", "--json"], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    assert sorted((r["name"], r["iterations"]) for r in json.loads(listed.stdout)) == [
        ("stepped.py", 10), ("tracked.py", 10)]


def test_train_step_marks_successful_calls_only(tmp_path: Path) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path)})

    @ecolaunch.train_step
    def train(x: int) -> int:
        """One step."""
        if x < 0:
            raise ValueError("bad batch")
        return 2 * x

    assert train(3) == 6
    assert train.__doc__ == "One step."
    with pytest.raises(ValueError):
        train(-1)
    assert len(channel.read_steps(tmp_path)[0]) == 1


def test_job_hints_bare_and_with_arguments(tmp_path: Path) -> None:
    @ecolaunch.job
    def main() -> str:
        return "ran"

    assert main() == "ran"
    assert ecolaunch.job_hints() == ecolaunch.JobHints()
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path), "RANK": "0"})

    @ecolaunch.job("bert-ft", max_slowdown_pct=5.5, memory_mib=20_000)
    def main2() -> None:
        pass

    assert main2.__ecolaunch_job__ == ecolaunch.JobHints("bert-ft", 5.5, 20_000, False)
    assert json.loads(channel.hints_path(tmp_path, 0).read_text())["steps"] is None
    assert json.loads(channel.hints_path(tmp_path, 0).read_text())["max_slowdown_pct"] == 5.5
    with pytest.raises(AttributeError):
        ecolaunch.job_hints().name = "other"  # type: ignore[union-attr]


@pytest.mark.parametrize("kwargs", [
    {"max_slowdown_pct": -1}, {"max_slowdown_pct": "10"}, {"max_slowdown_pct": float("nan")},
    {"memory_mib": 0}, {"memory_mib": 1.5}, {"memory_mib": True}, {"profile_safe": "yes"}, {"name": ""},
    {"key": ""}, {"key": "  "}, {"key": 7}, {"key": "k" * 201},
    {"steps": 0}, {"steps": -3}, {"steps": 2.0}, {"steps": True}, {"steps": "100"}, {"steps": 10 ** 12 + 1},
])
def test_job_rejects_bad_hints(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        ecolaunch.job(**kwargs)


def test_a_bad_steps_hint_says_what_to_declare() -> None:
    with pytest.raises(ConfigError) as e:
        ecolaunch.JobHints(steps=0)
    assert str(e.value) == "steps must be a whole number from 1 to 1000000000000, got 0"
    assert e.value.hint == "e.g. steps=epochs * len(loader): the iterations the whole run marks"
    assert ecolaunch.JobHints(steps=600).steps == 600
    assert hooks.MAX_STEPS == MAX_EXPECTED_ITERATIONS  # repeated in the hooks so that they import nothing


def _tracked(hook_dir: Path) -> object:
    return json.loads(channel.hints_path(hook_dir, 0).read_text()).get("tracked_steps")


def test_a_tracked_loop_over_a_sized_iterable_declares_the_steps_through_it(tmp_path: Path) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path), "RANK": "0"})
    for _ in range(2):
        ecolaunch.step()
    for epoch in range(3):
        for _ in ecolaunch.track(range(4)):
            # declared when the loop starts: the steps before it plus its length (per epoch: through this one)
            assert _tracked(tmp_path) == 2 + 4 * (epoch + 1)
    assert len(channel.read_steps(tmp_path)[0]) == 14


def test_a_tracked_loop_without_a_length_declares_nothing(tmp_path: Path) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path), "RANK": "0"})

    class Broken:
        def __iter__(self):
            return iter([1, 2])

        def __len__(self) -> int:
            raise NotImplementedError("an iterable-style dataset")

    assert list(ecolaunch.track([])) == []  # a total of 0 declares nothing
    assert list(ecolaunch.track(x for x in range(3))) == [0, 1, 2]
    seen = []
    for item in ecolaunch.track(Broken()):  # a length that raises never reaches the loop
        seen.append(item)
    assert seen == [1, 2]
    assert not channel.hints_path(tmp_path, 0).exists()
    assert len(channel.read_steps(tmp_path)[0]) == 5


def test_job_steps_and_a_tracked_total_share_the_hints_file(tmp_path: Path) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path), "RANK": "0"})

    @ecolaunch.job(name="ft", steps=600)
    def main() -> None:
        for _ in ecolaunch.track(range(5)):
            pass

    main()
    hints = channel.read_hints(tmp_path)
    assert (hints["name"], hints["steps"], hints["tracked_steps"]) == ("ft", 600, 5)
    assert declared_steps(hints) == 600  # the explicit steps win
    assert declared_steps({"tracked_steps": 5}) == 5
    assert declared_steps({"steps": None, "tracked_steps": 5}) == 5
    assert declared_steps({"steps": 0, "tracked_steps": "5"}) is None
    assert declared_steps({}) is None


def test_a_failed_write_of_the_tracked_total_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path), "RANK": "0"})
    channel.hints_path(tmp_path, 0).mkdir()  # the hints file cannot be replaced
    with caplog.at_level(logging.WARNING, logger="ecolaunch.profile.hooks"):
        for n in (2, 3):
            assert list(ecolaunch.track(range(n))) == list(range(n))
    warned = [r.message for r in caplog.records]
    assert len(warned) == 1 and warned[0].startswith("ecolaunch could not pass job hints to the launcher"), warned
    assert len(channel.read_steps(tmp_path)[0]) == 5  # the steps are marked all the same


def test_decorators_reject_non_functions() -> None:
    with pytest.raises(ConfigError):
        ecolaunch.job(name="x")(42)
    with pytest.raises(ConfigError):
        ecolaunch.train_step()(42)


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("0", False), ("", False)])
def test_is_profiling(value: str, expected: bool) -> None:
    hooks.reconfigure({"ECOLAUNCH_PROFILING": value})
    assert ecolaunch.is_profiling() is expected
    hooks.reconfigure({})
    assert ecolaunch.is_profiling() is False


def test_unwritable_hook_dir_turns_hooks_off_without_raising(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path / "missing")})
    with caplog.at_level(logging.WARNING, logger="ecolaunch.profile.hooks"):
        ecolaunch.step()
        ecolaunch.step()
    assert not hooks.is_active()
    assert len([r for r in caplog.records if "turned off" in r.message]) == 1


def test_bad_rank_falls_back_to_zero(tmp_path: Path) -> None:
    hooks.reconfigure({"ECOLAUNCH_HOOK_DIR": str(tmp_path), "RANK": "x"})
    ecolaunch.step()
    hooks.reconfigure({})
    assert list(channel.read_steps(tmp_path)) == [0]


def test_env_names_match_the_channel() -> None:
    assert (hooks.ENV_HOOK_DIR, hooks.ENV_PROFILING, hooks.ENV_RANK) == (
        channel.ENV_HOOK_DIR, channel.ENV_PROFILING, channel.ENV_RANK)
    assert os.environ.get(hooks.ENV_HOOK_DIR) is None  # the autouse conftest fixture keeps tests clean
