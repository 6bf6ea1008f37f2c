"""The launch command line: the installed torch's own torchrun parser plus ecolaunch's options.

What lives here: :func:`build_parser`, :func:`expand_prefix` (the ``torchrun`` and ``python`` prefix forms),
:func:`parse` and :func:`configure` (a command line into a ``LaunchConfig``), and the checks before anything is
booked (:func:`check_nproc`, :func:`check_script`, :func:`check_program`). What does not: the options' declarations
(:mod:`ecolaunch.launch.options`), the launch (:mod:`ecolaunch.launch.pipeline`). The rules it keeps, tested against
the installed torch in ``tests/launch/test_argv.py``: docs/torchrun.md#drop-in-rules.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Collection, Mapping, Sequence

from ecolaunch.errors import ConfigError, ProgramNotFound, with_hint
from ecolaunch.launch import exitcodes
from ecolaunch.launch.options import LaunchConfig, LaunchOptions, declarations
from ecolaunch.launch.slurm import allocation, fill_rendezvous
from ecolaunch.launch.torchrun import FunctionCall, TorchrunArgs, check_args

#: the ``--nproc-per-node`` words ecolaunch resolves: as many GPUs as the policy grants; no GPU
ELASTIC_NPROC = ("gpu", "auto")
CPU_NPROC = "cpu"
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")


def build_parser(prog: str = "ecolaunch", subcommands: Collection[str] = ()) -> argparse.ArgumentParser:
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
    for f, spec in declarations():
        text = f"{_plain(spec.text())} [env {spec.env}]".replace("%", "%%")  # argparse formats help with %
        if spec.takes_value:
            group.add_argument(*spec.flags, dest=_DEST + f.name, default=None, metavar=spec.metavar, help=text)
        else:
            group.add_argument(*spec.flags, dest=_DEST + f.name, action="store_const", const="1", default=None,
                               help=text)
    return parser


#: the Namespace attributes of ecolaunch's options (removed before the Namespace is torch's alone)
_DEST = "eco_"


def _plain(text: str) -> str:
    """A declaration's help without its Markdown (backticks; a link becomes its target)."""
    return re.sub(r"\[([^]]*)\]\(([^)]*)\)", r"\2", text).replace("`", "")


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
    takes_value = {flag for _, spec in declarations() if spec.takes_value for flag in spec.flags}
    flags_only = {flag for _, spec in declarations() if not spec.takes_value for flag in spec.flags}
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
          subcommands: Collection[str] = ()) -> LaunchConfig:
    """Parse a launch command line; argparse errors exit 2 with its message, as torchrun (``subcommands``: the names
    the help lists). Each ecolaunch option not on the command line comes from its environment variable in ``env``."""
    parser = build_parser(subcommands=subcommands)
    try:
        expanded, python_exec = expand_prefix(argv, executable)
    except ConfigError as e:
        parser.error(with_hint(str(e), e.hint))
    ns = parser.parse_args(expanded)
    given = {f.name: getattr(ns, _DEST + f.name) for f, _ in declarations()}
    for f, _ in declarations():
        delattr(ns, _DEST + f.name)
    try:
        options = LaunchOptions.from_env(env, given)
    except ConfigError as e:
        parser.error(with_hint(str(e), e.hint))
    return configure(parser, expanded, ns, env, options, python_exec=python_exec)


def configure(parser: argparse.ArgumentParser, argv: Sequence[str], ns: argparse.Namespace, env: Mapping[str, str],
              options: LaunchOptions, *, python_exec: str | None = None,
              function: FunctionCall | None = None) -> LaunchConfig:
    """The launch's configuration from ``parser``'s parse ``ns`` of ``argv`` (torch's options; the Namespace is
    torch's alone from here): a Slurm step's rendezvous filled in, then every check of a launch that must fail
    before anything is booked (a usage error exits 2 through ``parser``; a ``--no-python`` program that cannot run
    exits 127 or 126)."""
    try:
        alloc = allocation(env)
        filled = () if alloc is None else fill_rendezvous(ns, alloc, _given(parser, argv, env, _NODE_DESTS))
        workers = TorchrunArgs(ns)
        check_nproc(workers)
        check_args(workers, nproc_override="1" if workers.nproc_per_node in ELASTIC_NPROC else None)
        check_script(workers)
    except ProgramNotFound as e:
        parser.exit(e.exit_code, f"{parser.prog}: error: {with_hint(str(e), e.hint)}\n")
    except ConfigError as e:
        parser.error(with_hint(str(e), e.hint))
    return LaunchConfig(workers, options, python_exec=python_exec, function=function, slurm=alloc,
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


def check_nproc(args: TorchrunArgs) -> None:
    """ConfigError unless ``--nproc-per-node`` is a whole number >= 1 or one of the words ecolaunch resolves
    (``gpu``/``auto``: as many GPUs as the policy grants; ``cpu``: no GPU)."""
    value = args.nproc_per_node
    if value in (*ELASTIC_NPROC, CPU_NPROC) or (value.isdecimal() and int(value) >= 1):
        return
    raise ConfigError(f"--nproc-per-node must be a whole number >= 1, gpu, auto or cpu, got {value!r}",
                      hint="e.g. --nproc-per-node 2 (one worker per GPU), gpu (every GPU the policy grants you) or "
                           "cpu (no GPU)")


def check_script(args: TorchrunArgs) -> None:
    """ConfigError when the training script is meant to be a file (no ``-m``, no ``--no-python``) and none exists
    at that path (relative to the current directory, where the workers start). A directory or zip file counts:
    python runs those too. With ``--no-python``, ProgramNotFound when the program is not on ``PATH`` or not
    executable (the exit code is the shell's: 127, 126)."""
    if args.no_python:
        check_program(args.script)
        return
    if args.module:
        return
    script = args.script
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
