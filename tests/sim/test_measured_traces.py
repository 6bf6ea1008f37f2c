"""The measured traces: seeded, at the load and sizes their recipes and descriptions give, arriving steadily; and
the topology trace makes a 2-GPU job take a split set or wait."""

from __future__ import annotations

import numpy as np
import pytest

from ecolaunch.policy.candidates import best_link, worst_link
from ecolaunch.sim.measured_traces import RECIPES
from ecolaunch.sim.policies import get_sim_policy
from ecolaunch.sim.trace_registry import MEASURED, TRACES, trace_names
from ecolaunch.sim.traces import offered_load
from ecolaunch.sim.workloads import gavel_vc

NAMES = trace_names(MEASURED)


def test_every_measured_trace_has_a_recipe() -> None:
    assert list(RECIPES) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_a_trace_is_its_seed(name: str) -> None:
    entry = TRACES[name]
    machine = entry.machine("")
    a = entry.build(machine, seed=3, jobs=80)
    assert a == entry.build(machine, seed=3, jobs=80)
    b = entry.build(machine, seed=4, jobs=80)
    assert [j.arrival_s for j in a.jobs] != [j.arrival_s for j in b.jobs]
    assert [(j.kind, j.work_s) for j in a.jobs] != [(j.kind, j.work_s) for j in b.jobs]


@pytest.mark.parametrize("name", NAMES)
def test_load_sizes_and_jobs_are_the_recipes_and_the_description_says_them(name: str) -> None:
    entry, recipe = TRACES[name], RECIPES[name]
    machine = entry.machine("")
    per_host = len(machine.hosts[0].gpus)
    assert f"load {recipe.load}" in entry.description
    for seed in (0, 1):
        trace = entry.build(machine, seed=seed)
        assert len(trace.jobs) == recipe.jobs
        assert offered_load(trace, machine) == pytest.approx(recipe.load, rel=1e-9)
        sizes = {j.nproc for j in trace.jobs}
        assert max(sizes) <= (recipe.max_gpus or per_host)
        if recipe.sizes is not None:
            assert sizes <= set(recipe.sizes)
    if recipe.max_gpus is not None:
        assert f"at most {recipe.max_gpus} GPUs" in entry.description


@pytest.mark.parametrize("name", NAMES)
def test_arrivals_are_steady_not_the_sources_bursts(name: str) -> None:
    # the sources' own arrivals put over half their span into the longest 1 % of gaps; Poisson arrivals do not
    entry = TRACES[name]
    machine = entry.machine("")
    for seed in range(3):
        arrivals = np.array([j.arrival_s for j in entry.build(machine, seed=seed).jobs])
        gaps = np.sort(np.diff(arrivals))[::-1]
        assert np.all(gaps >= 0)
        assert gaps[:len(gaps) // 100].sum() < 0.1 * (arrivals[-1] - arrivals[0])


def test_the_sources_own_arrivals_are_bursts() -> None:
    # why the traces do not replay them (the module docstring's figure)
    arrivals = np.array([r.arrival_s for r in gavel_vc("6214e9")])
    gaps = np.sort(np.diff(arrivals))[::-1]
    assert gaps[:len(gaps) // 100].sum() > 0.5 * (arrivals[-1] - arrivals[0])


def test_the_topology_trace_makes_a_two_gpu_job_take_a_split_set_or_wait() -> None:
    entry = TRACES["workstation-topology"]
    machine = entry.machine("")
    trace = entry.build(machine, seed=0, jobs=100)
    sim = entry.simulation(machine, trace, "exclusive", get_sim_policy("exclusive"), seed=0)
    result = sim.run(trace)
    host = next(iter(sim.graph.hosts.values()))
    pairs = [o for o in result.jobs if o.nproc == 2]
    split = [o for o in pairs if worst_link(host, list(o.gpus)) > best_link(host, 2)]
    assert pairs and all(o.gpus for o in pairs)
    assert split and len(split) < len(pairs)  # some got an NVLink pair, some only a split set
