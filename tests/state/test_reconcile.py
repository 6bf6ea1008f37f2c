from __future__ import annotations

from ecolaunch.devices.backend import GpuProcess, GpuSnapshot, LinkKind
from ecolaunch.state.graph import Job, JobState, StateGraph
from ecolaunch.state.reconcile import PsutilProcessTable, reconcile


class FakeProcesses:
    def __init__(self, alive: dict[int, float], parents: dict[int, list[int]] | None = None) -> None:
        self._alive = alive
        self._parents = parents or {}

    def alive(self, pid: int, start_time: float) -> bool:
        return self._alive.get(pid) == start_time

    def ancestors(self, pid: int) -> list[int]:
        return self._parents.get(pid, [])


def snap(i: int, processes=()) -> GpuSnapshot:
    return GpuSnapshot(uuid=f"GPU-{i}", index=i, name="A100", memory_total_mib=1000,
                       memory_used_mib=sum(p.memory_mib for p in processes), util_gpu_pct=0.0, util_mem_pct=0.0,
                       power_w=50.0, power_limit_min_w=100.0, power_limit_default_w=400.0, power_limit_max_w=400.0,
                       power_limit_w=400.0, energy_j=0.0, processes=tuple(processes))


def job(jid: str, pid: int, start: float, host: str = "h") -> Job:
    return Job(id=jid, uid=1, user="u", host=host, launcher_pid=pid, launcher_start_time=start, nproc=1, name="x",
               seq=0, submitted_at=0.0, state=JobState.RUNNING, gpus=["GPU-0"])


def test_dead_and_reused_pids_are_released_other_hosts_kept() -> None:
    graph = StateGraph(jobs={
        "alive": job("alive", 10, 1.0),
        "dead": job("dead", 11, 1.0),
        "reused": job("reused", 12, 1.0),  # pid 12 now belongs to a process started later
        "remote": job("remote", 13, 1.0, host="other"),
    })
    report = reconcile(graph, "h", FakeProcesses({10: 1.0, 12: 99.0}))
    assert sorted(j.id for j in report.released) == ["dead", "reused"]
    assert sorted(graph.jobs) == ["alive", "remote"]


def test_foreign_processes_count_as_busy_workers_do_not() -> None:
    graph = StateGraph(jobs={"a": job("a", 10, 1.0)})
    procs = FakeProcesses({10: 1.0}, parents={20: [10, 1], 30: [5, 1]})
    gpus = [snap(0, [GpuProcess(20, 300)]), snap(1, [GpuProcess(30, 500), GpuProcess(10, 100)])]
    report = reconcile(graph, "h", procs, gpus, {("GPU-0", "GPU-1"): LinkKind.NVLINK})
    host = graph.hosts["h"]
    assert host.gpus["GPU-0"].foreign_pids == [] and host.gpus["GPU-0"].foreign_memory_mib == 0
    assert host.gpus["GPU-1"].foreign_pids == [30] and host.gpus["GPU-1"].foreign_memory_mib == 500
    assert report.foreign_gpus == ["GPU-1"]
    assert host.link("GPU-1", "GPU-0") is LinkKind.NVLINK


def test_psutil_table_knows_this_process() -> None:
    import os

    import psutil

    table = PsutilProcessTable()
    me = psutil.Process(os.getpid())
    assert table.alive(me.pid, me.create_time())
    assert not table.alive(me.pid, me.create_time() - 1000)
    assert me.ppid() in table.ancestors(me.pid)
