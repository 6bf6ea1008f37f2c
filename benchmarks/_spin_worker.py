"""The worker of gpu_check.py's ``waitpower`` section: what one GPU draws while kernels spin, as a rank's GPU does while
it waits inside a collective, against what it draws idle and computing. Prints one JSON document.

    _spin_worker.py <seconds per state> <blocks,...>

States, each measured over ``<seconds per state>`` from the board's energy counter (through ecolaunch's backend
selection, as the canned workloads read it), after a short settle:

- ``idle``: a CUDA context and nothing running;
- ``spin-K``: K busy-wait kernels at once, one per stream (``torch.cuda._sleep``: one thread spinning on the SM clock),
  relaunched until the window ends; NCCL waits for a slower rank the same way, its kernels spinning on a flag in
  memory, one block per channel (with many threads each): a proxy, not NCCL, which one GPU cannot host two ranks of;
- ``compute``: a large matmul in a loop (the board busy, at its current limit).

``spin_share`` is where each spin state lies between the two bounds ``docs/pace-matching.md`` assumes for a waiting
GPU: 0 at ``idle``, 1 at ``compute``.
"""

import json
import sys
import time

import torch

from ecolaunch.calibrate.canned import open_meter

SETTLE_S = 0.5
#: clock cycles one spin kernel runs (a few ms on any current board): short enough to end each window on time
SPIN_CYCLES = 5_000_000


def window(meter, seconds: float, busy) -> float | None:
    """Mean board power (W) over ``seconds`` while ``busy(deadline)`` keeps the GPU in the state measured."""
    busy(time.monotonic() + SETTLE_S)
    torch.cuda.synchronize()
    start_j, start = meter.energy_j(), time.monotonic()
    busy(start + seconds)
    torch.cuda.synchronize()
    end_j, end = meter.energy_j(), time.monotonic()
    return None if start_j is None or end_j is None else (end_j - start_j) / (end - start)


def idle(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))


def spinning(blocks: int):
    streams = [torch.cuda.Stream() for _ in range(blocks)]

    def busy(deadline: float) -> None:
        while time.monotonic() < deadline:
            for s in streams:
                with torch.cuda.stream(s):
                    torch.cuda._sleep(SPIN_CYCLES)
            torch.cuda.synchronize()

    return busy


def computing():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)

    def busy(deadline: float) -> None:
        while time.monotonic() < deadline:
            for _ in range(4):
                torch.mm(a, b)
            torch.cuda.synchronize()

    return busy


def main() -> int:
    seconds, blocks = float(sys.argv[1]), [int(k) for k in sys.argv[2].split(",")]
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device: a spinning kernel needs a real GPU"}))
        return 1
    torch.cuda.init()
    meter = open_meter("cuda")
    if meter.backend is None:
        print(json.dumps({"error": f"the GPU's energy counter cannot be read: {meter.error}"}))
        return 1
    power = {"idle": window(meter, seconds, idle)}
    for k in blocks:
        power[f"spin-{k}"] = window(meter, seconds, spinning(k))
    power["compute"] = window(meter, seconds, computing())
    low, high = power["idle"], power["compute"]
    share = {name: None if None in (w, low, high) or high <= low else round((w - low) / (high - low), 3)
             for name, w in power.items() if name.startswith("spin-")}
    print(json.dumps({"power_w": {k: None if w is None else round(w, 1) for k, w in power.items()},
                      "spin_share": share, "seconds": seconds, "spin_cycles": SPIN_CYCLES,
                      "limit_w": meter.snapshot().power_limit_w}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
