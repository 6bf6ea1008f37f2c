"""``ecolaunch history``: finished jobs with their energy, run time, power caps and GPU sharing."""

from __future__ import annotations

import errno
import json
import os
import time

import click

from ecolaunch.text import echo
from ecolaunch.cli.command import Command, Failed
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR
from ecolaunch.errors import StateError, with_hint
from ecolaunch.jobmodel.codec import to_json

DEFAULT_LIMIT = 20


def fmt_energy(joules: float | None) -> str:
    """``812 J``, ``12.3 kJ``, ``4.57 MJ``; ``N/A`` when unknown."""
    if joules is None:
        return "N/A"
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if joules >= scale:
            return f"{joules / scale:.3g} {unit}"
    return f"{joules:.0f} J"


def fmt_duration(seconds: float | None) -> str:
    """``12.3s``, ``3m05s``, ``1h02m``."""
    if seconds is None:
        return "N/A"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def fmt_time(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix_s))


def fmt_caps(caps: dict) -> str:
    values = sorted({c for c in caps.values() if c is not None})
    return ",".join(f"{c:.0f}" for c in values) if values else "N/A"


#: the mark and the words for energy that only its user's own record claims (``History.self_reported``)
SELF_REPORTED_MARK = "~"
SELF_REPORTED = ("the energy another user's launcher wrote in their own record; nothing root runs measured it "
                 "(docs/threat-model.md)")


def open_history():
    """The History of the resolved state directory (an EcolaunchError when it cannot be used: the command prints
    it as an ``Error:`` line, exit 1)."""
    # lazy: registering the subcommands loads every cli module; the history loads only when a command reads it
    from ecolaunch.runtime import resolve
    from ecolaunch.profile.history import History  # lazy: as above

    environment, _ = resolve()
    store = History(environment.state_dir)
    check_readable(store)
    return store, environment.state_dir


def check_readable(store) -> None:
    """StateError when the history cannot be listed: the state directory or its ``history`` directory is not a
    directory or not readable (History itself reads such a history as empty, with at most a warning). A state
    directory that does not exist yet holds no history: nothing has run there."""
    state_dir = store.layout.root
    for path in (state_dir, store.root):
        if not os.path.lexists(path):
            return
        try:
            os.listdir(path)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                hint = f"ask the lab admin for read access, or set {ENV_STATE_DIR} to the launcher's state directory"
            elif path == state_dir:
                hint = f"set {ENV_STATE_DIR} to the state directory the launcher uses"
            else:
                hint = "move it aside: the next launch creates the directory again"
            what = "the state directory" if path == state_dir else "the job history"
            raise StateError(f"cannot read {what} {str(path)!r}: {e.strerror or e}", hint=hint) from e


def warn_squatted(store) -> None:
    """One ``Warning:`` line per user history directory that someone else owns (its user's records can never be
    written or shown), then the fix once. Nothing when there is none."""
    warnings = [f"Warning: {store.root / name} belongs to uid {actual}, not to its user (uid {owner}): that user's "
                "jobs are neither recorded nor shown" for name, owner, actual in store.squatted()]
    if warnings:
        echo(with_hint("\n".join(warnings), "the lab admin runs `sudo ecolaunch init-state`: it moves such "
                             "directories aside and gives each user a fresh one"), err=True)


def find_record(store, job: str):
    """The record of ``job``: its id, or a unique prefix of one; Failed (with the choices, or the hint to list them)
    otherwise."""
    rec = store.get(job)
    if rec is not None:
        return rec
    matches = sorted(i for i in store.job_ids() if i.startswith(job))
    if len(matches) == 1:
        rec = store.get(matches[0])
        if rec is not None:
            return rec
    if len(matches) > 1:
        raise Failed(f"job {job!r} is ambiguous: it starts {', '.join(matches[:8])}",
                     hint="give more characters of the job id")
    raise Failed(f"no finished job {job!r} in the history (or its record is unreadable)",
                 hint="'ecolaunch history' lists the finished jobs")


def profile_used(rec) -> str:
    """Where a job's profile came from, in one word: the job whose stored profile it used, ``new`` (measured in
    this run), or ``-`` (none); ``*`` after it: the run updated nothing in the history."""
    if rec.profile_from:
        used = rec.profile_from[:9]
    else:
        used = "new" if rec.profile is not None and rec.profile_action in ("inline", "pre") else "-"
    return used + ("*" if rec.not_learned else "")


def match_lines(rec) -> list[str]:
    """Which stored profile a launch used and why, and what its run taught the history."""
    lines = [f"job {rec.job_id}  {rec.name}  (user {rec.user})"]
    lines.append(f"  matched on  {rec.history_match or 'N/A (recorded before ecolaunch kept it, or no single GPU model)'}")
    if rec.profile_from:
        lines.append(f"  profile     the stored profile of job {rec.profile_from}")
    elif rec.profile is not None and rec.profile_action in ("inline", "pre"):
        lines.append(f"  profile     measured in this run ({rec.profile_action})")
    else:
        lines.append("  profile     none")
    lines.append(f"  learned     not updated from this run: {rec.not_learned}" if rec.not_learned else
                 "  learned     what it measured is in the history for the next launch")
    return lines


@click.command(cls=Command)
@click.argument("job", required=False)
@click.option("--json", "as_json", is_flag=True, help="print the records as JSON (without their sampled series)")
@click.option("--limit", type=click.IntRange(min=0), default=DEFAULT_LIMIT, show_default=True,
              help="show the newest N jobs; 0 shows all")
def history(job: str | None, as_json: bool, limit: int) -> None:
    store, state_dir = open_history()
    if job is not None:
        rec = find_record(store, job)
        if as_json:
            doc = to_json(rec)
            doc.pop("samples", None)
            click.echo(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True))
        else:
            echo("\n".join(match_lines(rec)))
        return
    records = store.list(limit=limit or None)
    warn_squatted(store)
    if as_json:
        docs = []
        for rec in records:
            doc = to_json(rec)
            doc.pop("samples", None)
            docs.append(doc)
        click.echo(json.dumps(docs, indent=2, sort_keys=True, ensure_ascii=True))
        return
    if not records:
        missing = "" if state_dir.exists() else " (the directory does not exist: nothing has run there yet)"
        echo(f"no finished jobs in the history of {state_dir}{missing}")
        return
    header = (f"{'JOB':<10}{'ENDED':<18}{'USER':<10}{'NAME':<20}{'TIME':>9}{'ENERGY':>10}{'GPUS':>5}  {'CAP (W)':<9}"
              f"{'EXIT':>5}  {'PROFILE':<11}SHARED WITH")
    lines = [header]
    for r in records:
        shared = sorted({j for jobs in r.colocated_with.values() for j in jobs})
        energy = fmt_energy(r.energy_j) + (SELF_REPORTED_MARK if store.self_reported(r) else "")
        exit_code = "N/A" if r.exit_code is None else str(r.exit_code)
        lines.append(f"{r.job_id[:9]:<10}{fmt_time(r.ended):<18}{r.user[:9]:<10}{r.name[:19]:<20}"
                     f"{fmt_duration(r.duration_s):>9}{energy:>10}{len(r.gpus):>5}  "
                     f"{fmt_caps(r.power_caps_w):<9}{exit_code:>5}  {profile_used(r):<11}{', '.join(shared) or '-'}")
    if any(r.not_learned for r in records):
        lines.append("* updated nothing in the history: 'ecolaunch history JOB' says why")
    if any(store.self_reported(r) for r in records):
        lines.append(f"{SELF_REPORTED_MARK} self-reported: {SELF_REPORTED}")
    echo("\n".join(lines))


history.help = f"""List finished jobs, newest first: energy (the job's share of its GPUs'), run time, power caps,
the stored profile each used (PROFILE: the job that measured it, 'new' when the run measured its own) and the
jobs that shared its GPUs. With JOB (a unique prefix of its id), which stored profile that launch used and why
(what it was matched on), and whether its run updated the history.

Reads the history in the state directory ({ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} as for the
launcher). See one job in detail with 'ecolaunch report JOB'."""
