"""``ecolaunch status`` shows each GPU's whole name, however long."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import clean_env, ecolaunch_cmd


def test_status_shows_whole_gpu_names(state_dir: Path) -> None:
    env = clean_env(ECOLAUNCH_SIMULATE="1xRTX4090+1xA100-SXM4-80GB", ECOLAUNCH_STATE_DIR=str(state_dir))
    out = subprocess.run(ecolaunch_cmd("status"), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2:] == [
        "GPU NAME                        MEMORY (MiB)   UTIL   POWER/CAP (W)  JOBS",
        "0   NVIDIA GeForce RTX 4090          0/24576    0 %          25/450  -",
        "1   NVIDIA A100-SXM4-80GB            0/81920    0 %          50/400  -",
    ]
