"""``ecolaunch history`` and ``ecolaunch report``: whole outputs, JSON, errors, and the plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from ecolaunch.cli.history_cmd import fmt_duration, fmt_energy, history
from ecolaunch.cli.report_cmd import report
from ecolaunch.jobmodel.codec import to_json
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.history import History, JobRecord
from ecolaunch.jobmodel.profile import CapPoint
from tests.conftest import NO_POLICY, clean_env, ecolaunch_cmd

PROFILE = Profile(0.05, 81.5, 40.0, 12_000, 290.0, (CapPoint(400.0, 0.05, 290.0), CapPoint(250.0, 0.056, 240.0)))


def record(job_id: str, ended: float, **kw) -> JobRecord:
    fields = dict(job_id=job_id, user="alice", name="bert-ft", fingerprint="ab" * 32, started=ended - 3725.0,
                  ended=ended, duration_s=3725.0, exit_code=0, gpus=("GPU-aaaaaaaa-1111",),
                  gpu_names=("NVIDIA A100-SXM4-80GB",), power_caps_w={"GPU-aaaaaaaa-1111": 250.0},
                  colocated_with={}, energy_j=1_234_000.0, gpu_energy_j=1_234_000.0, iterations=70_000,
                  iter_time_s=0.0532, profile=PROFILE, profile_action="inline", recommended_cap_w=250.0,
                  recommendation="cap 250 W: predicted 12 J/iter", findings=(),
                  samples={"GPU-aaaaaaaa-1111": [{"t_s": 0.0, "power_w": 240.0, "power_limit_w": 250.0,
                                                  "util_gpu_pct": 80.0, "util_mem_pct": 40.0,
                                                  "memory_used_mib": 12_000}]})
    fields.update(kw)
    return JobRecord(**fields)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def filled(state: Path) -> History:
    h = History(state)
    h.record(record("a1b2c3d4", 1_700_000_000.0))
    h.record(record("a1ff0000", 1_700_003_600.0, user="bob", name="resnet", energy_j=512.0, gpu_energy_j=900.0,
                    exit_code=1, colocated_with={"GPU-aaaaaaaa-1111": ["a1b2c3d4"]}, duration_s=12.34,
                    power_caps_w={"GPU-aaaaaaaa-1111": None}, profile=None, profile_action="off",
                    recommendation=None, findings=("job runs 15.0 % slower than alone",)))
    return h


def invoke(command, args: list[str], state: Path):
    return CliRunner().invoke(command, args, env={"ECOLAUNCH_STATE_DIR": str(state), "ECOLAUNCH_POLICY": str(NO_POLICY),
                                                  "ECOLAUNCH_SIMULATE": None})


def test_history_table(filled: History, state: Path) -> None:
    result = invoke(history, [], state)
    assert result.exit_code == 0, result.output
    assert result.output == (
        "JOB       ENDED             USER      NAME                     TIME    ENERGY GPUS  CAP (W)   EXIT  PROFILE    SHARED WITH\n"
        "a1ff0000  2023-11-14 23:13  bob       resnet                  12.3s     512 J    1  N/A          1  -          a1b2c3d4\n"
        "a1b2c3d4  2023-11-14 22:13  alice     bert-ft                 1h02m   1.23 MJ    1  250          0  new        -\n"
    )


def test_history_json_and_limit(filled: History, state: Path) -> None:
    result = invoke(history, ["--json", "--limit", "1"], state)
    assert result.exit_code == 0, result.output
    docs = json.loads(result.output)
    assert [d["job_id"] for d in docs] == ["a1ff0000"]
    assert "samples" not in docs[0] and docs[0]["energy_j"] == 512.0
    assert len(json.loads(invoke(history, ["--json", "--limit", "0"], state).output)) == 2


def test_history_empty_and_bad_limit(state: Path) -> None:
    result = invoke(history, [], state)
    assert result.exit_code == 0
    assert result.output == (f"no finished jobs in the history of {state} (the directory does not exist: nothing has "
                             "run there yet)\n")
    state.mkdir()
    result = invoke(history, [], state)
    assert result.exit_code == 0
    assert result.output == f"no finished jobs in the history of {state}\n"
    bad = invoke(history, ["--limit", "-1"], state)
    assert bad.exit_code == 2 and "Invalid value for '--limit'" in bad.output


def test_history_skips_unreadable_records(filled: History, state: Path) -> None:
    (filled.jobs_dir / "zzzz.json").write_text('{"format": "ecolaunch-job", "vers')
    result = invoke(history, ["--json"], state)
    assert result.exit_code == 0
    assert [d["job_id"] for d in json.loads(result.output)] == ["a1ff0000", "a1b2c3d4"]


def test_report_text(filled: History, state: Path) -> None:
    result = invoke(report, ["a1b2c3d4"], state)
    assert result.exit_code == 0, result.output
    assert result.output == (
        "job a1b2c3d4  bert-ft  (user alice)\n"
        "  ran         2023-11-14 21:11 to 2023-11-14 22:13, 1h02m, exit 0\n"
        "  GPU         GPU-aaaaaaaa-1111 (NVIDIA A100-SXM4-80GB): cap 250 W, shared with nobody\n"
        "  energy      1.23 MJ (343 Wh) charged to the job; its GPUs drew 1.23 MJ; mean power 331 W per GPU\n"
        "  iterations  70000, 53.2 ms each\n"
        "  profile     (inline) alone and uncapped: 50.0 ms/iteration, 290 W, SM 82 %, memory bandwidth 40 %, "
        "memory 12000 MiB\n"
        "              at 400 W: 50.0 ms/iteration, 290 W\n"
        "              at 250 W: 56.0 ms/iteration, 240 W\n"
        "  power cap   cap 250 W: predicted 12 J/iter\n"
    )


def test_report_by_prefix_shared_and_findings(filled: History, state: Path) -> None:
    result = invoke(report, ["a1f"], state)
    assert result.exit_code == 0, result.output
    assert "shared with a1b2c3d4" in result.output
    assert "cap N/A W" in result.output
    assert "  profile     none (profiling: off)\n" in result.output
    assert "  warning     job runs 15.0 % slower than alone\n" in result.output


def test_report_json_is_the_whole_record(filled: History, state: Path) -> None:
    result = invoke(report, ["a1b2c3d4", "--json"], state)
    assert result.exit_code == 0
    doc = json.loads(result.output)
    assert doc == json.loads(json.dumps(to_json(filled.get("a1b2c3d4"))))


@pytest.mark.parametrize("job, message", [
    ("nope", "Error: no finished job 'nope' in the history (or its record is unreadable)\n"
             "HINT: 'ecolaunch history' lists the finished jobs\n"),
    ("a1", "Error: job 'a1' is ambiguous: it starts a1b2c3d4, a1ff0000\nHINT: give more characters of the job id\n"),
])
def test_report_unknown_or_ambiguous_job(filled: History, state: Path, job: str, message: str) -> None:
    result = invoke(report, [job], state)
    assert result.exit_code == 1
    assert result.output == message


def test_report_plot_without_matplotlib_says_how_to_get_it(filled: History, state: Path, tmp_path: Path,
                                                           monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as when it is not installed
    result = invoke(report, ["a1b2c3d4", "--plot", str(tmp_path / "job.png")], state)
    assert result.exit_code == 1
    assert result.output.endswith(
        f"Error: cannot plot {tmp_path / 'job.png'}: matplotlib is not installed\n"
        "HINT: pip install matplotlib (or pip install 'ecolaunch[plot]')\n")
    assert not (tmp_path / "job.png").exists()


class _Recorder:
    """Any method call is accepted and recorded; used as a stand-in for matplotlib objects."""

    def __init__(self, log: list) -> None:
        self._log = log

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            self._log.append((name, args, kwargs))
            if name == "savefig":
                Path(args[0]).write_bytes(b"\x89PNG fake")
        return call


def test_report_plot_draws_power_and_utilization(filled: History, state: Path, tmp_path: Path, monkeypatch) -> None:
    log: list = []
    fig, ax_power, ax_util = _Recorder(log), _Recorder(log), _Recorder(log)
    pyplot = types.SimpleNamespace(subplots=lambda *a, **k: (fig, (ax_power, ax_util)), close=lambda f: None)
    matplotlib = types.SimpleNamespace(use=lambda backend: log.append(("use", (backend,), {})), pyplot=pyplot)
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    out = tmp_path / "job.png"
    result = invoke(report, ["a1b2c3d4", "--plot", str(out)], state)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(b"\x89PNG")
    names = [n for n, _, _ in log]
    assert names[0] == "use" and log[0][1] == ("Agg",)
    assert names.count("plot") == 4  # power, cap, SM and memory utilization of the one GPU
    assert ("set_ylabel", ("power (W)",), {}) in log and ("set_ylabel", ("utilization (%)",), {}) in log
    assert ("set_ylim", (-5, 105), {}) in log  # a GPU idle at 0 % draws above the axis line, not on it
    labels = [kw["label"] for n, _, kw in log if n == "plot"]
    assert labels == [f"GPU-aaaaaaaa… {what}" for what in ("power", "cap", "SM", "memory")]  # no state graph here


def test_formatters() -> None:
    assert [fmt_energy(v) for v in (None, 0.4, 999.0, 1000.0, 2.5e6)] == ["N/A", "0 J", "999 J", "1 kJ", "2.5 MJ"]
    assert [fmt_duration(v) for v in (None, 5.0, 65.0, 7200.0)] == ["N/A", "5.0s", "1m05s", "2h00m"]


# --- the real command line: a state directory that cannot be read is an error, not an empty history ------------
def _cli(args: list[str], state: Path) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=clean_env(ECOLAUNCH_STATE_DIR=str(state)), capture_output=True,
                          text=True, timeout=60)


def test_an_unusable_state_directory_is_an_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "state-file"
    not_a_dir.write_text("")
    for args in (["history"], ["history", "--json"], ["report", "a1b2"]):
        out = _cli(args, not_a_dir)
        assert out.returncode == 1, out.stdout
        assert out.stdout == ""
        assert out.stderr == (f"Error: cannot read the state directory {str(not_a_dir)!r}: Not a directory\n"
                              "HINT: set ECOLAUNCH_STATE_DIR to the state directory the launcher uses\n")
    broken = tmp_path / "state"
    broken.mkdir()
    (broken / "history").write_text("")
    out = _cli(["history"], broken)
    assert out.returncode == 1, out.stdout
    assert out.stderr == (f"Error: cannot read the job history {str(broken / 'history')!r}: Not a directory\n"
                          "HINT: move it aside: the next launch creates the directory again\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_an_unreadable_state_directory_is_an_error(tmp_path: Path) -> None:
    locked = tmp_path / "state"
    (locked / "history" / "jobs").mkdir(parents=True)
    locked.chmod(0o300)
    try:
        out = _cli(["history"], locked)
    finally:
        locked.chmod(0o700)
    assert out.returncode == 1, out.stdout
    assert out.stderr == (f"Error: cannot read the state directory {str(locked)!r}: Permission denied\n"
                          "HINT: ask the lab admin for read access, or set ECOLAUNCH_STATE_DIR to the launcher's "
                          "state directory\n")


# --- report --plot: GPUs labelled by their NVML index, identical GPUs drawn once, 0 % visible ------------------
def _two_gpu_job(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """A state directory whose graph knows two simulated GPUs (as ``status`` wrote it), and a finished 2-GPU job
    whose record lists them against UUID order, with identical idle readings on both."""
    state = tmp_path / "state"
    env = clean_env(ECOLAUNCH_SIMULATE="2xA100-SXM4-80GB", ECOLAUNCH_STATE_DIR=str(state))
    out = subprocess.run(ecolaunch_cmd("status", "--json"), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    indices = {g["uuid"]: g["index"] for g in json.loads(out.stdout)["gpus"]}
    uuids = tuple(sorted(indices, reverse=True))
    points = [{"t_s": float(t), "power_w": 50.0, "power_limit_w": 400.0, "util_gpu_pct": 0.0, "util_mem_pct": 0.0,
               "memory_used_mib": 0} for t in range(5)]
    History(state).record(record("b0b0b0b0", time.time(), gpus=uuids, gpu_names=("NVIDIA A100-SXM4-80GB",) * 2,
                                 power_caps_w={u: 400.0 for u in uuids}, samples={u: points for u in uuids}))
    return state, indices


def test_plot_groups_label_gpus_by_index_and_merge_identical_ones(tmp_path: Path) -> None:
    from ecolaunch.cli.report_cmd import gpu_indices, plot_groups

    state, indices = _two_gpu_job(tmp_path)
    assert gpu_indices(state) == indices
    rec = History(state).get("b0b0b0b0")
    by_index = sorted(indices, key=indices.get)
    groups = plot_groups(rec, indices)
    assert [label for label, _ in groups] == [
        f"GPU 0 ({by_index[0][:12]}…) = GPU 1 ({by_index[1][:12]}…)"]
    assert groups[0][1]["util_gpu_pct"] == [0.0] * 5
    # different readings: one group per GPU, by index; a GPU the state graph does not know goes by its UUID
    rec.samples[by_index[1]] = [dict(p, power_w=60.0) for p in rec.samples[by_index[1]]]
    assert [label for label, _ in plot_groups(rec, {by_index[1]: 1})] == [
        f"GPU 1 ({by_index[1][:12]}…)", f"{by_index[0][:12]}…"]


def test_report_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    state, _ = _two_gpu_job(tmp_path)
    png = tmp_path / "job.png"
    out = _cli(["report", "b0b0b0b0", "--plot", str(png)], state)
    assert out.returncode == 0, out.stderr
    assert out.stderr == f"plot written to {png}\n"
    assert png.read_bytes().startswith(b"\x89PNG")


# --- the plot with matplotlib itself (a test dependency) ----------------------------------------------------------
def _flat(job_id: str) -> JobRecord:
    """A steady 100 W job: readings within ±0.07 W, no cap reading (the review's plot)."""
    samples = [{"t_s": float(t), "power_w": 100.0 + (0.07 if t % 2 else -0.07), "power_limit_w": None,
                "util_gpu_pct": 50.0, "util_mem_pct": 20.0, "memory_used_mib": 1000} for t in range(30)]
    return record(job_id, 1_700_000_000.0, samples={"GPU-aaaaaaaa-1111": samples})


def test_a_flat_power_series_gets_a_readable_axis_without_an_offset() -> None:
    matplotlib = pytest.importorskip("matplotlib")  # in the test extra: skipped only outside it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ecolaunch.cli.report_cmd import figure

    fig = figure(_flat("f1a7f1a7"), {"GPU-aaaaaaaa-1111": 0}, plt)
    try:
        fig.canvas.draw()
        ax_power = fig.axes[0]
        lo, hi = ax_power.get_ylim()
        assert 90.0 <= lo <= 95.0 and 105.0 <= hi <= 110.0, (lo, hi)  # not 99.93-100.07
        formatter = ax_power.yaxis.get_major_formatter()
        assert formatter.get_offset() == ""  # no "+1e2" above the axis
        labels = [t.get_text() for t in ax_power.get_yticklabels() if t.get_text()]
        assert labels and all(90.0 <= float(x.replace("\N{MINUS SIGN}", "-")) <= 110.0 for x in labels), labels
    finally:
        plt.close(fig)


@pytest.mark.parametrize(("values", "limits"), [
    ([100.0, 100.07, 99.93], (94.9265, 105.0735)),  # flat: 5 % of the level on each side
    ([100.0, 400.0], (80.0, 420.0)),             # a real range: 5 % of the top
    ([2.0, 2.0], (0.0, 7.0)),                    # near 0 W: at least 5 W, never below 0
    ([None, float("nan")], None),                # nothing to plot
])
def test_power_axis_limits(values, limits) -> None:
    from ecolaunch.cli.report_cmd import power_ylim

    got = power_ylim(values)
    assert got == limits if limits is None else got == pytest.approx(limits)


def test_report_plot_writes_a_png_from_the_command_line(state: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    History(state).record(_flat("f1a7f1a7"))
    out = tmp_path / "flat.png"
    run = subprocess.run(ecolaunch_cmd("report", "f1a7", "--plot", str(out)),
                         env=clean_env(ECOLAUNCH_STATE_DIR=str(state), MPLCONFIGDIR=str(tmp_path / "mpl")),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
