"""What ``ecolaunch top`` draws, with rich, and its refresh loop: the live view and the one-shot plain text.

What lives here: :func:`render` (one :meth:`~ecolaunch.cli.hostview.HostView.read` document as three tables: GPUs,
running jobs, the queue), :func:`live` (redrawn on the terminal's alternate screen until ``q``, keys read in cbreak
mode, the terminal's mode and screen restored however the view ends) and :func:`print_once`. Nothing here writes an
escape code of its own: rich draws, and ``termios`` sets the mode. What does not: the read (``cli.hostview``). What
each column shows: docs/top.md.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from typing import IO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ecolaunch.cli.hostview import cap_text, na
from ecolaunch.text import printable

#: the keys that quit the live view
QUIT_KEYS = frozenset("qQ")
#: what the keyboard reads when the terminal is gone (its end of input): the view quits too
END_OF_INPUT = ""
#: the width of the one-shot view when stdout is no terminal and COLUMNS is not set: wide enough that no row wraps
PLAIN_WIDTH = 200

SAVING_NOTE = ("saving: an estimate against running uncapped, from each job's power-cap curve; job figures as of its "
               "launcher's last heartbeat")


def print_once(doc: dict) -> None:
    """The view of ``doc`` once, as plain text on stdout (as wide as the terminal, when it is one)."""
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PLAIN_WIDTH
    Console(width=width, no_color=True, highlight=False).print(render(doc, live=False))


def live(read: Callable[[], dict], interval_s: float) -> None:
    """Redraw the view of ``read()`` every ``interval_s`` on the terminal's alternate screen until a quit key."""
    console = Console(highlight=False)
    with _keys(sys.stdin) as next_key, Live(console=console, screen=True, auto_refresh=False) as screen:
        while True:
            screen.update(render(read(), live=True, interval_s=interval_s), refresh=True)
            deadline = time.monotonic() + interval_s
            while (left := deadline - time.monotonic()) > 0:
                key = next_key(left)
                if key == END_OF_INPUT or key in QUIT_KEYS:
                    return


@contextlib.contextmanager
def _keys(stream: IO[str]) -> Iterator[Callable[[float], str | None]]:
    """``next_key(timeout_s)``: the next key pressed within the timeout, None when none was, :data:`END_OF_INPUT` at
    the end of the input. A terminal ``stream`` is in cbreak mode meanwhile, restored on exit whatever ends the block;
    from a non-terminal nothing is read (the view then quits by Ctrl-C only)."""
    if not stream.isatty():
        yield lambda timeout_s: time.sleep(timeout_s)
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def next_key(timeout_s: float) -> str | None:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return os.read(fd, 1).decode(errors="replace") if ready else None

    try:
        yield next_key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


# --- the view ------------------------------------------------------------------------------------------------
def render(doc: dict, *, live: bool, interval_s: float | None = None) -> RenderableType:
    """The view of one :meth:`HostView.read` document: header, GPUs, jobs, queue, warnings."""
    sim = f" (simulated: {doc['simulate']})" if doc["simulate"] else ""
    when = time.strftime("%H:%M:%S")
    parts: list[RenderableType] = [Text(printable(f"ecolaunch top  host {doc['host']}{sim}  {when}"),
                                        style="bold" if live else "")]
    parts.append(_gpu_table(doc))
    parts.append(_job_table(doc) if doc["jobs"] else Text("\njobs: none running"))
    parts.append(_queue_table(doc) if doc["queue"] else Text("\nqueue: nothing waiting"))
    parts += [Text(w, style="yellow" if live else "") for w in _warnings(doc)]
    parts.append(Text(f"\n{SAVING_NOTE}", style="dim" if live else ""))
    if live and interval_s is not None:
        parts.append(Text(f"q quits; refreshed every {interval_s:g} s", style="bold"))
    return Group(*parts)


def _table(title: str, *columns: str) -> Table:
    """A table of the view, titled; text columns left, figures right."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, expand=False,
                  collapse_padding=True)
    for name in columns:
        # on a narrow terminal the free text wraps, a word longer than its column folded onto the next line (rich's
        # default cuts it to "resnet50-…": a name no one can tell from its neighbours); figures and ids never wrap
        text = name in _TEXT_COLUMNS
        table.add_column(name, justify="left" if text or name == "JOB" else "right", no_wrap=not text,
                         overflow="fold" if text else "ellipsis")
    return table


#: the columns of free text (names, users, reasons), which wrap on a narrow terminal
_TEXT_COLUMNS = frozenset({"NAME", "JOBS", "USER", "REASON"})


def _gpu_table(doc: dict) -> Table:
    table = _table("\nGPUs", "GPU", "NAME", "POWER/CAP W", "UTIL", "MEMORY MiB", "JOBS")
    jobs = {j["id"]: j for j in doc["jobs"]}
    for g in doc["gpus"]:
        users = [f"{jid} ({jobs[jid]['user']})" for jid in g["jobs"] if jid in jobs]
        if g["foreign_pids"]:
            users.append(f"other processes: {', '.join(map(str, g['foreign_pids']))}")
        table.add_row(str(g["index"]), _cell(g["name"]), f"{na(g['power_w'])}/{cap_text(g)}",
                      f"{na(g['util_gpu_pct'])} %", f"{g['memory_used_mib']}/{g['memory_total_mib']}",
                      _cell(", ".join(users) or "-"))
    return table


def _job_table(doc: dict) -> Table:
    """The running jobs; their iteration time, energy and saving as of their launchers' last heartbeat (the
    iteration count is in ``status --json``); the time each is expected to run still when any of them knows it (a
    column nobody can fill would narrow the names on an 80-column terminal)."""
    left = any(j.get("remaining_s") is not None for j in doc["jobs"])
    table = _table(f"\njobs ({len(doc['jobs'])} running)", "JOB", "USER", "NAME", "GPUS", "CAP W", "TIME",
                   *(("LEFT",) if left else ()), "ITER", "ENERGY", "SAVED (EST.)")
    index = {g["uuid"]: g for g in doc["gpus"]}
    for j in doc["jobs"]:
        gpus = [index[u] for u in j["gpus"] if u in index]
        limits = sorted({g["power_limit_w"] for g in gpus if g["power_limit_w"] is not None})
        remaining = () if not left else ("N/A" if j.get("remaining_s") is None else _duration(j["remaining_s"]),)
        table.add_row(_cell(j["id"]), _cell(j["user"]), _cell(j["name"]),
                      ",".join(str(g["index"]) for g in gpus) or "-",
                      "/".join(f"{w:.0f}" for w in limits) or "N/A", _duration(j["age_s"]), *remaining,
                      _ms(j["iter_time_s"]), _energy(j["energy_j"]), _saving(j["energy_j"], j["saving_j"]))
    return table


def _queue_table(doc: dict) -> Table:
    table = _table(f"\nqueue ({len(doc['queue'])} waiting)", "#", "JOB", "USER", "NAME", "GPUS", "WAITED", "STARTS IN",
                   "REASON")
    for j in doc["queue"]:
        starts = "N/A" if j.get("starts_in_s") is None else _duration(j["starts_in_s"])
        table.add_row(str(j["position"]), _cell(j["id"]), _cell(j["user"]), _cell(j["name"]), str(j["nproc"]),
                      _duration(j["age_s"]), starts, _cell(j.get("reason") or "-"))
    return table


def _warnings(doc: dict) -> list[str]:
    lines = [f"warning: GPU {c['index']} is at {c['power_limit_w']:.0f} W, below its original {c['original_w']:.0f} "
             "W, lowered for a job that is gone; restore it with `sudo ecolaunch agent --once`"
             for c in doc.get("caps_left", [])]
    for i in doc.get("ignored", []):
        who = f" ({i['user']} on host {i['host']})" if i["user"] is not None else ""
        lines.append(printable(f"warning: ignoring job file jobs/{i['id']}.json{who}: {i['reason']}"))
    return lines


def _cell(text: str) -> Text:
    """A cell of text a member chose (a job's name, a user): shown as written, never read as rich markup or obeyed
    by the terminal."""
    return Text(printable(text))


def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _ms(seconds: float | None) -> str:
    return "N/A" if seconds is None else f"{seconds * 1e3:.1f} ms"


def _energy(joules: float | None) -> str:
    if joules is None:
        return "N/A"
    return f"{joules / 3.6e6:.3g} kWh" if joules >= 3.6e6 else f"{joules / 1e3:.3g} kJ"


def _saving(energy_j: float | None, saving_j: float | None) -> str:
    """The estimated saving, and its share of what running uncapped would have used (``energy + saving``)."""
    if energy_j is None or saving_j is None:
        return "N/A"
    uncapped_j = energy_j + saving_j
    share = f" ({100.0 * saving_j / uncapped_j:.0f}%)" if uncapped_j > 0 else ""
    return f"~{_energy(saving_j) if saving_j >= 0 else '-' + _energy(-saving_j)}{share}"


