"""Knowing a job: in-process hooks, the hook channel, sampling, profiling, power-cap curves, energy and history.

Modules (import them directly; this package imports nothing, so ``import ecolaunch`` stays cheap):

- ``hooks``: ``step()``, ``track()``, ``@train_step``, ``@job(...)``, ``is_profiling()`` for training scripts;
  near-free when the script is not launched by ecolaunch.
- ``channel``: the local file channel between workers and the launcher (step stamps, hints) and its reader.
- ``sampler``: the launcher-side sampler of power, energy counter, utilization and memory.
- ``profiler``: the profiling state machine (warm-up, up to three caps, cap choice) and the early-stage check.
- ``modes``: ``--profile auto|pre|inline|off`` resolved against the job's history.
- ``powercap``: cap -> (iteration time, power) model fitted from a few caps, and the cap choice.
- ``energy``: attributing a shared GPU's energy to the jobs on it.
- ``history``: job records and stored profiles in the state directory, and the job fingerprint.
- ``zeus_data``: loaders for the Zeus power-limit traces the cap model is built and checked on.
"""
