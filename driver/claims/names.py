"""Validation of the names that reach file paths, and request-name handling.

Claim namespaces, names, UIDs and request names end up in file names (CDI specs, metadata
directories); a name like ``../x`` must be refused before it gets near the file system, with an
error that quotes it. The rules are the apiserver's own (DNS label / subdomain), so a real claim
always passes; the rules themselves live in :mod:`driver.names`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from driver.names import is_claim_uid, is_dns_label, is_dns_subdomain
from driver.plugin import ClaimRef

__all__ = [
    "base_request_name",
    "check_claim_name",
    "check_claim_uid",
    "check_namespace",
    "check_request_name",
    "describe_claim",
    "dir_prefix",
]


def check_namespace(namespace: str) -> str:
    """Return an error message unless ``namespace`` is a DNS label ("" when fine)."""
    if not is_dns_label(namespace):
        return f"invalid namespace {namespace!r}: must be a DNS label"
    return ""


def check_claim_name(name: str) -> str:
    """Return an error message unless ``name`` is a DNS subdomain of at most 253 characters."""
    if not is_dns_subdomain(name):
        return f"invalid claim name {name!r}: must be a DNS subdomain"
    return ""


def check_claim_uid(uid: str) -> str:
    """Return an error message unless ``uid`` is a non-empty, file-name-safe UID."""
    if not uid:
        return "empty claim UID"
    if not is_claim_uid(uid):
        return f"invalid claim UID {uid!r}: letters, digits and '-' only"
    return ""


def check_request_name(request: str) -> str:
    """Return an error message unless ``request`` is ``<req>`` or ``<req>/<sub>`` of DNS labels."""
    parts = request.split("/")
    if len(parts) > 2 or not all(is_dns_label(p) for p in parts):
        return f"invalid request name {request!r}: must be <request> or <request>/<subrequest> (DNS labels)"
    return ""


def base_request_name(request: str) -> str:
    """The request a container references: ``"gpu/high-mem"`` -> ``"gpu"``."""
    return request.partition("/")[0]


@functools.lru_cache(maxsize=64)
def dir_prefix(directory: Path) -> str:
    """``str(directory / name) == dir_prefix(directory) + name`` for a checked name without ``/``.

    Every prepare builds several paths below the same few directories; joining strings to a
    cached prefix costs far less than a pathlib object per path, and gives the same text.
    """
    return str(directory / "_")[:-1]


def describe_claim(ref: ClaimRef) -> str:
    """How every error text names a claim: namespace/name and UID."""
    return f"claim {ref.namespace}/{ref.name} (uid {ref.uid})"
