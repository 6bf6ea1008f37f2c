"""``ecolaunch top``: the live view in a real terminal (tmux: keys sent, the screen captured), and its one-shot plain
output when stdout is not a terminal."""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.cli.topview import render
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.runtime import open_gpus, resolve
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import BIN, REPO, clean_env, ecolaunch_cmd

SPEC = "2xA100-SXM4-80GB"
USER = pwd.getpwuid(os.getuid()).pw_name


def _cells(text: str, *start: str) -> list[str]:
    """The cells (split on runs of blanks) of the one row of ``text`` whose first cells are ``start``."""
    rows = [line.split() for line in text.splitlines() if line.split()[:len(start)] == list(start)]
    assert len(rows) == 1, text
    return rows[0]


# --- one-shot output --------------------------------------------------------------------------------------------
@pytest.fixture
def booked(state_dir: Path):
    """On simulated GPUs: job ``run1`` of this process running on one GPU with the progress of a heartbeat, and job
    ``wait1`` asking for both GPUs, queued behind it."""
    env = {"ECOLAUNCH_SIMULATE": SPEC, "ECOLAUNCH_STATE_DIR": str(state_dir), "ECOLAUNCH_POLICY": ""}
    environment, _ = resolve(env)
    backend = open_gpus(environment)
    session = Session(StateStore(state_dir), backend, ExclusivePolicy(), Rules())
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user=USER)
    job = session.submit(JobRequest(id="run1", user=USER, host=backend.hostname(), nproc=1), me, name="train.py",
                         info={"expected_iterations": 1000})  # its completed runs marked 1,000 steps
    placement = session.try_place(job.id)
    assert not isinstance(placement, int)
    session.heartbeat(placement.job, JobProgress(at=time.time(), iterations=120, iter_time_s=0.0502, energy_j=5400.0,
                                                 saving_j=600.0))
    session.submit(JobRequest(id="wait1", user=USER, host=backend.hostname(), nproc=2), me, name="big.py", info={})
    return clean_env(**env)


def test_without_a_terminal_it_prints_the_view_once(booked: dict[str, str]) -> None:
    out = subprocess.run(ecolaunch_cmd("top"), env=booked, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "\x1b" not in text  # plain text: no colour, no cursor moves
    assert _cells(text, "0", "NVIDIA") == ["0", "NVIDIA", "A100-SXM4-80GB", "50/400", "0", "%", "0/81920", "run1",
                                           f"({USER})"]
    assert _cells(text, "1", "NVIDIA")[-1] == "-"
    row = _cells(text, "run1")
    assert row[:5] == ["run1", USER, "train.py", "0", "400"] and re.fullmatch(r"0:0\d", row[5]), row
    assert re.fullmatch(r"0:4[0-4]", row[6]), row  # left: 880 steps to go at 50.2 ms, about 44 s
    # 50.2 ms per iteration, 5.4 kJ so far, an estimated 0.6 kJ saved: 10 % of the 6 kJ it would have used uncapped
    assert row[7:] == ["50.2", "ms", "5.4", "kJ", "~0.6", "kJ", "(10%)"]
    assert "SAVED (EST.)" in text and "saving: an estimate against running uncapped" in text
    queued = _cells(text, "1", "wait1")
    assert queued[:5] == ["1", "wait1", USER, "big.py", "2"] and queued[-1] == "-"  # no reason recorded


def test_once_prints_one_plain_view(booked: dict[str, str]) -> None:
    """``--once`` prints one plain view and exits (on a terminal too: the tmux test below)."""
    out = subprocess.run(ecolaunch_cmd("top", "--once"), env=booked, cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert _cells(out.stdout, "run1")[:3] == ["run1", USER, "train.py"]


def test_a_queue_row_shows_its_reason_and_member_text_is_not_markup() -> None:
    from rich.console import Console

    doc = {"host": "h", "simulate": None, "gpus": [], "jobs": [], "caps_left": [], "ignored": [],
           "queue": [{"position": 1, "id": "q1", "user": "eve", "name": "[bold]x\x1b[2J", "nproc": 2, "age_s": 75.0,
                      "reason": "Resources", "reason_detail": "0 of the 2 GPU(s) the job needs are free",
                      "starts_in_s": 45.0}]}
    console = Console(width=200, no_color=True, record=True, file=open(os.devnull, "w"))
    console.print(render(doc, live=False))
    text = console.export_text()
    assert _cells(text, "1", "q1") == ["1", "q1", "eve", "[bold]x\\x1b[2J", "2", "1:15", "0:45", "Resources"]


def test_long_names_wrap_on_an_80_column_terminal_and_are_never_cut() -> None:
    """Issue 41: docs/top.md says long names wrap; they were cut to "resnet50-…", which tells no job from another."""
    from rich.console import Console

    name = "resnet50-imagenet-lr3e-4-batch256-warmup-cosine-long"
    doc = {"host": "h", "simulate": None, "gpus": [], "caps_left": [], "ignored": [], "queue": [],
           "jobs": [{"id": "a1b2c3d4", "user": "alice", "name": name, "gpus": [], "age_s": 70.0, "iter_time_s": 0.05,
                     "energy_j": 5400.0, "saving_j": 600.0}]}
    console = Console(width=80, no_color=True, record=True, file=open(os.devnull, "w"))
    console.print(render(doc, live=False))
    text = console.export_text()
    jobs = text[text.index("jobs (1 running)"):text.index("queue: nothing waiting")]
    assert [line.rstrip() for line in jobs.splitlines()] == [
        "jobs (1 running)",
        " JOB       USER   NAME        GPUS  CAP W  TIME     ITER  ENERGY   SAVED (EST.)",
        "─" * 80,
        " a1b2c3d4  alice  resnet50-i     -    N/A  1:10  50.0 ms  5.4 kJ  ~0.6 kJ (10%)",
        "                  magenet-lr",
        "                  3e-4-batch",
        "                  256-warmup",
        "                  -cosine-lo",
        "                  ng",
        "",
    ]
    assert "…" not in text


@pytest.mark.parametrize("value, why", [
    ("0", "0.0 is not in the range 0.1<=x<=3600.0."),
    ("-1", "-1.0 is not in the range 0.1<=x<=3600.0."),
    ("soon", "'soon' is not a valid float range."),  # click's words
])
def test_a_bad_interval_is_a_usage_error(value: str, why: str, state_dir: Path) -> None:
    env = clean_env(ECOLAUNCH_SIMULATE=SPEC, ECOLAUNCH_STATE_DIR=str(state_dir))
    out = subprocess.run(ecolaunch_cmd("top", "--interval", value), env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == ["Usage: ecolaunch top [OPTIONS]", "Try 'ecolaunch top --help' for help.", "",
                                       f"Error: Invalid value for '--interval': {why}"]


# --- in a terminal --------------------------------------------------------------------------------------------
class Tmux:
    """A private tmux server (its own socket) with one 80x40 window (a common ssh terminal) running ``script`` in bash
    (which, unlike dash, goes on with the script when Ctrl-C ends a foreground command that exits normally, as a shell
    prompt does)."""

    def __init__(self, socket: Path, script: Path) -> None:
        self.socket = socket
        # the pane by its id (%N), not the session's name, in every later command: one pane, no name to resolve
        self.pane = self("new-session", "-d", "-P", "-F", "#{pane_id}", "-s", "top", "-x", "80", "-y", "40",
                         f"bash {shlex.quote(str(script))}").strip()

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", self.pane)

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} never appeared on the screen:\n{screen}\n"
                                     f"the pane's processes, where each waits:\n{self.processes()}")
            time.sleep(0.2)

    def tty_flags(self) -> list[str]:
        """The pane's terminal modes (``stty -a`` of its tty, read from outside)."""
        tty = self("display-message", "-p", "-t", self.pane, "#{pane_tty}").strip()
        return subprocess.run(["stty", "-F", tty, "-a"], capture_output=True, text=True, check=True).stdout.split()

    def processes(self) -> str:
        """``ps`` of the processes on the pane's terminal with the kernel function each sleeps in (``wchan``): a view
        waiting for a key sleeps in ``poll_schedule_timeout`` (its ``select``); one blocked writing or on a lock shows
        where. Printed when a screen never appears, since a terminal test that fails on CI alone has nothing else."""
        tty = self("display-message", "-p", "-t", self.pane, "#{pane_tty}").strip()
        return subprocess.run(["ps", "-t", tty.removeprefix("/dev/"), "-o", "pid,stat,wchan:28,etime,args"],
                              capture_output=True, text=True).stdout

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def running_launch(sim_env, tmp_path: Path):
    """A real launch of a long stepper job on simulated GPUs, in the background; its environment. Stopped after."""
    env = sim_env(SPEC)
    log = open(tmp_path / "launch.log", "w")
    launch = subprocess.Popen(ecolaunch_cmd("--nproc-per-node", "1", str(BIN / "stepper.py"), "3000", "0.02"),
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while '"state": "running"' not in subprocess.run(ecolaunch_cmd("status", "--json"), env=env,
                                                         capture_output=True, text=True, timeout=60).stdout:
            assert launch.poll() is None and time.monotonic() < deadline, (tmp_path / "launch.log").read_text()
            time.sleep(0.3)
        yield env
    finally:
        launch.send_signal(signal.SIGINT)
        launch.wait(timeout=60)
        log.close()


@pytest.mark.skipif(shutil.which("tmux") is None,
                    reason="tmux is not installed (.ci/run installs it): the live view is tested in a tmux terminal")
def test_top_in_a_terminal_shows_the_gpus_and_the_job_and_quits_on_q_or_ctrl_c(running_launch, tmp_path: Path) -> None:
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in running_launch.items() if k.isidentifier())
    top = f"{shlex.quote(ecolaunch_cmd()[0])} -m ecolaunch top --interval 0.5"
    script = tmp_path / "top.sh"
    # the pane's own size: a tmux server started without a terminal (as under pytest) sets COLUMNS=80 and LINES=24 in
    # the pane's environment, which rich reads before the terminal's size
    script.write_text(f"{exports}unset COLUMNS LINES\ncd {shlex.quote(str(REPO))}\n"
                      f"{top}; echo \"top exited $?\"\n"
                      "stty -a | tr ' ;' '\\n\\n' | grep -Ex -- '-?(icanon|echo)' | tr '\\n' ' '; echo\n"
                      # each next view waits for an Enter from the test, which has read the screen before it: a view
                      # that started at once would hide the line above under its alternate screen (CI saw the second
                      # view start before a capture found "top exited")
                      "read -r _\n"
                      f"{top}; echo \"top exited $? again\"\n"
                      "read -r _\n"
                      f"{top} --once; echo \"once exited $?\"\n"
                      "exec sleep 600\n")
    tmux = Tmux(tmp_path / "tmux.sock", script)
    try:
        screen = tmux.wait_for(r"stepper\.py")
        gpu0, gpu1 = _cells(screen, "0", "NVIDIA"), _cells(screen, "1", "NVIDIA")
        assert gpu0[1:3] == ["NVIDIA", "A100-SXM4-80GB"] and gpu0[-1] == f"({USER})"
        assert gpu1[1:3] == ["NVIDIA", "A100-SXM4-80GB"] and gpu1[-1] == "-"
        job_id = gpu0[-2]
        row = _cells(screen, job_id)
        assert row[:5] == [job_id, USER, "stepper.py", "0", "400"], screen
        assert "q quits" in screen and "queue: nothing waiting" in screen
        flags = tmux.tty_flags()
        assert "-icanon" in flags and "-echo" in flags  # cbreak mode while the view runs

        tmux("send-keys", "-t", tmux.pane, "q")
        screen = tmux.wait_for(r"top exited \d+\n.*icanon", timeout_s=20)
        assert "top exited 0" in screen
        assert "icanon echo" in screen  # the terminal's modes are back
        assert "stepper.py" not in screen  # the view left the alternate screen: the shell's screen is back

        tmux("send-keys", "-t", tmux.pane, "Enter")
        tmux.wait_for(r"stepper\.py")  # the second view
        tmux("send-keys", "-t", tmux.pane, "C-c")
        screen = tmux.wait_for(r"top exited \d+ again", timeout_s=20)
        assert "top exited 0 again" in screen
        # --once on a terminal: one view on the shell's screen, no keys read, exit 0
        tmux("send-keys", "-t", tmux.pane, "Enter")
        screen = tmux.wait_for(r"once exited \d+", timeout_s=30)
        assert "once exited 0" in screen and _cells(screen, job_id)[:3] == [job_id, USER, "stepper.py"]
        assert "q quits" not in screen.split("top exited 0 again")[1]
        flags = tmux.tty_flags()
        assert "icanon" in flags and "echo" in flags
    finally:
        tmux.kill()
