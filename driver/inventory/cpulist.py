"""The kernel's CPU list format ("0-3,8,10-11"): sysfs speaks it, cpusets take it.

It lives with the inventory, the lowest layer that reads it; pinning and the journal use it too
(``driver.pinning.types`` re-exports it).

Not every list comes from the kernel: a container's ``NUMADRA_CPUS`` is whatever the pod wrote,
and it is parsed before anything says whether the pod may pin at all. A range is a promise of
work ("0-9999999" is ten million ids), so :func:`parse_cpulist` checks the text's length, every
id against ``limit`` and the sum of the ranges' widths *before* it expands a single range: the
work and the result are bounded by ``limit``, whatever the text. A list that breaks a bound, or
is not the kernel's format (ASCII digits, ``-`` and ``,`` only), is an
:class:`~driver.errors.UntrustedValueError` naming ``what``.
"""

from __future__ import annotations

from driver.errors import UntrustedValueError
from driver.untrusted.values import MAX_TEXT_DIGITS, ascii_int

__all__ = ["MAX_CPUS", "MAX_NODES", "format_cpulist", "parse_cpulist"]

#: the kernel's ceiling on CPU ids (``CONFIG_NR_CPUS`` is at most 8192): no host has an id above
MAX_CPUS = 8192
#: the kernel's ceiling on NUMA node ids (``CONFIG_NODES_SHIFT`` is at most 10)
MAX_NODES = 1024


def _max_text(limit: int) -> int:
    """The longest list of ids below ``limit`` in any spelling worth accepting: every id on its
    own with a comma, and room for whitespace around it."""
    return limit * (len(str(max(limit - 1, 0))) + 1) + 64


def _id(text: str, part: str, what: str) -> int:
    """One id of a list entry ``part``: ASCII digits only ("1-2-3", "٣", "0x3" are refused).

    The range check against the caller's limit comes after; this bounds the digits converted.
    """
    try:
        return ascii_int(text, what=what, lo=0, hi=10**MAX_TEXT_DIGITS)
    except UntrustedValueError:
        raise UntrustedValueError(what, f"{part[:32]!r} is not an id or a range of ids") from None


def parse_cpulist(text: str, *, limit: int = MAX_CPUS, what: str = "cpu list") -> frozenset[int]:
    """Parse the kernel's list format ("0-3,8,10-11"); empty text is the empty set.

    Every id must be below ``limit`` (:data:`MAX_CPUS`; :data:`MAX_NODES` for memory nodes). Raises
    UntrustedValueError (a ValueError) naming ``what``; the work done is bounded by ``limit``.
    """
    if len(text) > _max_text(limit):
        raise UntrustedValueError(
            what, f"is {len(text)} characters long, longer than any list of ids below {limit}"
        )
    spans: list[tuple[int, int]] = []
    width = 0
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        lo_text, sep, hi_text = part.partition("-")
        if not sep:
            hi_text = lo_text
        lo, hi = _id(lo_text, part, what), _id(hi_text, part, what)
        if hi < lo:
            raise UntrustedValueError(what, f"range {part!r} ends before it starts")
        if hi >= limit:
            raise UntrustedValueError(what, f"{part!r} names an id above {limit - 1}")
        width += hi - lo + 1
        if width > limit:
            raise UntrustedValueError(what, f"names more than {limit} ids (ranges overlap)")
        spans.append((lo, hi))
    out: set[int] = set()
    for lo, hi in spans:
        out.update(range(lo, hi + 1))
    return frozenset(out)


def format_cpulist(cpus: frozenset[int] | set[int] | list[int] | tuple[int, ...]) -> str:
    """Format ids in the kernel's list format with ranges ("0-3,8")."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
