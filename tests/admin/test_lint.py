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
    assert _warnings(ok) == []
    # on a host of RTX 4090s the other two models are real, but there is no such GPU here
    assert _warnings(ok, [_gpu(0)]) == [
        f"p.toml:{line}: caps.{key}: this host has no {model} (its GPUs are 1 x NVIDIA GeForce RTX 4090): the bounds "
        "apply to no GPU here | keep it if the file also serves machines with that GPU; else remove the table or "
        'write this host\'s model, [caps."GeForce RTX 4090"]'
        for line, key, model in ((3, "\"nvidia a100-sxm4-80gb\"", "nvidia a100-sxm4-80gb"),
                                 (5, '"H100 80GB HBM3"', "H100 80GB HBM3"))]
    assert _warnings("[caps.RTX4090]\nmax_w = 300\n") == [
        "p.toml:1: caps.RTX4090: no GPU reports the name 'RTX4090': NVML calls the RTX4090 'NVIDIA GeForce RTX 4090' "
        '| write [caps."GeForce RTX 4090"]']


def test_a_model_only_this_host_has_is_fine() -> None:
    assert _warnings('[caps."A10"]\nmax_w = 100\n', [_gpu(0, "NVIDIA A10")]) == []
    assert _warnings('[caps."A10"]\nmax_w = 100\n') == [
        "p.toml:1: caps.A10: no GPU model 'A10' in ecolaunch's catalogue: the bounds apply only to a GPU of that name "
        "| write the model as nvidia-smi -L shows it, e.g. [caps.A40]"]


def test_indices_and_uuids_are_checked_only_when_the_gpus_are_known() -> None:
    text = ('[caps.index.2]\nmax_w = 300\n[reserve."GPU-00000001-aaaa"]\nusers = ["root"]\n[reserve."GPU-ffff"]\n'
            'groups = ["root"]\n[agent]\ngpus = [1, "gpu-00000000-AAAA", 3]\n')
    assert _warnings(text) == []
    assert _warnings(text, [_gpu(0), _gpu(1)]) == [
        "p.toml:1: caps.index.2: this host has no GPU 2 (its GPUs are 0, 1): these bounds apply to no GPU "
        "| check the index or UUID with nvidia-smi -L",
        "p.toml:5: reserve.GPU-ffff: this host has no GPU with UUID GPU-ffff (its GPUs are 0, 1): the reservation "
        "applies to no GPU | check the index or UUID with nvidia-smi -L",
        "p.toml:8: agent.gpus: this host has no GPU 3 (its GPUs are 0, 1) | check the index or UUID with nvidia-smi -L",
    ]


def _board(index: int, name: str, lo: float, hi: float) -> GpuSnapshot:
    return GpuSnapshot(f"GPU-{index:08d}-bbbb", index, name, 81920, 0, None, None, None, lo, hi, hi, None, None)


def test_bounds_outside_the_boards_range_say_what_they_become() -> None:
    a100 = [_board(0, "NVIDIA A100-SXM4-80GB", 100.0, 400.0), _board(1, "NVIDIA A100-SXM4-80GB", 100.0, 400.0)]
    text = ('[caps."A100-SXM4-80GB"]\nmax_w = 900\n[caps.A40]\nmin_w = 50\nmax_w = 250\n'
            '[caps.index.1]\nmin_fraction = 0.1\n')
    warnings = _warnings(text, a100)
    assert warnings[0] == (
        "p.toml:1: caps.A100-SXM4-80GB.max_w: 900 W is above the power-limit range of the NVIDIA A100-SXM4-80GB, "
        "100-400 W: caps stay within the board's range, so this bound means 400 W | write a value within 100-400 W, "
        "or leave max_w out for the board's own limit")
    assert warnings[1].startswith("p.toml:3: caps.A40: this host has no A40 (its GPUs are 2 x NVIDIA A100-SXM4-80GB)")
    # a model this host lacks is checked against the catalogue's board: the A40's range is 100-300 W
    assert warnings[2].startswith("p.toml:3: caps.A40.min_w: 50 W is below the power-limit range of the NVIDIA A40, "
                                  "100-300 W: caps stay within the board's range, so this bound means 100 W | ")
    assert warnings[3] == (
        "p.toml:6: caps.index.1.min_fraction: 0.1 (40 W) is below the power-limit range of the NVIDIA "
        "A100-SXM4-80GB that is GPU 1, 100-400 W: caps stay within the board's range, so this bound means 100 W | "
        "write a value within 0.25-1, or leave min_fraction out for the board's own limit")
    assert len(warnings) == 4  # max_w = 250 fits the A40
    assert _warnings('[caps."A100-SXM4-80GB"]\nmin_w = 100\nmax_w = 400\n', a100) == []  # the edges are fine


def test_users_and_groups_this_host_does_not_know_apply_to_nobody() -> None:
    text = ('[reserve.0]\nusers = ["root", "no-such-user-1"]\ngroups = ["root", "no-such-group-1"]\n'
            '[users.no-such-user-2]\nmax_gpus = 1\n[users.root]\nmax_gpus = 2\n[users."*"]\nmax_gpus = 1\n'
            '[state]\ngroup = "no-such-group-2"\n')
    hint = "check the name with `getent {} {}`; keep it if the file also serves machines that have it"
    assert _warnings(text) == [
        "p.toml:1: reserve.0.users: no user 'no-such-user-1' on this host: the reservation lets nobody of that name "
        f"use GPU 0 | {hint.format('passwd', 'no-such-user-1')}",
        "p.toml:1: reserve.0.groups: no group 'no-such-group-1' on this host: the reservation lets no member of it "
        f"use GPU 0 | {hint.format('group', 'no-such-group-1')}",
        "p.toml:5: users.no-such-user-2.max_gpus: no user 'no-such-user-2' on this host: the limit applies to nobody | "
        f"{hint.format('passwd', 'no-such-user-2')}",
        "p.toml:11: state.group: no group 'no-such-group-2' on this host: `ecolaunch init-state` cannot give the "
        f"state directory to it | {hint.format('group', 'no-such-group-2')}",
    ]
