"""``ecolaunch policy``: show the lab admin's effective power policy, check a policy file, train the GNN.

What lives here: the ``policy`` group and its ``show``, ``check`` and ``train`` commands. What does not: the policy's
reading and schema (:mod:`ecolaunch.admin.rules`, :mod:`ecolaunch.admin.schema`), its checks against this host
(:mod:`ecolaunch.admin.lint`), the training (:mod:`ecolaunch.learn.train`). The commands, their output and exit
codes: docs/admin.md#the-policy-file and docs/gnn.md#training-data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ecolaunch.admin.binding import binding_policy
from ecolaunch.admin.rules import Rules, load_rules
from ecolaunch.admin.schema import SCALAR_KEYS, PolicyErrors, dotted, render
from ecolaunch.cli.command import Failed, Group
from ecolaunch.config import (
    DEFAULT_POLICY_FILE,
    DEFAULT_STATE_DIR,
    ENV_GNN_WEIGHTS,
    ENV_JSON,
    ENV_POLICY_FILE,
    ENV_STATE_DIR,
    Environment,
)
from ecolaunch.errors import EcolaunchError, StateError, with_hint
from ecolaunch.profile.modes import ProfilerSettings
from ecolaunch.safefs import OWN_DIR_MODE, RECORD_MODE, RefusedFile, open_dir
from ecolaunch.statedir import GNN_MANIFEST_FILE, StateLayout


@click.group("policy", cls=Group)
def policy() -> None:
    """Show or check the lab admin's power policy file; train the placement GNN."""


@policy.command("show")
@click.option(
    "--file",
    "file_",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Policy file to read. [env var: {ENV_POLICY_FILE}; default: {DEFAULT_POLICY_FILE}]",
)
@click.option("--json", "as_json", is_flag=True, envvar=ENV_JSON, help=f"Print JSON. [env var: {ENV_JSON}]")
def show(file_: Path | None, as_json: bool) -> None:
    """Print the effective policy and the source of each value (the file and line, or "default")."""
    path = file_ if file_ is not None else Environment.from_env().policy_file
    # --file names a file that must exist; the environment's choice follows load_rules' rule
    rules, sources = load_rules(path, required=True if file_ is not None else None)
    if file_ is None:
        binding_policy(os.environ)  # on a shared state directory: one warning naming what the admin's policy overrides
    found = path.is_file()
    if as_json:
        doc = {"file": str(path), "found": found, "rules": rules.to_dict(), "sources": sources}
        click.echo(json.dumps(doc, indent=2, sort_keys=False))
        return
    note = "" if found else " (not found: built-in defaults)"
    click.echo(f"Policy file: {path}{note}")
    rows = [("KEY", "VALUE", "SOURCE"), *policy_rows(rules, sources)]
    key_width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    for key, value, source in rows:
        click.echo(f"{key:<{key_width}}  {value:<{value_width}}  {source}".rstrip())


def _unset(field: str) -> str:
    """What an unset (None) policy value means, in words: the built-in behaviour, never "N/A"."""
    built_in = ProfilerSettings()
    return {
        "profiling_max_iterations": f"none (a full profile takes {built_in.planned_steps() - 1} iterations)",
        "profiling_max_time_s": "none (no time limit)",
        "profiling_max_caps": f"none (profiling tries at most {built_in.max_caps} caps)",
        "state_dir": f"none (${ENV_STATE_DIR}, else {DEFAULT_STATE_DIR})",
        "state_group": "none (the directory's group is not checked)",
        "power_max_total_w": "none (no power budget)",
    }.get(field, "none")


def policy_rows(rules: Rules, sources: dict[str, str]) -> list[tuple[str, str, str]]:
    """One (TOML key, value, source) row per policy value, in the order of the file's schema."""
    rows: list[tuple[str, str, str]] = []
    for table, keys in SCALAR_KEYS.items():
        for key, spec in keys.items():
            value = getattr(rules, spec.field)
            text = _unset(spec.field) if value is None else render(value)
            rows.append((f"{table}.{key}", text, sources[spec.field]))
    for model, bounds in rules.cap_bounds_model.items():
        source = sources.get(f"cap_bounds_model[{model}]", "default")
        rows.append((dotted(("caps", model)), bounds.describe(), source))
    for index, bounds in sorted(rules.cap_bounds_index.items()):
        rows.append((f"caps.index.{index}", bounds.describe(), sources.get(f"cap_bounds_index[{index}]", "default")))
    if not rules.cap_bounds_model and not rules.cap_bounds_index:
        rows.append(("caps", "none (each board's own range)", "default"))
    reserved = list(dict.fromkeys([*rules.reserved, *rules.reserved_groups]))
    for gpu in reserved:
        users, groups = list(rules.reserved.get(gpu, ())), list(rules.reserved_groups.get(gpu, ()))
        source = sources.get(f"reserved[{gpu}]", "default")
        rows.append((dotted(("reserve", gpu)), f"users={render(users)} groups={render(groups)}", source))
    if not reserved:
        rows.append(("reserve", "none (every GPU open to all)", "default"))
    for user, limit in rules.user_gpu_limit.items():
        source = sources.get(f"user_gpu_limit[{user}]", "default")
        rows.append((dotted(("users", user, "max_gpus")), str(limit), source))
    if not rules.user_gpu_limit:
        rows.append(("users", "none (no per-user GPU limit)", "default"))
    if rules.agent_gpus is None:
        rows.append(("agent.gpus", "every GPU of the host", sources["agent_gpus"]))
    else:
        gpus = [int(g) if g.isascii() and g.isdigit() else g for g in rules.agent_gpus]
        rows.append(("agent.gpus", render(gpus), sources["agent_gpus"]))
    return rows


@policy.command("check")
@click.argument("file", type=click.Path(path_type=Path))
def check(file: Path) -> None:
    """Validate the policy FILE: print "OK: FILE", or every error with its line and key (exit 1).

    A rule that applies to no GPU (a model no GPU reports; an index or UUID this host does not have, when its
    GPUs can be read) is a warning on stderr; the file is still valid (exit 0). A ``[power] max_total_w`` below
    what this host's GPUs need to run one job (the sum of their minimum power limits) or above what they can draw
    (the sum of their maximum limits) is an error; without readable GPUs a note says it was not checked."""
    # lazy: registering the subcommands loads every cli module; the linter loads only when `policy check` runs
    from ecolaunch.admin.lint import check_power_budget, policy_warnings

    try:
        rules, sources = load_rules(file, required=True)
    except PolicyErrors as e:  # every error, not only the first (issue 41); the last one exits
        for error in e.errors[:-1]:
            click.echo(error.render(), err=True)
        raise Failed.from_error(e.errors[-1]) from e
    gpus, why_unknown = _host_gpus()
    if gpus is not None:
        check_power_budget(rules, sources, gpus)  # below what one job needs, or above what the boards draw
    warnings = policy_warnings(rules, sources, gpus)
    for warning in warnings:
        click.echo(with_hint(f"Warning: {warning}", warning.hint), err=True)
    names_gpus = rules.cap_bounds_index or rules.reserved or rules.reserved_groups or rules.agent_gpus
    if gpus is None and names_gpus:
        click.echo(f"Note: GPU indices and UUIDs not checked against this host: {why_unknown}", err=True)
    if gpus is None and rules.power_max_total_w is not None:
        click.echo("Note: power.max_total_w not checked against this host's GPUs' power limits (it must lie between "
                   f"the sums of their minimum and maximum limits): {why_unknown}", err=True)
    count = f" ({len(warnings)} warning{'s' if len(warnings) > 1 else ''})" if warnings else ""
    click.echo(f"OK: {file}{count}")


def _host_gpus() -> tuple[list | None, str | None]:
    """This host's GPUs (simulated ones under ECOLAUNCH_SIMULATE), or None and why they cannot be read."""
    # lazy: opening the GPUs loads a backend (pynvml); only `policy check` asks for this host's GPUs
    from ecolaunch.runtime import open_gpus

    try:
        backend = open_gpus(Environment.from_env())
        try:
            return backend.gpus(), None
        finally:
            backend.close()
    except EcolaunchError as e:
        return None, str(e)


@policy.command("train")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Weight file to write (manifest.json is written beside it). Default: <state dir>/gnn/weights.pt, "
                   f"which launches, predict and simulate use unless {ENV_GNN_WEIGHTS} names another file.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed: the same seed and data give the same weights.")
@click.option("--epochs", type=click.IntRange(1, 10_000), default=60, show_default=True)
@click.option("--synthetic", type=click.IntRange(0, 1_000_000), default=4000, show_default=True,
              help="Random machine states labelled by the simulator's measured models.")
@click.option("--history/--no-history", "use_history", default=True, show_default=True,
              help="Add the measurements of this machine's job history (the state directory's).")
@click.option("--calibration/--no-calibration", "use_calibration", default=True, show_default=True,
              help="Add this machine's `ecolaunch calibrate` results (the state directory's).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def train_cmd(out: Path | None, seed: int, epochs: int, synthetic: int, use_history: bool, use_calibration: bool,
              as_json: bool) -> None:
    """Train the GNN from scratch: Gavel's measured pairs, Zeus's cap sweeps, simulated machines and (unless
    --no-history, --no-calibration) this machine's job history and `ecolaunch calibrate` results. Writes
    <state dir>/gnn/weights.pt unless --out says otherwise; launches, `ecolaunch predict` and `ecolaunch simulate`
    use that file (ECOLAUNCH_GNN_WEIGHTS overrides it). About a minute on 2 cores."""
    import torch

    # lazy: the trainer loads torch, torch_geometric and the simulator's models; only `policy train` needs them
    from ecolaunch.runtime import resolve
    from ecolaunch.learn.calibration_data import CalibrationData, calibration_samples  # lazy: as above
    from ecolaunch.learn.history_data import HistoryData, history_samples  # lazy: as above
    from ecolaunch.learn.train import train  # lazy: as above
    from ecolaunch.profile.history import History  # lazy: as above

    try:
        environment, _ = resolve()
        data = history_samples(History(environment.state_dir)) if use_history else HistoryData()
        simulated = environment.simulate is not None  # simulated calibration trains only for simulated GPUs
        cal = (calibration_samples(environment.state_dir, simulated=simulated) if use_calibration
               else CalibrationData())
        if use_calibration:
            _warn_untrusted_calibration(environment.state_dir)
        torch.set_num_threads(1)  # reproducible, and fastest on a small shared machine

        def progress(epoch: int, loss: float) -> None:
            if not as_json:
                click.echo(f"epoch {epoch + 1:3d}/{epochs}  loss {loss:.4f}", err=True)

        history = {"state_dir": str(environment.state_dir) if use_history else None, **data.summary()}
        calibration = {"state_dir": str(environment.state_dir) if use_calibration else None,
                       "simulated": simulated, **cal.summary()}

        def run(path: Path) -> dict:
            return train(seed, path, epochs=epochs, synthetic=synthetic, extra=[*data.samples, *cal.samples],
                         describe={"history": history, "calibration": calibration}, progress=progress)

        target = out if out is not None else StateLayout(environment.state_dir).gnn_weights
        manifest = run(out) if out is not None else _train_into_state_dir(target, run)
    except ImportError as e:
        raise Failed(f"training needs torch_geometric: {e}", hint="pip install torch-geometric") from None
    if as_json:
        click.echo(json.dumps(manifest, indent=2, sort_keys=True))
        return
    metrics = manifest.get("metrics", {})
    h = manifest["history"]
    skipped = ", ".join(f"{n} {why}" for why, n in h["skipped"].items()) or "none"
    click.echo(f"history     {h['samples']} samples ({h['cap_points']} profiled caps, {h['runs']} runs, "
               f"{h['shared_runs']} of them shared); left out: {skipped}" if use_history else "history     not used")
    c = manifest["calibration"]
    left = ", ".join(f"{n} {why}" for why, n in c["skipped"].items()) or "none"
    kind = " (simulated GPUs: not measurements)" if c["simulated"] and c["samples"] else ""
    click.echo(f"calibration {c['samples']} samples from {len(c['files'])} file(s){kind} ({c['cap_points']} caps "
               f"alone, {c['pairs']} pairs); left out: {left}" if use_calibration else "calibration not used")
    click.echo(f"weights     {target} ({manifest.get('weights_bytes', 0)} bytes), {manifest['train_s']} s")
    g = metrics.get("gavel_heldout")
    if g:  # only when training held Gavel pairs out (train()'s holdout)
        click.echo(f"Gavel held-out pairs: MAE {g['mae']:.4f}, pack accuracy {g['pack_accuracy_pct']:.1f} %")
    if "synthetic_throughput_mae" in metrics and "synthetic_power_mae_frac" in metrics:
        click.echo(f"simulated states: throughput MAE {metrics['synthetic_throughput_mae']:.4f}, power MAE "
                   f"{metrics['synthetic_power_mae_frac']:.4f} of the max limit")
    if out is None:
        click.echo(f"use it:     launches, predict and simulate with state directory {environment.state_dir} use it "
                   f"now ({ENV_GNN_WEIGHTS} overrides it)")
    else:
        click.echo(f"use it:     export {ENV_GNN_WEIGHTS}={out.resolve()}")


def _warn_untrusted_calibration(state_dir: Path) -> None:
    """A ``Warning:`` when ``<state dir>/calibration`` exists but is not used (a link, or not root's or this user's
    alone: a member made it first), so that its results are left out; with the fix."""
    import stat

    directory = StateLayout(state_dir).calibration
    try:
        st = os.lstat(directory)
    except OSError:
        return  # missing: nothing was calibrated here
    if stat.S_ISDIR(st.st_mode) and st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022:
        return
    kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a directory"
    click.echo(with_hint(f"Warning: {directory} is {kind} of uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}: "
                         "only root's or your own, writable by nobody else, is used, so no calibration goes into this "
                         "training", "on a shared machine run `sudo ecolaunch init-state`: it moves it aside and makes "
                         "it root's again; then `ecolaunch calibrate`"), err=True)


def _train_into_state_dir(target: Path, run) -> dict:
    """``run(path)`` trains into a private temporary directory beside ``target`` (``<state dir>/gnn/weights.pt``);
    the manifest, then the weights, are renamed into place, so a launch reads the old weights or the new ones,
    never a partial file. ``gnn/`` is created 0755 and must be root's or this user's, writable by nobody else."""
    import shutil
    import tempfile


    directory = target.parent
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        parent = os.open(directory.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.close(open_dir(directory.name, parent_fd=parent, create_mode=OWN_DIR_MODE, owners={0, os.geteuid()},
                              private=True))
        finally:
            os.close(parent)
        staging = Path(tempfile.mkdtemp(prefix=".train-", dir=directory))
    except RefusedFile as e:
        raise StateError(f"cannot write GNN weights into {directory}: {e}",
                         hint=f"on a shared machine run `sudo ecolaunch init-state`: it moves {directory} aside and "
                              "makes it root's again; or use --out FILE") from e
    except OSError as e:
        raise StateError(f"cannot write GNN weights into {directory}: {e.strerror or e}",
                         hint="run it as the state directory's owner (root on a shared machine), or use --out FILE"
                         ) from e
    try:
        manifest = run(staging / target.name)
        for name in (GNN_MANIFEST_FILE, target.name):
            os.chmod(staging / name, RECORD_MODE)
            os.replace(staging / name, directory / name)
        return manifest
    finally:
        shutil.rmtree(staging, ignore_errors=True)
