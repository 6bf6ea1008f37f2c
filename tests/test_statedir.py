"""The state directory's tree (ecolaunch.statedir): the names every reader and writer shares stay what they were
(a renamed file would strand every existing state directory), each path says what it holds."""

from __future__ import annotations

from pathlib import Path

from ecolaunch.calibrate.results import file_name
from ecolaunch.statedir import StateLayout, tree

#: the tree as it is on disk, typed by hand on purpose
TREE = [
    "state.json", "state.json.corrupt-<time>-<pid>-<random>", "state.lock", "jobs/", "jobs/<job id>.json", "hooks/",
    "hooks/<job id>[-profile]/", "history/", "history/<user>/", "history/<user>/jobs/<job id>.json",
    "history/<user>/profiles/<fingerprint>.json", "caps.json", "agent.json", "gnn/", "gnn/weights.pt",
    "gnn/manifest.json", "calibration/", "calibration/<model>[.simulated].json", "simulated-gpus.json",
    "simulated-gpus.json.lock",
]


def test_the_tree_keeps_its_names_and_says_what_each_path_holds() -> None:
    rows = tree()
    assert [path for path, _ in rows] == TREE
    assert all(what.endswith(".") and "(" in what for _, what in rows), rows


def test_a_layout_joins_onto_its_root(tmp_path: Path) -> None:
    layout = StateLayout(str(tmp_path))
    assert layout.root == tmp_path
    assert layout.job_file("j1") == tmp_path / "jobs" / "j1.json"
    assert layout.history_job("alice", "j1") == tmp_path / "history" / "alice" / "jobs" / "j1.json"
    assert layout.history_profile("alice", "ab") == tmp_path / "history" / "alice" / "profiles" / "ab.json"
    assert layout.run_hooks("j1-profile") == tmp_path / "hooks" / "j1-profile"
    assert layout.calibration_result(file_name("NVIDIA H200", False)) == tmp_path / "calibration" / "nvidia-h200.json"
    assert layout.simulated_gpus_lock == tmp_path / "simulated-gpus.json.lock"

