"""Text the CLI prints that other users wrote (job names, users, file names from the shared state directory)."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with what a terminal would obey (control characters, escapes) written out as Python escapes."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
