"""One rendering of an error and its hint: ``EcolaunchError.render`` / ``with_hint``, turned into click's failure by
``ecolaunch.cli.command``, used by every subcommand and by the launch path."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ecolaunch.cli.command import Command, Failed, Group
from ecolaunch.cli.group import register
from ecolaunch.errors import ConfigError, EcolaunchError, StateError, with_hint

CLI_DIR = Path(__file__).resolve().parents[2] / "ecolaunch" / "cli"


def test_an_error_renders_its_message_then_its_hint_on_a_line_of_its_own() -> None:
    assert ConfigError("bad value 3", hint="write 4").render() == "Error: bad value 3\nHINT: write 4"
    assert StateError("cannot read /s").render() == "Error: cannot read /s"
    assert EcolaunchError("x", hint="y").render("ecolaunch guard: Error: ") == "ecolaunch guard: Error: x\nHINT: y"
    assert EcolaunchError("x", hint="").render(prefix="") == "x"  # an empty hint prints no empty HINT line
    assert with_hint("Warning: a\nWarning: b", "fix both") == "Warning: a\nWarning: b\nHINT: fix both"
    assert with_hint("Warning: a", None) == "Warning: a"


@click.command(cls=Command)
@click.option("--hint", default=None)
@click.option("--code", type=int, default=None)
def _failing(hint: str | None, code: int | None) -> None:
    if code is not None:
        raise Failed("refused", hint=hint, exit_code=code)
    raise ConfigError("ECOLAUNCH_X = 'y' is not a number", hint=hint)


@pytest.mark.parametrize(("args", "code", "output"), [
    ([], 1, "Error: ECOLAUNCH_X = 'y' is not a number\n"),
    (["--hint", "set it to 3"], 1, "Error: ECOLAUNCH_X = 'y' is not a number\nHINT: set it to 3\n"),
    (["--code", "75", "--hint", "try later"], 75, "Error: refused\nHINT: try later\n"),
    (["--zzzz"], 2, "Usage: failing [OPTIONS]\nTry 'failing --help' for help.\n\nError: No such option '--zzzz'.\n"),
])
def test_a_subcommand_fails_with_the_one_rendering_on_stderr(args: list[str], code: int, output: str) -> None:
    result = CliRunner().invoke(_failing, args, prog_name="failing")
    assert (result.exit_code, result.stderr, result.stdout) == (code, output, ""), result.output


def test_every_subcommand_turns_its_errors_into_the_one_failure() -> None:
    def walk(command: click.Command, path: str):
        yield path, command
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, f"{path} {name}")

    commands = list(walk(register(), "ecolaunch"))
    assert len(commands) > 10
    wrong = [path for path, c in commands
             if not isinstance(c, Group if isinstance(c, click.Group) else Command)]
    assert not wrong, f"build these with cls=Command (ecolaunch.cli.command): {wrong}"


def _non_docstring_strings(tree: ast.Module):
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def test_no_cli_module_writes_a_hint_line_by_hand() -> None:
    found = []
    for path in sorted(CLI_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.name}:{node.lineno}" for node in _non_docstring_strings(tree) if "HINT:" in node.value]
    assert not found, f"render hints with EcolaunchError.render / ecolaunch.errors.with_hint, not by hand: {found}"


def test_the_scan_sees_a_hint_written_by_hand() -> None:
    tree = ast.parse('"""HINT: in a docstring is prose."""\nx = f"Error: {e}\\nHINT: {e.hint}"\n')
    assert [n.value for n in _non_docstring_strings(tree)] == ["Error: ", "\nHINT: "]


def test_the_launch_path_prints_the_same_rendering(tmp_path: Path) -> None:
    # a bad environment value fails before any GPU is touched: "Error:" + "HINT:" on stderr, exit 1
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    env = {"PATH": "/usr/bin:/bin", "ECOLAUNCH_STATE_DIR": str(tmp_path / "state"), "ECOLAUNCH_SIMULATE": "2xNoSuchGpu"}
    out = subprocess.run([sys.executable, "-m", "ecolaunch", "--nproc-per-node", "1", str(script)], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1, out.stderr
    assert "never runs" not in out.stdout
    error = [line for line in out.stderr.splitlines() if line.startswith(("Error: ", "HINT: "))]
    assert error == ["Error: bad machine spec '2xNoSuchGpu': unknown GPU model 'NoSuchGpu'", error[1]], out.stderr
    assert error[1].startswith("HINT: use one of: "), out.stderr
