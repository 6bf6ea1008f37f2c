"""``ecolaunch report JOB``: one finished job in detail, and a PNG plot of its power and utilization; without a JOB,
the report across jobs (``--by``, ``--since``, ``--user``, ``--format``: ``ecolaunch.cli.accounting``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from click.core import ParameterSource

from ecolaunch.cli.accounting import DEFAULT_SINCE, FORMATS, SinceType, report_across
from ecolaunch.text import echo
from ecolaunch.cli.command import Command, Failed
from ecolaunch.cli.history_cmd import SELF_REPORTED, find_record, fmt_duration, fmt_energy, fmt_time, open_history
from ecolaunch.config import ENV_STATE_DIR
from ecolaunch.errors import with_hint
from ecolaunch.jobmodel.codec import to_json
from ecolaunch.state.graph import StateGraph
from ecolaunch.statedir import StateLayout

PLOT_HINT = "pip install matplotlib (or pip install 'ecolaunch[plot]')"


def _na(value, fmt: str = "{:.0f}") -> str:
    return "N/A" if value is None else fmt.format(value)


def render(rec, indices: dict[str, int] | None = None, *, self_reported: bool = False) -> str:
    """The text report of one JobRecord; its GPUs named by their NVML index as ``ecolaunch status`` shows them
    (``indices``: UUID → index; a GPU missing there is named by its UUID); ``self_reported``: its energy is only
    its user's word (``History.self_reported``)."""
    exit_code = "N/A" if rec.exit_code is None else str(rec.exit_code)
    lines = [f"job {rec.job_id}  {rec.name}  (user {rec.user})",
             f"  ran         {fmt_time(rec.started)} to {fmt_time(rec.ended)}, {fmt_duration(rec.duration_s)}, exit {exit_code}"]
    for i, uuid in enumerate(rec.gpus):
        name = rec.gpu_names[i] if i < len(rec.gpu_names) else ""
        shared = ", ".join(rec.colocated_with.get(uuid, [])) or "nobody"
        gpu = f"{indices[uuid]} ({name or 'N/A'}, {uuid})" if indices and uuid in indices else f"{uuid} ({name or 'N/A'})"
        lines.append(f"  GPU         {gpu}: cap {_na(rec.power_caps_w.get(uuid))} W, shared with {shared}")
    wh = "" if rec.energy_j is None else f" ({rec.energy_j / 3600:.3g} Wh)"
    n = max(1, len(rec.gpus))
    mean = (f"; mean power {rec.gpu_energy_j / rec.duration_s / n:.0f} W per GPU" + (f" ({n} GPUs)" if n > 1 else "")
            if rec.gpu_energy_j is not None and rec.duration_s > 0 else "")
    lines.append(f"  energy      {fmt_energy(rec.energy_j)}{wh} charged to the job; its GPUs drew "
                 f"{fmt_energy(rec.gpu_energy_j)}{mean}")
    if self_reported:
        lines.append(f"              self-reported: {SELF_REPORTED}")
    if rec.profiling_energy_j:
        lines.append(f"              plus {fmt_energy(rec.profiling_energy_j)} for a pre-launch profiling run")
    it = "" if rec.iter_time_s is None else f", {rec.iter_time_s * 1e3:.1f} ms each"
    lines.append(f"  iterations  {_na(rec.iterations, '{}')}{it}")
    p = rec.profile
    if p is None:
        lines.append(f"  profile     none (profiling: {rec.profile_action or 'N/A'})")
    else:
        lines.append(f"  profile     ({rec.profile_action or 'N/A'}) alone and uncapped: "
                     f"{_na(p.iter_time_s and p.iter_time_s * 1e3, '{:.1f}')} ms/iteration, {_na(p.power_w)} W, "
                     f"SM {_na(p.sm_util_pct)} %, memory bandwidth {_na(p.mem_bw_util_pct)} %, "
                     f"memory {_na(p.memory_mib, '{}')} MiB")
        for pt in p.cap_points:
            lines.append(f"              at {pt.power_cap_w:.0f} W: {pt.iter_time_s * 1e3:.1f} ms/iteration, "
                         f"{pt.power_w:.0f} W")
    if rec.recommendation:
        lines.append(f"  power cap   {rec.recommendation}")
    if rec.history_match:
        lines.append(f"  history     matched on {rec.history_match}")
    if rec.not_learned:
        lines.append(f"              not updated from this run: {rec.not_learned}")
    lines += [f"  warning     {f}" for f in rec.findings]
    return "\n".join(lines)


#: the series drawn per GPU: (sample key, axis, line style, what the legend calls it)
_SERIES = (("power_w", "power", "-", "power"), ("power_limit_w", "power", "--", "cap"),
           ("util_gpu_pct", "util", "-", "SM"), ("util_mem_pct", "util", ":", "memory"))


def plot_groups(rec, indices: dict[str, int]) -> list[tuple[str, dict[str, list]]]:
    """What the plot draws: (legend label, series by sample key, ``t_s`` included) per group of GPUs.

    GPUs are labelled by their NVML index (``indices``: UUID → index, as ``ecolaunch status`` shows them; a GPU
    missing there is labelled by its UUID alone) and ordered by it. GPUs whose readings are identical (a
    data-parallel job on simulated GPUs) form one group, drawn once: their lines would hide each other exactly.
    """
    def order(uuid: str) -> tuple[int, str]:
        return (indices.get(uuid, 1 << 30), uuid)

    groups: dict[tuple, tuple[list[str], dict[str, list]]] = {}
    for uuid in sorted(rec.samples, key=order):
        points = rec.samples[uuid]
        series = {key: [p.get(key) for p in points] for key in ("t_s", *(k for k, *_ in _SERIES))}
        key = tuple(tuple(v) for v in series.values())
        groups.setdefault(key, ([], series))[0].append(uuid)
    out = []
    for uuids, series in groups.values():
        names = [f"GPU {indices[u]} ({u[:12]}…)" if u in indices else f"{u[:12]}…" for u in uuids]
        label = " = ".join(names)  # "GPU 0 (…) = GPU 1 (…)": identical readings, one line
        out.append((label, series))
    return out


def gpu_indices(state_dir: Path) -> dict[str, int]:
    """UUID → NVML index of every GPU the state directory's graph knows; empty when it cannot be read. Read as
    a plain file, not through a store transaction: a report changes nothing and may run where it cannot write."""
    # lazy: the store loads filelock, which `ecolaunch report` needs only for a state directory's graph
    from ecolaunch.state.store import MAX_STATE_BYTES
    from ecolaunch.safefs import read_file  # lazy: as the line above

    try:
        graph = StateGraph.from_dict(json.loads(read_file(StateLayout(state_dir).state_file, MAX_STATE_BYTES)[0]))
    except (OSError, ValueError, TypeError, RecursionError):  # missing, refused, not JSON, not a state document
        return {}
    return {g.uuid: g.index for host in graph.hosts.values() for g in host.gpus.values()}


def power_ylim(values) -> tuple[float, float] | None:
    """The power axis's range for the plotted watts (None: nothing to plot): theirs with a margin of 5 % of the
    span, and at least 5 % of their level or 5 W, so that a flat series (a steady 100 W job) sits in a readable
    range (95-105 W) instead of filling the axis with its noise; never below 0 W."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    pad = max(0.05 * (hi - lo), 0.05 * max(abs(lo), abs(hi)), 5.0)
    return max(0.0, lo - pad), hi + pad


def plot(rec, path: Path, indices: dict[str, int]) -> None:
    """Write a PNG of power (top) and GPU utilization (bottom) per GPU over the run."""
    try:
        import matplotlib
    except ImportError:
        raise Failed(f"cannot plot {path}: matplotlib is not installed", hint=PLOT_HINT) from None
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig = figure(rec, indices, plt)
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise click.ClickException(f"cannot write the plot {path}: {e.strerror or e}") from e
    finally:
        plt.close(fig)


def figure(rec, indices: dict[str, int], plt):
    """The plot's figure, drawn with ``plt`` (matplotlib.pyplot): power and caps above, utilization below."""
    fig, (ax_power, ax_util) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5))
    axes = {"power": ax_power, "util": ax_util}
    groups = plot_groups(rec, indices)
    watts = []
    for k, (label, series) in enumerate(groups):
        # one colour per GPU; earlier GPUs drawn wider, so lines that nearly coincide still show both
        style = {"color": f"C{k % 10}", "linewidth": 1.2 + 1.2 * (len(groups) - 1 - k), "zorder": 2 + k}
        for key, axis, linestyle, what in _SERIES:
            axes[axis].plot(series["t_s"], series[key], linestyle=linestyle, label=f"{label} {what}", **style)
            watts += series[key] if axis == "power" else []
    limits = power_ylim(watts)
    if limits is not None:
        ax_power.set_ylim(*limits)
    ax_power.ticklabel_format(axis="y", style="plain", useOffset=False)  # watts as watts: no "+1e2" offset
    ax_power.set_ylabel("power (W)")
    ax_util.set_ylabel("utilization (%)")
    ax_util.set_ylim(-5, 105)  # 0 % drawn above the axis line, not on it
    ax_util.set_yticks([0, 25, 50, 75, 100])
    ax_util.set_xlabel("seconds since start")
    ax_power.set_title(f"job {rec.job_id} {rec.name}: {fmt_energy(rec.energy_j)}")
    ax_power.legend(fontsize="small")
    ax_util.legend(fontsize="small")
    fig.tight_layout()
    return fig


#: the options of the report across jobs, and their parameters' names
_ACROSS = {"--by": "by", "--since": "since", "--user": "users", "--format": "fmt"}


@click.command(cls=Command)
@click.argument("job", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="print the whole record as JSON (sampled series included); without JOB, as --format json")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True, path_type=Path),
              help=f"write a PNG of power and utilization over time (needs matplotlib: {PLOT_HINT})")
@click.option("--by", type=click.Choice(["user", "day", "job"]), default="user", show_default=True,
              help="without JOB: one line per user, per day the jobs ended, or per job")
@click.option("--since", type=SinceType(), default=DEFAULT_SINCE, show_default=True,
              help="without JOB: the jobs that ended since then: 90m, 12h, 30d, 2w back, or an ISO date")
@click.option("--user", "users", multiple=True, metavar="USER", help="without JOB: only this user's jobs (repeatable)")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="without JOB: the form of the report")
@click.pass_context
def report(ctx: click.Context, job: str | None, as_json: bool, plot_path: Path | None, by: str, since,
           users: tuple[str, ...], fmt: str) -> None:
    given = [flag for flag, name in _ACROSS.items() if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if job is None:
        if plot_path is not None:
            raise click.UsageError(with_hint("--plot draws one job, and no JOB was given",
                                             "give its job id: ecolaunch report JOB --plot FILE ('ecolaunch history' "
                                             "lists them)"))
        if as_json and "--format" in given and fmt != "json":
            raise click.UsageError(with_hint(f"--json asks for JSON and --format for {fmt}", "give one of them"))
        report_across(by, since, users, "json" if as_json else fmt)
        return
    if given:
        options = " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)
        raise click.UsageError(with_hint(f"{options} {'is' if len(given) == 1 else 'are'} for the report across jobs, "
                                         f"not for one job ({job})", f"leave out JOB ({job}), or {options}"))
    store, state_dir = open_history()
    rec = find_record(store, job)
    if as_json:
        click.echo(json.dumps(to_json(rec), indent=2, sort_keys=True, ensure_ascii=True))
    else:
        echo(render(rec, gpu_indices(state_dir), self_reported=store.self_reported(rec)))
    if plot_path is not None:
        plot(rec, plot_path, gpu_indices(state_dir))
        click.echo(f"plot written to {plot_path}", err=True)


report.help = f"""Show one finished job, or energy, GPU-hours and the saving across jobs (like Slurm's sreport).

With JOB (a job id from 'ecolaunch history'; a unique prefix is enough): its energy, run time, GPUs and caps,
sharing, its profile and the cap advice. Without JOB: the jobs that ended since --since (default {DEFAULT_SINCE}),
one line per user, day or job (--by), with their energy in kWh, GPU-hours and the saving against running alone and
uncapped, an estimate (docs/accounting.md says how it is made). Reads the history in the state directory
({ENV_STATE_DIR}, as for the launcher)."""
