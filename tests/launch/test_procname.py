"""The launcher's process name (issue 41: ``ps -o comm`` showed ``pt_elastic``, torch's name for its thread)."""

from __future__ import annotations

import sys
import threading
import types
from pathlib import Path

import pytest

from ecolaunch.launch.procname import PROCESS_NAME, keeping_name, set_name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names through prctl are Linux's")
def test_set_name_names_the_calling_thread() -> None:
    seen: list[str] = []

    def name_me() -> None:  # another thread: pytest's own keeps its name
        set_name("eco-test")
        seen.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())

    worker = threading.Thread(target=name_me)
    worker.start()
    worker.join()
    assert seen == ["eco-test"]


def test_keeping_name_turns_torchs_pt_elastic_into_ours_and_restores_the_setter() -> None:
    asked: list[str] = []

    def torch_setter(name: str) -> None:
        asked.append(name)

    fake = types.SimpleNamespace(_set_thread_name=torch_setter)
    with keeping_name(fake):
        fake._set_thread_name("pt_elastic")  # what torch.distributed.run.run() does first
    assert asked == [PROCESS_NAME] and fake._set_thread_name is torch_setter
    with keeping_name(types.SimpleNamespace()):  # a torch without the setter: nothing to keep
        pass
