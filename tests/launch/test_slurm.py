"""What ecolaunch reads of a Slurm allocation (ecolaunch.launch.slurm): host lists, GPUs, and the rendezvous
options a multi-node step fills when the user did not give them."""

from __future__ import annotations

import pytest

from ecolaunch.errors import ConfigError
from ecolaunch.launch.argv import parse
from ecolaunch.launch.slurm import allocation, expand_hostlist
from tests.conftest import REPO

SCRIPT = str(REPO / "examples" / "ddp_train.py")
STEP = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_STEP_GPUS": "0,1"}


@pytest.mark.parametrize("text, hosts", [
    ("gpu[01-03,07],login", ["gpu01", "gpu02", "gpu03", "gpu07", "login"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("localhost", ["localhost"]),
    ("", []),
])
def test_host_lists_expand_as_scontrol_show_hostnames_does(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[01-03", "gpu]1[", "gpu[3-1]", "gpu[a-b]"])
def test_a_broken_host_list_is_a_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a Slurm host list"):
        expand_hostlist(text)


def test_the_allocation_outside_a_step_and_inside_one() -> None:
    assert allocation({}) is None
    batch = allocation({"SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "2,3", "SLURM_NODEID": "0"})
    assert batch.gpu_indices == (2, 3) and batch.node_id is None and batch.nodes == ()  # a batch script: no step
    step = allocation(STEP)
    assert (step.node_id, step.num_nodes, step.nodes, step.gpu_indices) == (1, 2, ("gpu07", "gpu08"), (0, 1))
    assert allocation({"SLURM_JOB_ID": "77"}).gpu_indices is None  # Slurm said nothing of GPUs
    with pytest.raises(ConfigError, match="SLURM_STEP_GPUS/SLURM_JOB_GPUS 'gpu0' is not a list of GPU indices"):
        allocation({"SLURM_JOB_ID": "77", "SLURM_STEP_GPUS": "gpu0"})
    with pytest.raises(ConfigError, match="SLURM_NODEID='x' is not a whole number"):
        allocation({**STEP, "SLURM_NODEID": "x"})


def test_a_step_fills_only_what_the_user_did_not_give() -> None:
    filled = parse(["--nproc-per-node", "2", SCRIPT], STEP)
    assert filled.slurm_filled == ("--nnodes 2", "--node-rank 1", "--master-addr gpu07")
    assert (filled.workers.parsed.nnodes, filled.workers.parsed.node_rank, filled.workers.parsed.master_addr) == ("2", 1, "gpu07")
    mine = parse(["--master-addr", "head", "--nproc-per-node", "2", SCRIPT], STEP)
    assert mine.slurm_filled == ("--nnodes 2", "--node-rank 1") and mine.workers.parsed.master_addr == "head"
    one = parse(["--nnodes", "1", "--nproc-per-node", "2", SCRIPT], STEP)  # the user's one-node job
    assert one.slurm_filled == () and one.workers.parsed.node_rank == 0
    c10d = parse(["--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29400", "--nnodes", "2", "--nproc-per-node", "2",
                  SCRIPT], STEP)
    assert c10d.slurm_filled == ()
    assert parse(["--nproc-per-node", "2", SCRIPT], {**STEP, "SLURM_STEP_NUM_NODES": "1"}).slurm_filled == ()
