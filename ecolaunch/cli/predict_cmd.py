"""``ecolaunch predict``: what-if predictions of the GNN for jobs sharing one GPU, read as JSON from stdin.

What lives here: the command, the scenario's reading and checks (:data:`MAX_DEPTH`, :data:`MAX_JOBS_PER_GPU`,
:data:`TRAINED_JOBS_PER_GPU`) and the answer's rendering. What does not: the measured curve
(:class:`ecolaunch.jobmodel.capcurve.CapCurve`, the one reading the placement policy uses too), the model. The input
and output, field by field, and how measured caps are honoured: docs/gnn.md#ecolaunch-predict.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from ecolaunch.cli.command import Command
from ecolaunch.config import Environment
from ecolaunch.errors import ConfigError, with_hint
from ecolaunch.jobmodel.codec import profile_from_json, profile_to_json
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.state.graph import GpuNode
from ecolaunch.validate import number_or_none

_JOB_FIELDS = ("id", "iter_time_s", "sm_util_pct", "mem_bw_util_pct", "memory_mib", "power_w", "cap_points")
_SCENARIO_FIELDS = ("gpu", "power_cap_w", "jobs")
_POINT_FIELDS = ("power_cap_w", "iter_time_s", "power_w")
#: the deepest nesting of arrays and objects accepted (an array of scenarios needs 6: array, scenario, jobs,
#: job, cap_points, point)
MAX_DEPTH = 16
#: the most jobs one GPU can share: the admin policy's own ceiling for ``[colocation] max_jobs_per_gpu``
MAX_JOBS_PER_GPU = 64
#: the most jobs per GPU in the GNN's training states (``ecolaunch.learn.train``); beyond, a note says so
TRAINED_JOBS_PER_GPU = 4


#: the fix printed with every bad input: the shortest valid scenario, and where every field is described
INPUT_HINT = ('a scenario is {"gpu": "A100-SXM4-80GB", "power_cap_w": null, "jobs": [{"id": "a", "iter_time_s": 0.1, '
              '"memory_mib": 6000}]} (or an array of them); every field: ecolaunch predict --help')


class _Bad(Exception):
    """A field of the input is wrong; ``str(e)`` names it."""


def _wrong(raw: dict[str, Any], key: str, where: str, want: str) -> _Bad:
    """The error for field ``key`` of ``raw`` (at ``where``), which should be ``want``: ``missing (want)`` when the
    key is absent, else ``expected want, got <its JSON>``."""
    if key not in raw:
        return _Bad(f"{where}: missing ({want})")
    return _Bad(f"{where}: expected {want}, got {json.dumps(raw[key])[:60]}")


def _number(value: Any, where: str, *, low: float = 0.0, high: float | None = None, positive: bool = False,
            nullable: bool = False) -> float | None:
    if value is None and nullable:
        return None
    out = number_or_none(value, lo=low, hi=high, positive=positive)
    if out is None:
        want = "a number" + (" > 0" if positive else f" >= {low:g}") + (f" and <= {high:g}" if high is not None else "")
        raise _Bad(f"{where}: expected {want}{' or null' if nullable else ''}, got {json.dumps(value)}")
    return out


def _object(value: Any, where: str, fields: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{where or 'input'}: expected an object, got {json.dumps(value)[:60]}")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise _Bad(f"{where + '.' if where else ''}{unknown[0]}: unknown field (known: {', '.join(fields)})")
    return value


def _job(raw: Any, where: str) -> dict[str, Any]:
    """One job: its ``id`` and its profile in the one JSON form (validated by :mod:`ecolaunch.jobmodel.codec`), with
    the two fields a what-if needs that a profile may lack."""
    raw = _object(raw, where, _JOB_FIELDS)
    if not isinstance(raw.get("id"), str) or not raw["id"]:
        raise _wrong(raw, "id", f"{where}.id", "a non-empty string")
    points = raw.get("cap_points")
    for i, p in enumerate(points if isinstance(points, list) else []):  # not a list: the codec says so
        if isinstance(p, dict):
            _object(p, f"{where}.cap_points[{i}]", _POINT_FIELDS)
            for key in _POINT_FIELDS:
                if key not in p:
                    raise _Bad(f"{where}.cap_points[{i}].{key}: missing (a cap point is {', '.join(_POINT_FIELDS)})")
    try:
        profile = profile_from_json({k: v for k, v in raw.items() if k != "id"}, where=where)
    except ConfigError as e:
        raise _Bad(str(e)) from None
    for key, what in (("iter_time_s", "its uncapped iteration time in seconds"), ("memory_mib", "its memory in MiB")):
        if getattr(profile, key) is None:
            raise _Bad(f"{where}.{key}: missing ({what}; every job needs it)")
    return {"id": raw["id"], **profile_to_json(profile)}


def parse_scenario(raw: Any, where: str = "") -> tuple[GpuModel, float | None, list[dict[str, Any]]]:
    """Validate one scenario: (catalogue GPU model, cap or None, job dicts). Raises _Bad naming the field."""
    # lazy: registering the subcommands loads every cli module; the catalogue loads only when a scenario is read
    from ecolaunch.devices.catalogue import lookup

    raw = _object(raw, where, _SCENARIO_FIELDS)
    pre = f"{where}." if where else ""
    if not isinstance(raw.get("gpu"), str):
        raise _wrong(raw, "gpu", f"{pre}gpu", 'a catalogue GPU name such as "V100-SXM2-32GB"')
    try:
        gpu = lookup(raw["gpu"])
    except ConfigError as e:
        raise _Bad(f"{pre}gpu: {e}") from None
    cap = _number(raw.get("power_cap_w"), f"{pre}power_cap_w", low=gpu.power_limit_min_w,
                  high=gpu.power_limit_max_w, nullable=True)
    jobs = raw.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise _wrong(raw, "jobs", f"{pre}jobs", "a non-empty list of jobs")
    if len(jobs) > MAX_JOBS_PER_GPU:
        raise _Bad(f"{pre}jobs: {len(jobs)} jobs cannot share one GPU (at most {MAX_JOBS_PER_GPU}, the most any admin "
                   "policy allows)")
    parsed = [_job(j, f"{pre}jobs[{i}]") for i, j in enumerate(jobs)]
    seen: set[str] = set()
    for i, j in enumerate(parsed):
        if j["id"] in seen:
            raise _Bad(f"{pre}jobs[{i}].id: {j['id']!r} appears twice")
        seen.add(j["id"])
    return gpu, cap, parsed


def predict_scenarios(scenarios: list[tuple[GpuModel, float | None, list[dict[str, Any]]]],
                      weights: Path | None = None) -> list[dict[str, Any]]:
    """Score every scenario in one forward pass of the GNN (``weights``: a weight file; None = shipped)."""
    import torch

    # lazy: features and infer load torch, which registering the subcommands must not
    from ecolaunch.policy.features import scenario_graph
    from ecolaunch.policy.infer import load_model_cached, score_sd  # lazy: as above

    torch.set_num_threads(1)  # a few tiny graphs: threads only add overhead on a shared machine
    graphs = [scenario_graph(GpuNode.from_model(gpu), cap, jobs) for gpu, cap, jobs in scenarios]
    throughputs, powers, sds = score_sd(graphs, None if weights is None else load_model_cached(weights))
    out = []
    for (gpu, cap, jobs), thr, power, sd in zip(scenarios, throughputs, powers, sds):
        memory = sum(j["memory_mib"] for j in jobs)
        out.append({
            "jobs": [{"id": j["id"], "normalized_throughput": round(float(x), 4), "throughput_sd": round(float(d), 4)}
                     for j, x, d in zip(jobs, thr, sd)],
            "gpu_power_w": round(_board_power_w(gpu, cap, float(power[0])), 1),
            "fits_memory": bool(memory <= gpu.memory_mib),
        })
    return out


def _board_power_w(gpu: GpuModel, cap: float | None, predicted_w: float) -> float:
    """A predicted board power the board can draw: at least its idle power (a board with jobs on it never draws
    less than one without); the model keeps it at most the limit (the cap, else the maximum) unless it comes from
    the job's measured curve (boards overshoot their limit by a few percent); the limit when not a number."""
    limit = cap if cap is not None else gpu.power_limit_max_w
    low = min(gpu.idle_power_w, limit)
    if not math.isfinite(predicted_w):
        return float(limit)
    return max(predicted_w, low)


def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, strings skipped: checked before parsing, so that deep
    input is refused with a clear error instead of a RecursionError from the parser or the error messages."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def _render(raw_scenarios: list[dict[str, Any]], scenarios: list[tuple[GpuModel, float | None, Any]],
            results: list[dict[str, Any]]) -> str:
    blocks = []
    for k, (raw, (gpu, cap, _), res) in enumerate(zip(raw_scenarios, scenarios, results)):
        # the cap in words, apart from the predicted power: "cap max: 383.0 W" read as a cap of 383 W (issue 41)
        limit = (f"uncapped (the board's maximum, {gpu.power_limit_max_w:g} W)" if cap is None
                 else f"capped at {cap:g} W")
        head = f"{raw['gpu']} {limit}: predicted GPU power {res['gpu_power_w']:.1f} W, " \
               f"memory {'fits' if res['fits_memory'] else 'does NOT fit'}"
        width = max(3, *(len(j["id"]) for j in res["jobs"]))
        rows = [f"{'JOB':<{width}}  NORMALIZED THROUGHPUT ± SD"]
        rows += [f"{j['id']:<{width}}  {j['normalized_throughput']:.3f} ± {j['throughput_sd']:.3f}"
                 for j in res["jobs"]]
        blocks.append((f"scenario {k + 1}: " if len(results) > 1 else "") + head + "\n" + "\n".join(rows))
    return "\n\n".join(blocks)


@click.command(cls=Command)
@click.option("--json", "as_json", is_flag=True, help="print the predictions as JSON")
def predict(as_json: bool) -> None:
    """Predict each job's normalized throughput and the GPU's power for jobs sharing one GPU.

    Reads a scenario (or a JSON array of scenarios) from stdin: ecolaunch predict --json < scenario.json

    \b
    A scenario:
      {"gpu": "A100-SXM4-80GB",      a catalogue GPU name
       "power_cap_w": null,          null = uncapped, else watts within the board's range
       "jobs": [{"id": "a",          unique per scenario
                 "iter_time_s": 0.1, "memory_mib": 6000,      required
                 "sm_util_pct": 45, "mem_bw_util_pct": 30,    optional (null: not measured)
                 "power_w": 250,                              optional: solo, uncapped
                 "cap_points": [{"power_cap_w": 200, "iter_time_s": 0.11, "power_w": 190}]}]}   optional

    Bad input: a usage error naming the field, exit 2.
    """
    stdin = click.get_text_stream("stdin")
    if stdin.isatty():
        raise click.UsageError("give the scenario as JSON on stdin, e.g. ecolaunch predict < scenario.json")
    text = stdin.read()
    if _depth(text) > MAX_DEPTH:
        raise _bad_input(f"input: arrays and objects nested more than {MAX_DEPTH} deep (scenarios need 6)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad_input(f"stdin is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:  # pragma: no cover - refused above
        raise _bad_input(f"input: arrays and objects nested more than {MAX_DEPTH} deep") from None
    many = isinstance(doc, list)
    items = doc if many else [doc]
    if many and not items:
        raise _bad_input("input: expected a scenario object or a non-empty array of them, got []")
    try:
        scenarios = [parse_scenario(s, f"[{i}]" if many else "") for i, s in enumerate(items)]
        # lazy: infer loads torch, which registering the subcommands must not; here only after the input parsed
        from ecolaunch.policy.infer import chosen_weights

        results = predict_scenarios(scenarios, chosen_weights(Environment.from_env()))
    except _Bad as e:
        raise _bad_input(str(e)) from None
    crowded = max(len(jobs) for _, _, jobs in scenarios)
    if crowded > TRAINED_JOBS_PER_GPU:
        click.echo(f"note: {crowded} jobs on one GPU; the model was trained with at most {TRAINED_JOBS_PER_GPU}, so these "
                   "predictions are extrapolations", err=True)
    if as_json:
        click.echo(json.dumps(results if many else results[0], indent=2))
    else:
        click.echo(_render(items, scenarios, results))


def _bad_input(message: str) -> click.UsageError:
    """Bad input on stdin: a usage error (exit 2, as a bad option), ``Error: message`` and the shortest scenario."""
    return click.UsageError(with_hint(message, INPUT_HINT), click.get_current_context(silent=True))


if __name__ == "__main__":  # pragma: no cover
    predict(sys.argv[1:])
