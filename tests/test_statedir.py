"""The state directory's tree (ecolaunch.statedir): the names every reader and writer shares stay what they were
(a renamed file would strand every existing state directory), each path says what it holds, and the store, the
history, the ledger, the agent, calibration, the GNN weights and the simulated GPUs use those paths."""

from __future__ import annotations

from pathlib import Path

from ecolaunch.caps.keeper import CapKeeper
from ecolaunch.admin.rules import Rules
from ecolaunch.calibrate.results import file_name
from ecolaunch.config import Environment
from ecolaunch.devices.select import open_backend
from ecolaunch.profile.history import History
from ecolaunch.state.store import StateStore
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


def test_the_modules_that_own_a_path_use_the_layouts(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    store = StateStore(tmp_path)
    assert (store.path, store.jobs_dir, store.job_file("j1")) == (layout.state_file, layout.jobs, layout.job_file("j1"))
    assert History(tmp_path).root == layout.history
    backend = open_backend("1xA100-SXM4-80GB", tmp_path)
    assert backend.state_path == layout.simulated_gpus
    assert CapKeeper(backend, tmp_path, Rules(), host="h").ledger_path == layout.ledger
    weights = layout.gnn_weights
    weights.parent.mkdir(mode=0o750)
    weights.write_bytes(b"")
    weights.chmod(0o640)
    environment = Environment.from_env({"ECOLAUNCH_STATE_DIR": str(tmp_path)})
    assert (environment.gnn_weights, environment.gnn_weights_source) == (weights, "state directory")
