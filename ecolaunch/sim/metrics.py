"""Summary metrics of a simulation run, one row per (trace, policy).

Energy in kWh in the three accountings of :mod:`ecolaunch.sim.node` (node, GPU-only, job-attributed); times in
seconds. *Slowdown* is a job's run time against its solo, uncapped run time (queueing excluded); a *QoS
violation* is a job whose slowdown exceeds its own bound, or, for a job placed under the sharing contract (whose
run-time bound the contract waives, :mod:`ecolaunch.policy.contract`), one that finished after the contract's
deadline. GPU utilization is the share of GPU-seconds during
the makespan in which the GPU held at least one job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ecolaunch.sim.engine import SimResult

_J_PER_KWH = 3.6e6
#: tolerance on a job's bound: a slowdown within 0.01 percentage points of its bound is not a violation
_BOUND_TOLERANCE_PCT = 0.01


@dataclass(frozen=True, slots=True)
class Summary:
    trace: str
    policy: str
    jobs: int
    finished: int
    rejected: int
    node_energy_kwh: float
    gpu_energy_kwh: float
    job_energy_kwh: float
    mean_jct_s: float
    p95_jct_s: float
    mean_slowdown_pct: float
    qos_violations_pct: float
    makespan_s: float
    gpu_utilization_pct: float
    shared_jobs_pct: float
    #: jobs placed under the sharing contract, and those of them that finished after its deadline (of all jobs)
    contract_jobs_pct: float = 0.0
    contract_violations_pct: float = 0.0
    #: the GPUs' energy above their idle power (what caps and placements move)
    gpu_dynamic_energy_kwh: float = 0.0
    #: jobs that started ahead of the head of the queue (EASY backfill), of the finished jobs
    backfilled_pct: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(result: SimResult) -> Summary:
    done = [j for j in result.jobs if j.end_s is not None]
    jcts = sorted(j.jct_s for j in done)
    slow = [j.slowdown_pct for j in done]
    contract = [j for j in done if j.contract_deadline_s is not None]
    broken = sum(1 for j in contract if j.contract_violated)
    violations = broken + sum(1 for j in done if j.contract_deadline_s is None
                              and j.slowdown_pct > j.allowed_slowdown_pct + _BOUND_TOLERANCE_PCT)
    n = max(1, len(done))
    return Summary(
        trace=result.trace,
        policy=result.policy,
        jobs=len(result.jobs),
        finished=len(done),
        rejected=sum(1 for j in result.jobs if j.rejected),
        node_energy_kwh=result.energy.node_energy_j / _J_PER_KWH,
        gpu_energy_kwh=result.energy.gpu_energy_j / _J_PER_KWH,
        gpu_dynamic_energy_kwh=result.energy.gpu_dynamic_energy_j / _J_PER_KWH,
        job_energy_kwh=sum(result.energy.job_energy_j.values()) / _J_PER_KWH,
        mean_jct_s=sum(jcts) / n,
        p95_jct_s=_percentile(jcts, 95.0),
        mean_slowdown_pct=sum(slow) / n,
        qos_violations_pct=100.0 * violations / n,
        makespan_s=result.makespan_s,
        gpu_utilization_pct=100.0 * result.gpu_busy_s / max(1e-9, result.gpu_count * result.makespan_s),
        shared_jobs_pct=100.0 * sum(1 for j in done if j.shared) / n,
        contract_jobs_pct=100.0 * len(contract) / n,
        contract_violations_pct=100.0 * broken / n,
        backfilled_pct=100.0 * sum(1 for j in done if j.backfilled) / n,
    )


def _percentile(ordered: list[float], pct: float) -> float:
    if not ordered:
        return 0.0
    k = (len(ordered) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
