"""CDI names: kinds (``vendor/class``), device names, qualified IDs and spec file names.

The rules follow the CDI parser: a vendor is a dotted name of alphanumerics, ``-`` and ``_``
that starts with a letter and ends with an alphanumeric; a class is the same without dots (dots in
the class need cdiVersion 0.6.0, which we never write); a device name starts and ends with an
alphanumeric and may contain ``-``, ``_``, ``.`` and ``:``.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "CdiNameError",
    "CdiSpecError",
    "parse_qualified_name",
    "qualified_name",
    "split_kind",
    "transient_spec_file_name",
    "validate_class",
    "validate_device_name",
    "validate_kind",
    "validate_vendor",
]

_VENDOR = re.compile(r"[A-Za-z](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_FILE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class CdiSpecError(ValueError):
    """A spec would be rejected by a CDI loader; the message names the device and field."""


class CdiNameError(CdiSpecError):
    """A CDI name breaks the naming rules; the message quotes the name and the rule.

    A spec error like any other: a name built from a claim's input (a device name with the
    allocation's ``shareID``) is that claim's error, reported as one, never an "internal error".
    """


def validate_vendor(vendor: str) -> None:
    """Reject a vendor the CDI parser would refuse (``numadra.dev`` is fine)."""
    if not _VENDOR.fullmatch(vendor) or ".." in vendor:
        raise CdiNameError(
            f"invalid CDI vendor {vendor!r}: letters, digits, '.', '-', '_'; "
            "start with a letter, end with a letter or digit"
        )


def validate_class(cls: str) -> None:
    """Reject a class the CDI parser would refuse; dots are refused (they need cdiVersion 0.6.0)."""
    if not _CLASS.fullmatch(cls):
        raise CdiNameError(
            f"invalid CDI class {cls!r}: letters, digits, '-', '_'; "
            "start with a letter, end with a letter or digit"
        )


@functools.lru_cache(maxsize=64)
def split_kind(kind: str) -> tuple[str, str]:
    """Split ``vendor/class`` into its parts, validating both (cached: a driver uses few kinds)."""
    vendor, sep, cls = kind.partition("/")
    if not sep or "/" in cls:
        raise CdiNameError(f"invalid CDI kind {kind!r}: must be vendor/class")
    validate_vendor(vendor)
    validate_class(cls)
    return vendor, cls


def validate_kind(kind: str) -> None:
    """Reject a kind that is not a valid ``vendor/class``."""
    split_kind(kind)


def validate_device_name(name: str) -> None:
    """Reject a device name the CDI parser would refuse."""
    if not _DEVICE.fullmatch(name):
        raise CdiNameError(
            f"invalid CDI device name {name!r}: letters, digits, '-', '_', '.', ':'; "
            "start and end with a letter or digit"
        )


def qualified_name(kind: str, device: str) -> str:
    """The fully qualified device ID the kubelet passes on: ``vendor/class=device``."""
    validate_kind(kind)
    validate_device_name(device)
    return f"{kind}={device}"


def parse_qualified_name(qualified: str) -> tuple[str, str]:
    """Split ``vendor/class=device`` into (kind, device), validating both."""
    kind, sep, device = qualified.partition("=")
    if not sep:
        raise CdiNameError(f"invalid qualified CDI device name {qualified!r}: missing '='")
    validate_kind(kind)
    validate_device_name(device)
    return kind, device


def transient_spec_file_name(kind: str, *ids: str) -> str:
    """File name of a transient spec: ``<vendor>_<class>_<id>[_<id>...].json``.

    Transient specs live for one claim; putting the claim UID into the file name means a glob finds
    every file of a claim and two claims never share a file. Each id must be a safe file name part.
    """
    vendor, cls = split_kind(kind)
    for part in ids:
        if not _FILE_PART.fullmatch(part) or ".." in part:
            raise CdiNameError(f"invalid spec file name part {part!r}: letters, digits, '.', '-', '_'")
    return "_".join((vendor, cls, *ids)) + ".json"
