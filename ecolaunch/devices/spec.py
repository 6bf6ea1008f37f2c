"""Machine specs for simulated GPUs: ``4xA100-SXM4-80GB``, ``2xRTX4090+2xA6000``, ``A40`` or a TOML file.

What lives here: parsing a spec string or file into hosts, GPUs and links, the default topology of a host, and
deterministic GPU UUIDs. The formats and the default topology: docs/simulator.md#machine-specs. What lives
elsewhere: the catalogue (:mod:`ecolaunch.devices.catalogue`), device state (:mod:`ecolaunch.devices.simulated`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecolaunch.devices.backend import LinkKind
from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.validate import is_integer, is_real

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["HostSpec", "MachineSpec", "default_links", "gpu_uuid", "parse_spec"]

_FORM = "COUNTxMODEL[+COUNTxMODEL...] (e.g. 4xA100-SXM4-80GB or 2xRTX4090+2xA6000) or a .toml file"
_HINT = "set ECOLAUNCH_SIMULATE to " + _FORM
_MAX_GPUS_PER_HOST = 64
_TERM = re.compile(r"^(?:(\d+)\s*[xX*×]\s*)?([A-Za-z][\w .\-]*)$")
_LINK_NAMES = {
    "nvlink": LinkKind.NVLINK, "nv": LinkKind.NVLINK,
    "pcie_switch": LinkKind.PCIE_SWITCH, "pix": LinkKind.PCIE_SWITCH, "pxb": LinkKind.PCIE_SWITCH,
    "pcie_host": LinkKind.PCIE_HOST, "phb": LinkKind.PCIE_HOST, "node": LinkKind.PCIE_HOST,
    "system": LinkKind.SYSTEM, "sys": LinkKind.SYSTEM,
}
_OVERRIDABLE = tuple(f.name for f in dataclasses.fields(GpuModel) if f.name != "name")


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One simulated host: its GPUs by index, their UUIDs, and the link of every pair ``(i, j)``, i < j."""

    name: str
    gpus: tuple[GpuModel, ...]
    links: dict[tuple[int, int], LinkKind] = field(hash=False)
    uuids: tuple[str, ...] = ()

    def link(self, i: int, j: int) -> LinkKind:
        """The link between GPUs ``i`` and ``j`` (either order)."""
        return self.links[(i, j) if i < j else (j, i)]


@dataclass(frozen=True, slots=True)
class MachineSpec:
    """A simulated machine: one or more hosts. ``source`` is the text the GPU UUIDs derive from."""

    hosts: tuple[HostSpec, ...]
    source: str = ""

    def host(self, name: str) -> HostSpec:
        """The host called ``name``; ConfigError listing the host names if there is none."""
        for host in self.hosts:
            if host.name == name:
                return host
        names = ", ".join(h.name for h in self.hosts)
        raise ConfigError(f"machine spec has no host {name!r} (hosts: {names})",
                          hint="name one of the spec's hosts")

    def replicate(self, n: int) -> MachineSpec:
        """``n`` copies of this machine's hosts, named ``node0``, ``node1``, ... in order, with fresh UUIDs.

        A one-host spec gives hosts ``node0..node{n-1}``; with m hosts the names run to ``node{n*m-1}``.
        """
        if not is_integer(n) or n < 1:
            raise ConfigError(f"cannot replicate a machine {n!r} times", hint="give a host count >= 1")
        hosts = []
        for k in range(n * len(self.hosts)):
            base = self.hosts[k % len(self.hosts)]
            name = f"node{k}"
            hosts.append(HostSpec(name, base.gpus, dict(base.links), _uuids(self.source, name, len(base.gpus))))
        return MachineSpec(tuple(hosts), self.source)


def gpu_uuid(source: str, host: str, index: int) -> str:
    """A deterministic NVML-format UUID (``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``)."""
    h = hashlib.sha256(f"{source}\0{host}\0{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _uuids(source: str, host: str, n: int) -> tuple[str, ...]:
    return tuple(gpu_uuid(source, host, i) for i in range(n))


def default_links(gpus: tuple[GpuModel, ...]) -> dict[tuple[int, int], LinkKind]:
    """The default topology of one host (docs/simulator.md#machine-specs)."""
    n = len(gpus)
    switches = (n + 1) // 2
    links = {}
    for i in range(n):
        for j in range(i + 1, n):
            a, b = gpus[i], gpus[j]
            if a.nvlink and b.nvlink and a.name == b.name:
                links[(i, j)] = LinkKind.NVLINK
            elif i // 2 == j // 2:
                links[(i, j)] = LinkKind.PCIE_SWITCH
            elif n > 4 and (i // 2 < (switches + 1) // 2) != (j // 2 < (switches + 1) // 2):
                links[(i, j)] = LinkKind.SYSTEM
            else:
                links[(i, j)] = LinkKind.PCIE_HOST
    return links


def _bad(where: str, part: object, why: str) -> ConfigError:
    where = f" {where}" if where else ""
    return ConfigError(f"bad machine spec{where}: {part!r} {why}; expected {_FORM}", hint=_HINT)


def _parse_term(term: str, where: str) -> list[GpuModel]:
    m = _TERM.match(term.strip())
    if not m:
        raise _bad(where, term, "is not COUNTxMODEL")
    count = int(m.group(1)) if m.group(1) is not None else 1
    if not 1 <= count <= _MAX_GPUS_PER_HOST:
        raise _bad(where, term, f"has count {count}, which must be in 1..{_MAX_GPUS_PER_HOST}")
    return [_lookup(m.group(2), where)] * count


def _lookup(name: str, where: str) -> GpuModel:
    try:
        return lookup(name)
    except ConfigError as e:
        raise ConfigError(f"bad machine spec {where}: {e}",
                          hint=f"{e.hint}; the spec's form is {_FORM}") from None


def _parse_gpu_string(text: str, where: str) -> list[GpuModel]:
    if not text.strip():
        raise _bad(where, text, "is empty")
    gpus: list[GpuModel] = []
    for term in text.split("+"):
        if not term.strip():
            raise _bad(where, text, "has an empty part between '+' signs")
        gpus.extend(_parse_term(term, where))
    return gpus


def _parse_gpu_table(entry: Mapping[str, Any], where: str) -> list[GpuModel]:
    unknown = set(entry) - {"model", "count", *_OVERRIDABLE}
    if unknown:
        raise ConfigError(
            f"bad machine spec {where}: unknown GPU key(s) {', '.join(sorted(unknown))}",
            hint=f"a GPU table takes model, count and overrides of: {', '.join(_OVERRIDABLE)}",
        )
    if not isinstance(entry.get("model"), str):
        raise ConfigError(f"bad machine spec {where}: a GPU table needs model = \"<catalogue name>\"",
                          hint=_HINT)
    count = entry.get("count", 1)
    if not is_integer(count) or not 1 <= count <= _MAX_GPUS_PER_HOST:
        raise _bad(where, count, f"is not a GPU count in 1..{_MAX_GPUS_PER_HOST}")
    base = _lookup(entry["model"], where)
    overrides = {k: v for k, v in entry.items() if k in _OVERRIDABLE}
    for key, value in overrides.items():
        expected = type(getattr(base, key))
        if expected is float and is_real(value):
            overrides[key] = float(value)
        elif expected is int and not is_integer(value):
            raise _bad(where, value, f"is not a valid {key} (an integer)")
        elif expected not in (float, int) and not isinstance(value, expected):
            raise _bad(where, value, f"is not a valid {key} ({expected.__name__})")
        elif expected is float and not is_real(value):
            raise _bad(where, value, f"is not a valid {key} (a number)")
    try:
        model = dataclasses.replace(base, **overrides)
    except ConfigError as e:
        raise ConfigError(f"bad machine spec {where}: {e}", hint=e.hint) from None
    return [model] * count


def _parse_links(raw: Any, n: int, where: str) -> dict[tuple[int, int], LinkKind]:
    if not isinstance(raw, list):
        raise _bad(where, raw, "is not a list of {gpus = [i, j], kind = \"nvlink\"} tables")
    links = {}
    for entry in raw:
        pair = entry.get("gpus") if isinstance(entry, dict) else None
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(is_integer(i) for i in pair)):
            raise _bad(where, entry, "is not a link {gpus = [i, j], kind = \"...\"}")
        i, j = sorted(pair)
        if i == j or i < 0 or j >= n:
            raise _bad(where, entry, f"links GPUs {pair}, but GPU indices run 0..{n - 1} and must differ")
        if not isinstance(kind, str) or kind.lower() not in _LINK_NAMES:
            raise _bad(where, entry, f"has link kind {kind!r}; use one of {', '.join(_LINK_NAMES)}")
        links[(i, j)] = _LINK_NAMES[kind.lower()]
    return links


def _parse_host(raw: Any, index: int, n_hosts: int, hostname: str | None, source: str) -> HostSpec:
    where = f"host #{index}"
    if not isinstance(raw, dict):
        raise _bad(where, raw, "is not a [[hosts]] table")
    unknown = set(raw) - {"name", "gpus", "links"}
    if unknown:
        raise ConfigError(f"bad machine spec {where}: unknown key(s) {', '.join(sorted(unknown))}",
                          hint="a [[hosts]] table takes name, gpus and links")
    name = raw.get("name")
    if name is None:
        name = (hostname or socket.gethostname()) if n_hosts == 1 else f"node{index}"
    if not isinstance(name, str) or not name.strip():
        raise _bad(where, name, "is not a host name")
    where = f"host {name!r}"
    spec = raw.get("gpus")
    gpus: list[GpuModel] = []
    if isinstance(spec, str):
        gpus = _parse_gpu_string(spec, where)
    elif isinstance(spec, list) and spec:
        for entry in spec:
            if isinstance(entry, str):
                gpus.extend(_parse_gpu_string(entry, where))
            elif isinstance(entry, dict):
                gpus.extend(_parse_gpu_table(entry, where))
            else:
                raise _bad(where, entry, "is neither a GPU term nor a GPU table")
    else:
        raise _bad(where, spec, "is not a gpus = \"...\" string or a non-empty list")
    if len(gpus) > _MAX_GPUS_PER_HOST:
        raise _bad(where, spec, f"has {len(gpus)} GPUs; at most {_MAX_GPUS_PER_HOST} per host")
    models = tuple(gpus)
    links = default_links(models)
    links.update(_parse_links(raw.get("links", []), len(models), where))
    return HostSpec(name, models, links, _uuids(source, name, len(models)))


def _parse_toml(path: Path, hostname: str | None) -> MachineSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read machine spec file {str(path)!r}: {e.strerror or e}",
                          hint=_HINT) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"machine spec file {str(path)!r} is not valid TOML: {e}", hint=_HINT) from None
    unknown = set(doc) - {"hosts"}
    if unknown:
        raise ConfigError(f"machine spec file {str(path)!r}: unknown key(s) {', '.join(sorted(unknown))}",
                          hint="describe each host in a [[hosts]] table")
    raw_hosts = doc.get("hosts")
    if not isinstance(raw_hosts, list) or not raw_hosts:
        raise ConfigError(f"machine spec file {str(path)!r} describes no hosts",
                          hint="add a [[hosts]] table with gpus = \"4xA100-SXM4-80GB\"")
    hosts = tuple(_parse_host(raw, i, len(raw_hosts), hostname, text) for i, raw in enumerate(raw_hosts))
    names = [h.name for h in hosts]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"machine spec file {str(path)!r} names host(s) twice: {', '.join(duplicates)}",
                          hint="give every [[hosts]] table its own name")
    return MachineSpec(hosts, text)


def parse_spec(text: str, *, hostname: str | None = None) -> MachineSpec:
    """Parse ``ECOLAUNCH_SIMULATE``: a spec string (one host) or the path of a TOML machine file.

    Args:
        text: ``4xA100-SXM4-80GB``, ``2xRTX4090+2xA6000``, ``A40``, or a path ending in ``.toml`` (or
            naming an existing file).
        hostname: the name of a one-host machine; default ``socket.gethostname()``.

    Raises:
        ConfigError: naming the bad part and the expected form.
    """
    if not isinstance(text, str) or not text.strip():
        raise _bad("", text, "is empty")
    stripped = text.strip()
    path = Path(stripped).expanduser()
    if stripped.lower().endswith(".toml") or path.is_file():
        return _parse_toml(path, hostname)
    gpus = tuple(_parse_gpu_string(stripped, repr(stripped)))
    if len(gpus) > _MAX_GPUS_PER_HOST:
        raise _bad(repr(stripped), stripped, f"has {len(gpus)} GPUs; at most {_MAX_GPUS_PER_HOST} per host")
    name = hostname or socket.gethostname()
    return MachineSpec((HostSpec(name, gpus, default_links(gpus), _uuids(stripped, name, len(gpus))),), stripped)
