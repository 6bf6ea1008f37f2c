"""``ecolaunch status``: the host's GPUs, the jobs on them and the queue."""

from __future__ import annotations

import json
import time

import click

from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR, Environment
from ecolaunch.errors import EcolaunchError
from ecolaunch.state.graph import Job, StateGraph


def _na(value, fmt: str = "{:.0f}") -> str:
    return "N/A" if value is None else fmt.format(value)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print the state as JSON")
def status(as_json: bool) -> None:
    from ecolaunch.cli.context import resolve
    from ecolaunch.cli.context import open_gpus
    from ecolaunch.launch.session import Session
    from ecolaunch.policy.baselines import ExclusivePolicy
    from ecolaunch.state.store import StateStore

    try:
        environment, rules = resolve()
        backend = open_gpus(environment)
        session = Session(StateStore(environment.state_dir, group=rules.state_group), backend, ExclusivePolicy(), rules)
        graph = session.snapshot()
    except EcolaunchError as e:
        message = f"{e}" + (f"\nHINT: {e.hint}" if e.hint else "")
        raise click.ClickException(message) from e
    doc = _status_doc(graph, session.host, backend.kind, environment)
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
                "power_limit_max_w": g.power_limit_max_w,
                "jobs": [j.id for j in graph.jobs_on(g.uuid)],
                "foreign_pids": list(g.foreign_pids),
                "foreign_memory_mib": g.foreign_memory_mib,
            }
            for g in gpus
        ],
        "jobs": [_job_doc(j, now) for j in graph.running_jobs() if j.host == host],
        "queue": [_job_doc(j, now) for j in graph.queued_jobs() if j.host == host],
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
    lines.append(f"{'GPU':<4}{'NAME':<22}{'MEMORY (MiB)':>16}{'UTIL':>7}{'POWER/CAP (W)':>16}  JOBS")
    for g in doc["gpus"]:
        users = [f"{jid} ({jobs[jid]['user']}: {jobs[jid]['name']})" for jid in g["jobs"] if jid in jobs]
        if g["foreign_pids"]:
            users.append(f"other processes: {', '.join(map(str, g['foreign_pids']))}")
        mem = f"{g['memory_used_mib']}/{g['memory_total_mib']}"
        util = f"{_na(g['util_gpu_pct'])} %"
        power = f"{_na(g['power_w'])}/{_na(g['power_limit_w'])}"
        lines.append(f"{g['index']:<4}{g['name'][:21]:<22}{mem:>16}{util:>7}{power:>16}  {', '.join(users) or '-'}")
    if doc["queue"]:
        lines.append("")
        lines.append(f"queue ({len(doc['queue'])} waiting):")
        for pos, j in enumerate(doc["queue"], start=1):
            lines.append(f"  {pos}. {j['id']} {j['user']}: {j['name']}, {j['nproc']} GPU(s), waiting {j['age_s']:.0f} s")
    return "\n".join(lines)


# the f-string docstring above is not a docstring to Python: set the help text explicitly
status.help = f"""Show this host's GPUs, the ecolaunch jobs using them, and the queue.

Reads {ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} like the launcher."""
