"""The log of the long-running commands (agent, calibrate) on stderr."""

from __future__ import annotations

import logging
import sys


def stderr_logging(prefix: str, verbose: bool):
    """Send ecolaunch's log to stderr as ``<prefix>: LEVEL message`` (WARNING, or INFO with ``verbose``); returns the
    function that puts the previous setup back (the long-running commands: agent, calibrate)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: %(levelname)s %(message)s"))
    root = logging.getLogger("ecolaunch")
    saved = (root.handlers[:], root.level, root.propagate)
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False

    def restore() -> None:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]

    return restore
