"""The crash-safe journal of prepared claims: one JSON file, versioned, checksummed, atomic.

The kubelet calls unprepare with a bare (namespace, name, uid), possibly after the claim was
deleted, possibly in another process (rolling update), possibly after a reboot that emptied
``/var/run/cdi``. So everything needed to answer a repeated prepare, to undo a prepare, and to
re-create the files a reboot wiped lives here, keyed by claim UID: the devices returned to the
kubelet, every file written (path *and* content) and the claim's CPU pinning (the source of truth of
which CPUs are taken).

File shape::

    {"kind": "NumadraJournal", "version": 1, "checksum": "sha256:<hex of canonical body>",
     "body": {"claims": {"<uid>": {...}}}}

The canonical body is ``json.dumps(body, sort_keys=True, separators=(",", ":"))``. The file is
rewritten whole (temp file, fsync, rename, fsync dir) once per prepare/unprepare call, never per
device. A corrupt file or an unknown version is never "repaired" silently: :class:`JournalError`
says what is wrong and how to recover.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdi.io import atomic_write_bytes
from driver.errors import JournalError
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice

__all__ = [
    "JOURNAL_FILE",
    "JOURNAL_KIND",
    "JOURNAL_VERSION",
    "Journal",
    "JournalEntry",
    "StoredFile",
    "journal_path",
]

JOURNAL_KIND = "NumadraJournal"
JOURNAL_VERSION = 1
JOURNAL_FILE = "journal.json"
#: the file header up to and including the checksum; equal headers mean equal bodies
_HEAD_BYTES = len('{"kind":"NumadraJournal","version":1,"checksum":"sha256:') + 64


def journal_path(plugin_dir: Path) -> Path:
    """Where the journal of a plugin directory lives: ``<plugin-dir>/state/journal.json``."""
    return plugin_dir / "state" / JOURNAL_FILE


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
    #: the directories created for this claim (metadata), removed on unprepare
    directories: tuple[str, ...] = field(default=())

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
            "directories": list(self.directories),
            "pinning": None,
        }
        if self.pinning is not None:
            out["pinning"] = [
                {
                    "request": a.request,
                    "mode": a.mode.value,
                    "cpus": sorted(a.cpus),
                    "mems": sorted(a.mems),
                }
                for a in self.pinning.assignments
            ]
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> JournalEntry:
        """Parse an entry; raises KeyError/TypeError/ValueError on a malformed one."""
        uid = _str(obj["uid"])
        pinning_raw = obj["pinning"]
        pinning = None
        if pinning_raw is not None:
            pinning = ClaimPinning(
                claim_uid=uid,
                assignments=tuple(
                    CpuAssignment(
                        request=_str(a["request"]),
                        mode=CpuMode(a["mode"]),
                        cpus=frozenset(int(c) for c in a["cpus"]),
                        mems=frozenset(int(m) for m in a["mems"]),
                    )
                    for a in pinning_raw
                ),
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
            directories=tuple(_str(d) for d in obj["directories"]),
            pinning=pinning,
        )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _file_json(f: StoredFile) -> dict[str, Any]:
    return {"path": f.path, "content": f.content, "mode": f.mode}


def _file_from_json(obj: Mapping[str, Any]) -> StoredFile:
    return StoredFile(path=_str(obj["path"]), content=_str(obj["content"]), mode=int(obj["mode"]))


def _canonical(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


class Journal:
    """The journal file of one plugin directory, loaded into memory.

    Not thread safe on its own: the caller (``ClaimsDriver``) serialises prepare and unprepare, and
    the kubelet layer adds a ``flock`` across processes. :meth:`load` re-reads the file only when it
    changed on disk (every write is a rename, so the inode changes), which keeps the hot path cheap
    while two processes of a rolling update still see each other's writes.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, JournalEntry] = {}
        #: canonical JSON text of each entry, so a save joins strings instead of re-encoding all
        self._text: dict[str, str] = {}
        self._head = b""

    def _recovery(self, problem: str) -> JournalError:
        return JournalError(
            f"journal {self.path} {problem}; recovery: stop numadra, move {self.path} aside "
            "(mv it to a backup name) and start again: the kubelet re-prepares the claims of "
            "running pods; check the CDI specs in the CDI dir of claims that are gone"
        )

    def load(self) -> None:
        """(Re)read the file if it changed; a missing file is an empty journal.

        Raises :class:`JournalError` (with the recovery in the message) on an unreadable file,
        invalid JSON, a checksum mismatch, an unknown kind or version, or a malformed entry.
        """
        try:
            with self.path.open("rb") as fh:
                head = fh.read(_HEAD_BYTES)
                if head == self._head and len(head) == _HEAD_BYTES:
                    return  # same checksum in the header: same body as the one in memory
                raw = head + fh.read()
        except FileNotFoundError:
            self._entries, self._text, self._head = {}, {}, b""
            return
        except OSError as exc:
            raise self._recovery(f"cannot be read ({exc.strerror})") from exc
        self._parse(raw)
        self._head = raw[:_HEAD_BYTES]

    def _parse(self, raw: bytes) -> None:
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._recovery(f"is corrupt (not JSON: {exc})") from exc
        if not isinstance(doc, dict) or doc.get("kind") != JOURNAL_KIND:
            raise self._recovery(f"is corrupt (not a {JOURNAL_KIND} document)")
        version = doc.get("version")
        if version != JOURNAL_VERSION:
            raise self._recovery(
                f"has unknown schema version {version!r} (this numadra reads version {JOURNAL_VERSION})"
            )
        body = doc.get("body")
        if not isinstance(body, dict):
            raise self._recovery("is corrupt (no body)")
        digest = hashlib.sha256(_canonical(body).encode()).hexdigest()
        if doc.get("checksum") != f"sha256:{digest}":
            raise self._recovery("is corrupt (checksum mismatch)")
        claims = body.get("claims")
        if not isinstance(claims, dict):
            raise self._recovery("is corrupt (no claims map)")
        entries: dict[str, JournalEntry] = {}
        texts: dict[str, str] = {}
        for uid, obj in claims.items():
            try:
                entry = JournalEntry.from_json(obj)
            except (KeyError, TypeError, ValueError) as exc:
                raise self._recovery(f"is corrupt (entry {uid!r}: {exc!r})") from exc
            if entry.uid != uid:
                raise self._recovery(f"is corrupt (entry {uid!r} has uid {entry.uid!r})")
            entries[uid] = entry
            texts[uid] = _canonical(obj)
        self._entries, self._text = entries, texts

    def save(self) -> None:
        """Write the whole journal atomically (creating ``state/`` if needed)."""
        # byte-identical to _canonical({"claims": {uid: entry_json, ...}}): keys sorted, no spaces
        claims = ",".join(f"{json.dumps(uid)}:{self._text[uid]}" for uid in sorted(self._text))
        body_text = f'{{"claims":{{{claims}}}}}'
        digest = hashlib.sha256(body_text.encode()).hexdigest()
        data = (
            f'{{"kind":"{JOURNAL_KIND}","version":{JOURNAL_VERSION},'
            f'"checksum":"sha256:{digest}","body":{body_text}}}\n'
        ).encode()
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_bytes(self.path, data, mode=0o600)
        self._head = data[:_HEAD_BYTES]

    def get(self, uid: str) -> JournalEntry | None:
        """The entry of a claim, or None when it is not prepared."""
        return self._entries.get(uid)

    def put(self, entry: JournalEntry) -> None:
        """Add or replace the entry of ``entry.uid`` (in memory; call :meth:`save`)."""
        self._entries[entry.uid] = entry
        self._text[entry.uid] = _canonical(entry.to_json())

    def remove(self, uid: str) -> bool:
        """Drop a claim's entry (in memory); True when there was one."""
        self._text.pop(uid, None)
        return self._entries.pop(uid, None) is not None

    def entries(self) -> Iterator[JournalEntry]:
        """Every entry, in UID order."""
        for uid in sorted(self._entries):
            yield self._entries[uid]

    def holder(self, pool: str, device: str, *, except_uid: str = "") -> JournalEntry | None:
        """The claim (other than ``except_uid``) holding the whole, unshared device, if any."""
        for uid, entry in self._entries.items():
            if uid == except_uid:
                continue
            for held in entry.devices:
                if held.share_id is None and held.device_name == device and held.pool_name == pool:
                    return entry
        return None

    def taken_cpus(self, *, except_uid: str = "") -> frozenset[int]:
        """CPUs pinned by every journaled claim other than ``except_uid``."""
        out: set[int] = set()
        for uid, entry in self._entries.items():
            if uid != except_uid and entry.pinning is not None:
                out |= entry.pinning.cpus
        return frozenset(out)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries
