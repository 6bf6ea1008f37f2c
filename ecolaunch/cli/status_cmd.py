"""``ecolaunch status``: the host's GPUs, the jobs on them, the queue with why each job waits, and the job files left
out.

What lives here: the command and its rendering of one :class:`~ecolaunch.cli.hostview.HostView` read (``ecolaunch
top`` refreshes the same read). What does not: the queue's rows (:func:`ecolaunch.state.queue.queue_rows`), which
job files the state graph leaves out and why (``StateGraph.ignored``). What it shows: docs/queue.md#why-a-job-waits.
"""

from __future__ import annotations

import json

import click

from ecolaunch.cli.command import Command
from ecolaunch.cli.hostview import HostView, cap_text, na
from ecolaunch.text import printable
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR


@click.command(cls=Command)
@click.option("--json", "as_json", is_flag=True, help="print the state as JSON")
def status(as_json: bool) -> None:
    doc = HostView.open().read()
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(_render(doc))


def _render(doc: dict) -> str:
    sim = f" (simulated: {doc['simulate']})" if doc["simulate"] else ""
    lines = [f"host {doc['host']}{sim}   state: {doc['state_dir']}", ""]
    jobs = {j["id"]: j for j in doc["jobs"]}
    powers = [f"{na(g['power_w'])}/{cap_text(g)}" for g in doc["gpus"]]
    width = max([16, *(len(p) + 2 for p in powers)])  # an enforced limit shown beside the cap widens the column
    names = max([21, *(len(g["name"]) for g in doc["gpus"])]) + 1  # whole names: "NVIDIA GeForce RTX 4090" is 23
    lines.append(f"{'GPU':<4}{'NAME':<{names}}{'MEMORY (MiB)':>16}{'UTIL':>7}{'POWER/CAP (W)':>{width}}  JOBS")
    for g, power in zip(doc["gpus"], powers):
        users = [printable(f"{jid} ({jobs[jid]['user']}: {jobs[jid]['name']})") for jid in g["jobs"] if jid in jobs]
        if g["foreign_pids"]:
            users.append(f"other processes: {', '.join(map(str, g['foreign_pids']))}")
        mem = f"{g['memory_used_mib']}/{g['memory_total_mib']}"
        util = f"{na(g['util_gpu_pct'])} %"
        lines.append(f"{g['index']:<4}{g['name']:<{names}}{mem:>16}{util:>7}{power:>{width}}  {', '.join(users) or '-'}")
    for c in doc.get("caps_left", []):
        lines.append(f"warning: GPU {c['index']} is at {c['power_limit_w']:.0f} W, below its original "
                     f"{c['original_w']:.0f} W, lowered for a job that is gone; restore it with "
                     "`sudo ecolaunch agent --once`")
    for i in doc.get("ignored", []):
        who = f" ({i['user']} on host {i['host']})" if i["user"] is not None else ""
        # a member chose the file name, user and host: escape what a terminal would obey
        lines.append(printable(f"warning: ignoring job file jobs/{i['id']}.json{who}: {i['reason']}"))
    if doc["queue"]:
        lines.append("")
        lines.append(f"queue ({len(doc['queue'])} waiting):")
        for j in doc["queue"]:
            why = "reason not judged yet" if j["reason"] is None else j["reason"] + (
                f" ({j['reason_detail']})" if j["reason_detail"] else "")
            starts = "start unknown" if j.get("starts_in_s") is None else f"starts in about {j['starts_in_s']:.0f} s"
            lines.append(printable(f"  {j['position']}. {j['id']} {j['user']}: {j['name']}, {j['nproc']} GPU(s), "
                                   f"waiting {j['age_s']:.0f} s, {starts}: {why}"))
    return "\n".join(lines)


# the f-string docstring above is not a docstring to Python: set the help text explicitly
status.help = f"""Show this host's GPUs, the ecolaunch jobs using them, and the queue.

Reads {ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} like the launcher."""
