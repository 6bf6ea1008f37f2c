"""EaCO Tables 1-4 reproduced from the solo rows alone (ecolaunch.sim.node.reproduce_eaco)."""

from __future__ import annotations

import pytest

from ecolaunch.sim import node
from ecolaunch.sim.interference import InterferenceModel, default_interference_model


@pytest.fixture(scope="module")
def rep() -> node.EacoReproduction:
    return node.reproduce_eaco()


def test_every_unsaturated_set_draws_the_power_eaco_measured(rep: node.EacoReproduction) -> None:
    unsaturated = [s for s in rep.sets if not s.saturated]
    assert [s.name for s in unsaturated] == ["J1&J3", "J1&J4", "J2&J4", "J1&J2&J3", "J1&J2&J4"]
    for s in unsaturated:
        assert abs(s.power_w / s.paper_power_w - 1.0) <= 0.07, s  # SOURCE.md: the additive model, -6 % to +7 %
        assert abs(s.energy_saving_pct - s.paper_energy_saving_pct) <= 6.0, s


def test_the_gpus_switching_alone_explains_under_a_third_of_eacos_slowdowns() -> None:
    # Without the 8-GPU jobs' synchronization wait (docs/known-issues.md): EaCO's co-located jobs finished 3-8 %
    # later; the V100's switching cost (5 ms for a co-runner busy all the time, fitted on Gavel) at these jobs'
    # 5-48 % utilization explains under 1 %.
    for s in node.reproduce_eaco(sync_wait_s=0.0).sets:
        if not s.saturated:
            assert 0.0 < s.jct_increase_pct < s.paper_jct_increase_pct / 3.0, s


def test_the_synchronization_wait_predicts_each_held_out_set_within_3_points(rep: node.EacoReproduction) -> None:
    # issue 36, item 4: the wait is fitted on the other four unsaturated sets and scored on the fifth
    for s in rep.sets:
        if not s.saturated:
            assert s.jct_increase_loo_pct is not None
            assert abs(s.jct_increase_loo_pct - s.paper_jct_increase_pct) <= 3.0, s
            assert s.jct_increase_loo_pct > 3.0 * node.reproduce_eaco(sync_wait_s=0.0).sets[rep.sets.index(s)] \
                .jct_increase_pct, s
    assert 0.020 < rep.sync_wait_s < 0.035  # a few time slices per iteration, as docs/gnn.md reads it


def test_the_simulators_host_static_power_keeps_the_one_gpu_prior() -> None:
    # the simulator does not pass job GPU counts, so its host power is fitted with the prior it predicts with
    from ecolaunch.devices.catalogue import lookup
    from ecolaunch.sim.engine import default_host_static_w

    one_gpu = node.reproduce_eaco(sync_wait_s=0.0).static_power_w
    assert default_host_static_w() == pytest.approx(one_gpu - 8 * lookup("V100-SXM2-32GB").idle_power_w)


def test_only_the_four_job_set_is_saturated_with_a_large_slowdown(rep: node.EacoReproduction) -> None:
    saturated = [s for s in rep.sets if s.saturated]
    assert [s.name for s in saturated] == ["J1&J2&J3&J4"]
    assert saturated[0].utilization_sum_pct > 100.0
    worst_unsaturated = max(s.jct_increase_pct for s in rep.sets if not s.saturated)
    assert saturated[0].jct_increase_pct > worst_unsaturated
    # EaCO measured non-additive power there: the additive prediction overshoots the paper, which is why the
    # rule must flag the set instead of trusting its numbers
    assert saturated[0].power_w > saturated[0].paper_power_w


def test_static_power_is_fitted_near_the_published_estimate(rep: node.EacoReproduction) -> None:
    assert 650.0 < rep.static_power_w < 780.0  # SOURCE.md: ~740 W for a purely additive model


def test_job_energies_add_up_to_the_node_energy(rep: node.EacoReproduction) -> None:
    for s in rep.sets:
        assert sum(s.job_energy_kwh.values()) == pytest.approx(s.node_energy_kwh)


def test_eacos_jobs_pay_the_v100s_switching_cost(rep: node.EacoReproduction) -> None:
    model = default_interference_model()
    free = InterferenceModel(0.0, model.default_iter_time_s)
    k80 = InterferenceModel(model.switch_overhead_for("K80"), model.default_iter_time_s,
                            {"volta": model.switch_overhead_for("K80")})
    at = {name: {s.name: s.jct_increase_pct for s in node.reproduce_eaco(m, sync_wait_s=0.0).sets}
          for name, m in (("free", free), ("k80", k80))}
    for s in node.reproduce_eaco(sync_wait_s=0.0).sets:
        if not s.saturated:
            assert at["free"][s.name] == pytest.approx(0.0, abs=1e-9)
            assert 0.0 < s.jct_increase_pct < at["k80"][s.name]


def test_reproduction_is_deterministic(rep: node.EacoReproduction) -> None:
    assert node.reproduce_eaco() == rep
