"""Text the CLI prints that other users wrote (job names, users, file names, history records from the shared state
directory): every command that prints a field of a record goes through :func:`printable` or :func:`echo`, so that a
terminal never obeys an escape sequence a colleague put in a record (a window title, a cleared screen, OSC 52's
clipboard). JSON output escapes the same characters itself (``json.dumps`` with ``ensure_ascii``). And :func:`gist`,
a line's words without its figures, for a line printed again only when its words change."""

from __future__ import annotations


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with what a terminal would obey (control characters, escapes) written out as Python escapes;
    with ``lines``, its line breaks are kept (a block of lines the CLI composed)."""
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Print a block of lines that holds fields of records: every line through :func:`printable`."""
    import click  # lazy: the launch path imports printable() and must not load click (tests/cli/test_main.py)

    click.echo(printable(text, lines=True), err=err, nl=nl)


def gist(text: str) -> str:
    """``text`` without its digits: what a changing line says apart from its figures (a waiting launcher tells its
    reason again when that changes, not when the seconds to a reservation tick down)."""
    return "".join(c for c in text if not c.isdigit())
