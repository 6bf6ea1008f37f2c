"""Worker for launcher tests: marks ``ecolaunch.step()`` every ``<seconds per step>`` for ``<steps>`` steps.

    stepper.py <steps> <seconds per step>
"""

import sys
import time

import ecolaunch

steps, dt = int(sys.argv[1]), float(sys.argv[2])
for _ in range(steps):
    time.sleep(dt)
    ecolaunch.step()
