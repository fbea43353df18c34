"""The one way numadra parses a value it did not make: JSON documents and the numbers in them.

Files others can write (recorded faults, health-clear requests, the journal, CDI specs and
metadata streams read back, an OCI bundle's ``config.json``) are JSON, and Python's decoder
accepts more than numadra ever writes: integers of hundreds of digits (``math.isfinite`` and
``float()`` then raise ``OverflowError``), ``NaN`` and ``Infinity``, and nesting deep enough to
raise ``RecursionError``. None of those is a ``ValueError``, so a caller that refused bad input
with ``except ValueError`` crashed instead, at every start while the file stayed.

Here every failure is :class:`~driver.errors.UntrustedValueError` (a ``ValueError``) naming what
was parsed, and a number is checked against its bounds *as it came*: an integer is compared as an
integer (exactly, whatever its size), never converted to a float first, and a float must be
finite. A caller checks each entry on its own, skips a bad one and names it; the others stand.
"""

from __future__ import annotations

import json
import math
from typing import Any

from driver.errors import UntrustedValueError

__all__ = ["MAX_WALL_CLOCK_S", "bounded_int", "bounded_number", "json_type", "loads_json"]

#: a wall-clock time recorded in a file (a fault's trip, an operator's clear request) is seconds
#: since the epoch below this (the year 5138): anything larger is damage, not a date
MAX_WALL_CLOCK_S = 1e11


def loads_json(data: bytes | str, *, what: str) -> Any:
    """The decoded document; UntrustedValueError (naming ``what``) when it is not JSON.

    The caller bounds the size (the files are read with a cap); this bounds the rest: any
    decoder failure, deep nesting included, is our error.
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise UntrustedValueError(what, "is nested too deeply") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, UnicodeDecodeError, the digit limit
        raise UntrustedValueError(what, f"is not JSON ({exc})") from None


def bounded_int(value: object, *, what: str, lo: int, hi: int) -> int:
    """``value`` when it is an integer (not a bool) with ``lo <= value <= hi``; else our error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UntrustedValueError(what, f"must be an integer, got {json_type(value)}")
    if not lo <= value <= hi:
        raise UntrustedValueError(what, f"must be between {lo} and {hi}, got {_short(value)}")
    return value


def bounded_number(value: object, *, what: str, lo: float, hi: float) -> float:
    """``value`` as a float when it is a finite number (not a bool) in ``[lo, hi]``; else our error.

    An integer is compared before it is converted, so one too large for a float is out of bounds,
    not an ``OverflowError``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UntrustedValueError(what, f"must be a number, got {json_type(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UntrustedValueError(what, f"must be a finite number, got {value}")
    if not lo <= value <= hi:
        raise UntrustedValueError(what, f"must be between {lo:g} and {hi:g}, got {_short(value)}")
    return float(value)


def _short(value: int | float) -> str:
    """A number for an error text, without printing hundreds of digits."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return repr(value)


_JSON_TYPES = (
    (bool, "a boolean"),
    (str, "a string"),
    (int | float, "a number"),
    (list, "a list"),
    (dict, "an object"),
)


def json_type(value: object) -> str:
    """What a decoded value is, in the JSON words an error text uses ("a number", "null")."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)
