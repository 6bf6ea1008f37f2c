"""The launcher's process name, as ``ps -o comm``, ``top`` and ``pgrep`` show it: ``ecolaunch``.

What lives here: :func:`set_name` (names the calling thread; Linux: ``prctl(PR_SET_NAME)`` through ctypes; elsewhere
it does nothing and returns False) and :func:`keeping_name` (while it lasts, torch's renaming of its launcher thread
names it ours instead). What does not: the launch itself (:mod:`ecolaunch.launch.torchrun`). Base layer: imports only
the standard library. Why: docs/torchrun.md, "torch's run(), as the launcher calls it".
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
from collections.abc import Iterator
from types import ModuleType

logger = logging.getLogger(__name__)

#: the name ``ps -o comm`` shows for a launcher (Linux keeps at most 15 bytes of it)
PROCESS_NAME = "ecolaunch"
#: ``<linux/prctl.h>``: set the calling thread's name
_PR_SET_NAME = 15


def set_name(name: str = PROCESS_NAME) -> bool:
    """Name the calling thread ``name`` (the process, when it is the main thread); False where it cannot (not Linux,
    no libc), which changes nothing else."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no C library to call, or one without prctl
        return False
    if not done:
        logger.debug("could not name the process %s: errno %d", name, ctypes.get_errno())
    return done


@contextlib.contextmanager
def keeping_name(torch_multiprocessing: ModuleType, name: str = PROCESS_NAME) -> Iterator[None]:
    """While it lasts, ``torch_multiprocessing._set_thread_name`` (what torch's ``run()`` calls to name its thread
    ``pt_elastic``) names the thread ``name`` instead, with torch's own setter; restored afterwards. A torch without
    that function is left alone."""
    original = getattr(torch_multiprocessing, "_set_thread_name", None)
    if original is None:
        yield
        return
    torch_multiprocessing._set_thread_name = lambda _asked: original(name)
    try:
        yield
    finally:
        torch_multiprocessing._set_thread_name = original
