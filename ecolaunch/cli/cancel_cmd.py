"""``ecolaunch cancel JOB`` / ``ecolaunch cancel -u USER``: stop a queued or running job of this host, by its id or its
name, or every job of a user (Slurm's ``scancel -u``).

What lives here: the command and what it prints. What does not: who may cancel and how a job is stopped
(:mod:`ecolaunch.launch.cancel`), finding jobs (``state.queue.find_jobs``). Its exit codes:
docs/queue.md#cancelling-a-job.
"""

from __future__ import annotations

import os
import pwd

import click

from ecolaunch.cli.command import Command, Failed
from ecolaunch.text import printable
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR
from ecolaunch.launch import exitcodes

#: the exit code of a refused cancel: the job is another user's (sysexits' EX_NOPERM)
NOT_PERMITTED = exitcodes.NOT_PERMITTED
#: how long the command waits for cancelled jobs to leave the state (a running job's workers stop first)
WAIT_S = 30.0


@click.command(cls=Command)
@click.argument("job", required=False)
@click.option("--all", "every", is_flag=True, help="cancel every job of yours with that name (a name may be shared)")
@click.option("-u", "--user", "user", metavar="USER",
              help="cancel every job of USER on this host, as Slurm's scancel -u (JOB then optional: with it, only "
                   "USER's jobs that JOB names); you may name only yourself, root anyone")
def cancel(job: str | None, every: bool, user: str | None) -> None:
    if job is None and user is None:
        raise click.UsageError("give JOB (a job's id or name), or --user USER to cancel every job of that user")
    # lazy: registering the subcommands loads every cli module; the store and session load when `cancel` runs
    from ecolaunch.launch.cancel import NotItsLauncher, stop, wait_gone
    from ecolaunch.launch.session import Session  # lazy: as above
    from ecolaunch.policy.baselines import ExclusivePolicy  # lazy: as above
    from ecolaunch.runtime import open_gpus, resolve  # lazy: as above
    from ecolaunch.state.store import StateStore  # lazy: as above

    environment, rules = resolve()
    session = Session(StateStore(environment.state_dir, group=rules.state_group), open_gpus(environment),
                      ExclusivePolicy(), rules)
    graph = session.snapshot()
    mine = _jobs_to_cancel(graph, session.host, job, user, every)
    if not mine:
        return
    positions = {j.id: p for p, j in enumerate(graph.queued_jobs(session.host), start=1)}
    # the queued first: none of them may start on the GPUs a running one releases before it is signalled too
    mine.sort(key=lambda j: j.id not in positions)
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


def _jobs_to_cancel(graph, host: str, job: str | None, user: str | None, every: bool) -> list:
    """The jobs the command line names that the caller may cancel; a failure (exit 1, 77) or usage error (2) where
    there are none or too many; an empty list (and a line saying so) where ``--user`` alone finds none."""
    # lazy: as in cancel()
    from ecolaunch.launch.cancel import may_cancel
    from ecolaunch.runtime import current_user  # lazy: as above
    from ecolaunch.state.queue import find_jobs, user_jobs  # lazy: as above

    uid, me = os.geteuid(), current_user()
    owner = None if user is None else _uid_of(user)
    if owner is not None and uid != 0 and owner != uid:
        raise Failed(printable(f"user {me} may cancel only their own jobs; --user {user} names another user"),
                     hint=printable(f"ask {user} or the lab admin (root: sudo ecolaunch cancel -u {user})"),
                     exit_code=NOT_PERMITTED)
    if job is None:
        found = user_jobs(graph, host, owner)
        if not found:
            click.echo(printable(f"no queued or running job of user {user} on host {host}: nothing to cancel"))
        return [j for j in found if may_cancel(j, uid)]  # all of them: the caller is their user, or root
    found = find_jobs(graph, host, job)
    if owner is not None:
        found = [j for j in found if j.uid == owner]
    if not found:
        of = "" if user is None else f" of user {user}"
        raise Failed(printable(f"no job {job!r}{of} on host {host}: no queued or running job{of} has that id or "
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
    return mine


def _uid_of(user: str) -> int:
    """The uid of the account ``user`` (a number: that uid, as a job of a uid without an account shows its user)."""
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        if user.isascii() and user.isdigit():
            return int(user)
    raise click.BadParameter(printable(f"no user {user!r} on this host"), param_hint="'--user'")


cancel.help = f"""Cancel a queued or running job of this host, by its id or its name (--name, else the script's), or
every job of a user (-u USER, as Slurm's scancel -u).

The job's launcher is sent SIGTERM: a queued one leaves the queue (exit 143), a running one stops its workers,
releases its GPUs and restores its caps. A user may cancel their own jobs (and name only themselves with -u); root
may cancel any. Only a process the kernel says is the job's launcher (its uid, holding the job's file open; never
pid 1) is signalled. Exit codes: 0 cancelled (or -u found no job: nothing to cancel), 1 no such job (or its file
names no launcher of it: nothing signalled), 2 usage (neither JOB nor -u), {NOT_PERMITTED} another user's job.

Reads {ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} like the launcher."""
