"""``ecolaunch calibrate``: measure this machine's GPUs with canned workloads, so that predictions fit them.

Modules, one job each: :mod:`~ecolaunch.calibrate.plan` (the settings, the choice of GPUs, who sets caps),
:mod:`~ecolaunch.calibrate.run` (one GPU's calibration), :mod:`~ecolaunch.calibrate.readings` (the GPU's readings
and the host's CPU load), :mod:`~ecolaunch.calibrate.plausible` (which pairs cannot be true),
:mod:`~ecolaunch.calibrate.booking` (who uses a GPU; the calibration's booking), :mod:`~ecolaunch.calibrate.worker`
(the workload processes), :mod:`~ecolaunch.calibrate.mps` (a private MPS daemon), :mod:`~ecolaunch.calibrate.results`
(the result files), :mod:`~ecolaunch.calibrate.canned` (the workloads), :mod:`~ecolaunch.calibrate.links` and
:mod:`~ecolaunch.calibrate.linkprobe` (``--links``: the pairs and their two processes). Nothing in this package prints;
``ecolaunch.cli.calibrate_cmd`` does; training on the results is ``ecolaunch.learn.calibration_data``. What a
calibration measures, how, and the result document's fields: docs/admin.md#calibrating-to-this-machine.
"""

from __future__ import annotations
