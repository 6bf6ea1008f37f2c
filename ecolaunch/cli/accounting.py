"""``ecolaunch report`` without a JOB: energy, GPU-hours and the estimated saving across jobs, as Slurm's ``sreport``.

What lives here: the ``--since`` value (:class:`SinceType`: a duration back from now, ``90m``, ``12h``, ``30d``,
``2w``, or an ISO date), and :func:`report_across`, which prints the groups of
:func:`ecolaunch.profile.accounting.summarize` as a table, CSV or JSON. The numbers and how the saving is estimated
are :mod:`ecolaunch.profile.accounting`'s; ``ecolaunch.cli.report_cmd`` owns the command and its arguments.
"""

from __future__ import annotations

import csv
import io
import json
import re
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime

import click

from ecolaunch.cli.history_cmd import SELF_REPORTED, SELF_REPORTED_MARK, fmt_time, open_history, warn_squatted
from ecolaunch.text import echo
from ecolaunch.errors import with_hint

FORMATS = ("table", "csv", "json")
DEFAULT_SINCE = "30d"
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
NOTE_WIDTH = 115
SINCE_HINT = "give a duration back from now (90m, 12h, 30d, 2w) or an ISO date (2026-11-01, 2026-11-01T09:00)"


@dataclass(frozen=True, slots=True)
class Since:
    """The start of the report: unix seconds, and how the user wrote it."""

    at: float
    text: str

    def describe(self) -> str:
        """``2026-11-02 06:12 (30d)``; a date is shown alone."""
        return fmt_time(self.at) + ("" if _DURATION.fullmatch(self.text) is None else f" ({self.text})")


class SinceType(click.ParamType):
    """``--since``: a duration with a unit (s, m, h, d, w) back from now, or an ISO date or time (local time unless
    it names its offset); a bad value or a time in the future is a usage error (exit 2) with the forms to use."""

    name = "DURATION|DATE"

    def convert(self, value, param, ctx) -> Since:
        if isinstance(value, Since):
            return value
        text = str(value).strip()
        now = time.time()
        match = _DURATION.fullmatch(text)
        if match is not None:
            amount = float(match.group(1)) * _UNIT_S[match.group(2)]
            if amount <= 0:
                self.fail(with_hint(f"{text!r} is no time at all", SINCE_HINT), param, ctx)
            return Since(now - amount, text)
        try:
            at = datetime.fromisoformat(text).timestamp()
        except ValueError:
            why = "has no unit" if re.fullmatch(r"\d+(\.\d+)?", text) else "is neither a duration nor an ISO date"
            self.fail(with_hint(f"{text!r} {why}", SINCE_HINT), param, ctx)
        if at > now:
            self.fail(with_hint(f"{text!r} is in the future ({fmt_time(at)})", SINCE_HINT), param, ctx)
        return Since(at, text)


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s).astimezone().isoformat(timespec="seconds")


def _numbers(usage) -> dict:
    """A group's sums (:class:`~ecolaunch.profile.accounting.Usage`) as the CSV and JSON name them."""
    return {"jobs": usage.jobs, "energy_kwh": usage.energy_kwh, "gpu_hours": usage.gpu_hours,
            "jobs_estimated": usage.estimated, "uncapped_kwh_estimate": usage.uncapped_kwh,
            "saving_kwh_estimate": usage.saving_kwh, "saving_pct_estimate": usage.saving_pct,
            "saving_error_pct_estimate": usage.saving_error_pct}


def _job_row(job) -> dict:
    """One job (:class:`~ecolaunch.profile.accounting.JobUsage`) as the CSV and JSON name it."""
    return {"job": job.job_id, "user": job.user, "name": job.name, "ended": _iso(job.ended), "gpus": job.gpus,
            "energy_kwh": job.energy_kwh, "gpu_hours": job.gpu_hours, "uncapped_kwh_estimate": job.uncapped_kwh,
            "saving_kwh_estimate": job.saving_kwh, "saving_pct_estimate": job.saving_pct,
            "saving_error_pct_estimate": job.saving_error_pct}


#: the CSV's and JSON's fields of a group (after its key: the user or the day), and of a job (``--by job``)
GROUP_FIELDS = ("jobs", "energy_kwh", "gpu_hours", "jobs_estimated", "uncapped_kwh_estimate", "saving_kwh_estimate",
                "saving_pct_estimate", "saving_error_pct_estimate")
JOB_FIELDS = ("job", "user", "name", "ended", "gpus", "energy_kwh", "gpu_hours", "uncapped_kwh_estimate",
              "saving_kwh_estimate", "saving_pct_estimate", "saving_error_pct_estimate")


def fields(by: str) -> tuple[str, ...]:
    """The columns of the report ``--by by``, in order."""
    return JOB_FIELDS if by == "job" else (by, *GROUP_FIELDS)


def rows(groups, by: str) -> list[dict]:
    """One dict per group (per job for ``--by job``), keyed by :func:`fields`."""
    if by == "job":
        return [_job_row(jobs[0]) for _, _, jobs in groups]
    return [{by: key, **_numbers(usage)} for key, usage, _ in groups]


def fmt_number(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits without an exponent (``343``, ``0.343``, ``0.00000287``); ``N/A``."""
    if value is None:
        return "N/A"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - int(f"{abs(value):e}".split("e")[1]))
    return f"{value:.{decimals}f}"


def _pct(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.1f} %"


def _saving(row: dict, field: str) -> str:
    """A saving cell: ``none`` for jobs that ran alone and uncapped (a saving of 0 with no error: the baseline
    itself), ``~0`` and ``within ±N %`` for a saving within its measurement error (no finding), else the estimate."""
    saving, error = row["saving_pct_estimate"], row["saving_error_pct_estimate"]
    if saving is None or error is None:
        return "N/A"
    if saving == 0.0 and error == 0.0:
        return "none"
    if abs(saving) <= error:
        return f"within ±{error:.1f} %" if field == "saving_pct_estimate" else "~0"
    return _pct(saving) if field == "saving_pct_estimate" else fmt_number(row[field])


#: the table's number columns: (field, heading, how a value is shown); ``jobs`` only for groups
_NUMBERS = (("jobs", "JOBS", str), ("energy_kwh", "ENERGY (kWh)", fmt_number), ("gpu_hours", "GPU-HOURS", fmt_number),
            ("saving_kwh_estimate", "SAVING (kWh)*", None), ("saving_pct_estimate", "SAVING*", None))
#: what the table's saving cells other than numbers mean, said under it when one shows
NONE_NOTE = "none: the jobs ran alone and uncapped, the baseline itself"
WITHIN_NOTE = "within ±N %: the saving is within its measurement error, no finding"


def render_table(table_rows: list[dict], total: dict, by: str) -> str:
    """The table: a heading, one line per row, then the total."""
    keys = ("job", "user", "name", "ended") if by == "job" else (by,)
    numbers = [c for c in _NUMBERS if by != "job" or c[0] != "jobs"]
    shown = [{k: (r[k][:16].replace("T", " ") if k == "ended" else str(r[k])) for k in keys} for r in table_rows]
    widths = [max([len(k), *(len(r[k]) for r in shown)]) + 2 for k in keys]
    cells = [[_saving(r, f) if show is None else show(r[f]) for f, _, show in numbers] for r in (*table_rows, total)]
    number_widths = [max([len(head), *(len(c[i]) for c in cells)]) + 2 for i, (_, head, _) in enumerate(numbers)]

    def line(left: list[str], right: list[str]) -> str:
        return ("".join(f"{v:<{w}}" for v, w in zip(left, widths)) + "".join(f"{v:>{w}}" for v, w in
                                                                               zip(right, number_widths))).rstrip()

    out = [line([k.upper() for k in keys], [head for _, head, _ in numbers])]
    out += [line([r[k] for k in keys], c) for r, c in zip(shown, cells)]
    label = "total" if by != "job" else f"total ({total['jobs']} job{'s' if total['jobs'] != 1 else ''})"
    out.append(f"{label:<{sum(widths)}}" + "".join(f"{v:>{w}}" for v, w in zip(cells[-1], number_widths)))
    return "\n".join(out)


def report_across(by: str, since: Since, users: tuple[str, ...], fmt: str) -> None:
    """Print the report across jobs (see the module docstring)."""
    # lazy: registering the subcommands loads every cli module; the accounting loads only for a report across jobs
    from ecolaunch.profile.accounting import ESTIMATE, summarize

    store, state_dir = open_history()
    records = store.list()
    groups, usage = summarize(records, by, since=since.at, users=users)
    claimed = sum(1 for r in records if store.self_reported(r) and (since.at is None or r.ended >= since.at)
                  and (not users or r.user in users))
    warn_squatted(store)
    table_rows, total = rows(groups, by), _numbers(usage)
    if fmt == "json":
        click.echo(json.dumps({"by": by, "since": _iso(since.at), "users": list(users), "rows": table_rows,
                               "total": total, "estimate": ESTIMATE}, indent=2, ensure_ascii=True))
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(fields(by))
        writer.writerows([["" if r[f] is None else r[f] for f in fields(by)] for r in table_rows])
        echo(buffer.getvalue(), nl=False)
        return
    whose = f" of {', '.join(users)}" if users else ""
    if not table_rows:
        echo(f"no finished jobs{whose} ended since {since.describe()} in the history of {state_dir}")
        return
    echo(f"jobs{whose} that ended since {since.describe()}, by {by}:")
    echo(render_table(table_rows, total, by))
    note = f"* estimated for {usage.estimated} of {usage.jobs} jobs: {ESTIMATE} (docs/accounting.md)"
    shown = {_saving(r, "saving_pct_estimate") for r in (*table_rows, total)}
    note += "".join(f"; {words}" for words, cell in ((NONE_NOTE, "none"), (WITHIN_NOTE, "within"))
                    if any(c.startswith(cell) for c in shown))
    echo(textwrap.fill(note, NOTE_WIDTH, subsequent_indent="  "))
    if claimed:
        echo(textwrap.fill(f"{SELF_REPORTED_MARK} {claimed} of {usage.jobs} jobs' energy is self-reported: "
                           f"{SELF_REPORTED}", NOTE_WIDTH, subsequent_indent="  "))
