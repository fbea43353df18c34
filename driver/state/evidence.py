"""What numadra wrote for prepared claims, read back to catch a journal that forgot one.

The journal is the record of which claims hold which devices and CPUs; a claim it does not know is
free to be handed out again. But every prepared claim also left files that carry its UID:

* its CDI spec ``<cdi-dir>/<driver>_claim_<uid>.json`` (device names ``<uid>-<device>[-<shareID>]``,
  the pinning markers ``NUMADRA_CPUS``/``NUMADRA_MEMS``/``NUMADRA_CPU_MODE``/``NUMADRA_REQUEST`` in
  the environment of its cpu devices);
* its metadata streams ``<plugin-dir>/dra-device-metadata/<uid>_<request>.json`` (which the
  claim spec mounts into the containers), each naming the claim (namespace, name, uid) and the
  devices (pool, name) of one request.

The journal is saved before those files are written and after they are removed, under the same
lock, so every file of a claim lies inside the journal's lifetime of that claim: files of a UID the
journal does not hold mean the journal lost it (deleted, emptied, replaced, restored from an old
copy). :meth:`Evidence.unjournaled` finds such UIDs and rebuilds an entry from the files: the
devices (so the "one claim per whole device" check holds them), the CPUs (so the planner does not
hand them out again), and the files themselves (so unprepare removes them). A device whose
``adminAccess`` cannot be told from the files is held as exclusive: the safe side.

Reading is cheap enough for where it runs (at start, and when the journal file was deleted,
replaced or cut shorter, never on an unchanged journal): one directory listing of the CDI dir,
one of the metadata dir, and a read of the files of each unknown UID (every file name carries
the UID, so the files of journaled claims are never opened).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdi.naming import split_kind
from driver.errors import JournalError
from driver.inventory.cpulist import MAX_NODES
from driver.layout import CLAIM_CDI_CLASS, METADATA_DIR
from driver.log import get_logger
from driver.names import is_claim_uid, is_dns_label, is_dns_subdomain
from driver.pinning.types import (
    ENV_CPU_MODE,
    ENV_CPUS,
    ENV_MEMS,
    ENV_REQUEST,
    ClaimPinning,
    CpuAssignment,
    CpuMode,
    parse_cpulist,
)
from driver.plugin import PreparedDevice
from driver.state.entry import JournalEntry, StoredFile
from driver.untrusted.files import read_file_text
from driver.untrusted.values import loads_json

__all__ = ["Evidence", "Found"]

#: a shareID (a UID) at the end of a CDI device name ``<uid>-<device>-<shareID>``
_SHARE_SUFFIX = re.compile(r"-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
#: a metadata stream larger than this is not ours (one claim's stream is a few KB)
_MAX_READ = 4 << 20
_log = get_logger("state.evidence")


def _is_claim_name(namespace: str, name: str) -> bool:
    return is_dns_label(namespace) and is_dns_subdomain(name)


@dataclass(frozen=True, slots=True)
class Found:
    """A claim the journal does not hold although its files are on disk."""

    uid: str
    entry: JournalEntry
    #: every file and directory that shows it, for the operator
    paths: tuple[str, ...]


@dataclass(slots=True)
class _ClaimFiles:
    """What the files of one UID say (filled while scanning)."""

    spec: str = ""
    streams: dict[str, str] = field(default_factory=dict)  # request -> metadata file path


@dataclass(slots=True)
class _Streams:
    """What a claim's metadata streams say."""

    namespace: str = ""
    name: str = ""
    by_request: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # -> [(pool, device)]
    files: list[StoredFile] = field(default_factory=list)


def _read_claim_file(path: str) -> str:
    """A file's text through :func:`driver.untrusted.files.read_file_text`: no link followed, no
    blocking open (a FIFO planted under a claim's name), a regular file of a plausible size."""
    return read_file_text(path, max_bytes=_MAX_READ)


def _first_object(text: str) -> dict[str, Any]:
    obj = loads_json(text.split("\n", 1)[0], what="metadata stream")
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


class Evidence:
    """The files numadra writes per claim in one CDI dir and one plugin dir (see the module doc)."""

    def __init__(self, *, cdi_dir: Path, plugin_dir: Path, driver_name: str, pool: str) -> None:
        self.cdi_dir = cdi_dir
        self.plugin_dir = plugin_dir
        self.driver_name = driver_name
        self.pool = pool
        # the same text as the paths prepare writes (``driver.claims.paths.dir_prefix``)
        self._cdi_base = str(cdi_dir / "_")[:-1]
        self._meta_base = str(plugin_dir / METADATA_DIR)
        vendor, _ = split_kind(f"{driver_name}/{CLAIM_CDI_CLASS}")
        self._spec_prefix = f"{vendor}_{CLAIM_CDI_CLASS}_"

    # -- scanning ---------------------------------------------------------------------------------

    def _scan(self, known: Container[str]) -> dict[str, _ClaimFiles]:
        claims: dict[str, _ClaimFiles] = {}
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(self.cdi_dir) as it:
            for item in it:
                name = item.name
                if name.startswith(self._spec_prefix) and name.endswith(".json"):
                    uid = name[len(self._spec_prefix) : -5]
                    if uid in known or not is_claim_uid(uid):
                        continue
                    if not item.is_file(follow_symlinks=False):  # numadra writes regular files only
                        _log.warning("not a claim's CDI spec: not a regular file", path=item.path)
                        continue
                    claims.setdefault(uid, _ClaimFiles()).spec = self._cdi_base + name
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(self._meta_base) as it:
            for item in it:
                uid, sep, request = item.name.removesuffix(".json").partition("_")
                if not sep or not item.name.endswith(".json") or uid in known:
                    continue  # not a metadata file (a temp file starts with "."), or a journaled one
                if is_claim_uid(uid) and is_dns_label(request) and item.is_file(follow_symlinks=False):
                    claims.setdefault(uid, _ClaimFiles()).streams[request] = item.path
        return claims

    def unjournaled(self, known: Container[str]) -> list[Found]:
        """Claims with files on disk that ``known`` (the journal's UIDs) lacks, rebuilt; UID order.

        Raises :class:`JournalError` when such a claim's CDI spec cannot be read as the spec
        numadra writes: its devices are then unknown, and carrying on could hand them out twice.
        """
        found: list[Found] = []
        for uid, claim in sorted(self._scan(known).items()):
            entry = self._rebuild(uid, claim)
            paths = [p for p in (claim.spec, *claim.streams.values()) if p]
            found.append(Found(uid=uid, entry=entry, paths=tuple(paths)))
        return found

    # -- rebuilding -------------------------------------------------------------------------------

    def _read_streams(self, uid: str, claim: _ClaimFiles) -> _Streams:
        """What the claim's metadata streams say (a stream naming another UID is not this claim's)."""
        out = _Streams()
        for request, path in sorted(claim.streams.items()):
            try:
                content = _read_claim_file(path)
                obj = _first_object(content)
                meta = obj["metadata"]
                listed = obj["requests"][0]["devices"]
                held = [(str(d["pool"]), str(d["name"])) for d in listed]
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                continue
            if meta.get("uid") != uid:
                continue
            out.by_request[request] = held
            ns, nm = meta.get("namespace"), meta.get("name")
            if isinstance(ns, str) and isinstance(nm, str) and _is_claim_name(ns, nm):
                out.namespace, out.name = ns, nm
            out.files.append(StoredFile(path, content))
        return out

    def _rebuild(self, uid: str, claim: _ClaimFiles) -> JournalEntry:
        streams = self._read_streams(uid, claim)
        by_request = streams.by_request
        device_request = {dev: req for req, devs in by_request.items() for _, dev in devs}
        devices: list[PreparedDevice] = []
        specs: list[StoredFile] = []
        pinning: ClaimPinning | None = None
        if claim.spec:
            text, devices, pinning = self._read_claim_spec(uid, claim.spec, device_request)
            specs.append(StoredFile(claim.spec, text))
        else:  # metadata only (the CDI dir was emptied too): hold the devices the streams name
            for request, devs in by_request.items():
                devices += [PreparedDevice((request,), pool, dev, ()) for pool, dev in devs]
        return JournalEntry(
            namespace=streams.namespace,
            name=streams.name,
            uid=uid,
            devices=tuple(devices),
            cdi_specs=tuple(specs),
            metadata_files=tuple(streams.files),
            pinning=pinning,
            adopted=True,
        )

    def _read_claim_spec(
        self, uid: str, path: str, device_request: Mapping[str, str]
    ) -> tuple[str, list[PreparedDevice], ClaimPinning | None]:
        """The devices and pinning a claim's CDI spec shows; JournalError when it is not ours."""
        try:
            text = _read_claim_file(path)
            spec = loads_json(text, what="CDI spec")
            if spec.get("kind") != f"{self.driver_name}/{CLAIM_CDI_CLASS}":
                raise ValueError(f"kind {spec.get('kind')!r}")
            raw_devices = spec["devices"]
            if not isinstance(raw_devices, list):
                raise TypeError("devices is not a list")
            devices: list[PreparedDevice] = []
            assignments: dict[str, CpuAssignment] = {}
            for raw in raw_devices:
                cdi_name = raw["name"]
                if not isinstance(cdi_name, str) or not cdi_name.startswith(f"{uid}-"):
                    raise ValueError(f"device {cdi_name!r} is not named after the claim")
                rest = cdi_name[len(uid) + 1 :]
                share = _SHARE_SUFFIX.search(rest)
                device = rest[: share.start()] if share and share.end() == len(rest) else rest
                share_id = share.group(1) if share and share.end() == len(rest) else None
                env = dict(e.split("=", 1) for e in raw.get("containerEdits", {}).get("env", ()) if "=" in e)
                request = env.get(ENV_REQUEST) or device_request.get(device, "")
                if ENV_CPUS in env and request and request not in assignments:
                    assignments[request] = CpuAssignment(
                        request=request,
                        mode=CpuMode(env.get(ENV_CPU_MODE, "")),
                        cpus=parse_cpulist(env[ENV_CPUS], what=ENV_CPUS),
                        mems=parse_cpulist(env.get(ENV_MEMS, ""), limit=MAX_NODES, what=ENV_MEMS),
                    )
                devices.append(
                    PreparedDevice(
                        request_names=(request,) if request else (),
                        pool_name=self.pool,
                        device_name=device,
                        cdi_device_ids=(f"{self.driver_name}/{CLAIM_CDI_CLASS}={cdi_name}",),
                        share_id=share_id,
                    )
                )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise JournalError(
                f"state lost: claim {uid} is not in the journal but its CDI spec {path} is on disk, "
                f"and that spec cannot be read as numadra's ({exc}); its devices are unknown, so "
                "numadra refuses to go on. If the claim is gone (no pod uses it), move that file "
                "and the claim's other files aside and start again"
            ) from exc
        pinning = (
            ClaimPinning(claim_uid=uid, assignments=tuple(assignments.values())) if assignments else None
        )
        return text, devices, pinning
