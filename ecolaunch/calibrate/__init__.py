"""``ecolaunch calibrate``: measure this machine's GPUs with canned workloads, so that predictions fit them.

The GNN learns from public traces (Gavel's pairs, Zeus's cap sweeps) and the simulator; real GPUs differ from
those (time-slicing between processes costs switching overhead; an H200 is not a V100). A calibration runs the
three workloads of :mod:`ecolaunch.calibrate.canned` — ``mm`` (compute-bound), ``bw`` (memory-bound), ``mlp``
(launch-bound) — as real processes on one GPU of each model: each alone at up to three caps (the highest the admin
policy allows, and the two lower caps the profiler would try), and every pair of them sharing the GPU
(time-slicing; under MPS too where the driver has it and the caller is root). ``ecolaunch policy train`` then trains
on the results together with the job history (:mod:`ecolaunch.learn.calibration_data`), and writes the weights
into the state directory, where launches, ``ecolaunch predict`` and ``ecolaunch simulate`` pick them up.

Modules, one job each:

- :mod:`~ecolaunch.calibrate.plan`: the settings, the choice of GPUs, who sets caps;
- :mod:`~ecolaunch.calibrate.run`: one GPU's calibration (:func:`~ecolaunch.calibrate.run.calibrate_gpu`);
- :mod:`~ecolaunch.calibrate.readings`: the GPU's readings during a measurement, and the host's CPU load;
- :mod:`~ecolaunch.calibrate.plausible`: which pairs cannot be true (a job faster than alone; time-slicing busier
  than all the time);
- :mod:`~ecolaunch.calibrate.booking`: who uses a GPU (:class:`~ecolaunch.calibrate.booking.GpuBusy`), and the
  calibration's own booking in the state graph;
- :mod:`~ecolaunch.calibrate.worker`: the workload processes and the calibrator's handle on them;
- :mod:`~ecolaunch.calibrate.mps`: whether MPS can be measured, a private MPS daemon;
- :mod:`~ecolaunch.calibrate.results`: the result files under ``<state dir>/calibration/``.

The result document (``format`` ``ecolaunch-calibration``, ``version`` 1), one per GPU model::

    simulated, note        true on simulated GPUs, with the note that the figures are not measurements
    backend, host, user, started_at (Unix s), wall_s
    gpu                    uuid, index, name, memory_total_mib, power_limit_{min,default,max}_w, power_limit_found_w
    settings               workloads, seconds, settle_s, budget_s, caps, mps, force
    caps                   measured (bool: at least one capped point), points (how many below the highest cap), by
                           ("agent" | "root" | null), why_not, bounds_w ([lo, hi] the policy allows)
    mps                    measured (bool), why_not
    forced, occupants      whether --force measured beside someone, and who ({user, job_id, name, pid})
    workloads              name -> {what, device, energy_source, stand_in_load}
    alone[]                workload, power_cap_w, iters, wall_s, iter_time_s, iter_time_median_s, iter_time_cv_pct,
                           and the GPU's figures: window_s, energy_j, power_w, sm_util_pct, mem_util_pct,
                           memory_used_mib, power_limit_w, disturbed_by[], others_cpu_cores (the CPU the host's
                           other processes used, in cores; null: unknown), host_busy (bool: readings.host_busy)
    pairs[]                workloads [a, b], sharing ("time-slicing" | "mps"), power_cap_w, jobs[] (per worker: the
                           timing fields above and normalized_throughput = alone iteration time at that cap, the
                           latest measured, / this one), and the GPU's figures as above; flagged (why the window cannot be true:
                           calibrate.plausible; null when it can), remeasured (measured a second time, after a
                           flagged window on a busy host)
    skipped[]              {what, why}: measurements left out (time budget, a cap that did not apply)
    software               ecolaunch, python, torch versions

Figures a device cannot give are null. Nothing in this package prints; ``ecolaunch.cli.calibrate_cmd`` does.
"""

from __future__ import annotations
