"""ecolaunch's own launch options, each declared once, and the typed configuration of one launch.

Each field of :class:`LaunchOptions` carries its option's whole declaration (:func:`option`: flags, environment
variable, value name, check, help, the hint under a bad value). The command line's parser
(:func:`ecolaunch.launch.argv.build_parser`), the reading of ``ECOLAUNCH_*`` variables, ``ecolaunch.launch()``'s
keywords and the README's option table (:func:`option_table`) are all made from it. :class:`LaunchConfig` is what
the CLI and the Python API build and hand to the pipeline (:func:`ecolaunch.launch.pipeline.run_launch`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ecolaunch import config
from ecolaunch.errors import ConfigError
from ecolaunch.launch.slurm import Allocation
from ecolaunch.launch.torchrun import FunctionCall, TorchrunArgs
from ecolaunch.state.graph import MAX_EXPECTED_ITERATIONS
from ecolaunch.validate import number_or_none

#: what ``--name`` may be: it is typed back to ``ecolaunch cancel`` and shown in tables (no spaces, no controls)
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+:@-]{0,63}")


@dataclass(frozen=True, slots=True)
class Spec:
    """One option's declaration. ``metavar`` None: a flag that takes no value (``--dry-run``); ``check(raw, spec)``
    turns a given value into the field's; ``api``: whether ``ecolaunch.launch()`` takes it as a keyword."""

    flags: tuple[str, ...]
    env: str
    help: str
    metavar: str | None = None
    check: Callable[[str, Spec], Any] | None = None
    hint: str = ""
    api: bool = True

    @property
    def flag(self) -> str:
        """The option's long flag, as errors name it."""
        return self.flags[-1]

    @property
    def takes_value(self) -> bool:
        return self.metavar is not None

    def text(self) -> str:
        """The help, its ``{policies}`` filled in (the placement policies, loaded only for a help or the README)."""
        return self.help.format(policies=_policy_list()) if "{policies}" in self.help else self.help

    def named(self) -> str:
        """How an error names the option: ``--policy (or ECOLAUNCH_PLACEMENT_POLICY)``."""
        return f"{self.flag} (or {self.env})"


def option(default: Any, *flags: str, env: str, help: str, metavar: str | None = None,
           check: Callable[[str, Spec], Any] | None = None, hint: str = "", api: bool = True) -> Any:
    """A :class:`LaunchOptions` field with its option's declaration (a dataclass field's metadata)."""
    return field(default=default, metadata={"spec": Spec(tuple(flags), env, help, metavar, check, hint, api)})


def _flag(raw: str, spec: Spec) -> bool:
    return config.env_flag({spec.env: raw}, spec.env)


def _number(raw: str, spec: Spec) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{spec.named()} must be a number, got {raw!r}", hint=spec.hint) from None
    if number_or_none(value, lo=0.0) is None:
        raise ConfigError(f"{spec.named()} must be a finite number >= 0, got {raw!r}", hint=spec.hint)
    return value


def _mib(raw: str, spec: Spec) -> int:
    return int(_number(raw, spec))


def _steps(raw: str, spec: Spec) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_EXPECTED_ITERATIONS:
        raise ConfigError(f"{spec.named()} must be a whole number from 1 to {MAX_EXPECTED_ITERATIONS}, got {raw!r}",
                          hint=spec.hint)
    return value


def _policy(raw: str, spec: Spec) -> str:
    from ecolaunch.policy.registry import policy_names  # lazy: the policies load when a launch is parsed

    names = policy_names()
    if raw not in names:
        raise ConfigError(f"{spec.named()} must be a placement policy, got {raw!r}", hint=f"use one of: {', '.join(names)}")
    return raw


def _policy_list() -> str:
    """The placement policies, the default first (for the help)."""
    from ecolaunch.policy.registry import policy_names  # lazy: as in _policy

    default = config.DEFAULT_PLACEMENT_POLICY
    return ", ".join([f"`{default}` (default)", *(f"`{n}`" for n in policy_names() if n != default)])


def _profile_mode(raw: str, spec: Spec) -> str:
    from ecolaunch.profile.modes import parse_mode  # lazy: as in _policy

    return parse_mode(raw).value


def _job_name(raw: str, spec: Spec) -> str:
    if not JOB_NAME.fullmatch(raw):
        raise ConfigError(f"{spec.named()} must be 1 to 64 letters, digits or '_.+:@-', starting with a letter or "
                          f"digit, got {raw!r}", hint=spec.hint)
    return raw


def _job_key(raw: str, spec: Spec) -> str:
    if not raw.strip() or len(raw) > 200:
        raise ConfigError(f"{spec.named()} must be 1 to 200 characters, not only spaces, got "
                          f"{raw[:40]!r}{'...' if len(raw) > 40 else ''}", hint=spec.hint)
    return raw


def yes_or_no(raw: str, spec: Spec) -> bool:
    """The check of an option whose value is yes or no (``--share-if-sooner``)."""
    value = config.yes_no(raw)
    if value is None:
        raise ConfigError(f"{spec.named()} must be yes or no, got {raw!r}", hint=spec.hint)
    return value


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """ecolaunch's own launch options (torchrun's are :class:`~ecolaunch.launch.torchrun.TorchrunArgs`), in the
    order ``ecolaunch --help`` lists them. A field left at its default was given neither on the command line nor by
    its environment variable."""

    dry_run: bool = option(False, "--dry-run", env="ECOLAUNCH_DRY_RUN", api=False,
                           help="decide and print the placement, launch nothing")
    json: bool = option(False, "--json", env=config.ENV_JSON, api=False,
                        help="print the decision as JSON on stdout, with --dry-run only that "
                             "([docs/torchrun.md](docs/torchrun.md#the-decision-as-json))")
    explain: bool = option(False, "--explain", env="ECOLAUNCH_EXPLAIN",
                           help="say why the policy chose these GPUs and caps, and what the best alternatives cost")
    wait_timeout_s: float | None = option(
        None, "--wait-timeout", env="ECOLAUNCH_WAIT_TIMEOUT", metavar="SECONDS", check=_number,
        help="seconds to wait in the queue when no GPUs fit (default: until they do; 0: fail at once, exit 75)",
        hint="e.g. --wait-timeout 600 (seconds in the queue; 0: fail at once, exit 75; leave it out to wait until "
             "GPUs fit)")
    policy: str = option(config.DEFAULT_PLACEMENT_POLICY, "--policy", env="ECOLAUNCH_PLACEMENT_POLICY", metavar="NAME",
                         check=_policy, help="placement policy: {policies}")
    allowed_slowdown_pct: float | None = option(
        None, "--allowed-slowdown", env=config.ENV_ALLOWED_SLOWDOWN, metavar="PCT", check=_number,
        help="the most slowdown (%) this job accepts from sharing and power caps; the admin's maximum wins",
        hint="e.g. --allowed-slowdown 10 (percent: at most 10 % slower than the job alone and uncapped)")
    memory_mib: int | None = option(
        None, "--memory-mib", env="ECOLAUNCH_MEMORY_MIB", metavar="MIB", check=_mib,
        help="peak GPU memory per worker (MiB) when known: GPUs with less free memory are skipped",
        hint="e.g. --memory-mib 20000 (one worker's peak GPU memory in MiB); leave it out when unknown")
    steps: int | None = option(
        None, "--steps", env="ECOLAUNCH_STEPS", metavar="N", check=_steps,
        help="the iterations the whole run marks: when the queue expects it to end",
        hint="e.g. --steps 20000 (the iterations the whole run marks, as ecolaunch.step() counts them)")
    profile: str = option("auto", "--profile", env="ECOLAUNCH_PROFILE", metavar="MODE", check=_profile_mode,
                          help="how the job is profiled: `auto` (default), `pre` (a short run first), `inline` (the "
                               "real run's first steps) or `off` ([docs/profiling.md](docs/profiling.md))")
    name: str | None = option(None, "--name", env="ECOLAUNCH_JOB_NAME", metavar="NAME", check=_job_name,
                              hint="e.g. --name resnet50-lr3e-4",
                              help="the job's name in status, history and the queue, and for `ecolaunch cancel "
                                   "NAME` (default: the script's file name)")
    job_key: str | None = option(None, "--job-key", env="ECOLAUNCH_JOB_KEY", metavar="KEY", check=_job_key,
                                 hint="name the job, e.g. --job-key bert-ft",
                                 help="launches with the same key, worker count and GPU model share one profile, "
                                      "whatever their script and arguments")
    fresh_profile: bool = option(False, "--fresh-profile", env="ECOLAUNCH_FRESH_PROFILE",
                                 help="ignore the job's stored profile: profile it again")
    share_if_sooner: bool | None = option(
        None, "--share-if-sooner", env="ECOLAUNCH_SHARE_IF_SOONER", metavar="yes|no", check=yes_or_no,
        hint="e.g. --share-if-sooner yes (the script comes after the value)",
        help="start now on a shared GPU if that finishes the job sooner than waiting "
             "([docs/queue.md](docs/queue.md#sharing-to-finish-sooner); default: the admin's)")
    backfill: bool | None = option(
        None, "--backfill", env="ECOLAUNCH_BACKFILL", metavar="yes|no", check=yes_or_no,
        hint="e.g. --backfill no (the script comes after the value)",
        help="start ahead of the queue's head when that keeps its reservation "
             "([docs/queue.md](docs/queue.md#backfill); default: yes, no for `exclusive`)")
    verbose: bool = option(False, "-v", "--verbose", env="ECOLAUNCH_VERBOSE", api=False,
                           help="log each step; show tracebacks of ecolaunch errors")

    @property
    def wait(self) -> bool:
        """Whether the job may wait in the queue (``--wait-timeout 0``: it may not)."""
        return self.wait_timeout_s != 0.0

    @classmethod
    def from_raw(cls, raw: Mapping[str, str | None]) -> LaunchOptions:
        """The options from their given text, by field name (absent, None or empty: the default); a bad value is a
        ConfigError naming the option, its variable and the value, with the option's hint."""
        values = {}
        for f, spec in declarations():
            text = raw.get(f.name)
            if text is None or text == "":
                continue
            values[f.name] = spec.check(text, spec) if spec.check is not None else _flag(text, spec)
        return cls(**values)

    @classmethod
    def from_env(cls, env: Mapping[str, str], given: Mapping[str, str | None] | None = None, *,
                 api: bool = False) -> LaunchOptions:
        """The options ``given`` as text (by field name), each other one from its environment variable; with
        ``api``, only the options ``ecolaunch.launch()`` takes (the others keep their defaults)."""
        given = given or {}
        return cls.from_raw({f.name: given[f.name] if given.get(f.name) is not None else env.get(spec.env)
                             for f, spec in declarations() if spec.api or not api})


def declarations() -> Iterator[tuple[dataclasses.Field, Spec]]:
    """Each option's field and declaration, in ``--help`` order."""
    for f in dataclasses.fields(LaunchOptions):
        yield f, f.metadata["spec"]


def spec_of(name: str) -> Spec:
    """The declaration of option ``name`` (a :class:`LaunchOptions` field)."""
    return LaunchOptions.__dataclass_fields__[name].metadata["spec"]


def api_keywords() -> tuple[str, ...]:
    """The options ``ecolaunch.launch()`` takes as keywords (not the command line's printing flags)."""
    return tuple(f.name for f, spec in declarations() if spec.api)


def option_table() -> str:
    """The README's option table (a generated region)."""
    rows = ["| option | environment variable | meaning |", "|---|---|---|"]
    for _, spec in declarations():
        value = f" {spec.metavar.replace('|', chr(92) + '|')}" if spec.takes_value else ""
        flags = ", ".join(f"`{flag}{value if flag == spec.flag else ''}`" for flag in spec.flags)
        rows.append(f"| {flags} | `{spec.env}` | {spec.text().replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """One launch, typed: what the CLI (:func:`ecolaunch.launch.argv.parse`) and ``ecolaunch.launch()`` build and
    the pipeline runs."""

    workers: TorchrunArgs
    options: LaunchOptions = LaunchOptions()
    #: the interpreter of the ``ecolaunch python ...`` form when it is not ours (exported as PYTHON_EXEC)
    python_exec: str | None = None
    #: what the workers call instead of a script (``ecolaunch.launch(fn)``; ``workers`` names it as a module)
    function: FunctionCall | None = None
    #: the Slurm allocation the launch runs in (None: outside Slurm), and the rendezvous options taken from it
    slurm: Allocation | None = None
    slurm_filled: tuple[str, ...] = ()
