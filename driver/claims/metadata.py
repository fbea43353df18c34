"""Device metadata files (KEP-5304): what a container can read about its devices, per request.

For every (claim, base request) with devices:

* a JSON *stream* at ``<plugin-dir>/dra-device-metadata/<ns>_<claim>/<request>/metadata.json``:
  the same ``DeviceMetadata`` object once per API version, newest first
  (``metadata.resource.k8s.io/v1beta1`` then ``v1alpha1``), each followed by a newline; readers
  take the first version they understand;
* a CDI spec ``<cdi-dir>/<driver>_metadata_<claimUID>_<request>.json`` (kind ``<driver>/metadata``,
  device ``<claimUID>_<request>``) that bind-mounts that file read-only at
  ``/var/run/kubernetes.io/dra-device-attributes/{resourceclaims/<claim>|resourceclaimtemplates/
  <podClaimName>}/<request>/<driver>-metadata.json``; its CDI ID is appended to the first device
  of the request.

The pod's claim name comes from the claim's ``resource.kubernetes.io/pod-claim-name`` annotation,
which anyone who can edit the claim can set: it must be a DNS label (what a pod's claim name is)
before it goes into the container path. Anything else (``../``, a NUL, a newline, a slash) is not
a claim name a pod can have: the claim is prepared without device metadata and a warning names it,
as for a claim whose names are too long for a directory.

``metadata.generation`` starts at 1 and increases whenever the content of a file changes.
Attributes are those of the published device (computed by the slice builder's own
:func:`driver.slices.attributes.device_attributes`, so they cannot drift).

Every prepare renders these files, so the JSON is assembled from pre-encoded parts: each device's
object (driver, pool, name, attributes, networkData) is encoded once per published attribute map
and reused by every claim of that device; the text is byte-identical to ``json.dumps`` of the
objects with compact separators.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cdi import ContainerEdits, Device, Mount, Spec, qualified_name, transient_spec_file_name
from cdi.version import V030, V050
from driver.claims.names import dir_prefix
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.model import InventoryDevice, Nic
from driver.log import get_logger

__all__ = [
    "API_VERSIONS",
    "CONTAINER_DIR",
    "METADATA_DIR",
    "NAME_MAX",
    "MetadataFile",
    "claim_metadata_dir",
    "container_path",
    "metadata_cdi_kind",
    "metadata_dir_too_long",
    "metadata_files",
    "metadata_spec_glob",
    "parse_generation",
    "pod_claim_name_problem",
]

#: newest first: the order of objects in the stream
API_VERSIONS = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
METADATA_DIR = "dra-device-metadata"
_GENERATION = re.compile(r'"generation":[0-9]+')
#: the JSON text of a string, as ``json.dumps`` writes it (the C encoder json.dumps itself calls)
_quote = encode_basestring_ascii
#: the ``{"kind":"DeviceMetadata","apiVersion":...,`` opening of each object of a stream
_HEADS = tuple(f'{{"kind":"DeviceMetadata","apiVersion":{_quote(v)},' for v in API_VERSIONS)


@dataclass(frozen=True, slots=True)
class MetadataFile:
    """One request's metadata: the host file, its content, and the CDI spec that mounts it."""

    request: str  # base request name
    host_path: str
    content: str
    spec_file: str
    container_path: str  # where the spec mounts the file
    cdi_id: str  # ``<driver>/metadata=<claimUID>_<request>``
    #: the spec file's exact content (what ``spec_bytes(self.spec)`` gives, written directly)
    spec_text: str

    @property
    def spec(self) -> Spec:
        """The CDI spec that bind-mounts the file read-only (one device)."""
        kind, _, device_name = self.cdi_id.partition("=")
        mount = Mount(self.host_path, self.container_path, _MOUNT_OPTIONS)
        return Spec(kind=kind, devices=(Device(device_name, ContainerEdits(mounts=(mount,))),))


_MOUNT_OPTIONS = ("ro", "bind")


def _mount_spec_text(kind: str, device_name: str, host_path: str, mount_path: str) -> str:
    """The compact JSON of a one-mount spec, as ``spec_bytes`` writes it, without the spec objects.

    No validation is needed: the kind is the driver's (checked by ``qualified_name``), the device
    name is a checked claim UID and request name, and the container path is absolute. The
    version is ``min_cdi_version``'s: a mount without ``type`` needs nothing above 0.3.0, a device
    name that does not start with a letter needs 0.5.0.
    """
    version = V050 if device_name and not device_name[0].isalpha() else V030
    return (
        f'{{"cdiVersion":"{version}","kind":{_quote(kind)},"devices":[{{"name":{_quote(device_name)},'
        f'"containerEdits":{{"mounts":[{{"hostPath":{_quote(host_path)},"containerPath":{_quote(mount_path)},'
        f'"options":["ro","bind"]}}]}}}}]}}\n'
    )


def metadata_cdi_kind(driver_name: str) -> str:
    """The CDI kind of metadata specs."""
    return f"{driver_name}/metadata"


def claim_metadata_dir(plugin_dir: Path, namespace: str, name: str) -> str:
    """``<plugin-dir>/dra-device-metadata/<ns>_<claim>``: the claim's tree, one subdirectory per request.

    A plain string, as ``str(plugin_dir / ...)`` would give (the names are checked DNS names, so
    nothing needs normalising): pathlib objects cost more than the rest of a path's use here.
    """
    return f"{dir_prefix(plugin_dir)}{METADATA_DIR}/{namespace}_{name}"


#: the longest file name Linux file systems take (NAME_MAX of ext4, xfs, tmpfs)
NAME_MAX = 255


def metadata_dir_too_long(namespace: str, name: str) -> bool:
    """True when ``<ns>_<name>`` cannot be a directory name (valid names reach 63 + 1 + 253)."""
    return len(namespace.encode()) + 1 + len(name.encode()) > NAME_MAX


def metadata_spec_glob(driver_name: str, claim_uid: str) -> str:
    """The glob matching every metadata spec file of a claim (``<driver>_metadata_<uid>_*.json``).

    Unprepare uses it when the journal has no entry (a crash between writing files and the
    journal), so it must name files exactly as :func:`metadata_files` does.
    """
    stem = transient_spec_file_name(metadata_cdi_kind(driver_name), claim_uid).removesuffix(".json")
    return f"{stem}_*.json"


#: a DNS label (RFC 1123), matched whole: ``$`` of ``re.match`` would let a trailing newline in
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_log = get_logger("claims.metadata")


def pod_claim_name_problem(name: str) -> str:
    """Why the pod-claim-name annotation cannot name a directory ("" when it can: a DNS label)."""
    if not name or _DNS_LABEL.fullmatch(name):
        return ""
    return f"annotation resource.kubernetes.io/pod-claim-name {name!r} is not a DNS label"


def container_path(view: ClaimView, request: str, driver_name: str) -> str:
    """Where the container sees the file (template claims use the pod's claim name).

    Raises ValueError when the pod's claim name is not a DNS label (:func:`metadata_files` skips
    such a claim's metadata before it gets here).
    """
    if problem := pod_claim_name_problem(view.pod_claim_name):
        raise ValueError(problem)
    if view.pod_claim_name:
        sub = f"resourceclaimtemplates/{view.pod_claim_name}"
    else:
        sub = f"resourceclaims/{view.name}"
    return f"{CONTAINER_DIR}/{sub}/{request}/{driver_name}-metadata.json"


def _device_json(dev: AllocatedDevice, driver_name: str, attributes: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "driver": driver_name,
        "pool": dev.pool,
        "name": dev.device_name,
        "attributes": dict(attributes),
    }
    if isinstance(dev.device, Nic):
        network: dict[str, Any] = {"interfaceName": dev.device.interface_name}
        if dev.device.mac_address:
            network["hardwareAddress"] = dev.device.mac_address
        out["networkData"] = network
    return out


class _DeviceTexts:
    """The encoded device objects of the metadata streams, reused while their inputs stay the same.

    Keyed by (driver, pool, device name); an entry is used only while the inventory device and its
    attribute map are the very objects it was encoded from (the inventory provider and the slice
    builder hand out immutable objects until something changes), so a new inventory re-encodes.
    """

    _MAX = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: dict[tuple[str, str, str], tuple[InventoryDevice, Mapping[str, Any], str]] = {}

    def get(self, dev: AllocatedDevice, driver_name: str, attributes: Mapping[str, Any]) -> str:
        key = (driver_name, dev.pool, dev.device_name)
        hit = self._texts.get(key)
        if hit is not None and hit[0] is dev.device and hit[1] is attributes:
            return hit[2]
        text = json.dumps(_device_json(dev, driver_name, attributes), separators=(",", ":"))
        with self._lock:
            if len(self._texts) >= self._MAX:
                self._texts.clear()
            self._texts[key] = (dev.device, attributes, text)
        return text


_DEVICE_TEXTS = _DeviceTexts()
_NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})


def _stream(view: ClaimView, full_request: str, devices: list[str], generation: int) -> str:
    """One compact JSON line per API version: ``kind``, ``apiVersion``, then the shared fields.

    The objects differ only in ``apiVersion``, so the fields after it are encoded once and each
    line is its own header followed by that text. ``devices`` are the encoded device objects.
    """
    pod_claim = f',"podClaimName":{_quote(view.pod_claim_name)}' if view.pod_claim_name else ""
    rest = (
        f'"metadata":{{"name":{_quote(view.name)},"namespace":{_quote(view.namespace)},'
        f'"uid":{_quote(view.uid)},"generation":{generation:d}}}{pod_claim},'
        f'"requests":[{{"name":{_quote(full_request)},"devices":[{",".join(devices)}]}}]}}\n'
    )
    return "".join(head + rest for head in _HEADS)


def parse_generation(content: str) -> int:
    """The generation of a written stream (0 when it cannot be read)."""
    try:
        first = json.loads(content.split("\n", 1)[0])
        return int(first["metadata"]["generation"])
    except (ValueError, KeyError, TypeError):
        return 0


def _without_generation(content: str) -> str:
    return _GENERATION.sub('"generation":0', content)


def metadata_files(
    view: ClaimView,
    *,
    driver_name: str,
    plugin_dir: Path,
    cdi_dir: Path,
    attributes: Mapping[str, Mapping[str, Any]],
    previous: Mapping[str, str] | None = None,
) -> list[MetadataFile]:
    """The metadata files of a claim, one per base request, in order of first appearance.

    ``attributes`` maps device names to their published attributes (treated as immutable: the
    encoded form of a device is reused while the same map object is passed). ``previous`` maps
    host paths to the content written before: an unchanged file keeps its generation, a changed
    one gets +1. A claim whose pod-claim-name annotation is not a DNS label gets none (logged).
    """
    if problem := pod_claim_name_problem(view.pod_claim_name):
        _log.warning(
            f"claim prepared without device metadata: {problem}",
            claim_uid=view.uid,
            claim=f"{view.namespace}/{view.name}",
        )
        return []
    by_request: dict[str, list[AllocatedDevice]] = {}
    for dev in view.devices:
        by_request.setdefault(dev.base_request, []).append(dev)
    kind = metadata_cdi_kind(driver_name)
    claim_dir = claim_metadata_dir(plugin_dir, view.namespace, view.name)
    cdi_base = dir_prefix(cdi_dir)
    out: list[MetadataFile] = []
    for request, devs in by_request.items():
        host_path = f"{claim_dir}/{request}/metadata.json"
        devices = [
            _DEVICE_TEXTS.get(d, driver_name, attributes.get(d.device_name, _NO_ATTRIBUTES)) for d in devs
        ]
        old = previous.get(host_path, "") if previous else ""
        generation = max(parse_generation(old), 1) if old else 1
        content = _stream(view, devs[0].request, devices, generation)
        if old and _without_generation(content) != _without_generation(old):
            content = _stream(view, devs[0].request, devices, generation + 1)
        device_name = f"{view.uid}_{request}"
        mount_path = container_path(view, request, driver_name)
        out.append(
            MetadataFile(
                request=request,
                host_path=host_path,
                content=content,
                spec_file=cdi_base + transient_spec_file_name(kind, view.uid, request),
                container_path=mount_path,
                cdi_id=qualified_name(kind, device_name),
                spec_text=_mount_spec_text(kind, device_name, host_path, mount_path),
            )
        )
    return out
