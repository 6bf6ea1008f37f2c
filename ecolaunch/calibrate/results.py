"""Calibration results on disk: one versioned JSON file per GPU model under ``<state dir>/calibration/``, and one
per model for a link probe (``links-*.json``, ``kind: links``).

What lives here: the file name of a model's results (:func:`file_name`), writing one atomically
(:func:`write_result`) and reading them back under the rule of trust, every access through :mod:`ecolaunch.safefs`.
What does not: what training makes of them (:mod:`ecolaunch.learn.calibration_data`). The document's fields, the
file names and modes: docs/admin.md#the-result-file; who may write them: docs/threat-model.md#who-can-write-what.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecolaunch.errors import ConfigError, StateError
from ecolaunch.safefs import OWN_DIR_MODE, RECORD_MODE, RefusedFile, open_dir, read_at, write_at
from ecolaunch.statedir import CALIBRATION_DIR, StateLayout
from ecolaunch.validate import is_real

__all__ = ["FORMAT", "LINKS_KIND", "VERSION", "StoredResult", "file_name", "is_links", "read_results", "validate",
           "write_result"]

FORMAT = "ecolaunch-calibration"
VERSION = 1
#: the ``kind`` of a link probe's document (``ecolaunch calibrate --links``); a GPU's calibration has none
LINKS_KIND = "links"
MAX_BYTES = 4 * 1024 * 1024
_SLUG = re.compile(r"[^a-z0-9]+")


def file_name(gpu_name: str, simulated: bool, *, links: bool = False) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200.json`` (``.simulated.json`` for simulated GPUs; ``links-nvidia-h200.json``
    for a link probe's)."""
    slug = _SLUG.sub("-", gpu_name.lower()).strip("-") or "gpu"
    return f"{'links-' if links else ''}{slug}{'.simulated' if simulated else ''}.json"


def is_links(doc: dict[str, Any]) -> bool:
    """Whether a (valid) document is a link probe's rather than a GPU's calibration."""
    return doc.get("kind") == LINKS_KIND


def _trusted_owners() -> set[int]:
    return {0, os.geteuid()}


def write_result(state_dir: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` as its GPU model's file (atomically, mode 0640: ``safefs.RECORD_MODE``); returns the path.

    Raises StateError when the directory cannot be used (someone else's, a link, writable by others) or written.
    """
    validate(doc)
    name = file_name(doc["gpu"]["name"], bool(doc["simulated"]), links=is_links(doc))
    layout = StateLayout(state_dir)
    directory = layout.calibration
    data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    try:
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        parent = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = open_dir(CALIBRATION_DIR, parent_fd=parent, create_mode=OWN_DIR_MODE, owners=_trusted_owners(),
                          private=True)
        finally:
            os.close(parent)
        try:
            write_at(fd, name, data, mode=RECORD_MODE)
        finally:
            os.close(fd)
    except RefusedFile as e:
        raise StateError(f"cannot write calibration results into {directory}: {e}",
                         hint=f"move {directory} aside (only root or you may own it, and nobody else may write it)"
                         ) from e
    except OSError as e:
        raise StateError(f"cannot write calibration results into {directory}: {e.strerror or e}",
                         hint="run `sudo ecolaunch calibrate` on a shared state directory") from e
    return layout.calibration_result(name)


@dataclass(frozen=True, slots=True)
class StoredResult:
    """One file of the calibration directory: its document, or why it is not used (``doc`` None)."""

    path: Path
    doc: dict[str, Any] | None
    problem: str | None = None


def read_results(state_dir: Path) -> list[StoredResult]:
    """Every ``*.json`` of ``<state dir>/calibration/`` in name order (none when the directory does not exist);
    an untrusted directory is one problem entry for the directory itself."""
    layout = StateLayout(state_dir)
    directory = layout.calibration
    try:
        fd = open_dir(directory)
    except FileNotFoundError:
        return []
    except OSError as e:
        return [StoredResult(directory, None, str(e))]
    try:
        st = os.fstat(fd)
        if st.st_uid not in _trusted_owners() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return [StoredResult(directory, None, f"owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}: "
                                                  "only root's or your own directory, writable by nobody else, counts")]
        out = []
        for name in sorted(os.listdir(fd)):
            if name.startswith(".") or not name.endswith(".json"):
                continue
            path = layout.calibration_result(name)
            try:
                raw, _ = read_at(fd, name, MAX_BYTES, owners=_trusted_owners(), trusted=True)
                doc = json.loads(raw)
                validate(doc)
            except (OSError, ValueError, ConfigError) as e:
                out.append(StoredResult(path, None, str(e)))
                continue
            out.append(StoredResult(path, doc))
        return out
    finally:
        os.close(fd)


def validate(doc: Any) -> None:
    """Raise ConfigError unless ``doc`` is a calibration document of this version with its main fields in place
    (the figures themselves are checked where they are used)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"not an {FORMAT} document")
    if doc.get("version") != VERSION:
        raise ConfigError(f"{FORMAT} version {doc.get('version')!r}; this ecolaunch reads version {VERSION}",
                          hint="run `ecolaunch calibrate` again")
    gpu = doc.get("gpu")
    if not isinstance(gpu, dict) or not isinstance(gpu.get("name"), str) or not gpu["name"]:
        raise ConfigError("gpu.name is missing")
    for key in ("memory_total_mib", "power_limit_max_w"):
        value = gpu.get(key)
        if not is_real(value) or not 0 < value < 1e9:
            raise ConfigError(f"gpu.{key} = {value!r} is not a positive number")
    if not isinstance(doc.get("simulated"), bool):
        raise ConfigError("simulated is not true or false")
    if is_links(doc):
        _validate_links(doc)
        return
    for key in ("alone", "pairs"):
        if not isinstance(doc.get(key), list):
            raise ConfigError(f"{key} is not a list")


def _validate_links(doc: dict[str, Any]) -> None:
    pairs = doc.get("pairs")
    if not isinstance(pairs, list) or len(pairs) != 2:
        raise ConfigError("pairs is not a list of the best- and the worst-linked pair")
    for i, pair in enumerate(pairs):
        if not isinstance(pair, dict) or not isinstance(pair.get("link"), str):
            raise ConfigError(f"pairs[{i}].link is missing")
        for key in ("step_ms", "allreduce_ms"):
            if not is_real(pair.get(key)) or not 0 < pair[key] < 1e9:
                raise ConfigError(f"pairs[{i}].{key} = {pair.get(key)!r} is not a positive number")
    penalty = doc.get("penalty")
    if not isinstance(penalty, dict) or not is_real(penalty.get("step_slowdown_pct")):
        raise ConfigError("penalty.step_slowdown_pct is missing")
