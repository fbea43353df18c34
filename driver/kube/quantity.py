"""Kubernetes resource quantities ("8", "500m", "64Gi", "1e3"): one grammar, exact values, one form.

Three places need them and must agree: the slice builder writes capacities that have to read back
unchanged from the apiserver (else the publisher sees a difference on every sync), the slice
validator checks the grammar the apiserver accepts, and ``explain`` compares capacities exactly
(floats would round "1Gi" against "1073741824"), so values are parsed to :class:`Fraction`.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["QUANTITY", "format_quantity", "parse_quantity"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}  # fmt: skip
#: the quantity grammar of the apiserver's parser: number, then an exponent or one suffix
QUANTITY = re.compile(
    r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)", re.ASCII
)
#: binary suffixes from the largest down, for the canonical form
_LARGEST_FIRST = sorted(_BINARY.items(), key=lambda kv: -kv[1])
_DECIMAL_LARGEST_FIRST = [
    (suffix, int(factor))
    for suffix, factor in sorted(_DECIMAL.items(), key=lambda kv: -kv[1])
    if factor >= 1000
]


def parse_quantity(text: str | int) -> Fraction:
    """Parse a quantity; raises ValueError naming the text when it is not one."""
    if isinstance(text, int):
        return Fraction(text)
    m = QUANTITY.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, exponent, suffix = m.groups()
    value = Fraction(number)
    if exponent:
        return value * Fraction(10) ** int(exponent[1:])
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix or ""]


def format_quantity(value: Fraction | int) -> str:
    """Whole values in the apiserver's canonical form: binary suffix when exact ("64Gi"), else decimal.

    For whole byte amounts this is the apiserver's canonical form of a binary quantity, so the
    publisher comparing desired and stored slices sees no spurious difference. Fractions (only
    ever shown to humans) print as a short decimal.
    """
    value = Fraction(value)
    if value.denominator != 1:
        return f"{float(value):g}"
    n = value.numerator
    for suffix, factor in _LARGEST_FIRST:
        if n and n % factor == 0:
            return f"{n // factor}{suffix}"
    # not binary: the apiserver stores a plain number in decimal canonical form ("1000" -> "1k",
    # "2000000" -> "2M", "1536" stays), so write it that way (checked against kube-apiserver 1.37)
    for suffix, factor in _DECIMAL_LARGEST_FIRST:
        if n and n % factor == 0:
            return f"{n // factor}{suffix}"
    return str(n)
