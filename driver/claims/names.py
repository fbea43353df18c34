"""Validation of the names that reach file paths, and request-name handling.

Claim namespaces, names, UIDs and request names end up in file names (CDI specs, metadata
directories); a name like ``../x`` must be refused before it gets near the file system, with an
error that quotes it. The rules are the apiserver's own (DNS label / subdomain), so a real claim
always passes; the rules themselves, and the checks of a claim reference the kubelet layer applies
too, live in :mod:`driver.names`; ``describe_claim`` lives with ``ClaimRef`` in :mod:`driver.plugin`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from driver.names import check_claim_name, check_claim_uid, check_namespace, is_dns_label
from driver.plugin import describe_claim

__all__ = [
    "base_request_name",
    "check_claim_name",
    "check_claim_uid",
    "check_namespace",
    "check_request_name",
    "describe_claim",
    "dir_prefix",
]


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
