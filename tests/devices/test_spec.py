"""Machine-spec parsing: strings, TOML files, default topology, deterministic UUIDs, error messages."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from ecolaunch.devices.backend import LinkKind
from ecolaunch.devices.spec import HostSpec, MachineSpec, default_links, gpu_uuid, parse_spec
from ecolaunch.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data"
UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _host(text: str) -> HostSpec:
    machine = parse_spec(text, hostname="h")
    assert len(machine.hosts) == 1
    return machine.hosts[0]


@pytest.mark.parametrize(("text", "names"), [
    ("4xA100-SXM4-80GB", ["A100-SXM4-80GB"] * 4),
    ("A40", ["A40"]),
    ("2xRTX4090+2xA6000", ["RTX4090", "RTX4090", "A6000", "A6000"]),
    (" 2 x rtx4090 + a6000 ", ["RTX4090", "RTX4090", "A6000"]),
    ("3*T4", ["T4"] * 3),
])
def test_good_strings(text, names):
    host = _host(text)
    assert [g.name for g in host.gpus] == names
    assert host.name == "h"
    assert len(host.uuids) == len(names)
    assert set(host.links) == {(i, j) for i in range(len(names)) for j in range(i + 1, len(names))}


def test_string_spec_defaults_to_the_real_hostname():
    assert parse_spec("A40").hosts[0].name == socket.gethostname()


def test_uuids_are_nvml_shaped_deterministic_and_distinct():
    a = _host("4xA100-SXM4-80GB")
    assert all(UUID.match(u) for u in a.uuids)
    assert len(set(a.uuids)) == 4
    assert _host("4xA100-SXM4-80GB").uuids == a.uuids  # another process parsing the same spec agrees
    assert parse_spec("4xA100-SXM4-80GB", hostname="other").hosts[0].uuids != a.uuids
    assert _host("4xA100-SXM4-40GB").uuids[0] != a.uuids[0]
    assert gpu_uuid("4xA100-SXM4-80GB", "h", 2) == a.uuids[2]


def test_sxm_gpus_are_all_pairs_nvlink():
    assert set(_host("8xH100-SXM5-80GB").links.values()) == {LinkKind.NVLINK}


def test_pcie_four_gpus_switch_pairs_then_host_bridge():
    host = _host("4xA6000")
    assert host.link(0, 1) == host.link(3, 2) == LinkKind.PCIE_SWITCH
    assert {host.link(0, 2), host.link(0, 3), host.link(1, 2), host.link(1, 3)} == {LinkKind.PCIE_HOST}
    assert LinkKind.SYSTEM not in host.links.values()


def test_pcie_eight_gpus_cross_sockets_between_halves():
    host = _host("8xV100-PCIE-16GB")
    assert host.link(0, 1) == LinkKind.PCIE_SWITCH
    assert host.link(0, 3) == LinkKind.PCIE_HOST
    assert host.link(4, 7) == LinkKind.PCIE_HOST
    assert host.link(3, 4) == host.link(0, 7) == LinkKind.SYSTEM


def test_nvlink_only_between_same_sxm_model():
    host = _host("2xA100-SXM4-80GB+2xV100-SXM2-32GB+2xA40")
    assert host.link(0, 1) == LinkKind.NVLINK and host.link(2, 3) == LinkKind.NVLINK
    assert host.link(1, 2) == LinkKind.PCIE_HOST  # different models: PCIe, even though both are SXM
    assert host.link(4, 5) == LinkKind.PCIE_SWITCH  # A40 has no NVLink by default
    assert host.link(0, 5) == LinkKind.SYSTEM


def test_default_links_of_one_gpu_is_empty():
    assert default_links(_host("T4").gpus) == {}


def test_two_host_toml_file():
    machine = parse_spec(str(DATA / "machine_two_hosts.toml"))
    assert [h.name for h in machine.hosts] == ["dgx", "ws"]
    dgx, ws = machine.hosts
    assert len(dgx.gpus) == 8 and set(dgx.links.values()) == {LinkKind.NVLINK}
    assert [g.name for g in ws.gpus] == ["RTX4090", "RTX4090", "A6000", "A6000"]
    assert ws.gpus[2].idle_power_w == 20.0 and ws.gpus[2].power_limit_max_w == 280.0
    assert ws.gpus[0].idle_power_w == 25.0  # not overridden
    assert ws.link(2, 3) == LinkKind.NVLINK  # explicit link, given as [3, 2]
    assert ws.link(0, 1) == LinkKind.PCIE_SWITCH  # default kept elsewhere
    assert not set(dgx.uuids) & set(ws.uuids)
    assert machine.host("ws") is ws
    with pytest.raises(ConfigError, match="no host 'nope'.*dgx, ws"):
        machine.host("nope")


def test_unnamed_single_host_toml_takes_the_given_hostname():
    machine = parse_spec(str(DATA / "machine_workstation.toml"), hostname="box")
    assert machine.hosts[0].name == "box"
    assert [g.name for g in machine.hosts[0].gpus] == ["V100-PCIE-32GB"] * 4


def test_existing_file_without_toml_suffix_is_read(tmp_path):
    path = tmp_path / "machine"
    path.write_text('[[hosts]]\nname = "x"\ngpus = "2xL4"\n')
    assert [g.name for g in parse_spec(str(path)).hosts[0].gpus] == ["L4", "L4"]


def test_replicate_names_hosts_and_renews_uuids():
    machine = parse_spec("2xA40", hostname="h").replicate(3)
    assert isinstance(machine, MachineSpec)
    assert [h.name for h in machine.hosts] == ["node0", "node1", "node2"]
    uuids = [u for h in machine.hosts for u in h.uuids]
    assert len(set(uuids)) == 6
    assert machine.replicate(1).hosts[0].uuids == machine.hosts[0].uuids  # deterministic
    two = parse_spec(str(DATA / "machine_two_hosts.toml")).replicate(2)
    assert [len(h.gpus) for h in two.hosts] == [8, 4, 8, 4]
    with pytest.raises(ConfigError, match="replicate"):
        machine.replicate(0)


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "is empty"),
    ("   ", "is empty"),
    ("0xA40", "count 0"),
    ("65xA40", "count 65"),
    ("4x", "'4x' is not COUNTxMODEL"),
    ("-1xT4", "'-1xT4' is not COUNTxMODEL"),
    ("A40++A40", "empty part"),
    ("4xA40+", "empty part"),
    ("4xA100", "unknown GPU model 'A100'; did you mean A100-SXM4-80GB"),
    ("2xRTX4090+2xB9000", "unknown GPU model 'B9000'"),
    ("40xA40+40xA40", "at most 64"),
])
def test_bad_strings_name_the_part_and_the_form(text, fragment):
    with pytest.raises(ConfigError) as info:
        parse_spec(text)
    assert fragment in str(info.value)
    assert "4xA100-SXM4-80GB" in str(info.value) + str(info.value.hint)  # the expected form is shown


@pytest.mark.parametrize(("body", "fragment"), [
    ("hosts = [", "not valid TOML"),
    ('gpus = "A40"', "unknown key(s) gpus"),
    ("", "describes no hosts"),
    ('[[hosts]]\nname = "a"\n', "is not a gpus"),
    ('[[hosts]]\ngpus = "2xA40"\nram = 3\n', "unknown key(s) ram"),
    ('[[hosts]]\ngpus = "2xA41"\n', "unknown GPU model 'A41'"),
    ('[[hosts]]\ngpus = [{model = "A40", colour = "red"}]\n', "unknown GPU key(s) colour"),
    ('[[hosts]]\ngpus = [{count = 2}]\n', "needs model"),
    ('[[hosts]]\ngpus = [{model = "A40", count = 0}]\n', "GPU count"),
    ('[[hosts]]\ngpus = [{model = "A40", power_limit_min_w = 400}]\n', "min <= default <= max"),
    ('[[hosts]]\ngpus = [{model = "A40", memory_mib = "lots"}]\n', "not a valid memory_mib"),
    ('[[hosts]]\ngpus = [{model = "A40", nvlink = 1}]\n', "not a valid nvlink"),
    ('[[hosts]]\ngpus = "2xA40"\nlinks = [{gpus = [0, 2], kind = "nvlink"}]\n', "indices run 0..1"),
    ('[[hosts]]\ngpus = "2xA40"\nlinks = [{gpus = [1, 1], kind = "nvlink"}]\n', "must differ"),
    ('[[hosts]]\ngpus = "2xA40"\nlinks = [{gpus = [0, 1], kind = "warp"}]\n', "link kind 'warp'"),
    ('[[hosts]]\ngpus = "2xA40"\nlinks = "all"\n', "is not a list"),
    ('[[hosts]]\nname = "a"\ngpus = "A40"\n[[hosts]]\nname = "a"\ngpus = "A40"\n', "names host(s) twice: a"),
])
def test_bad_toml_files(tmp_path, body, fragment):
    path = tmp_path / "machine_bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        parse_spec(str(path))
    assert fragment in str(info.value)
    assert info.value.hint


def test_missing_toml_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read machine spec file"):
        parse_spec(str(tmp_path / "nope.toml"))
