"""``numadra explain`` output: a readable report, or JSON with the same content for scripts."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from driver.explain.model import ClaimExplanation, DeviceCheck, ReasonKind, RequestExplanation, Verdict

__all__ = ["to_json", "to_text"]

_MARK = {Verdict.ELIGIBLE: "+", Verdict.EXCLUDED: "-", Verdict.UNKNOWN: "?"}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, RequestExplanation):
            out["eligible"] = list(value.eligible)
        return out
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def to_json(explanation: ClaimExplanation) -> str:
    """The explanation as indented JSON (enums as their string values)."""
    return json.dumps(_plain(explanation), indent=2) + "\n"


def _check_lines(check: DeviceCheck, verbose: bool) -> list[str]:
    tag = " (allocated)" if check.allocated else ""
    head = f"    {_MARK[check.verdict]} {check.device}{tag}"
    if not check.reasons:
        return [head]
    if not verbose and len(check.reasons) > 1:
        return [f"{head}: {check.reasons[0].message} (+{len(check.reasons) - 1} more)"]
    if len(check.reasons) == 1:
        return [f"{head}: {check.reasons[0].message}"]
    return [head] + [f"        {r.message}" for r in check.reasons]


def _request_lines(req: RequestExplanation, verbose: bool, indent: str = "") -> list[str]:
    amount = "all" if req.mode == "All" else str(req.count)
    head = f"{indent}request {req.name!r}: {req.status.value}"
    if req.subrequests:
        lines = [f"{head} (firstAvailable, tried in order)"]
        for sub in req.subrequests:
            lines += _request_lines(sub, verbose, indent + "  ")
        return lines
    eligible = len(req.eligible)
    lines = [f"{head} (class {req.device_class}, needs {amount}, {eligible} eligible)"]
    lines += [f"{indent}    note: {n}" for n in req.notes]
    checks = sorted(req.checks, key=lambda c: (c.verdict is not Verdict.ELIGIBLE, c.verdict.value, c.device))
    if not verbose:
        # devices of another type are noise for a request: count them instead of listing them
        wrong = [c for c in checks if c.reasons and c.reasons[0].kind is ReasonKind.WRONG_TYPE]
        checks = [c for c in checks if c not in wrong]
        for check in checks:
            lines += [indent + line for line in _check_lines(check, verbose)]
        if wrong:
            types = sorted({c.type or "?" for c in wrong})
            lines.append(
                f"{indent}    - {len(wrong)} device(s) of another type ({', '.join(types)}): wrong type"
            )
        return lines
    for check in checks:
        lines += [indent + line for line in _check_lines(check, verbose)]
    return lines


def to_text(explanation: ClaimExplanation, *, verbose: bool = False) -> str:
    """A report: the claim, what is allocated and prepared, then every request with its devices.

    Without ``verbose``, devices of the wrong type are summarised in one line per request and only
    the first reason of a device is shown.
    """
    e = explanation
    lines = [f"claim {e.namespace}/{e.name}" + (f" (uid {e.uid})" if e.uid else "")]
    if e.allocated:
        lines.append("  allocated (status.allocation):")
        lines += [f"    {a.request} -> {a.pool}/{a.device}" for a in e.allocated]
    if e.prepared is not None:
        lines.append("  prepared on this node (journal):")
        for d in e.prepared.devices:
            requests = ",".join(d.requests) or "*"
            lines.append(f"    {d.device} (requests {requests}) cdi: {' '.join(d.cdi_device_ids) or '-'}")
        for p in e.prepared.pinning:
            lines.append(
                f"    request {p.request}: cpuset {p.cpuset or '-'} memset {p.memset or '-'} ({p.mode})"
            )
    elif e.uid:
        lines.append("  not prepared on this node")
    for note in e.notes:
        lines.append(f"  note: {note}")
    for req in e.requests:
        lines += ["", *_request_lines(req, verbose)]
    return "\n".join(lines) + "\n"
