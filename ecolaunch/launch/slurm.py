"""Inside a Slurm allocation: the GPUs Slurm gave this node, and a multi-node step's node rank and peers.

What lives here: :func:`allocation` (what Slurm's environment says), :func:`expand_hostlist` (Slurm's compressed
host lists, ``node[01-03,07]``), :func:`fill_rendezvous` (a step over several nodes run as ``srun ecolaunch ...``
without ``--nnodes``/``--node-rank``/``--master-addr``: taken from the allocation). What does not: placing (the
allowed GPUs restrict it: :mod:`ecolaunch.launch.pipeline`), meeting the other nodes (:mod:`ecolaunch.launch.nodes`).
Which variables are read, and when: docs/multinode.md#slurm.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ecolaunch.errors import ConfigError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True, slots=True)
class Allocation:
    """What Slurm's environment says of this launch: the job, this node, the step's nodes and this node's GPUs."""

    job_id: str
    #: this node's index in the step (``SLURM_NODEID``), the step's node count and its hosts (None: not in a step)
    node_id: int | None
    num_nodes: int | None
    nodes: tuple[str, ...]
    #: NVML indices of the GPUs Slurm gave this node (None: Slurm said nothing of GPUs)
    gpu_indices: tuple[int, ...] | None


def allocation(env: Mapping[str, str]) -> Allocation | None:
    """The Slurm allocation this launch runs in, or None outside Slurm (no ``SLURM_JOB_ID``). ConfigError on a
    variable that is not what Slurm writes."""
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        return None
    gpus_raw = env.get("SLURM_STEP_GPUS", env.get("SLURM_JOB_GPUS"))
    gpus = None if gpus_raw is None else _indices(gpus_raw)
    in_step = env.get("SLURM_STEP_ID", "").strip() not in ("", "batch", "extern", "interactive")
    node_id = _whole(env, "SLURM_NODEID") if in_step and env.get("SLURM_NODEID") else None
    num = _whole(env, "SLURM_STEP_NUM_NODES") if in_step and env.get("SLURM_STEP_NUM_NODES") else None
    nodes = tuple(expand_hostlist(env.get("SLURM_STEP_NODELIST", ""))) if in_step else ()
    return Allocation(job_id, node_id, num, nodes, gpus)


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list, expanded: ``"gpu[01-03,07],login"`` -> gpu01, gpu02, gpu03, gpu07, login (zero padding
    kept; several bracket groups in one name expand as a product, as ``scontrol show hostnames`` does)."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        hosts.extend(_expand_one(item))
    return hosts


def fill_rendezvous(args: argparse.Namespace, alloc: Allocation, given: Collection[str]) -> tuple[str, ...]:
    """Fill, in place, the rendezvous options a multi-node step needs and the user did not give (``given``: the
    option dests given on the command line or through ``PET_*``); returns what was filled, as options."""
    if alloc.num_nodes is None or alloc.num_nodes <= 1 or alloc.node_id is None:
        return ()
    if "rdzv_backend" in given and args.rdzv_backend != "static":
        return ()  # the user's own rendezvous (c10d, etcd): its endpoint says where the nodes meet
    if getattr(args, "standalone", False) or ("nnodes" in given and str(args.nnodes).split(":")[-1].strip() == "1"):
        return ()  # a one-node job, as the user said
    filled = []
    if "nnodes" not in given:
        args.nnodes = str(alloc.num_nodes)
        filled.append(f"--nnodes {alloc.num_nodes}")
    if "node_rank" not in given:
        args.node_rank = alloc.node_id
        filled.append(f"--node-rank {alloc.node_id}")
    if "master_addr" not in given and "rdzv_endpoint" not in given and alloc.nodes:
        args.master_addr = alloc.nodes[0]
        filled.append(f"--master-addr {alloc.nodes[0]}")
    return tuple(filled)


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise _bad_hostlist(text)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise _bad_hostlist(text)
    items.append(text[start:])
    return [i for i in items if i]


def _expand_one(item: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    head, body, tail = item[:open_at], item[open_at + 1:close_at], item[close_at + 1:]
    out = []
    for part in body.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise _bad_hostlist(item)
        lo, hi = match.group(1), match.group(2) or match.group(1)
        if int(hi) < int(lo):
            raise _bad_hostlist(item)
        out.extend(f"{head}{n:0{len(lo)}d}" for n in range(int(lo), int(hi) + 1))
    return [h + t for h in out for t in _expand_one(tail)]


def _bad_hostlist(text: str) -> ConfigError:
    return ConfigError(f"SLURM_STEP_NODELIST {text!r} is not a Slurm host list",
                       hint="give --nnodes, --node-rank and --master-addr yourself, or run under srun")


def _indices(raw: str) -> tuple[int, ...]:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not all(p.isdecimal() for p in parts):
        raise ConfigError(f"SLURM_STEP_GPUS/SLURM_JOB_GPUS {raw!r} is not a list of GPU indices",
                          hint="run inside a Slurm allocation with --gres=gpu:N, or unset the variable")
    return tuple(int(p) for p in parts)


def _whole(env: Mapping[str, str], name: str) -> int:
    raw = env[name].strip()
    if not raw.isdecimal():
        raise ConfigError(f"{name}={raw!r} is not a whole number", hint="run under srun, or unset the variable")
    return int(raw)
