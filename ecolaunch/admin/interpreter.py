"""How ecolaunch starts its own Python helpers, and whether the Python that runs as root is root's alone.

What lives here: :func:`helper_argv` (a helper's command line: ``python -I`` from :data:`HELPER_CWD`, importing
ecolaunch from where this process does), :func:`settings_argv` / :func:`add_settings_options` /
:func:`settings_env` (a helper's settings on its command line, never from its environment), :func:`helper_env`,
and :func:`unsafe_paths` / :func:`interpreter_warning` (an interpreter, prefix, ``sys.path`` or package another uid
could write). What does not: printing (the CLI renders the warning), the state directory's checks
(``ecolaunch.state.store``), the files root may believe (``ecolaunch.admin.safety``). Why: docs/threat-model.md,
round two, item 1.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR, Environment, default_state_dir

__all__ = ["HELPER_CWD", "add_settings_options", "helper_argv", "helper_env", "interpreter_warning",
           "package_root", "settings_argv", "settings_env", "unsafe_paths"]

#: the working directory of every helper: one nobody but root can write, so a relative path never lands in a
#: member's directory
HELPER_CWD = "/"

#: a helper's settings: its command-line option -> the variable the parent read it from
_SETTINGS = {"--state-dir": ENV_STATE_DIR, "--simulate": ENV_SIMULATE, "--policy": ENV_POLICY_FILE}

# Run a module as ``python -m`` would, with ecolaunch imported from ``root`` (argv[1]): the directory the parent
# imports it from, so a helper runs the parent's code whether it was installed or is a source checkout (``-I``
# ignores PYTHONPATH). ``root`` goes first only when the default path would find another ecolaunch or none.
_BOOT = """\
import importlib.util, os, runpy, sys
root, name = sys.argv[1], sys.argv[2]
spec = importlib.util.find_spec("ecolaunch")
if spec is None or spec.origin is None or os.path.dirname(os.path.dirname(spec.origin)) != root:
    sys.path.insert(0, root)
sys.argv = [name, *sys.argv[3:]]
if name.endswith(".py"):
    runpy.run_path(name, run_name="__main__")
else:
    runpy.run_module(name, run_name="__main__", alter_sys=True)
"""


def package_root() -> str:
    """The directory this process imports ecolaunch from (the parent of the ``ecolaunch`` package)."""
    return str(Path(__file__).resolve().parents[2])


def helper_argv(module: str, *args: str, executable: str | None = None) -> list[str]:
    """The command line that runs ``python -m module args`` isolated (``python -I`` from :data:`HELPER_CWD`), or the script
    ``module`` when it is an absolute path ending in ``.py``; start it with ``cwd=HELPER_CWD`` (or another directory
    only root can write) and ``env=helper_env(...)``."""
    return [executable or sys.executable, "-I", "-c", _BOOT, package_root(), module, *args]


def settings_argv(env: Mapping[str, str], state_dir: str | os.PathLike[str] | None = None,
                  cwd: str | None = None) -> list[str]:
    """The options that give a helper the settings ``env`` holds, and the state directory they resolve to
    (``state_dir``, default: resolved from ``env`` and its policy file as every command does), so that the helper
    needs neither the environment nor the parent's working directory. Paths are made absolute against ``cwd``
    (default: this process's), since the helper runs in :data:`HELPER_CWD`."""
    base = os.getcwd() if cwd is None else cwd

    def absolute(value: str) -> str:
        return os.path.join(base, os.path.expanduser(value.strip())) if value.strip() else value

    values = {var: env[var] for var in _SETTINGS.values() if var in env}
    for var in (ENV_STATE_DIR, ENV_POLICY_FILE):
        if var in values:
            values[var] = absolute(values[var])
    if state_dir is None and values.get(ENV_STATE_DIR):
        state_dir = values[ENV_STATE_DIR]
    if state_dir is None:
        # lazy: only a helper given no state dir reads the policy file; the modules importing this one stay light
        from ecolaunch.admin.rules import load_rules

        # the simulated spec as given: a simulated machine's directory is named after it
        rules, _ = load_rules(Environment.from_env({**env, **values}).policy_file)
        state_dir = default_state_dir({**env, **values}, rules.state_dir)
    values[ENV_STATE_DIR] = absolute(os.fspath(state_dir))
    spec = values.get(ENV_SIMULATE, "").strip()
    if spec.lower().endswith(".toml") or (spec and os.path.isfile(os.path.join(base, spec))):
        values[ENV_SIMULATE] = absolute(spec)
    return [f"{option}={values[var]}" for option, var in _SETTINGS.items() if var in values]


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """The options :func:`settings_argv` writes, for a helper's own parser."""
    for option, var in _SETTINGS.items():
        parser.add_argument(option, dest=var, default=None, help=f"as ${var} (passed by the parent, never inherited)")


def settings_env(args: argparse.Namespace) -> dict[str, str]:
    """The settings a helper was given, as the mapping :func:`ecolaunch.runtime.resolve` reads."""
    return {var: getattr(args, var) for var in _SETTINGS.values() if getattr(args, var, None) is not None}


def helper_env(env: Mapping[str, str], **extra: str) -> dict[str, str]:
    """A helper's environment: ``env`` without ``PYTHON*`` (ignored under ``-I`` anyway) and ``ECOLAUNCH_*`` (its
    settings come on its command line), plus ``extra``."""
    out = {k: v for k, v in env.items() if not k.startswith(("PYTHON", "ECOLAUNCH_"))}
    out.update(extra)
    return out


# --- is this interpreter root's alone? -----------------------------------------------------------------------


def _writable_by_others(st: os.stat_result, *, contents: bool) -> str | None:
    """Why a non-root uid could change what this file or directory holds (``contents``: add or replace entries
    in it; else only rename it away, which a sticky directory prevents), or None."""
    if st.st_uid != 0:
        return f"owned by uid {st.st_uid}"
    mode = st.st_mode
    sticky = stat.S_ISDIR(mode) and bool(mode & stat.S_ISVTX)
    if mode & stat.S_IWOTH and (contents or not sticky):
        return "writable by everyone"
    if mode & stat.S_IWGRP and st.st_gid != 0 and (contents or not sticky):
        return f"writable by group {st.st_gid}"
    return None


def unsafe_paths(paths: Iterable[str | os.PathLike[str]] | None = None, *,
                 trees: Iterable[str | os.PathLike[str]] | None = None) -> list[tuple[str, str]]:
    """``(path, why)`` for each path a non-root uid could write that this interpreter's imports depend on.

    ``paths`` (default: the real interpreter, ``sys.prefix`` and every directory on ``sys.path``) may not be
    written by anyone but root; ``trees`` (default: the ecolaunch package) not either, nor anything inside them;
    the parents of both, up to ``/``, may not be renamed by anyone but root. Links are followed to what they name.
    """
    if paths is None:
        paths = [os.path.realpath(sys.executable), sys.prefix,
                 *(p or os.getcwd() for p in sys.path if isinstance(p, str))]
    if trees is None:
        trees = [Path(package_root()) / "ecolaunch"]
    found: dict[str, str] = {}
    parents: set[str] = set()

    def check(path: str, contents: bool) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            return False  # a sys.path entry that does not exist (or a path hook's name) imports nothing
        why = _writable_by_others(st, contents=contents)
        if why is not None:
            found.setdefault(path, why)
        return True

    for raw in paths:
        path = os.path.realpath(raw)
        if check(path, contents=True):
            parents.update(str(p) for p in Path(path).parents)
    for raw in trees:
        top = os.path.realpath(raw)
        parents.update(str(p) for p in Path(top).parents)
        for here, _dirs, files in os.walk(top):
            check(here, contents=True)
            for name in files:
                check(os.path.join(here, name), contents=True)
    for parent in sorted(parents):
        check(parent, contents=False)
    return sorted(found.items())


def interpreter_warning(euid: int | None = None, found: list[tuple[str, str]] | None = None) -> tuple[str, str] | None:
    """``(message, hint)`` when this process runs as root from files another uid can write, else None (also for
    any other euid: a member's own venv is their business)."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return None
    found = unsafe_paths() if found is None else found
    if not found:
        return None
    shown = "; ".join(f"{path} ({why})" for path, why in found[:3]) + (f"; and {len(found) - 3} more"
                                                                       if len(found) > 3 else "")
    return (f"ecolaunch runs as root from files a non-root user can write, so their code runs as root: {shown}",
            "install ecolaunch into a root-owned environment (e.g. `sudo python3 -m venv /opt/ecolaunch && sudo "
            "/opt/ecolaunch/bin/pip install ecolaunch`) and run root's commands from there")
