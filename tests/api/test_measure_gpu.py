"""``ecolaunch.measure()`` on a real NVIDIA GPU (opt-in: ``-m gpu``): NVML's energy counter, and a window that
waits for the CUDA work queued inside it."""

from __future__ import annotations

import time

import pytest

import ecolaunch

pytestmark = pytest.mark.gpu


def test_measure_reads_nvml_energy_and_waits_for_the_queued_cuda_work() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(50):
        x @ x
    torch.cuda.synchronize()
    busy_s = time.perf_counter() - start
    with ecolaunch.measure("matmul") as m:
        for _ in range(50):
            x @ x  # queued: without the window's synchronisation it would end long before the GPU does
    assert m.why_no_energy is None and m.gpus and m.time_s >= 0.8 * busy_s
    assert m.energy_j > 0 and m.energy_j == pytest.approx(sum(m.gpu_energy_j.values()))
    with ecolaunch.measure("queued only", sync_cuda=False) as queued:
        for _ in range(50):
            x @ x
    torch.cuda.synchronize()
    assert queued.time_s < 0.5 * busy_s
