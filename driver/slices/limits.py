"""ResourceSlice API limits (resource.k8s.io/v1, Kubernetes 1.37); the name rules are :mod:`driver.names`.

Shared by the builder (which must stay within them) and the validator (which checks them).
"""

from __future__ import annotations

import re

from driver.names import MAX_SUBDOMAIN

#: devices per slice, and per slice when any device uses taints, counters or list attributes
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_ADVANCED = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUES = 48
MAX_STRING_BYTES = 64
MAX_ID_LENGTH = 32
MAX_DOMAIN_LENGTH = 63
MAX_DRIVER_NAME = 63
MAX_POOL_NAME = 253
MAX_TAINTS = 16
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: prefix of the standard attributes every DRA driver may publish
STANDARD_DOMAIN = "resource.kubernetes.io"


def clip_utf8(text: str, max_bytes: int = MAX_STRING_BYTES) -> str:
    """``text`` without control characters, cut to ``max_bytes`` UTF-8 bytes on a character boundary."""
    if not text.isprintable():
        text = "".join(ch for ch in text if ch.isprintable())
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def sanitize_subdomain(name: str, max_length: int = MAX_SUBDOMAIN) -> str:
    """Any text as a valid DNS subdomain of at most ``max_length`` characters ("x" if nothing is left)."""
    labels = []
    for raw in name.lower().split("."):
        label = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")
        if label:
            labels.append(label)
    out = ".".join(labels)[:max_length].rstrip("-.")
    # a cut may leave a label ending in "-" before a later "."; strip per label once more
    out = ".".join(p.strip("-") for p in out.split(".") if p.strip("-"))
    return out or "x"
