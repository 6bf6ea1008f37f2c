"""The cap ledger's file: ``<state dir>/caps.json``, the cap each GPU had before ecolaunch first changed it.

What lives here: the file's format (schema, version, one entry per GPU UUID: the original cap and the last one
ecolaunch set), reading it only when root alone may have written it, and validating it. What does not: deciding
and applying caps (``ecolaunch.caps.keeper.CapKeeper``, which writes the file before it changes any hardware), and
creating an empty one (``ecolaunch init-state``, from :func:`empty_ledger`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecolaunch.admin.safety import trusted_by_root
from ecolaunch.safefs import RefusedFile, read_file
from ecolaunch.validate import is_number

__all__ = ["LEDGER_SCHEMA", "LEDGER_VERSION", "MAX_LEDGER_BYTES", "LedgerEntry", "LedgerWriteError",
           "empty_ledger", "load_ledger", "load_ledger_entries", "parse_ledger", "parse_ledger_entries"]

logger = logging.getLogger(__name__)

LEDGER_SCHEMA = "ecolaunch.jobcaps"
LEDGER_VERSION = 1
MAX_LEDGER_BYTES = 1024 * 1024


class LedgerWriteError(OSError):
    """The ledger could not be written (a directory planted at its path, a full disk): ``filename`` is its path.
    Nothing new is applied while it lasts; the caller logs it and tries again (the agent's next pass)."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """A GPU ecolaunch changed: the cap it found (restored when no job wants a change) and the last cap it set
    (None in ledgers written before it was recorded)."""

    original_w: float
    set_w: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {"original_w": self.original_w} if self.set_w is None else {"original_w": self.original_w,
                                                                            "set_w": self.set_w}


def load_ledger(path: Path, host: str) -> dict[str, float] | None:
    """The originals in a ledger file (uuid → W); ``{}`` when there is none; None when it is untrustworthy
    (see :func:`load_ledger_entries`)."""
    entries = load_ledger_entries(path, host)
    return None if entries is None else {u: e.original_w for u, e in entries.items()}


def load_ledger_entries(path: Path, host: str, warn=logger.warning) -> dict[str, LedgerEntry] | None:
    """The entries of a ledger file; ``{}`` when there is none; None when it is untrustworthy.

    Untrustworthy (ignored with a warning, through ``warn``): a symbolic link or non-regular file, a file owned by
    someone other than this user or root or writable by others, or a document that fails validation.
    """
    try:
        raw, st = read_file(path, MAX_LEDGER_BYTES)
    except FileNotFoundError:
        return None
    except (RefusedFile, OSError) as e:
        warn("ignoring cap ledger %s: %s", path, e)
        return None
    if not trusted_by_root(st):
        warn("ignoring cap ledger %s: owned by uid %d with mode %o (only root may write it)", path, st.st_uid,
             st.st_mode & 0o7777)
        return None
    try:
        return parse_ledger_entries(json.loads(raw), host)
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError) as e:
        warn("ignoring cap ledger %s: %s", path, e)
        return None


def parse_ledger(doc: Any, host: str) -> dict[str, float]:
    """Validate a ledger document; the originals (uuid → W); raises ValueError."""
    return {u: e.original_w for u, e in parse_ledger_entries(doc, host).items()}


def parse_ledger_entries(doc: Any, host: str) -> dict[str, LedgerEntry]:
    """Validate a ledger document; raises ValueError."""
    if not isinstance(doc, dict) or doc.get("schema") != LEDGER_SCHEMA or doc.get("version") != LEDGER_VERSION:
        raise ValueError(f"not an {LEDGER_SCHEMA} document of version {LEDGER_VERSION}")
    if doc.get("host") != host:
        raise ValueError(f"it describes host {doc.get('host')!r}, not {host!r}")
    gpus = doc.get("gpus")
    if not isinstance(gpus, dict):
        raise ValueError("gpus: expected an object")
    out = {}
    for uuid, entry in gpus.items():
        values = []
        for key in ("original_w", "set_w"):
            w = entry.get(key) if isinstance(entry, dict) else None
            if w is None and key == "set_w":
                values.append(None)
                continue
            if not is_number(w) or w <= 0:
                raise ValueError(f"gpus.{uuid}.{key}: expected a power in watts above 0")
            values.append(float(w))
        out[str(uuid)] = LedgerEntry(*values)
    return out


def empty_ledger(host: str) -> dict[str, Any]:
    """The document of a ledger of ``host`` that records no GPU (what ``ecolaunch init-state`` creates)."""
    return {"schema": LEDGER_SCHEMA, "version": LEDGER_VERSION, "host": host, "gpus": {}}
