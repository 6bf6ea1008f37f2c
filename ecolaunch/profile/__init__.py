"""Knowing a job: in-process hooks, the hook channel, power-cap curves (and, elsewhere, sampler and history).

Modules (import them directly; this package imports nothing, so ``import ecolaunch`` stays cheap):

- ``hooks``: ``step()``, ``track()``, ``@train_step``, ``@job(...)``, ``is_profiling()`` for training scripts;
  near-free when the script is not launched by ecolaunch.
- ``channel``: the local file channel between workers and the launcher (step stamps, hints) and its reader.
- ``powercap``: cap -> (iteration time, power) model fitted from a few caps, and the cap choice.
- ``zeus_data``: loaders for the Zeus power-limit traces the cap model is built and checked on.
"""
