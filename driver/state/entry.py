"""One prepared claim's record in the journal: what numadra did for it, and its JSON shape.

The journal stores these records and the evidence check rebuilds them from the files on disk, so
the record lives below both (:mod:`driver.state.journal`, :mod:`driver.state.evidence`) and
imports neither. ``to_json`` / ``from_json`` are the stable shape the journal's checksummed lines
hold; the journal writes the same text straight from the record (``journal._entry_text``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from driver.pinning.types import ClaimPinning, CpuAssignment
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
    #: since: a shared claim's later pods): pinning is bound to them; None when not known (an entry
    #: rebuilt from evidence, or written before numadra recorded pods): pinning then reads them
    reserved_pods: tuple[str, ...] | None = None
    #: rebuilt from the files on disk (the journal had lost the claim), not prepared for the
    #: kubelet: its claim is checked against the apiserver and released once confirmed gone
    adopted: bool = False

    def holds_devices_without_spec(self) -> bool:
        """True for an entry rebuilt from metadata alone: it holds its devices, but the CDI spec that
        gives them to a container is gone, so a repeat prepare must render the claim anew (every
        prepared claim with devices has that spec otherwise)."""
        return bool(self.devices) and not self.cdi_specs

    def files(self) -> tuple[StoredFile, ...]:
        """Every file of the claim: CDI specs then metadata files."""
        return self.cdi_specs + self.metadata_files

    def to_json(self) -> dict[str, Any]:
        """The entry as JSON (stable shape; part of the checksummed body)."""
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "devices": [
                {
                    "requestNames": list(d.request_names),
                    "pool": d.pool_name,
                    "device": d.device_name,
                    "cdiDeviceIDs": list(d.cdi_device_ids),
                    "shareID": d.share_id,
                }
                for d in self.devices
            ],
            "cdiSpecs": [_file_json(f) for f in self.cdi_specs],
            "metadataFiles": [_file_json(f) for f in self.metadata_files],
            "pinning": None,
        }
        if self.admin_devices:  # only then: entries without admin access keep their old text
            out["adminDevices"] = list(self.admin_devices)
        if self.reserved_pods is not None:  # only when recorded: older entries keep their text
            out["reservedPods"] = list(self.reserved_pods)
        if self.adopted:  # only then: prepared entries keep their text
            out["adopted"] = True
        if self.pinning is not None:
            out["pinning"] = [a.to_json() for a in self.pinning.assignments]
        return out

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
        )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {type(value).__name__}")
    return value


def _file_json(f: StoredFile) -> dict[str, Any]:
    return {"path": f.path, "content": f.content, "mode": f.mode}


def _file_from_json(obj: Mapping[str, Any]) -> StoredFile:
    mode = bounded_int(obj["mode"], what="file mode", lo=0, hi=0o7777)
    return StoredFile(path=_str(obj["path"]), content=_str(obj["content"]), mode=mode)
