"""The link rule in the simulator (ecolaunch.policy.linkwait through sim.engine): a pair offered a split set holds out
for the NVLink-like pair the running jobs' ends free, and takes the split set when its wait is over, at once, as the
waiting launcher's next try would."""

from __future__ import annotations

import pytest

from ecolaunch.devices.spec import parse_spec
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.policy.linkwait import LinkWait
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.sim.lengths import TrueLengths, steps_of

#: 4 V100s: GPU 0-1 and 2-3 behind one PCIe switch each, the host bridge between
MACHINE = parse_spec("4xV100-PCIE-16GB", hostname="ws")
U = MACHINE.hosts[0].uuids


def job(jid: str, arrival: float, work: float, nproc: int = 1) -> TraceJob:
    return TraceJob(jid, arrival, nproc, work, Profile(iter_time_s=0.2, sm_util_pct=80.0, mem_bw_util_pct=40.0,
                                                       memory_mib=8000))


def trace(a_work: float) -> Trace:
    """``a`` on GPU 0, ``b`` on GPU 1 (ends at 10 s), ``c`` on GPU 2: at 20 s the pair finds GPU 1 and 3 free, a split
    pair, while GPU 0-1 is the pair ``a``'s end frees."""
    return Trace("split", (job("a", 0.0, a_work), job("b", 0.0, 10.0), job("c", 0.0, 50000.0),
                           job("pair", 20.0, 1000.0, nproc=2)))


class PairKnown:
    """Only the pair knows its length (nobody declared the others', and no history has them)."""

    name = "pair-known"

    def known(self, j, profile):
        return {"expected_s": j.work_s, "expected_iterations": steps_of(j.work_s)} if j.id == "pair" else {}

    def ended(self, j, run_s, iterations):
        pass

    def margin(self) -> float:
        return 0.18


def outcome(policy, a_work: float, lengths=None):
    result = Simulation(MACHINE, policy, lengths=lengths or TrueLengths()).run(trace(a_work))
    return {o.id: o for o in result.jobs}["pair"]


def test_the_pair_waits_for_the_switch_pair_rather_than_take_a_split_one() -> None:
    now = outcome(ExclusivePolicy(), 1000.0)
    assert now.start_s == 20.0 and set(now.gpus) == {U[1], U[3]}
    held = outcome(LinkWait(ExclusivePolicy()), 1000.0)
    assert held.start_s == pytest.approx(1000.0) and set(held.gpus) == {U[0], U[1]}


def test_a_pair_whose_wait_is_shorter_than_the_pairs_end_takes_the_split_set_now() -> None:
    assert outcome(LinkWait(ExclusivePolicy(), share=0.5), 1000.0).start_s == 20.0  # 500 s of wait: too short


def test_a_hold_on_a_job_of_unknown_end_ends_with_its_wait_even_when_nothing_else_happens() -> None:
    # a runs 10,000 s and nobody knows it: the pair holds out its 4 x 1000 s from 20 s, then takes the split set
    placed = outcome(LinkWait(ExclusivePolicy()), 10000.0, PairKnown())
    assert placed.start_s == pytest.approx(4020.0) and set(placed.gpus) == {U[1], U[3]}
