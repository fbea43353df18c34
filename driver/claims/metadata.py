"""Device metadata files (KEP-5304): what a container can read about its devices, per request.

For every (claim, base request) with devices:

* a JSON *stream* at ``<plugin-dir>/dra-device-metadata/<claimUID>_<request>.json``: the same
  ``DeviceMetadata`` object once per API version, newest first
  (``metadata.resource.k8s.io/v1beta1`` then ``v1alpha1``), each followed by a newline; readers
  take the first version they understand;
* a read-only bind mount of that file at ``/var/run/kubernetes.io/dra-device-attributes/
  {resourceclaims/<claim>|resourceclaimtemplates/<podClaimName>}/<request>/<driver>-metadata.json``,
  carried by the first CDI device of the request in the claim's own CDI spec
  (:func:`driver.claims.render.claim_spec`).

Why this layout and not the Go helper's (``<ns>_<claim>/<request>/metadata.json`` plus a CDI
spec of kind ``<driver>/metadata`` per request, whose ID is appended to the request's first
device): the container sees the same file at the same path either way, but the helper's layout
makes five new inodes per one-request claim (two directories, the stream, two spec files) where
this one makes two (the stream and the claim's spec), and on a disk every inode created is paid
for on the prepare path (``bench/prepare.py`` reports new inodes per claim; bench/README.md).
Keying the file by UID instead of by name also means a claim deleted and re-created under its
old name never shares a file with its predecessor, and no namespace/name pair is too long for a
file name (a UID and a request name are bounded by :mod:`driver.names`, far below ``NAME_MAX``).

The pod's claim name comes from the claim's ``resource.kubernetes.io/pod-claim-name`` annotation,
which anyone who can edit the claim can set: it must be a DNS label (what a pod's claim name is)
before it goes into the container path. Anything else (``../``, a NUL, a newline, a slash) is not
a claim name a pod can have: the claim is prepared without device metadata and a warning names it.

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
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cdi import CheckedHostPath, Mount
from cdi.reuse import ReusedWhileSame
from driver.claims.paths import dir_prefix
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.model import Nic
from driver.layout import METADATA_DIR
from driver.log import get_logger
from driver.names import is_dns_label
from driver.untrusted.hostpaths import check_host_path_for_container, checked_child
from driver.untrusted.values import bounded_int, loads_json

__all__ = [
    "API_VERSIONS",
    "CONTAINER_DIR",
    "METADATA_DIR",
    "MetadataFile",
    "checked_metadata_dir",
    "container_path",
    "metadata_dir",
    "metadata_file_glob",
    "metadata_files",
    "parse_generation",
    "pod_claim_name_problem",
]

#: newest first: the order of objects in the stream
API_VERSIONS = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
_GENERATION = re.compile(r'"generation":[0-9]+')
#: the JSON text of a string, as ``json.dumps`` writes it (the C encoder json.dumps itself calls)
_quote = encode_basestring_ascii
#: the ``{"kind":"DeviceMetadata","apiVersion":...,`` opening of each object of a stream
_HEADS = tuple(f'{{"kind":"DeviceMetadata","apiVersion":{_quote(v)},' for v in API_VERSIONS)


@dataclass(frozen=True, slots=True)
class MetadataFile:
    """One request's metadata: the host file, its content, and the mount that shows it."""

    request: str  # base request name
    host_path: str
    content: str
    container_path: str  # where the mount shows the file

    def mount(self, directory: CheckedHostPath) -> Mount:
        """The read-only bind mount of the file (added to the request's first CDI device);
        ``directory``: :func:`checked_metadata_dir`, the directory the file is written to."""
        name = self.host_path.rpartition("/")[2]
        return Mount(checked_child(directory, name), self.container_path, _MOUNT_OPTIONS)


_MOUNT_OPTIONS = ("ro", "bind")


def metadata_dir(plugin_dir: Path) -> str:
    """``<plugin-dir>/dra-device-metadata``: every metadata file of the driver, side by side.

    A plain string, as ``str(plugin_dir / ...)`` would give: pathlib objects cost more than the
    rest of a path's use here.
    """
    return f"{dir_prefix(plugin_dir)}{METADATA_DIR}"


def checked_metadata_dir(plugin_dir: Path) -> CheckedHostPath:
    """:func:`metadata_dir` as a host path a container may be given (it must exist).

    numadra sees the plugin dir at its host path (the kubelet finds numadra's socket there too),
    so it is checked below ``/``; the files in it are numadra's own. Raises
    :class:`~driver.errors.UntrustedHostPathError` when someone other than root could change what
    the directory resolves to.
    """
    return check_host_path_for_container("/", metadata_dir(plugin_dir))


def metadata_file_glob(claim_uid: str) -> str:
    """The glob matching every metadata file of a claim (``<claimUID>_*.json``), below
    :func:`metadata_dir`.

    Unprepare uses it when the journal has no entry (a crash between writing files and the
    journal), so it must name files exactly as :func:`metadata_files` does. A UID cannot hold
    ``_``, so the glob of one claim never matches another's files.
    """
    return f"{claim_uid}_*.json"


_log = get_logger("claims.metadata")


def pod_claim_name_problem(name: str) -> str:
    """Why the pod-claim-name annotation cannot name a directory ("" when it can: a DNS label)."""
    if not name or is_dns_label(name):
        return ""
    return f"annotation resource.kubernetes.io/pod-claim-name {name!r} is not a DNS label"


def container_path(view: ClaimView, request: str, driver_name: str) -> str:
    """Where the container sees the file (template claims use the pod's claim name).

    Raises ValueError when the pod's claim name is not a DNS label (:func:`metadata_files` skips
    such a claim's metadata before it gets here).
    """
    if problem := pod_claim_name_problem(view.pod_claim_name):
        raise ValueError(problem)
    return _container_file(_container_dir(view), request, driver_name)


def _container_dir(view: ClaimView) -> str:
    """The claim's directory below :data:`CONTAINER_DIR` (its pod claim name checked by the caller)."""
    if view.pod_claim_name:
        return f"{CONTAINER_DIR}/resourceclaimtemplates/{view.pod_claim_name}"
    return f"{CONTAINER_DIR}/resourceclaims/{view.name}"


def _container_file(container_dir: str, request: str, driver_name: str) -> str:
    return f"{container_dir}/{request}/{driver_name}-metadata.json"


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


#: the encoded device objects of the metadata streams, by (driver, pool, device name), reused while
#: the inventory device and its attribute map are the very objects they were encoded from
_DEVICE_TEXTS: ReusedWhileSame[str] = ReusedWhileSame(4096)


def _device_text(dev: AllocatedDevice, driver_name: str, attributes: Mapping[str, Any]) -> str:
    return _DEVICE_TEXTS.get(
        (driver_name, dev.pool, dev.device_name),
        (dev.device, attributes),
        lambda: json.dumps(_device_json(dev, driver_name, attributes), separators=(",", ":")),
    )


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
        first = loads_json(content.split("\n", 1)[0], what="metadata stream")
        return bounded_int(first["metadata"]["generation"], what="generation", lo=0, hi=(1 << 63) - 1)
    except (ValueError, KeyError, TypeError):
        return 0


def _without_generation(content: str) -> str:
    return _GENERATION.sub('"generation":0', content)


def metadata_files(
    view: ClaimView,
    *,
    driver_name: str,
    plugin_dir: Path,
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
    host_head = f"{metadata_dir(plugin_dir)}/{view.uid}_"
    container_dir = _container_dir(view)  # the pod claim name is a DNS label (checked above)
    out: list[MetadataFile] = []
    for request, devs in by_request.items():
        host_path = f"{host_head}{request}.json"
        devices = [_device_text(d, driver_name, attributes.get(d.device_name, _NO_ATTRIBUTES)) for d in devs]
        old = previous.get(host_path, "") if previous else ""
        generation = max(parse_generation(old), 1) if old else 1
        content = _stream(view, devs[0].request, devices, generation)
        if old and _without_generation(content) != _without_generation(old):
            content = _stream(view, devs[0].request, devices, generation + 1)
        out.append(
            MetadataFile(
                request=request,
                host_path=host_path,
                content=content,
                container_path=_container_file(container_dir, request, driver_name),
            )
        )
    return out
