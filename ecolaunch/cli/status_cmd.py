"""``ecolaunch status``: the host's GPUs, the jobs on them, the queue with why each job waits, and the job files left
out.

The queue's rows are :func:`ecolaunch.state.queue.queue_rows`'s (position, job, time waited, and the reason its
launcher last recorded: Slurm's reason codes, ``state.graph.WaitReason``).

A job file the state graph leaves out (``StateGraph.ignored``: refused fields, an owner who is not the uid it
names, another host's job naming this host's GPUs, a booking the admin rules never admitted) is listed with why,
so that a user whose launch waits on an idle-looking machine sees what is going on."""

from __future__ import annotations

import json
import time

import click

from ecolaunch.cli.command import Command
from ecolaunch.cli.text import printable
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR, Environment
from ecolaunch.state.graph import Job, StateGraph
from ecolaunch.state.queue import queue_rows


#: a limit in force further than this from the set one is shown beside it (NVML reports whole mW; 0.5 W is noise)
ENFORCED_SHOWN_ABOVE_W = 0.5


def _na(value, fmt: str = "{:.0f}") -> str:
    return "N/A" if value is None else fmt.format(value)


def _cap(gpu: dict) -> str:
    """The set power limit, and the limit in force beside it when the driver has not (yet) enforced the set one."""
    limit, enforced = gpu["power_limit_w"], gpu.get("power_limit_enforced_w")
    if limit is not None and enforced is not None and abs(enforced - limit) > ENFORCED_SHOWN_ABOVE_W:
        return f"{limit:.0f} (enforced {enforced:.0f})"
    return _na(limit)


@click.command(cls=Command)
@click.option("--json", "as_json", is_flag=True, help="print the state as JSON")
def status(as_json: bool) -> None:
    # lazy: registering the subcommands loads every cli module; the store, session and caps load when `status` runs
    from ecolaunch.runtime import open_gpus, resolve
    from ecolaunch.launch.jobcaps import orphan_keeper, orphaned_caps  # lazy: as above
    from ecolaunch.launch.session import Session  # lazy: as above
    from ecolaunch.policy.baselines import ExclusivePolicy  # lazy: as above
    from ecolaunch.state.store import StateStore  # lazy: as above

    environment, rules = resolve()
    backend = open_gpus(environment)
    # run as root without a cap agent, this is a privileged transaction: it restores caps dead launchers left
    session = Session(StateStore(environment.state_dir, group=rules.state_group), backend, ExclusivePolicy(), rules,
                      cap_keeper=orphan_keeper(backend, rules, environment.state_dir))
    graph = session.snapshot()
    left = orphaned_caps(graph, session.host, rules, environment.state_dir, session.processes)
    doc = _status_doc(graph, session.host, backend.kind, environment)
    doc["caps_left"] = [{"uuid": u, "index": graph.hosts[session.host].gpus[u].index, "power_limit_w": now,
                         "original_w": original} for u, (now, original) in left.items()]
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(_render(doc))


def _status_doc(graph: StateGraph, host: str, kind: str, environment: Environment) -> dict:
    node = graph.hosts.get(host)
    gpus = sorted(node.gpus.values(), key=lambda g: g.index) if node else []
    now = time.time()
    return {
        "host": host,
        "backend": kind,
        "simulate": environment.simulate,
        "state_dir": str(environment.state_dir),
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "memory_used_mib": g.memory_used_mib,
                "memory_total_mib": g.memory_total_mib,
                "util_gpu_pct": g.util_gpu_pct,
                "util_mem_pct": g.util_mem_pct,
                "power_w": g.power_w,
                "power_limit_w": g.power_limit_w,
                "power_limit_enforced_w": g.power_limit_enforced_w,
                "power_limit_max_w": g.power_limit_max_w,
                "jobs": [j.id for j in graph.jobs_on(g.uuid)],
                "foreign_pids": list(g.foreign_pids),
                "foreign_memory_mib": g.foreign_memory_mib,
            }
            for g in gpus
        ],
        "jobs": [_job_doc(j, now) for j in graph.running_jobs() if j.host == host],
        "queue": [row.to_dict() for row in queue_rows(graph, host, now)],
        "ignored": [{"id": i.id, "reason": i.reason, "user": i.job.user if i.job else None,
                     "host": i.job.host if i.job else None} for _, i in sorted(graph.ignored.items())],
    }


def _job_doc(job: Job, now: float) -> dict:
    return {
        "id": job.id,
        "user": job.user,
        "name": job.name,
        "state": job.state.value,
        "nproc": job.nproc,
        "gpus": list(job.gpus),
        "power_caps_w": dict(job.power_caps_w),
        "launcher_pid": job.launcher_pid,
        "age_s": round(now - (job.started_at or job.submitted_at), 1),
    }


def _render(doc: dict) -> str:
    sim = f" (simulated: {doc['simulate']})" if doc["simulate"] else ""
    lines = [f"host {doc['host']}{sim}   state: {doc['state_dir']}", ""]
    jobs = {j["id"]: j for j in doc["jobs"]}
    powers = [f"{_na(g['power_w'])}/{_cap(g)}" for g in doc["gpus"]]
    width = max([16, *(len(p) + 2 for p in powers)])  # an enforced limit shown beside the cap widens the column
    names = max([21, *(len(g["name"]) for g in doc["gpus"])]) + 1  # whole names: "NVIDIA GeForce RTX 4090" is 23
    lines.append(f"{'GPU':<4}{'NAME':<{names}}{'MEMORY (MiB)':>16}{'UTIL':>7}{'POWER/CAP (W)':>{width}}  JOBS")
    for g, power in zip(doc["gpus"], powers):
        users = [printable(f"{jid} ({jobs[jid]['user']}: {jobs[jid]['name']})") for jid in g["jobs"] if jid in jobs]
        if g["foreign_pids"]:
            users.append(f"other processes: {', '.join(map(str, g['foreign_pids']))}")
        mem = f"{g['memory_used_mib']}/{g['memory_total_mib']}"
        util = f"{_na(g['util_gpu_pct'])} %"
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
            lines.append(printable(f"  {j['position']}. {j['id']} {j['user']}: {j['name']}, {j['nproc']} GPU(s), "
                                   f"waiting {j['age_s']:.0f} s: {why}"))
    return "\n".join(lines)


# the f-string docstring above is not a docstring to Python: set the help text explicitly
status.help = f"""Show this host's GPUs, the ecolaunch jobs using them, and the queue.

Reads {ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} like the launcher."""
