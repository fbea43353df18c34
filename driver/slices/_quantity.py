"""Kubernetes quantities in canonical form, so that what we publish equals what the apiserver returns."""

from __future__ import annotations

__all__ = ["format_bytes", "format_count"]

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def format_bytes(value: int) -> str:
    """Bytes with the largest binary suffix that keeps the value exact: 68719476736 -> "64Gi".

    This is the apiserver's canonical form for binary quantities (values below 1024 print as plain
    numbers), so a publisher comparing desired and stored slices sees no spurious difference.
    """
    if value == 0:
        return "0"
    exponent = 0
    while exponent < len(_BINARY_SUFFIXES) - 1 and value % 1024 == 0 and abs(value) >= 1024:
        value //= 1024
        exponent += 1
    return f"{value}{_BINARY_SUFFIXES[exponent]}"


def format_count(value: int) -> str:
    """A plain count ("224")."""
    return str(value)
