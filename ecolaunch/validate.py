"""The checks of a number read from a user, a file or a device: one rule for what a number is.

What lives here: the predicates :func:`is_real`, :func:`is_number` (a finite real) and :func:`is_integer`;
:func:`number_or_none` (for readers that skip what they cannot use); :func:`number` / :func:`integer`, which raise an
:class:`~ecolaunch.errors.EcolaunchError` saying what was checked, the value and the range. A ``bool`` is never a
number here (``True`` in a file is a mistake, not 1), nor is a string (parsing text is the caller's). What does not:
the schema of a file (the admin policy's is :mod:`ecolaunch.admin.schema`) and the meaning of a field. Base layer:
imports only the standard library and :mod:`ecolaunch.errors`.
"""

from __future__ import annotations

import math
from typing import Any

from ecolaunch.errors import ConfigError, EcolaunchError

__all__ = ["integer", "is_integer", "is_number", "is_real", "number", "number_or_none"]


def is_real(value: Any) -> bool:
    """An ``int`` or a ``float`` (infinities and NaN included), not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite ``int`` or ``float``, not a ``bool``."""
    return is_real(value) and math.isfinite(value)


def is_integer(value: Any) -> bool:
    """An ``int``, not a ``bool`` (``2.0`` is a float, not an integer)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _in_range(value: float, lo: float | None, hi: float | None, positive: bool) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi) and (not positive or value > 0)


def _rule(kind: str, lo: float | None, hi: float | None, positive: bool) -> str:
    bounds = ([f">= {lo:g}"] if lo is not None else []) + (["> 0"] if positive else []) \
        + ([f"<= {hi:g}"] if hi is not None else [])
    return f"{kind} {' and '.join(bounds)}" if bounds else kind


def number_or_none(value: Any, *, lo: float | None = None, hi: float | None = None,
                   positive: bool = False) -> float | None:
    """``value`` as a float when it is a finite number in range (``lo <= value <= hi``, ``> 0`` if ``positive``),
    else None."""
    return float(value) if is_number(value) and _in_range(value, lo, hi, positive) else None


def number(value: Any, *, what: str, lo: float | None = None, hi: float | None = None, positive: bool = False,
           error: type[EcolaunchError] = ConfigError, hint: str | None = None) -> float:
    """``value`` as a float, if it is a finite number in range (``lo <= value <= hi``, ``> 0`` if ``positive``).

    Raises:
        EcolaunchError: ``error`` (ConfigError by default), ``"<what> must be a number <range>, got <value>"``, with
            ``hint``.
    """
    if not is_number(value) or not _in_range(value, lo, hi, positive):
        raise error(f"{what} must be {_rule('a number', lo, hi, positive)}, got {value!r}", hint=hint)
    return float(value)


def integer(value: Any, *, what: str, lo: int | None = None, hi: int | None = None, positive: bool = False,
            error: type[EcolaunchError] = ConfigError, hint: str | None = None) -> int:
    """``value``, if it is an ``int`` (not a bool, not a float) in range (``lo <= value <= hi``, ``> 0`` if
    ``positive``).

    Raises:
        EcolaunchError: ``error`` (ConfigError by default), ``"<what> must be an integer <range>, got <value>"``,
            with ``hint``.
    """
    if not is_integer(value) or not _in_range(value, lo, hi, positive):
        raise error(f"{what} must be {_rule('an integer', lo, hi, positive)}, got {value!r}", hint=hint)
    return value
