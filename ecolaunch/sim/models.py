"""Shared pieces of the simulator's measured models: the vendored data and a small fitter.

What lives here: cached loaders of the measured data vendored in ``ecolaunch/sim/data`` (the Zeus power-limit
sweeps, Gavel's single-GPU pair throughputs and EaCO's Tables 1-4; each file read once per process, on first use,
never at import) and :func:`least_squares`, a bounded Levenberg-Marquardt solver in plain numpy (no scipy, no
torch). What does not: the job's profile (:class:`ecolaunch.jobmodel.profile.Profile`), the models themselves
(:mod:`ecolaunch.sim.power`, :mod:`ecolaunch.sim.interference`, :mod:`ecolaunch.sim.node`).
"""

from __future__ import annotations

import csv
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ecolaunch.errors import ConfigError

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parent / "data"

#: GPUs with a Zeus power-limit sweep, and the maximum power limit of the board that was swept (W).
ZEUS_GPUS: Mapping[str, float] = {"v100": 250.0, "a40": 300.0, "p100": 250.0, "rtx6000": 260.0}
#: GPU types with Gavel single-GPU pair measurements.
GAVEL_GPUS: tuple[str, ...] = ("v100", "p100", "k80")


# --- vendored data ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ZeusRow:
    """One Zeus measurement: a workload at one power limit on one GPU."""

    gpu: str
    workload: str  # "dataset/network"
    batch_size: int
    optimizer: str
    power_limit_w: float
    time_per_epoch_s: float
    power_w: float


@dataclass(frozen=True, slots=True)
class GavelPair:
    """Two job types sharing one GPU in Gavel: each one's throughput alone and together (iterations/s)."""

    gpu: str
    job_a: str
    job_b: str
    solo_a: float
    solo_b: float
    shared_a: float
    shared_b: float


def read_data_csv(name: str) -> list[dict[str, str]]:
    """Rows of a CSV file vendored in ``ecolaunch/sim/data`` (ConfigError when the package lacks it)."""
    path = DATA_DIR / name
    if not path.is_file():
        raise ConfigError(f"measured data file {path} is missing",
                          hint="reinstall ecolaunch; the package ships ecolaunch/sim/data")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@functools.lru_cache(maxsize=None)
def zeus_rows(gpu: str) -> tuple[ZeusRow, ...]:
    """The Zeus sweep of one GPU (``summary_power_<gpu>.csv``), read once per process."""
    if gpu not in ZEUS_GPUS:
        raise ConfigError(f"no Zeus power trace for GPU {gpu!r}", hint=f"use one of {', '.join(ZEUS_GPUS)}")
    return tuple(
        ZeusRow(gpu=gpu, workload=f"{r['dataset']}/{r['network']}", batch_size=int(r["batch_size"]),
                optimizer=r["optimizer"], power_limit_w=float(r["power_limit"]),
                time_per_epoch_s=float(r["time_per_epoch"]), power_w=float(r["average_power"]))
        for r in read_data_csv(f"summary_power_{gpu}.csv")
    )


@functools.lru_cache(maxsize=None)
def gavel_solo() -> dict[tuple[str, str], float]:
    """Gavel solo throughputs (iterations/s) by ``(gpu, job_type)``, single-GPU jobs."""
    return {(r["gpu"], r["job_type"]): float(r["throughput"]) for r in read_data_csv("gavel_solo_sf1.csv")}


@functools.lru_cache(maxsize=None)
def gavel_pairs(gpu: str) -> tuple[GavelPair, ...]:
    """Gavel's measured single-GPU pairs on ``gpu``, each unordered pair once (``job_a <= job_b`` by type
    order in the file), infeasible/unmeasured pairs (``0, 0``) left out."""
    solo = gavel_solo()
    order = {job: i for i, (g, job) in enumerate(solo) if g == gpu}
    out = []
    for r in read_data_csv("gavel_pairs_sf1.csv"):
        if r["gpu"] != gpu:
            continue
        a, b = r["job_a"], r["job_b"]
        ta, tb = float(r["throughput_a"]), float(r["throughput_b"])
        if order[a] > order[b] or ta <= 0.0 or tb <= 0.0:
            continue
        out.append(GavelPair(gpu, a, b, solo[(gpu, a)], solo[(gpu, b)], ta, tb))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def eaco_tables() -> tuple[tuple[dict[str, str], ...], tuple[dict[str, str], ...]]:
    """EaCO's Tables 1-2 (exclusive runs) and 3-4 (co-located sets), as the CSV rows."""
    return tuple(read_data_csv("eaco_exclusive_table1_2.csv")), tuple(read_data_csv("eaco_colocated_table3_4.csv"))


# --- fitting ---------------------------------------------------------------------------------------------

def least_squares(
    residuals: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    normal_equations: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
    max_iter: int = 200,
    tol: float = 1e-12,
) -> np.ndarray:
    """Minimize ``sum(residuals(x)**2)`` within ``lower <= x <= upper`` (projected Levenberg-Marquardt).

    ``normal_equations(x, r)`` may return ``(J^T J, J^T r)`` directly (cheaper for a sparse Jacobian ``J``);
    without it the Jacobian is taken by forward differences. The result is deterministic for a given input.
    Good for the few dozen parameters the simulator's models have, not a general-purpose optimizer.
    """
    x = np.clip(np.asarray(x0, dtype=float), lower, upper)
    r = residuals(x)
    cost = float(r @ r)
    lam = 1e-3
    for _ in range(max_iter):
        if normal_equations is not None:
            hess, grad = normal_equations(x, r)
        else:
            jac = _jacobian(residuals, x, r, lower, upper)
            grad, hess = jac.T @ r, jac.T @ jac
        diag = np.maximum(np.diag(hess), 1e-12)
        improved = False
        for _ in range(12):
            step = np.linalg.solve(hess + lam * np.diag(diag), -grad)
            x_new = np.clip(x + step, lower, upper)
            r_new = residuals(x_new)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                improved = True
                break
            lam *= 4.0
        if not improved:
            break
        done = cost - cost_new <= tol * max(cost, 1e-30)
        x, r, cost = x_new, r_new, cost_new
        lam = max(lam / 3.0, 1e-9)
        if done:
            break
    return x


def _jacobian(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r: np.ndarray,
              lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    jac = np.empty((r.size, x.size))
    for k in range(x.size):
        h = 1e-6 * max(1.0, abs(x[k]))
        if x[k] + h > upper[k]:  # step inward at an upper bound
            h = -h
        xk = x.copy()
        xk[k] += h
        jac[:, k] = (fun(xk) - r) / h
    return jac
