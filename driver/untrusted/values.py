"""The one way numadra parses a value it did not make: JSON documents, and numbers in JSON or text.

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

A number written as text (an HTTP header such as ``Retry-After``, an environment variable, a
token of a kernel file, a file name) goes through :func:`ascii_int`. ``str.isdigit`` and ``int``
accept far more than any of those writers put there: ``"²"`` is a digit to ``isdigit`` and no
number to ``int`` or ``float`` (``ValueError`` out of a guard that looked safe), ``"٣"`` and a
fullwidth one are numbers to ``int``, and so are ``" 7 "``, ``"+7"`` and ``"1_000"``. ``ascii_int``
takes the ASCII digits ``0-9`` (``a-f`` too in base 16) and nothing else, with a bounded length,
so a number that arrives as text can only be what its writer meant or our error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeGuard

from driver.errors import UntrustedValueError

__all__ = [
    "MAX_TEXT_DIGITS",
    "MAX_WALL_CLOCK_S",
    "ascii_int",
    "bounded_int",
    "bounded_number",
    "is_object",
    "json_type",
    "loads_json",
    "object_or_empty",
]

#: a wall-clock time recorded in a file (a fault's trip, an operator's clear request) is seconds
#: since the epoch below this (the year 5138): anything larger is damage, not a date
MAX_WALL_CLOCK_S = 1e11
#: digits :func:`ascii_int` reads at most: more than any count, id, port or delay numadra reads
#: (2**64 is 20 digits) and few enough that ``int()`` stays cheap
MAX_TEXT_DIGITS = 24

_DIGITS = {10: frozenset("0123456789"), 16: frozenset("0123456789abcdefABCDEF")}


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


def ascii_int(text: str, *, what: str, lo: int, hi: int, base: int = 10) -> int:
    """The integer ``text`` spells in ASCII digits, when ``lo <= value <= hi``; else our error.

    Only ``0-9`` (and ``a-f``/``A-F`` with ``base=16``), at most :data:`MAX_TEXT_DIGITS` of them:
    no sign (a ``-`` only when ``lo`` is negative), no blanks, no ``_``, no ``0x`` prefix, no
    other script's digits. The caller strips what its format allows around the number.
    """
    digits = text[1:] if text.startswith("-") and lo < 0 else text
    if not digits or not set(digits) <= _DIGITS[base]:
        shown = repr(text[:MAX_TEXT_DIGITS]) + ("..." if len(text) > MAX_TEXT_DIGITS else "")
        kind = "decimal" if base == 10 else "hexadecimal"
        raise UntrustedValueError(what, f"must be {kind} ASCII digits, got {shown}")
    if len(digits) > MAX_TEXT_DIGITS:
        raise UntrustedValueError(what, f"has {len(digits)} digits, more than {MAX_TEXT_DIGITS}")
    value = int(text, base)
    if not lo <= value <= hi:
        raise UntrustedValueError(what, f"must be between {lo} and {hi}, got {value}")
    return value


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


#: what :func:`object_or_empty` gives for a value that is no object: read-only, shared
_NO_OBJECT: Mapping[str, Any] = MappingProxyType({})


def is_object(value: object) -> TypeGuard[Mapping[str, Any]]:
    """Whether a decoded value is a JSON object: decoded JSON's plain ``dict`` is tested first,
    because the ``Mapping`` ABC check is slow on a hot path."""
    return type(value) is dict or isinstance(value, Mapping)


def object_or_empty(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty (read-only) one.

    For a reader that takes what it can from another party's document and treats a field of the
    wrong type as absent (a claim's allocation, a pod's status, another driver's slice), where
    refusing the whole document would fail a caller that must fail open. A reader that must
    refuse a wrong type checks the document's shape instead (:mod:`driver.untrusted.shape`).
    """
    return value if is_object(value) else _NO_OBJECT
