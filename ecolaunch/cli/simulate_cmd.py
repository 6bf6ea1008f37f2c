"""``ecolaunch simulate``: run policies on a trace over simulated GPUs and compare energy and job times.

The traces come from :mod:`ecolaunch.sim.trace_registry` and the policies from :mod:`ecolaunch.sim.policies`; the
help lists both as the registries hold them, read when the help is shown (the registries load the simulator, which
the other subcommands, registered beside this one, must not pay for).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from ecolaunch.cli.command import Command
from ecolaunch.config import Environment
from ecolaunch.errors import ConfigError, did_you_mean, with_hint


def _fmt_h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


class _Listed(click.Option):
    """An option whose help is written by ``listing()`` when the help is shown."""

    def __init__(self, *args: Any, listing: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = listing

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self._listing()
        return super().get_help_record(ctx)


def _trace_help() -> str:
    # lazy: click builds this listing only when it shows the option's help; the simulator's registries load then
    from ecolaunch.sim.trace_registry import MEASURED, MODEL, trace_names

    return (f"a trace of the model world on --gpus ({', '.join(trace_names(MODEL))}), of the measured world on its "
            f"own machine ({', '.join(trace_names(MEASURED))}), or a trace file (see docs/simulator.md)")


def _policy_help() -> str:
    # lazy: click builds this listing only when it shows the option's help; the simulator's registries load then
    from ecolaunch.sim.policies import ABLATIONS, sim_policy_names

    return (f"a placement policy ({', '.join(sim_policy_names())}, or the ablation {', '.join(ABLATIONS)}); "
            "repeat to compare several in one run")


def _refuse_machine_options(trace_name: str, own: str) -> None:
    """A usage error when ``--gpus`` or ``--hosts`` was given for a measured trace, which runs on its own machine:
    the models it plays are measurements of those boards, so another machine would be silently ignored."""
    ctx = click.get_current_context()
    given = [f"--{name}" for name in ("gpus", "hosts")
             if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)]
    if given:
        raise click.UsageError(with_hint(
            f"{' and '.join(given)} cannot apply to the measured trace {trace_name!r}: it runs on its own machine "
            f"({own}), the boards its measurements are of",
            f"leave out {' and '.join(given)}, or pick a trace of the model world for another machine: "
            f"{', '.join(_model_traces())}"))


def _link_speed(text: str | None, measured: bool, trace_name: str) -> tuple[float | None, str | None]:
    """``--link-slowdown``: the share of speed a worse-linked set keeps, and a line that says where it comes from."""
    if text is None:
        return None, None
    if not measured:
        raise click.BadParameter(with_hint(f"the model world plays no link between GPUs, so trace {trace_name!r} "
                                           "cannot take a link slowdown",
                                           "pick a measured trace (workstation-topology has split pairs)"),
                                 param_hint="'--link-slowdown'")
    if text.strip() == "calibrated":
        pct, where = _calibrated_slowdown()
    else:
        try:
            pct, where = float(text), "--link-slowdown"
        except ValueError:
            pct, where = math.nan, ""
        if not 0 <= pct < 1e4:
            raise click.BadParameter(with_hint(f"{text!r} is not a percentage >= 0 or 'calibrated'",
                                               "e.g. --link-slowdown 12.5, or --link-slowdown calibrated"),
                                     param_hint="'--link-slowdown'")
    from ecolaunch.sim.measured import link_speed_of  # lazy: the simulator loads numpy, as in simulate()

    return link_speed_of(pct), f"links: a worse-linked set runs every multi-GPU job {pct:.1f} % slower ({where})"


def _calibrated_slowdown() -> tuple[float, str]:
    """The step slowdown of the newest link probe of the state directory (one made on real GPUs first)."""
    # lazy: the results load only when --link-slowdown calibrated is given
    from ecolaunch.calibrate.results import is_links, read_results

    state_dir = Environment.from_env().state_dir
    docs = [r for r in read_results(state_dir) if r.doc is not None and is_links(r.doc)]
    if not docs:
        raise click.BadParameter(with_hint(f"no link probe in {state_dir}/calibration/",
                                           "run `ecolaunch calibrate --links` on this machine first, or give a "
                                           "percentage"), param_hint="'--link-slowdown'")
    newest = max(docs, key=lambda r: (not r.doc["simulated"], r.doc.get("started_at") or 0))
    pct = max(0.0, float(newest.doc["penalty"]["step_slowdown_pct"]))
    said = f"{newest.path}" + (", made on simulated GPUs: not a measurement" if newest.doc["simulated"] else "")
    return pct, said


def _model_traces() -> list[str]:
    # lazy: as in _trace_help
    from ecolaunch.sim.trace_registry import MODEL, trace_names

    return trace_names(MODEL)


@click.command(cls=Command)
@click.option("--gpus", "gpus", default="8xA100-SXM4-80GB", show_default=True,
              help="GPUs of one host: a spec like 8xA100-SXM4-80GB or 2xRTX4090+2xA6000, or a TOML machine file "
                   "(a measured trace runs on its own machine and refuses --gpus)")
@click.option("--hosts", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="identical hosts (a measured trace refuses it)")
@click.option("--trace", "trace_name", cls=_Listed, listing=_trace_help, default="workstation-light",
              show_default=True)
@click.option("--policy", "policies", cls=_Listed, listing=_policy_help, multiple=True, default=("exclusive",),
              show_default=True)
@click.option("--seed", default=0, show_default=True, help="seed of the trace's random draws")
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=None, help="number of jobs (default: the trace's)")
@click.option("--backfill", type=click.Choice(["yes", "no"]), default=None,
              help="EASY backfill in the queue (default: as the launcher, every policy but exclusive)")
@click.option("--link-slowdown", metavar="PCT|calibrated", default=None,
              help="a measured trace's multi-GPU jobs run PCT % slower on a worse-linked set, every type alike "
                   "(calibrated: as `ecolaunch calibrate --links` measured this machine's); default: Gavel's "
                   "across-server slowdown of each type, an upper bound for one host's links")
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON")
def simulate(gpus: str, hosts: int, trace_name: str, policies: tuple[str, ...], seed: int, jobs: int | None,
             backfill: str | None, link_slowdown: str | None, as_json: bool) -> None:
    """Run each policy on the same trace and machine, and print energy (node, GPU-only, job-attributed),
    mean and p95 job completion time, mean slowdown against running alone, QoS violations, makespan and GPU
    utilization. Deterministic: the same arguments give the same numbers."""
    # lazy: the simulator loads numpy and its fitted models, which the other subcommands do not need
    from ecolaunch.sim.metrics import summarize
    from ecolaunch.jobmodel.capcurve import default_prior  # lazy: read only by the simulator, as above
    from ecolaunch.sim.policies import get_sim_policy  # lazy: as above
    from ecolaunch.sim.trace_registry import gpus_label, lookup  # lazy: as above

    from ecolaunch.sim.policies import ABLATIONS, sim_policy_names  # lazy: as above

    known = [*sim_policy_names(), *ABLATIONS]
    for name in policies:
        if name not in known:
            raise click.BadParameter(with_hint(f"no policy {name!r}{did_you_mean(name, known)}",
                                               f"choose from: {', '.join(known)}"), param_hint="'--policy'")
    try:
        entry = lookup(trace_name)
    except ConfigError as e:
        raise click.BadParameter(with_hint(str(e), e.hint), param_hint="'--trace'") from None
    machine = entry.machine(gpus, hosts)
    if entry.brings_machine:  # a measured trace runs on the boards its measurements are of
        _refuse_machine_options(trace_name, gpus_label(machine))
        gpus = gpus_label(machine)
    link_speed, link_said = _link_speed(link_slowdown, entry.brings_machine, trace_name)
    trace = entry.build(machine, seed=seed, jobs=jobs)
    weights = Environment.from_env().gnn_weights
    if weights is not None and any(p in ("gnn", "no-gnn") for p in policies):
        # lazy: infer loads torch; only a simulation given gnn weights needs it
        from ecolaunch.policy.infer import chosen_weights

        weights = chosen_weights(Environment.from_env())
    priors = default_prior
    if entry.brings_machine:  # the measured world reads each job's curve with the prior held out for its type
        from ecolaunch.sim.measured import HeldOutPriors  # lazy: as above

        priors = HeldOutPriors({j.id: j.kind for j in trace.jobs})
    chosen = [get_sim_policy(p, gnn_weights=weights, priors=priors) for p in policies]
    if entry.brings_machine:  # the measured world: `curve` (and `curve-link`) as the launcher runs it, told a
        from ecolaunch.sim.first_curves import as_launched  # colleague's profile; lazy: as above

        chosen = [as_launched(c, trace, p) if p in ("curve", "curve-link") else c for p, c in zip(policies, chosen)]
    rows = []
    for name, policy in zip(policies, chosen):
        sim = entry.simulation(machine, trace, name, policy, seed=seed, link_speed=link_speed)
        if backfill is not None:
            sim.backfill = backfill == "yes"
        show_bar = not as_json and len(trace.jobs) >= 2000 and sys.stderr.isatty()
        if show_bar:
            with click.progressbar(length=len(trace.jobs), label=f"{policy.name:>10}", file=sys.stderr) as bar:
                last = [0]

                def progress(done: int, total: int) -> None:
                    bar.update(done - last[0])  # noqa: B023 (called within this iteration)
                    last[0] = done  # noqa: B023 (called within this iteration)

                result = sim.run(trace, progress)
        else:
            result = sim.run(trace)
        rows.append(summarize(result))
    if as_json:
        doc = {"trace": trace.name, "machine": gpus, "hosts": hosts, "seed": seed, "jobs": len(trace.jobs),
               "link_speed": link_speed, "policies": {r.policy: r.to_dict() for r in rows}}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    click.echo(f"trace {trace.name}: {len(trace.jobs)} jobs on {hosts} x {gpus} (seed {seed})")
    if link_said:
        click.echo(link_said)
    header = (f"{'policy':<11}{'node kWh':>10}{'GPU kWh':>10}{'job kWh':>10}{'mean JCT':>11}{'p95 JCT':>11}"
              f"{'slowdown':>10}{'QoS viol':>10}{'makespan':>11}{'GPU util':>10}{'shared':>8}")
    click.echo(header)
    for r in rows:
        click.echo(f"{r.policy:<11}{r.node_energy_kwh:>10.2f}{r.gpu_energy_kwh:>10.2f}{r.job_energy_kwh:>10.2f}"
                   f"{_fmt_h(r.mean_jct_s):>11}{_fmt_h(r.p95_jct_s):>11}{r.mean_slowdown_pct:>9.1f}%"
                   f"{r.qos_violations_pct:>9.1f}%{_fmt_h(r.makespan_s):>11}{r.gpu_utilization_pct:>9.1f}%"
                   f"{r.shared_jobs_pct:>7.0f}%")

