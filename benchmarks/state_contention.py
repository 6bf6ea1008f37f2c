"""N launcher processes booking GPUs in parallel through one state store: lock wait and double bookings.

    python benchmarks/state_contention.py [--procs 8] [--cycles 25] [--gpus 8] [--json]

Each process repeats: enter the queue, wait for a placement (exclusive policy, 1 GPU), hold it a few
milliseconds, release. Every transaction's wait for the file lock is recorded. A process notes when it held
each GPU (after the placement was committed, before the release started); two jobs holding one GPU in
overlapping intervals is a double booking (must be 0). ``--json`` prints ``p50_ms``, ``p99_ms`` (lock wait),
``double_bookings``, ``transactions``, ``decisions``, ``wall_s``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, emit, percentile

sys.path.insert(0, str(REPO))


def _worker(state_dir: str, spec: str, cycles: int, seed: int, out: multiprocessing.Queue) -> None:
    from ecolaunch.admin.rules import Rules
    from ecolaunch.devices.select import open_backend
    from ecolaunch.launch.session import Launcher, Session
    from ecolaunch.policy.base import JobRequest
    from ecolaunch.policy.baselines import ExclusivePolicy
    from ecolaunch.state.reconcile import process_start_time
    from ecolaunch.state.store import StateStore

    rng = random.Random(seed)
    waits, holds = [], []
    store = StateStore(Path(state_dir), on_lock_wait=waits.append)
    session = Session(store, open_backend(spec, Path(state_dir)), ExclusivePolicy(), Rules())
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="bench")
    for c in range(cycles):
        request = JobRequest(id=f"{seed}-{c}", user="bench", host=session.host, nproc=1)
        session.submit(request, me, name="bench", info={})
        placement = session.wait_for_placement(request.id, None)
        t0 = time.time()
        time.sleep(rng.uniform(0.001, 0.005))
        holds.append((placement.decision.gpus[0], t0, time.time()))
        session.release(request.id)
    out.put((waits, holds))


def double_bookings(holds: list[tuple[str, float, float]]) -> int:
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for gpu, start, end in holds:
        by_gpu.setdefault(gpu, []).append((start, end))
    count = 0
    for spans in by_gpu.values():
        spans.sort()
        count += sum(1 for (_, e1), (s2, _) in zip(spans, spans[1:]) if s2 < e1)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=25)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    spec = f"{args.gpus}xA100-SXM4-80GB"
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as state:
        start = time.perf_counter()
        procs = [ctx.Process(target=_worker, args=(state, spec, args.cycles, i, out)) for i in range(args.procs)]
        for p in procs:
            p.start()
        results = [out.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        wall = time.perf_counter() - start
    waits = [w for ws, _ in results for w in ws]
    holds = [h for _, hs in results for h in hs]
    result = {
        "procs": args.procs,
        "gpus": args.gpus,
        "decisions": len(holds),
        "transactions": len(waits),
        "p50_ms": round(percentile(waits, 50) * 1000, 3),
        "p99_ms": round(percentile(waits, 99) * 1000, 3),
        "double_bookings": double_bookings(holds),
        "wall_s": round(wall, 2),
    }
    table = (
        f"state contention: {args.procs} processes x {args.cycles} bookings on {args.gpus} simulated GPUs\n"
        f"  decisions {result['decisions']}, transactions {result['transactions']}, wall {result['wall_s']} s\n"
        f"  lock wait p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms\n"
        f"  double bookings: {result['double_bookings']} (must be 0)"
    )
    emit(result, args.json, table)


if __name__ == "__main__":
    main()
