"""The kernel's CPU list format ("0-3,8,10-11"): sysfs speaks it, cpusets take it.

It lives with the inventory, the lowest layer that reads it; pinning and the journal use it too
(``driver.pinning.types`` re-exports it).
"""

from __future__ import annotations

__all__ = ["format_cpulist", "parse_cpulist"]


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse the kernel's list format ("0-3,8,10-11"); empty text is the empty set."""
    out: set[int] = set()
    for raw in text.strip().split(","):
        part = raw.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            start, end = int(lo), int(hi)
            if end < start:
                raise ValueError(f"bad cpulist range {part!r}")
            out.update(range(start, end + 1))
        else:
            out.add(int(lo))
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
