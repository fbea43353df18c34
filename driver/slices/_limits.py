"""ResourceSlice API limits and name rules (resource.k8s.io/v1, Kubernetes 1.37).

Shared by the builder (which must stay within them) and the validator (which checks them).
"""

from __future__ import annotations

import re

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
MAX_SUBDOMAIN = 253
MAX_LABEL = 63
MAX_TAINTS = 16
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: prefix of the standard attributes every DRA driver may publish
STANDARD_DOMAIN = "resource.kubernetes.io"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_dns_label(name: str) -> bool:
    """RFC 1123 label, at most 63 characters (device names)."""
    return len(name) <= MAX_LABEL and DNS_LABEL.match(name) is not None


def is_dns_subdomain(name: str, max_length: int = MAX_SUBDOMAIN) -> bool:
    """RFC 1123 subdomain (object, node, driver and pool names)."""
    return len(name) <= max_length and DNS_SUBDOMAIN.match(name) is not None


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
