"""The apiserver's Status object: parsed once, and the one test of "this object is gone".

Why: a 404 is not the apiserver's word that an object is gone. A proxy, a gateway or a
misrouted request answers 404 too, with an HTML page that can quote any text, also
``resourceclaims "<name>" not found``. What decides (an adopted claim released, a status write
dropped) is only a JSON object of ``kind: Status``, ``apiVersion: v1`` whose ``reason`` and
``details`` name the object asked for. :func:`parse_status` reads that object from an answer's
body (anything else is None, and decides nothing); :func:`is_not_found` is the test callers
use; no caller matches the message text (``tests/unit/kube/test_status.py`` scans ``driver/``).
"""

from __future__ import annotations

import json

from driver.errors import ApiStatus, KubeError

__all__ = ["RESOURCE_GROUP", "is_not_found", "parse_status"]

#: the API group of ResourceClaims and ResourceSlices
RESOURCE_GROUP = "resource.k8s.io"


def parse_status(body: bytes) -> ApiStatus | None:
    """The Status object of an answer's body, or None when the body is anything else."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or obj.get("kind") != "Status" or obj.get("apiVersion") != "v1":
        return None
    details = obj.get("details")
    details = details if isinstance(details, dict) else {}
    code = obj.get("code")
    return ApiStatus(
        reason=_text(obj.get("reason")),
        code=code if isinstance(code, int) and not isinstance(code, bool) else 0,
        message=_text(obj.get("message")),
        name=_text(details.get("name")),
        group=_text(details.get("group")),
        kind=_text(details.get("kind")),
    )


def is_not_found(err: KubeError, resource: str, name: str, group: str = RESOURCE_GROUP) -> bool:
    """True only when the apiserver said that ``resource`` ``name`` does not exist: an HTTP 404
    whose body is a Status with ``reason: NotFound``, code 404, ``details.kind`` the resource
    and ``details.name`` the name (and ``details.group`` the group, where the Status names one).

    Anything else (an HTML page, a Status about another object, an apiserver that does not serve
    the API) is False: the object may still exist, ask again later.
    """
    status = err.api_status
    return (
        err.status == 404
        and status is not None
        and status.reason == "NotFound"
        and status.code == 404
        and status.kind == resource
        and status.name == name
        and status.group in ("", group)
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
