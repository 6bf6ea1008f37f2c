"""Policy rules that apply to no GPU: warnings, never errors (one policy may serve several machines)."""

from __future__ import annotations

from ecolaunch.admin.lint import policy_warnings
from ecolaunch.admin.rules import parse_rules
from ecolaunch.devices.backend import GpuSnapshot


def _gpu(index: int, name: str = "NVIDIA GeForce RTX 4090") -> GpuSnapshot:
    return GpuSnapshot(f"GPU-{index:08d}-aaaa", index, name, 24564, 0, None, None, None, None, None, None, None, None)


def _warnings(text: str, gpus=None) -> list[str]:
    rules, sources = parse_rules(text, "p.toml")
    return [f"{w} | {w.hint}" for w in policy_warnings(rules, sources, gpus)]


def test_models_match_as_the_cap_bounds_do() -> None:
    ok = ('[caps."GeForce RTX 4090"]\nmax_w = 300\n[caps."nvidia a100-sxm4-80gb"]\nmax_w = 300\n'
          '[caps."H100 80GB HBM3"]\nmax_w = 500\n')
    assert _warnings(ok) == [] and _warnings(ok, [_gpu(0)]) == []
    assert _warnings("[caps.RTX4090]\nmax_w = 300\n") == [
        "p.toml:1: caps.RTX4090: no GPU reports the name 'RTX4090': NVML calls the RTX4090 'NVIDIA GeForce RTX 4090' "
        '| write [caps."GeForce RTX 4090"]']


def test_a_model_only_this_host_has_is_fine() -> None:
    assert _warnings('[caps."A10"]\nmax_w = 100\n', [_gpu(0, "NVIDIA A10")]) == []
    assert _warnings('[caps."A10"]\nmax_w = 100\n') == [
        "p.toml:1: caps.A10: no GPU model 'A10' in ecolaunch's catalogue: the bounds apply only to a GPU of that name "
        "| write the model as nvidia-smi -L shows it, e.g. [caps.A40]"]


def test_indices_and_uuids_are_checked_only_when_the_gpus_are_known() -> None:
    text = ('[caps.index.2]\nmax_w = 300\n[reserve."GPU-00000001-aaaa"]\nusers = ["a"]\n[reserve."GPU-ffff"]\n'
            'groups = ["g"]\n[agent]\ngpus = [1, "gpu-00000000-AAAA", 3]\n')
    assert _warnings(text) == []
    assert _warnings(text, [_gpu(0), _gpu(1)]) == [
        "p.toml:1: caps.index.2: this host has no GPU 2 (its GPUs are 0, 1): these bounds apply to no GPU "
        "| check the index or UUID with nvidia-smi -L",
        "p.toml:5: reserve.GPU-ffff: this host has no GPU with UUID GPU-ffff (its GPUs are 0, 1): the reservation "
        "applies to no GPU | check the index or UUID with nvidia-smi -L",
        "p.toml:8: agent.gpus: this host has no GPU 3 (its GPUs are 0, 1) | check the index or UUID with nvidia-smi -L",
    ]
