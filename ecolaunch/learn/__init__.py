"""Offline learning: the GNN's training data and loop.

What lives here: :mod:`.train` (the seeded training loop, its folds and data sources), :mod:`.history_data` (a
lab's job history as samples) and :mod:`.calibration_data` (a machine's calibration results as samples). What does
not: the refit of the simulator's shipped parameters (``benchmarks/refit_models.py``). Nothing on the launch path
imports this package: it reads the simulator, calibration results and history, and writes weights.
"""
