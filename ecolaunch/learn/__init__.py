"""Offline learning: the GNN's training data and loop, and the refit of the simulator's shipped parameters.

What lives here: :mod:`.train` (the seeded training loop, its folds and data sources), :mod:`.history_data` (a
lab's job history as samples), :mod:`.calibration_data` (a machine's calibration results as samples) and
:mod:`.refit` (``python -m ecolaunch.learn.refit``: ``sim/data/fitted_models.json``). Nothing on the launch path
imports this package: it reads the simulator, calibration results and history, and writes weights and parameters.
"""
