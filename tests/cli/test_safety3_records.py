"""Issue 35 (safety, round three), item 5: what a terminal prints from a member's records.

A member (a real second uid) writes history records of her own: one named with escape sequences (a window title,
a cleared screen), one claiming 1e18 J. Root's ``history``, ``history JOB``, ``report JOB`` and the accounting
report print the name escaped, never raw; JSON stays ``ensure_ascii``; the absurd record is refused on read; the
plausible one is marked self-reported.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from ecolaunch.cli.history_cmd import history
from ecolaunch.cli.report_cmd import report
from ecolaunch.state.layout import init_state
from tests.conftest import NO_POLICY
from tests.multiuser import GID, MALLORY, remove, require_root, run_as, shared_dir

NAME = "\x1b]0;owned\x07\x1b[2J"
WRITE = """
h = History(Path(args["d"]))
def rec(job_id, name, energy_j):
    return JobRecord(job_id=job_id, user="nobody", name=name, fingerprint=None, started=1_700_000_000.0,
                     ended=1_700_000_060.0, duration_s=60.0, exit_code=0, gpus=("GPU-1",), gpu_names=("A100",),
                     energy_j=energy_j, gpu_energy_j=energy_j)
h.record(rec("escapes", args["name"], 6000.0))
h.record(rec("absurd", "x", 1e18))
"""


def _invoke(command, args: list[str], d) -> object:
    return CliRunner().invoke(command, args, env={"ECOLAUNCH_STATE_DIR": str(d), "ECOLAUNCH_POLICY": str(NO_POLICY),
                                                  "ECOLAUNCH_SIMULATE": None, "TZ": "UTC"})


def test_a_members_records_reach_roots_terminal_escaped_and_absurd_energy_is_refused() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        run_as(MALLORY, WRITE,
               {"d": str(d), "name": NAME}, imports="from ecolaunch.profile.history import History, JobRecord")
        outputs = {"history": _invoke(history, [], d), "history JOB": _invoke(history, ["escapes"], d),
                   "report JOB": _invoke(report, ["escapes"], d), "accounting": _invoke(report, ["--since", "10000d"], d),
                   "history --json": _invoke(history, ["--json"], d), "report --json": _invoke(report, ["escapes", "--json"], d)}
        for what, result in outputs.items():
            assert result.exit_code == 0, (what, result.output)
            assert "\x1b" not in result.output and "\x07" not in result.output, what
        for what in ("history JOB", "report JOB"):
            assert "\\x1b]0;owned\\x07\\x1b[2J" in outputs[what].output, what
        assert json.loads(outputs["report --json"].output)["name"] == NAME  # JSON escapes it, and keeps it
        assert "\\u001b" in outputs["history --json"].output
        listed = outputs["history"].output
        assert "absurd" not in listed  # 1e18 J in 60 s on one GPU: refused on read
        assert "6 kJ~" in listed and "~ self-reported: the energy another user's launcher wrote" in listed
        assert "self-reported: the energy another user's launcher wrote" in outputs["report JOB"].output
        assert "1 of 1 jobs' energy is self-reported" in outputs["accounting"].output
    finally:
        remove(d)
