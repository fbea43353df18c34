"""One prepared claim's record in the journal: what numadra did for it, and its JSON shape.

The journal stores these records and the evidence check rebuilds them from the files on disk, so
the record lives below both (:mod:`driver.state.journal`, :mod:`driver.state.evidence`) and
imports neither. ``to_json`` / ``from_json`` are the stable shape the journal's checksummed lines
hold. :meth:`JournalEntry.json_text` is the one serialiser: the journal stores its text, and
``to_json`` (``numadra state``, tests) is that text parsed back, so the two cannot differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any

from driver.pinning.types import ClaimPinning, CpuAssignment, PodGroupRef
from driver.plugin import PreparedDevice
from driver.untrusted.values import bounded_int

__all__ = ["JournalEntry", "StoredFile"]


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file written for a claim, with its exact content so it can be re-created identically."""

    path: str
    content: str
    mode: int = 0o644


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """Everything numadra did for one prepared claim."""

    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]
    cdi_specs: tuple[StoredFile, ...] = ()
    metadata_files: tuple[StoredFile, ...] = ()
    pinning: ClaimPinning | None = None
    #: devices (names, in this driver's pool) held with ``adminAccess``: they block no other claim
    admin_devices: tuple[str, ...] = field(default=())
    #: UIDs of the pods in the claim's ``status.reservedFor`` (at prepare, and any the driver read
    #: since: a shared claim's later pods, and pods the apiserver confirmed as members of one of
    #: ``reserved_groups``): pinning is bound to them; None when not known (an entry rebuilt from
    #: evidence, or written before numadra recorded pods): pinning then reads them
    reserved_pods: tuple[str, ...] | None = None
    #: rebuilt from the files on disk (the journal had lost the claim), not prepared for the
    #: kubelet: its claim is checked against the apiserver and released once confirmed gone
    adopted: bool = False
    #: the PodGroups in the claim's ``status.reservedFor`` (workload-aware scheduling), in the
    #: claim's namespace: their pods are consumers once the apiserver confirms their membership
    reserved_groups: tuple[PodGroupRef, ...] = ()

    def holds_devices_without_spec(self) -> bool:
        """True for an entry rebuilt from metadata alone: it holds its devices, but the CDI spec that
        gives them to a container is gone, so a repeat prepare must render the claim anew (every
        prepared claim with devices has that spec otherwise)."""
        return bool(self.devices) and not self.cdi_specs

    def files(self) -> tuple[StoredFile, ...]:
        """Every file of the claim: CDI specs then metadata files."""
        return self.cdi_specs + self.metadata_files

    def json_text(self) -> str:
        """The record as compact JSON with sorted keys: the text a journal line holds.

        Written straight from the fields (every prepared claim is encoded once per call, and a
        dict run through a sorting encoder would cost more); a key appears only where the older
        records had it, so an entry without admin devices, recorded pods, PodGroups or the adopted
        mark keeps the text it always had.
        """
        devices = ",".join(
            [
                f'{{"cdiDeviceIDs":{_strings(d.cdi_device_ids)},"device":{_quote(d.device_name)},'
                f'"pool":{_quote(d.pool_name)},"requestNames":{_strings(d.request_names)},'
                f'"shareID":{"null" if d.share_id is None else _quote(d.share_id)}}}'
                for d in self.devices
            ]
        )
        pinning = "null"
        if self.pinning is not None:
            pinning = f"[{','.join([a.json_text() for a in self.pinning.assignments])}]"
        admin = f'"adminDevices":{_strings(self.admin_devices)},' if self.admin_devices else ""
        adopted = '"adopted":true,' if self.adopted else ""
        pods = "" if self.reserved_pods is None else f'"reservedPods":{_strings(self.reserved_pods)},'
        if self.reserved_groups:
            groups = ",".join(
                [f'{{"name":{_quote(g.name)},"uid":{_quote(g.uid)}}}' for g in self.reserved_groups]
            )
            pods = f'"reservedPodGroups":[{groups}],{pods}'
        return (
            f'{{{admin}{adopted}"cdiSpecs":[{",".join([_file_text(f) for f in self.cdi_specs])}],'
            f'"devices":[{devices}],'
            f'"metadataFiles":[{",".join([_file_text(f) for f in self.metadata_files])}],'
            f'"name":{_quote(self.name)},"namespace":{_quote(self.namespace)},'
            f'"pinning":{pinning},{pods}"uid":{_quote(self.uid)}}}'
        )

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object: :meth:`json_text` parsed (for display, not the hot path)."""
        body: dict[str, Any] = json.loads(self.json_text())
        return body

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> JournalEntry:
        """Parse an entry; raises KeyError/TypeError/ValueError on a malformed one."""
        uid = _str(obj["uid"])
        pinning_raw = obj["pinning"]
        pinning = None
        if pinning_raw is not None:
            pinning = ClaimPinning(
                claim_uid=uid, assignments=tuple(CpuAssignment.from_json(a) for a in pinning_raw)
            )
        return cls(
            namespace=_str(obj["namespace"]),
            name=_str(obj["name"]),
            uid=uid,
            devices=tuple(
                PreparedDevice(
                    request_names=tuple(_str(r) for r in d["requestNames"]),
                    pool_name=_str(d["pool"]),
                    device_name=_str(d["device"]),
                    cdi_device_ids=tuple(_str(c) for c in d["cdiDeviceIDs"]),
                    share_id=None if d["shareID"] is None else _str(d["shareID"]),
                )
                for d in obj["devices"]
            ),
            cdi_specs=tuple(_file_from_json(f) for f in obj["cdiSpecs"]),
            metadata_files=tuple(_file_from_json(f) for f in obj["metadataFiles"]),
            pinning=pinning,
            admin_devices=tuple(_str(d) for d in obj.get("adminDevices", ())),
            reserved_pods=(
                None if obj.get("reservedPods") is None else tuple(_str(p) for p in obj["reservedPods"])
            ),
            adopted=_bool(obj.get("adopted", False)),
            reserved_groups=tuple(
                PodGroupRef(name=_str(g["name"]), uid=_str(g["uid"]))
                for g in obj.get("reservedPodGroups", ())
            ),
        )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {type(value).__name__}")
    return value


#: the JSON text of a string, as ``json.dumps`` writes it (the C encoder json.dumps itself calls)
_quote = encode_basestring_ascii


def _strings(values: tuple[str, ...]) -> str:
    if len(values) == 1:  # most lists (a device's CDI IDs, its requests) hold one string
        return f"[{_quote(values[0])}]"
    return f"[{','.join(map(_quote, values))}]"


def _file_text(f: StoredFile) -> str:
    return f'{{"content":{_quote(f.content)},"mode":{f.mode:d},"path":{_quote(f.path)}}}'


def _file_from_json(obj: Mapping[str, Any]) -> StoredFile:
    mode = bounded_int(obj["mode"], what="file mode", lo=0, hi=0o7777)
    return StoredFile(path=_str(obj["path"]), content=_str(obj["content"]), mode=mode)
