"""``ecolaunch cancel JOB``: stop a queued or running job of this host, by its id or its name.

Exit codes: 0 the job was cancelled (its launcher was sent SIGTERM; the command waits for it to leave the state),
1 no job of that id or name on this host (or the state cannot be read, or the process its file names is not its
launcher by the kernel's word: nothing is signalled), 2 a bad command line (also a name that several of the
caller's jobs share, without ``--all``), 77 the job belongs to another user (only its own user and root may cancel
it). What cancelling does to the job, and whom it never signals: :mod:`ecolaunch.launch.cancel`.
"""

from __future__ import annotations

import os

import click

from ecolaunch.cli.command import Command, Failed
from ecolaunch.cli.text import printable
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR

#: the exit code of a refused cancel: the job is another user's (sysexits' EX_NOPERM)
NOT_PERMITTED = 77
#: how long the command waits for cancelled jobs to leave the state (a running job's workers stop first)
WAIT_S = 30.0


@click.command(cls=Command)
@click.argument("job")
@click.option("--all", "every", is_flag=True, help="cancel every job of yours with that name (a name may be shared)")
def cancel(job: str, every: bool) -> None:
    # lazy: registering the subcommands loads every cli module; the store and session load when `cancel` runs
    from ecolaunch.launch.cancel import NotItsLauncher, may_cancel, stop, wait_gone
    from ecolaunch.launch.session import Session  # lazy: as above
    from ecolaunch.policy.baselines import ExclusivePolicy  # lazy: as above
    from ecolaunch.runtime import current_user, open_gpus, resolve  # lazy: as above
    from ecolaunch.state.queue import find_jobs  # lazy: as above
    from ecolaunch.state.store import StateStore  # lazy: as above

    environment, rules = resolve()
    session = Session(StateStore(environment.state_dir, group=rules.state_group), open_gpus(environment),
                      ExclusivePolicy(), rules)
    graph = session.snapshot()
    uid, me = os.geteuid(), current_user()
    found = find_jobs(graph, session.host, job)
    if not found:
        raise Failed(printable(f"no job {job!r} on host {session.host}: no queued or running job has that id or "
                               "name"), hint="see 'ecolaunch status' for the jobs and their ids")
    mine = [j for j in found if may_cancel(j, uid)]
    if not mine:
        owners = ", ".join(sorted({j.user for j in found}))
        raise Failed(printable(f"job {job!r} belongs to {owners}; user {me} may cancel only their own jobs"),
                     hint=f"ask {owners} or the lab admin (root: sudo ecolaunch cancel {found[0].id})",
                     exit_code=NOT_PERMITTED)
    if len(mine) > 1 and not every:
        ids = ", ".join(j.id for j in mine)
        raise click.UsageError(printable(f"{len(mine)} jobs are named {job!r}: {ids}; give one id, or --all to "
                                         "cancel them all"))
    positions = {j.id: p for p, j in enumerate(graph.queued_jobs(session.host), start=1)}
    stopped, refused = [], []
    for j in mine:
        try:
            if stop(j, session.processes, session.store.job_file(j.id)):
                stopped.append(j)
        except NotItsLauncher as e:
            refused.append(e)
    left = wait_gone(session.snapshot, [j.id for j in stopped], WAIT_S)
    for j in mine:
        if any(e.job is j for e in refused):
            continue
        where = (f"queued at position {positions[j.id]}" if j.id in positions else
                 "running on GPU " + ",".join(str(graph.hosts[session.host].gpus[u].index) for u in j.gpus
                                               if u in graph.hosts[session.host].gpus))
        if j not in stopped:
            outcome = "its launcher had already ended"
        elif j.id in left:
            outcome = (f"sent SIGTERM to its launcher (pid {j.launcher_pid}), which is still stopping after "
                       f"{WAIT_S:g} s; its GPUs are released when it ends")
        else:
            outcome = (f"its launcher (pid {j.launcher_pid}) left the queue" if j.id in positions else
                       f"its launcher (pid {j.launcher_pid}) stopped its workers and released its GPUs")
        click.echo(printable(f"cancelled job {j.id} ({j.user}: {j.name}), {where}: {outcome}"))
    if refused:
        for e in refused[:-1]:
            click.echo(printable(e.render()), err=True)
        raise Failed(printable(str(refused[-1])), hint=refused[-1].hint)


cancel.help = f"""Cancel a queued or running job of this host, by its id or its name (--name, else the script's).

The job's launcher is sent SIGTERM: a queued one leaves the queue (exit 143), a running one stops its workers,
releases its GPUs and restores its caps. A user may cancel their own jobs; root may cancel any. Only a process the
kernel says is the job's launcher (its uid, holding the job's file open; never pid 1) is signalled. Exit codes: 0
cancelled, 1 no such job (or its file names no launcher of it: nothing signalled), 2 usage, {NOT_PERMITTED}
another user's job.

Reads {ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} like the launcher."""
