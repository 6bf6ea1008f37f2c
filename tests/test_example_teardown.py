"""Every example that starts a process group ends it the way docs/python-api.md ("Ending a gloo job") says: after
its ``destroy_process_group()`` no gloo thread is left running.

A gloo thread left to the interpreter's exit can abort a worker that finished its work (exit code 134, "terminate
called without an active exception"): it releases a finished collective after the interpreter began to finalize,
needs the GIL for it, and Python (before 3.14) ends such a thread with ``pthread_exit``, whose unwinding through a
``noexcept`` destructor calls ``std::terminate``. The abort itself is a race (a few runs in a hundred on loaded
cores: ``benchmarks/teardown_loop.py``); the threads left behind, its precondition, are seen every time, so the
test checks those, in a one-rank job of each example.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import BIN, REPO, clean_env

#: each example that calls init_process_group, with the function that runs a worker and its arguments
EXAMPLES = {
    "ddp_train.py": ["main", "--", "--steps", "2"],
    "instrumented_ddp.py": ["main", "--", "--steps", "2"],
    "python_launch.py": ["train", "2"],
}
GLOO_THREADS = ("gloo_tcp_loop", "pt_gloo_runloop", "pt_tcpstore_uv")


def test_every_example_with_a_process_group_is_checked() -> None:
    users = {p.name for p in (REPO / "examples").glob("*.py") if "init_process_group" in p.read_text()}
    assert users == set(EXAMPLES)


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_leaves_no_gloo_thread_after_destroy(example: str) -> None:
    cmd = [sys.executable, str(BIN / "example_teardown.py"), str(REPO / "examples" / example), *EXAMPLES[example]]
    done = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    threads = next(line for line in done.stdout.splitlines() if line.startswith("threads: "))
    assert not [name for name in threads.removeprefix("threads: ").split(",") if name in GLOO_THREADS], threads
