"""The one place that says what a valid Kubernetes name is; every check is a full match.

Names from the kubelet, the apiserver and the command line end up in file names (CDI specs,
metadata dirs, sockets), in ResourceSlices and in log lines. Copies of these rules drift, and a
rule written as ``^...$`` with ``re.match`` lets ``"numadra.dev\\n"`` and ``"node1\\n"`` pass (``$``
also matches before a final newline). So there is one copy, here, and every pattern is applied
with :meth:`re.Pattern.fullmatch`, which has no such exception, and the length limits travel with the
rule, so a caller cannot use one without the other.

The rules are the apiserver's (``k8s.io/apimachinery/pkg/util/validation``): a real object's name
always passes. A request name is ``<request>`` or ``<request>/<subrequest>``; containers and the
kubelet only know the first part (:func:`base_request_name`).
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_CLAIM_UID",
    "MAX_LABEL",
    "MAX_SUBDOMAIN",
    "base_request_name",
    "check_claim_name",
    "check_claim_uid",
    "check_namespace",
    "check_request_name",
    "is_c_identifier",
    "is_claim_uid",
    "is_dns_label",
    "is_dns_subdomain",
]

#: RFC 1123 label: namespaces, device and request names
MAX_LABEL = 63
#: RFC 1123 subdomain: object, node, driver and pool names
MAX_SUBDOMAIN = 253
#: the apiserver's UIDs are 36-character UUIDs; 128 leaves room for other generators
MAX_CLAIM_UID = 128

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A UID becomes part of file and CDI device names: no '/', '.', '_' or leading '-'.
_CLAIM_UID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")


def is_dns_label(name: str, max_length: int = MAX_LABEL) -> bool:
    """RFC 1123 label of at most ``max_length`` characters (namespaces, device names)."""
    return len(name) <= max_length and _DNS_LABEL.fullmatch(name) is not None


def is_dns_subdomain(name: str, max_length: int = MAX_SUBDOMAIN) -> bool:
    """RFC 1123 subdomain (object, node, driver and pool names)."""
    return len(name) <= max_length and _DNS_SUBDOMAIN.fullmatch(name) is not None


def is_c_identifier(name: str, max_length: int = MAX_SUBDOMAIN) -> bool:
    """A C identifier (attribute and capacity names of a ResourceSlice)."""
    return len(name) <= max_length and _C_IDENTIFIER.fullmatch(name) is not None


def is_claim_uid(uid: str, max_length: int = MAX_CLAIM_UID) -> bool:
    """A claim UID that is safe inside a file name: letters, digits and inner '-'."""
    return len(uid) <= max_length and _CLAIM_UID.fullmatch(uid) is not None


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
    """``"gpu/high-mem"`` -> ``"gpu"``: containers reference, and the kubelet matches them on, the
    base request name."""
    return request.partition("/")[0]
