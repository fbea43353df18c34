"""Kubernetes resource quantities ("8", "500m", "64Gi", "1e3") as exact fractions.

Capacities in ResourceSlices and capacity requests in claims are quantity strings; comparing them
as floats would round "1Gi" vs "1073741824" wrongly, so they are parsed to :class:`Fraction`.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["format_quantity", "parse_quantity"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(text: str | int) -> Fraction:
    """Parse a quantity; raises ValueError naming the text when it is not one."""
    if isinstance(text, int):
        return Fraction(text)
    m = _QUANTITY.match(text.strip())
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, exponent, suffix = m.groups()
    value = Fraction(number)
    if exponent:
        return value * Fraction(10) ** int(exponent[1:])
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix or ""]


def format_quantity(value: Fraction) -> str:
    """A short human form: integers as is, binary multiples with Ki/Mi/Gi suffixes."""
    if value.denominator != 1:
        return f"{float(value):g}"
    n = value.numerator
    for suffix, factor in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if n and n % factor == 0:
            return f"{n // factor}{suffix}"
    return str(n)
