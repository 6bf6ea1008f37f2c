"""The launch command line: the installed torch's own torchrun parser plus ecolaunch's options.

Rules this module keeps (tested against the installed torch in ``tests/launch/test_argv.py``):

* every torchrun option, spelling, ``PET_*`` fallback and argparse abbreviation keeps its exact meaning: the
  parser *is* ``torch.distributed.run.get_args_parser()``, and ecolaunch only adds options none of whose
  prefixes was a valid torchrun abbreviation;
* everything after the training script goes to the script, as with torchrun;
* prefix forms: ``ecolaunch [eco options] torchrun <torchrun args>`` and
  ``ecolaunch [eco options] python [-m module | script] args`` (one worker);
* each ecolaunch option has an ``ECOLAUNCH_*`` environment variable, read from the ``env`` mapping the CLI
  passes in (a flag on the command line wins);
* a bad value of an ecolaunch option or its variable (``--policy magic``, ``--profile sometimes``,
  ``--wait-timeout soon``, ``ECOLAUNCH_DRY_RUN=maybe``) is a usage error, exit 2, like argparse's own;
* a bad ``--nproc-per-node`` (``0``, ``two``) and whatever torch's own checks of a launch refuse (``-m`` with
  ``--no-python``, an unknown ``--logs-specs``) are usage errors too, exit 2, before anything is booked;
* a training script that does not exist (unless ``-m`` or ``--no-python`` says it is no file) is a usage error
  too, exit 2, before anything is booked: torchrun would start every worker, each failing with python's
  "can't open file" (python's own exit code for it is 2 as well);
* a ``--no-python`` program that is not on ``PATH`` (or no such path) exits 127, one that is not executable 126,
  the shell's codes for a command it cannot run, also before anything is booked (torchrun fails with a
  ``FileNotFoundError`` traceback).

Errors print argparse's way (``ecolaunch: error: ...``), then ``HINT: ...`` on a line of its own.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ecolaunch import config
from ecolaunch.config import LaunchOptions
from ecolaunch.errors import ConfigError, ProgramNotFound, with_hint
from ecolaunch.launch import exitcodes
from ecolaunch.launch.slurm import Allocation, allocation, fill_rendezvous
from ecolaunch.launch.torchrun import FunctionCall, check_args
from ecolaunch.policy.registry import policy_names
from ecolaunch.profile.modes import DEFAULT_MODE, parse_mode
from ecolaunch.validate import number_or_none

#: ecolaunch's own launch options: (flags, env var, takes a value, help)
ECO_OPTIONS: tuple[tuple[tuple[str, ...], str, bool, str], ...] = (
    (("--dry-run",), config.ENV_DRY_RUN, False, "decide and print the placement, launch nothing"),
    (("--json",), config.ENV_JSON, False, "print the decision as JSON (with --dry-run: only the JSON)"),
    (
        ("--explain",),
        config.ENV_EXPLAIN,
        False,
        "say why the policy chose these GPUs and caps, and what the best alternatives would have cost",
    ),
    (
        ("--wait-timeout",),
        config.ENV_WAIT_TIMEOUT,
        True,
        "seconds to wait in the queue when no GPUs fit (default: wait until they do; 0: fail at once, exit 75)",
    ),
    (("--policy",), config.ENV_PLACEMENT_POLICY, True, f"placement policy (default: {config.DEFAULT_PLACEMENT_POLICY})"),
    (
        ("--allowed-slowdown",),
        config.ENV_ALLOWED_SLOWDOWN,
        True,
        "the most slowdown (percent) this job accepts from sharing and power caps; the admin policy's maximum wins",
    ),
    (("--memory-mib",), "ECOLAUNCH_MEMORY_MIB", True, "peak GPU memory per worker (MiB) when known, for safe sharing"),
    (
        ("--profile",),
        config.ENV_PROFILE,
        True,
        "when to profile the job: auto (history; else pre if a previous run declared profile_safe; else inline), "
        "pre (a short profiling run first), inline (profile the real run's first iterations) or off",
    ),
    (
        ("--name",),
        config.ENV_JOB_NAME,
        True,
        "the job's name in status, history and the queue, and for 'ecolaunch cancel NAME' (default: the script's "
        "file name)",
    ),
    (
        ("--job-key",),
        config.ENV_JOB_KEY,
        True,
        "the job's history key: launches with the same key (and worker count and GPU model) share one profile, "
        "whatever their script and arguments (default: matched on the script and its arguments, see docs/profiling.md)",
    ),
    (("--fresh-profile",), config.ENV_FRESH_PROFILE, False, "ignore the job's stored profile: profile it again"),
    (
        ("--share-if-sooner",),
        config.ENV_SHARE_IF_SOONER,
        True,
        "yes: when no GPUs of its own are free, start now on a shared GPU if that is predicted to finish the job "
        "sooner than waiting, its slowdown bound waived for that (every running job keeps its own); no: never "
        "(default: the admin policy's [colocation] share_if_sooner, off unless set; see docs/queue.md)",
    ),
    (("-v", "--verbose"), config.ENV_VERBOSE, False, "log each step; show tracebacks of ecolaunch errors"),
)

_METAVARS = {"--wait-timeout": "SECONDS", "--policy": "NAME", "--allowed-slowdown": "PCT", "--memory-mib": "MIB", "--profile": "MODE",
             "--name": "NAME", "--job-key": "KEY", "--share-if-sooner": "yes|no"}
#: the HINT printed under a bad value of each numeric option (the README promises one after every bad value)
_NUMBER_HINTS = {
    "--wait-timeout": "e.g. --wait-timeout 600 (seconds in the queue; 0: fail at once, exit 75; leave it out to wait "
                      "until GPUs fit)",
    "--allowed-slowdown": "e.g. --allowed-slowdown 10 (percent: at most 10 % slower than the job alone and uncapped)",
    "--memory-mib": "e.g. --memory-mib 20000 (one worker's peak GPU memory in MiB); leave it out when unknown",
}
#: what ``--name`` may be: it is typed back to ``ecolaunch cancel`` and shown in tables (no spaces, no controls)
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+:@-]{0,63}")
#: the ``--nproc-per-node`` words ecolaunch resolves: as many GPUs as the policy grants; no GPU
ELASTIC_NPROC = ("gpu", "auto")
CPU_NPROC = "cpu"
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")


@dataclass(frozen=True, slots=True)
class ParsedLaunch:
    """A parsed launch: torch's Namespace (without ecolaunch's attributes) and ecolaunch's options."""

    torch_args: argparse.Namespace
    options: LaunchOptions
    memory_mib: int | None
    #: the interpreter of the ``ecolaunch python ...`` form when it is not ours (exported as PYTHON_EXEC)
    python_exec: str | None = None
    #: what the workers call instead of a script (``ecolaunch.launch(fn)``; ``torch_args`` names it as a module)
    function: FunctionCall | None = None
    #: the Slurm allocation the launch runs in (None: outside Slurm), and the rendezvous options taken from it
    slurm: Allocation | None = None
    slurm_filled: tuple[str, ...] = ()


def build_parser(env: Mapping[str, str], prog: str = "ecolaunch",
                 subcommands: Collection[str] = ()) -> argparse.ArgumentParser:
    """torch's torchrun parser with ecolaunch's option group added; its description lists ``subcommands`` (the CLI
    passes the names it routes on, so that every registered subcommand is in the help)."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = prog
    parser.description = (
        "Drop-in torchrun: places the job on GPUs shared with the other jobs of this machine, then launches it "
        "exactly like torchrun."
    )
    if subcommands:
        parser.description += (f" Subcommands: {', '.join(sorted(subcommands))} (see '{prog} SUBCOMMAND --help'); "
                               "run a script named like a subcommand as ./NAME.")
    group = parser.add_argument_group("ecolaunch options")
    for flags, env_var, takes_value, help_text in ECO_OPTIONS:
        dest = flags[-1].lstrip("-").replace("-", "_")
        default = env.get(env_var)
        if takes_value:
            metavar = _METAVARS[flags[-1]]
            group.add_argument(*flags, dest=f"eco_{dest}", default=default, metavar=metavar, help=f"{help_text} [env {env_var}]")
        else:
            group.add_argument(*flags, dest=f"eco_{dest}", action="store_const", const="1", default=default, help=f"{help_text} [env {env_var}]")
    return parser


def expand_prefix(argv: Sequence[str], executable: str = sys.executable) -> tuple[list[str], str | None]:
    """Rewrite the prefix forms into plain torchrun arguments.

    Returns the arguments and, for ``python`` forms naming another interpreter, that interpreter's path.
    """
    argv = list(argv)
    i = _skip_eco_options(argv)
    if i >= len(argv):
        return argv, None
    head, word, rest = argv[:i], argv[i], argv[i + 1 :]
    if word == "torchrun":
        return head + rest, None
    if not _PYTHON_RE.match(os.path.basename(word)):
        return argv, None
    if not rest:
        raise ConfigError(f"'{word}' needs a script or -m MODULE", hint=f"run: ecolaunch {word} train.py [args]")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise ConfigError(f"'{word} -m' needs a module name", hint=f"run: ecolaunch {word} -m package.module [args]")
        launch = ["-m", *rest[1:]]
    elif rest[0].startswith("-"):
        raise ConfigError(
            f"interpreter option {rest[0]!r} is not supported in the 'ecolaunch {word} ...' form",
            hint="use 'ecolaunch python script.py ...' or 'ecolaunch python -m module ...' (PYTHONUNBUFFERED=1 for -u)",
        )
    else:
        launch = rest
    interpreter = shutil.which(word) or word
    python_exec = None if os.path.realpath(interpreter) == os.path.realpath(executable) else interpreter
    return [*head, "--nproc-per-node", "1", *launch], python_exec


def _skip_eco_options(argv: list[str]) -> int:
    """Index of the first argument that is not one of ecolaunch's own options (or its value)."""
    takes_value = {f for flags, _, value, _ in ECO_OPTIONS if value for f in flags}
    flags_only = {f for flags, _, value, _ in ECO_OPTIONS if not value for f in flags}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in takes_value:
            i += 1 if "=" in arg else 2
        elif arg in flags_only:
            i += 1
        else:
            break
    return i


def parse(argv: Sequence[str], env: Mapping[str, str], executable: str = sys.executable,
          subcommands: Collection[str] = ()) -> ParsedLaunch:
    """Parse a launch command line; argparse errors exit 2 with its message, as torchrun (``subcommands``: the names
    the help lists)."""
    parser = build_parser(env, subcommands=subcommands)
    try:
        expanded, python_exec = expand_prefix(argv, executable)
    except ConfigError as e:
        parser.error(with_hint(str(e), e.hint))
    ns = parser.parse_args(expanded)
    try:
        options, memory_mib = _options(ns)
        alloc = allocation(env)
        filled = () if alloc is None else fill_rendezvous(ns, alloc, _given(parser, expanded, env, _NODE_DESTS))
        check_nproc(ns)
        check_args(ns, nproc_override="1" if ns.nproc_per_node in ELASTIC_NPROC else None)
        check_script(ns)
    except ProgramNotFound as e:
        parser.exit(e.exit_code, f"{parser.prog}: error: {with_hint(str(e), e.hint)}\n")
    except ConfigError as e:
        parser.error(with_hint(str(e), e.hint))
    for flags, *_ in ECO_OPTIONS:
        delattr(ns, "eco_" + flags[-1].lstrip("-").replace("-", "_"))
    return ParsedLaunch(torch_args=ns, options=options, memory_mib=memory_mib, python_exec=python_exec, slurm=alloc,
                        slurm_filled=filled)


#: the rendezvous options a Slurm step may fill (:func:`ecolaunch.launch.slurm.fill_rendezvous`)
_NODE_DESTS = ("nnodes", "node_rank", "master_addr", "rdzv_backend", "rdzv_endpoint")


def _given(parser: argparse.ArgumentParser, argv: Sequence[str], env: Mapping[str, str],
           dests: Sequence[str]) -> set[str]:
    """Which of ``dests`` the command line or its ``PET_*`` variable gave: the arguments parsed again with those
    defaults replaced by a marker (argparse keeps no record of what was typed)."""
    marker = object()
    actions = [a for a in parser._actions if a.dest in dests]
    saved = [a.default for a in actions]
    for a in actions:
        a.default = marker
    try:
        probe = parser.parse_args(list(argv))
    finally:
        for a, default in zip(actions, saved):
            a.default = default
    return {d for d in dests if getattr(probe, d, marker) is not marker or env.get(f"PET_{d.upper()}")}


def _options(ns: argparse.Namespace) -> tuple[LaunchOptions, int | None]:
    wait_timeout = _number(ns.eco_wait_timeout, "--wait-timeout", config.ENV_WAIT_TIMEOUT, low=0.0)
    slowdown = _number(ns.eco_allowed_slowdown, "--allowed-slowdown", config.ENV_ALLOWED_SLOWDOWN, low=0.0)
    memory = _number(ns.eco_memory_mib, "--memory-mib", "ECOLAUNCH_MEMORY_MIB", low=0.0)
    options = LaunchOptions(
        dry_run=_flag(ns.eco_dry_run, config.ENV_DRY_RUN),
        json=_flag(ns.eco_json, config.ENV_JSON),
        wait=wait_timeout != 0.0,
        wait_timeout_s=wait_timeout,
        placement_policy=_placement_policy(ns.eco_policy),
        allowed_slowdown_pct=slowdown,
        verbose=_flag(ns.eco_verbose, config.ENV_VERBOSE),
        explain=_flag(ns.eco_explain, config.ENV_EXPLAIN),
        profile=_profile_mode(ns.eco_profile),
        name=_job_name(ns.eco_name),
        job_key=_job_key(ns.eco_job_key),
        fresh_profile=_flag(ns.eco_fresh_profile, config.ENV_FRESH_PROFILE),
        share_if_sooner=_yes_no(ns.eco_share_if_sooner, "--share-if-sooner", config.ENV_SHARE_IF_SOONER),
    )
    return options, None if memory is None else int(memory)


def _yes_no(raw: str | None, flag: str, env_var: str) -> bool | None:
    """``yes``/``no`` (the words :func:`~ecolaunch.config.yes_no` reads), or None when not given."""
    if raw is None or raw.strip() == "":
        return None
    value = config.yes_no(raw)
    if value is not None:
        return value
    raise ConfigError(f"{flag} (or {env_var}) must be yes or no, got {raw!r}",
                      hint=f"e.g. {flag} yes (the script comes after the value)")


def check_nproc(ns: argparse.Namespace) -> None:
    """ConfigError unless ``--nproc-per-node`` is a whole number >= 1 or one of the words ecolaunch resolves
    (``gpu``/``auto``: as many GPUs as the policy grants; ``cpu``: no GPU)."""
    value = ns.nproc_per_node
    if value in (*ELASTIC_NPROC, CPU_NPROC) or (value.isdecimal() and int(value) >= 1):
        return
    raise ConfigError(f"--nproc-per-node must be a whole number >= 1, gpu, auto or cpu, got {value!r}",
                      hint="e.g. --nproc-per-node 2 (one worker per GPU), gpu (every GPU the policy grants you) or "
                           "cpu (no GPU)")


def check_script(ns: argparse.Namespace) -> None:
    """ConfigError when the training script is meant to be a file (no ``-m``, no ``--no-python``) and none exists
    at that path (relative to the current directory, where the workers start). A directory or zip file counts:
    python runs those too. With ``--no-python``, ProgramNotFound when the program is not on ``PATH`` or not
    executable (the exit code is the shell's: 127, 126)."""
    if ns.no_python:
        check_program(ns.training_script)
        return
    if ns.module:
        return
    script = ns.training_script
    if not os.path.exists(script):
        raise ConfigError(
            f"training script {script!r} does not exist",
            hint="check the path; run a module with -m MODULE, a program on PATH with --no-python",
        )


def check_program(program: str) -> None:
    """ProgramNotFound unless ``program`` runs as the workers would start it (``execvp``): a name looked up on
    ``PATH``, or a path (with a ``/``) to an executable file."""
    if shutil.which(program) is not None:
        return
    if os.sep in program and os.path.isdir(program):
        raise ProgramNotFound(f"--no-python program {program!r} is a directory", exitcodes.NOT_EXECUTABLE,
                              hint="give the path of the program inside it")
    if os.sep in program and os.path.exists(program):
        raise ProgramNotFound(f"--no-python program {program!r} is not executable", exitcodes.NOT_EXECUTABLE,
                              hint=f"chmod +x {program}, or run a Python script without --no-python")
    where = "does not exist" if os.sep in program else "is not on PATH"
    raise ProgramNotFound(f"--no-python program {program!r} {where}", exitcodes.NOT_FOUND,
                          hint="check the name (`command -v NAME`) or give its path; a Python script runs without "
                               "--no-python")


def _placement_policy(raw: str | None) -> str:
    if not raw:
        return config.DEFAULT_PLACEMENT_POLICY

    names = policy_names()
    if raw not in names:
        raise ConfigError(f"--policy (or {config.ENV_PLACEMENT_POLICY}) must be a placement policy, got {raw!r}",
                          hint=f"use one of: {', '.join(names)}")
    return raw


def _job_name(raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    if not JOB_NAME.fullmatch(raw):
        raise ConfigError(f"--name (or {config.ENV_JOB_NAME}) must be 1 to 64 letters, digits or '_.+:@-', starting "
                          f"with a letter or digit, got {raw!r}", hint="e.g. --name resnet50-lr3e-4")
    return raw


def _profile_mode(raw: str | None) -> str:
    return parse_mode(raw or DEFAULT_MODE).value


def _job_key(raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    if not raw.strip() or len(raw) > 200:
        raise ConfigError(f"--job-key (or {config.ENV_JOB_KEY}) must be 1 to 200 characters, not only spaces, "
                          f"got {raw[:40]!r}{'...' if len(raw) > 40 else ''}",
                          hint="name the job, e.g. --job-key bert-ft")
    return raw


def _flag(raw: str | None, env_var: str) -> bool:
    return config.env_flag({env_var: raw or ""}, env_var)


def _number(raw: str | None, flag: str, env_var: str, *, low: float) -> float | None:
    if raw is None or raw == "":
        return None
    hint = _NUMBER_HINTS[flag]
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{flag} (or {env_var}) must be a number, got {raw!r}", hint=hint) from None
    if number_or_none(value, lo=low) is None:
        raise ConfigError(f"{flag} (or {env_var}) must be a finite number >= {low:g}, got {raw!r}", hint=hint)
    return value
