"""Worker for launcher tests: writes what it sees to <out_dir>/rank-<RANK>.json, optionally sleeps."""

import json
import os
import sys
import time

import torch.distributed as dist

out_dir = sys.argv[1]
sleep_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
keys = [k for k in os.environ if k.startswith(("TORCHELASTIC_", "ECOLAUNCH_", "CUDA_", "PET_"))]
keys += ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
         "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS",
         "TORCH_NCCL_ASYNC_ERROR_HANDLING"]
seen = {k: os.environ.get(k) for k in sorted(set(keys))}
seen["is_torchelastic_launched"] = dist.is_torchelastic_launched()
seen["argv"] = sys.argv[1:]
seen["pid"] = os.getpid()
rank = os.environ.get("RANK", "none")
tmp = os.path.join(out_dir, f".rank-{rank}.json.tmp")
with open(tmp, "w") as f:
    json.dump(seen, f)
os.replace(tmp, os.path.join(out_dir, f"rank-{rank}.json"))
if sleep_s:
    time.sleep(sleep_s)
