"""The CDI spec model (the subset numadra writes) and its validation.

Frozen dataclasses rather than dicts: a spec is built once per claim, validated, serialised to the
exact JSON the CDI loader accepts (camelCase keys, empty fields omitted, since the loader rejects
unknown fields and some runtimes choke on ``null``), and compared for equality on reconcile.

Each class has two spellings of one JSON object: ``to_json()`` (the object, for readers that want a
dict) and ``_text()`` (its compact text, written straight from the fields). ``Spec.json_text()``,
what is written to disk on every prepare, uses the text: building the dicts only to encode them
cost about a quarter of rendering a claim. The two are kept in step by a test that
compares the text with ``json.dumps`` of the object for arbitrary specs; a field of a type the
text does not spell (not what this model declares) falls back to encoding the object, so the
bytes are ``json.dumps``'s whatever the input.

A spec declares the lowest ``cdiVersion`` whose features it uses (:func:`min_cdi_version`, the Go
library's ``MinimumRequiredVersion``): runtimes that vendor an older CDI library reject specs that
declare a version they do not know, and podman accepts only up to 0.5.0. The features this model
can express and where they appeared: everything basic in 0.3.0, ``mounts[].type`` in 0.4.0,
``deviceNodes[].hostPath`` and device names not starting with a letter in 0.5.0,
``additionalGids`` in 0.7.0. (0.6.0 brought only annotations and dotted class names, which this
model does not write.) The rule lives with the model because serialising a spec applies it.

A mount's ``host_path`` and a device node's ``host_path`` are :data:`CheckedHostPath`: the runtime
resolves them as root when it creates a container, so a program that writes specs makes them
only after checking what they resolve through (numadra: ``driver.untrusted.hostpaths``).
:func:`spec_from_json` marks the paths of a spec it reads back the same way: the caller only
inspects them (another program's spec), or checks them again before it writes them (numadra's
specs re-created at start).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, NewType

from cdi.naming import CdiNameError, CdiSpecError, validate_device_name, validate_kind
from cdi.reuse import ReusedWhileSame

__all__ = [
    "HOOK_NAMES",
    "KNOWN_VERSIONS",
    "V030",
    "V040",
    "V050",
    "V070",
    "CdiSpecError",
    "CheckedHostPath",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Hook",
    "Mount",
    "Spec",
    "min_cdi_version",
    "spec_from_json",
    "validate_spec",
]

#: the OCI hook points a CDI hook may name
HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})
_PERMISSIONS = re.compile(r"[rwm]{1,3}")
#: the largest group ID the OCI runtime spec can carry (a uint32)
_MAX_GID = 2**32 - 1
#: env names that passed ``_ENV_NAME`` (a pure check, so one that passed once always passes): a
#: spec's env names are few and the same on every prepare; bounded, emptied when full
_GOOD_ENV_NAMES: set[str] = set()
_MAX_GOOD_ENV_NAMES = 1024


def _compact_encoder() -> Callable[[Any], str]:
    """``json.dumps(obj, separators=(",", ":"))`` as one encoder built once, for every spec.

    ``json.dumps`` with any argument builds a new ``JSONEncoder`` and C encoder per call, which
    cost about as much as encoding a claim's spec. The C encoder here is made with the very
    arguments ``JSONEncoder.encode`` passes it, except the circular-reference markers: a spec's
    JSON is built fresh from frozen objects and cannot refer to itself, and without markers the
    encoder holds no state, so threads may share it. Without the C accelerator (not CPython):
    one reused ``JSONEncoder``, the same text.
    """
    fallback = json.JSONEncoder(separators=(",", ":"), check_circular=False)
    try:
        from _json import make_encoder  # the C encoder json.encoder itself uses
    except ImportError:  # pragma: no cover - CPython always has it
        return fallback.encode
    # markers, default, encoder, indent, separators, sort_keys, skipkeys, allow_nan
    encoder = make_encoder(
        None, fallback.default, encode_basestring_ascii, None, ":", ",", False, False, True
    )

    def encode(obj: Any) -> str:
        return "".join(encoder(obj, 0))

    return encode


_encode_compact = _compact_encoder()

#: the JSON text of a string, as ``json.dumps`` writes it (the C encoder json.dumps itself calls)
_quote = encode_basestring_ascii


def _strings(values: tuple[str, ...]) -> str:
    """The JSON text of a list of strings."""
    return f"[{','.join(map(_quote, values))}]"


def _number(value: int) -> str:
    """The JSON text of an integer (anything else as ``json.dumps`` writes it)."""
    return int.__repr__(value) if type(value) is int else _encode_compact(value)


#: a host path checked before it is handed to a container (see the module docstring)
CheckedHostPath = NewType("CheckedHostPath", str)

V030 = "0.3.0"
V040 = "0.4.0"
V050 = "0.5.0"
V070 = "0.7.0"
#: versions this library may write, oldest first
KNOWN_VERSIONS = (V030, V040, V050, V070)
_RANK = {version: rank for rank, version in enumerate(KNOWN_VERSIONS)}


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device node to create in the container; ``hostPath`` is written only when it differs from
    ``path`` (without it the runtime reads the node at ``path`` on the host)."""

    path: str
    host_path: CheckedHostPath | None = None
    type: str = ""
    major: int | None = None
    minor: int | None = None
    permissions: str = ""
    file_mode: int | None = None
    uid: int | None = None
    gid: int | None = None

    def _numbers(self) -> tuple[tuple[str, int | None], ...]:
        """The numeric fields by their JSON key, in the order both spellings write them."""
        return (
            ("major", self.major),
            ("minor", self.minor),
            ("fileMode", self.file_mode),
            ("uid", self.uid),
            ("gid", self.gid),
        )

    def to_json(self) -> dict[str, Any]:
        """The CDI JSON object of this node."""
        out: dict[str, Any] = {"path": self.path}
        if self.host_path is not None and self.host_path != self.path:
            out["hostPath"] = self.host_path
        if self.type:
            out["type"] = self.type
        for key, value in self._numbers():
            if value is not None:
                out[key] = value
        if self.permissions:
            out["permissions"] = self.permissions
        return out

    def _text(self) -> str:
        """The compact JSON text of :meth:`to_json`."""
        text = '{"path":' + _quote(self.path)
        if self.host_path is not None and self.host_path != self.path:
            text += ',"hostPath":' + _quote(self.host_path)
        if self.type:
            text += ',"type":' + _quote(self.type)
        for key, value in self._numbers():
            if value is not None:
                text += f',"{key}":{_number(value)}'
        if self.permissions:
            text += ',"permissions":' + _quote(self.permissions)
        return text + "}"


@dataclass(frozen=True, slots=True)
class Mount:
    """A mount into the container; ``type`` is set only when needed (it raises cdiVersion to 0.4.0)."""

    host_path: CheckedHostPath
    container_path: str
    options: tuple[str, ...] = ()
    type: str = ""

    def to_json(self) -> dict[str, Any]:
        """The CDI JSON object of this mount."""
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out

    def _text(self) -> str:
        """The compact JSON text of :meth:`to_json`."""
        text = f'{{"hostPath":{_quote(self.host_path)},"containerPath":{_quote(self.container_path)}'
        if self.options:
            text += ',"options":' + _strings(self.options)
        if self.type:
            text += ',"type":' + _quote(self.type)
        return text + "}"


@dataclass(frozen=True, slots=True)
class Hook:
    """An OCI hook the runtime runs at ``hook_name``."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The CDI JSON object of this hook."""
        out: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out

    def _text(self) -> str:
        """The compact JSON text of :meth:`to_json`."""
        text = f'{{"hookName":{_quote(self.hook_name)},"path":{_quote(self.path)}'
        if self.args:
            text += ',"args":' + _strings(self.args)
        if self.env:
            text += ',"env":' + _strings(self.env)
        if self.timeout is not None:
            text += ',"timeout":' + _number(self.timeout)
        return text + "}"


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """What injecting a device changes in the container's OCI spec.

    ``additional_gids`` are supplementary groups of the container's process (cdiVersion 0.7.0):
    the group that owns a device node on the host lets a non-root process open it. Runtimes skip
    GID 0, so it is never written.
    """

    env: tuple[str, ...] = ()  # "NAME=value"
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()

    def is_empty(self) -> bool:
        """True when the edits change nothing."""
        return not (self.env or self.device_nodes or self.mounts or self.hooks or self.additional_gids)

    def to_json(self) -> dict[str, Any]:
        """The CDI JSON object; empty lists are left out."""
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [n.to_json() for n in self.device_nodes]
        if self.mounts:
            out["mounts"] = [m.to_json() for m in self.mounts]
        if self.hooks:
            out["hooks"] = [h.to_json() for h in self.hooks]
        if self.additional_gids:
            out["additionalGids"] = list(self.additional_gids)
        return out

    def _text(self) -> str:
        """The compact JSON text of :meth:`to_json`."""
        parts: list[str] = []
        if self.env:
            parts.append(_TUPLE_TEXTS.of(self.env, _env_text))
        if self.device_nodes:
            parts.append(_TUPLE_TEXTS.of(self.device_nodes, _nodes_text))
        if self.mounts:
            parts.append(f'"mounts":[{",".join([m._text() for m in self.mounts])}]')
        if self.hooks:
            parts.append(f'"hooks":[{",".join([h._text() for h in self.hooks])}]')
        if self.additional_gids:
            parts.append(f'"additionalGids":[{",".join(map(_number, self.additional_gids))}]')
        return f"{{{','.join(parts)}}}"


def _env_text(env: tuple[str, ...]) -> str:
    return '"env":' + _strings(env)


def _nodes_text(nodes: tuple[DeviceNode, ...]) -> str:
    return f'"deviceNodes":[{",".join([n._text() for n in nodes])}]'


#: the text of the env and device-node tuples of edits, by tuple object: a renderer hands the same
#: tuple to many specs (a device's nodes, its environment when no claim adds to it), and a tuple of
#: strings or frozen nodes is the same text for as long as it exists; tuples met once cost one entry
_TUPLE_TEXTS: ReusedWhileSame[str] = ReusedWhileSame(2048)


@dataclass(frozen=True, slots=True)
class Device:
    """One named device of a spec; its qualified ID is ``<kind>=<name>``."""

    name: str
    edits: ContainerEdits = field(default_factory=ContainerEdits)

    def to_json(self) -> dict[str, Any]:
        """The CDI JSON object of this device (``containerEdits`` is required, even when empty)."""
        return {"name": self.name, "containerEdits": self.edits.to_json()}

    def _text(self) -> str:
        """The compact JSON text of :meth:`to_json`."""
        return f'{{"name":{_quote(self.name)},"containerEdits":{self.edits._text()}}}'


@dataclass(frozen=True, slots=True)
class Spec:
    """A CDI spec file: one kind, its devices, and edits common to all of them."""

    kind: str
    devices: tuple[Device, ...]
    edits: ContainerEdits = field(default_factory=ContainerEdits)

    def to_json(self, cdi_version: str | None = None) -> dict[str, Any]:
        """The whole spec as JSON; ``cdiVersion`` defaults to the lowest version that fits."""
        out: dict[str, Any] = {
            "cdiVersion": cdi_version or min_cdi_version(self),
            "kind": self.kind,
            "devices": [d.to_json() for d in self.devices],
        }
        if not self.edits.is_empty():
            out["containerEdits"] = self.edits.to_json()
        return out

    def json_text(self, cdi_version: str | None = None) -> str:
        """The compact JSON text of :meth:`to_json` (what is written to disk): the same text as
        ``json.dumps(spec.to_json(cdi_version), separators=(",", ":"))``."""
        try:
            version = cdi_version or min_cdi_version(self)
            text = (
                f'{{"cdiVersion":{_quote(version)},"kind":{_quote(self.kind)},'
                f'"devices":[{",".join([d._text() for d in self.devices])}]'
            )
            if not self.edits.is_empty():
                text += ',"containerEdits":' + self.edits._text()
        except (TypeError, AttributeError):  # a field of a type the model does not declare
            return _encode_compact(self.to_json(cdi_version))
        return text + "}"


def _edits_version(edits: ContainerEdits) -> str:
    if edits.additional_gids:
        return V070
    for node in edits.device_nodes:
        if node.host_path is not None and node.host_path != node.path:
            return V050
    for mount in edits.mounts:
        if mount.type:
            return V040
    return V030


def min_cdi_version(spec: Spec) -> str:
    """The lowest CDI version whose features ``spec`` uses."""
    needed = _edits_version(spec.edits)
    for device in spec.devices:
        if device.name and not device.name[0].isalpha() and _RANK[needed] < _RANK[V050]:
            needed = V050
        edits = device.edits
        if edits.device_nodes or edits.mounts or edits.additional_gids:  # the only parts that raise it
            found = _edits_version(edits)
            if _RANK[found] > _RANK[needed]:
                needed = found
    return needed


def _validate_edits(edits: ContainerEdits, kind: str, device: str | None) -> None:
    """Check one set of edits: ``device`` names the device they belong to (None: the spec's own)."""
    if edits.env:
        _validate_env(edits.env, kind, device)
    for node in edits.device_nodes:
        if not node.path.startswith("/"):
            raise CdiSpecError(f"{_where(kind, device)}: device node path {node.path!r} must be absolute")
        if node.host_path is not None and not node.host_path.startswith("/"):
            raise CdiSpecError(
                f"{_where(kind, device)}: device node hostPath {node.host_path!r} must be absolute"
            )
        if node.type not in _NODE_TYPES:
            raise CdiSpecError(
                f"{_where(kind, device)}: device node {node.path!r} has invalid type {node.type!r}"
            )
        if node.permissions and node.permissions != "none" and not _PERMISSIONS.fullmatch(node.permissions):
            raise CdiSpecError(
                f"{_where(kind, device)}: device node {node.path!r} has invalid permissions "
                f"{node.permissions!r}"
            )
    for mount in edits.mounts:
        if not mount.host_path or not mount.container_path.startswith("/"):
            raise CdiSpecError(
                f"{_where(kind, device)}: mount {mount.host_path!r} -> {mount.container_path!r} needs "
                "a hostPath and an absolute containerPath"
            )
    for hook in edits.hooks:
        if hook.hook_name not in HOOK_NAMES:
            raise CdiSpecError(f"{_where(kind, device)}: invalid hook name {hook.hook_name!r}")
        if not hook.path.startswith("/"):
            raise CdiSpecError(f"{_where(kind, device)}: hook path {hook.path!r} must be absolute")
    if edits.additional_gids:
        _validate_gids(edits.additional_gids, _where(kind, device))


def _validate_env(env: tuple[str, ...], kind: str, device: str | None) -> None:
    known = _GOOD_ENV_NAMES
    for entry in env:
        name, sep, _ = entry.partition("=")
        if name in known and sep:
            continue
        if not sep or not _ENV_NAME.fullmatch(name):
            raise CdiSpecError(f"{_where(kind, device)}: invalid env entry {entry!r}: must be NAME=value")
        if len(known) >= _MAX_GOOD_ENV_NAMES:
            known.clear()
        known.add(name)


def _where(kind: str, device: str | None) -> str:
    """What an error of :func:`validate_spec` is about: ``device <kind>=<name>`` or ``spec <kind>``
    (made only for an error: a valid spec's check spells no message)."""
    return f"spec {kind}" if device is None else f"device {kind}={device}"


def _validate_gids(gids: tuple[int, ...], where: str) -> None:
    for gid in gids:
        if isinstance(gid, bool) or not isinstance(gid, int) or not 0 < gid <= _MAX_GID:
            raise CdiSpecError(f"{where}: additional GID {gid!r} must be an integer in 1..{_MAX_GID}")


def validate_spec(spec: Spec) -> None:
    """Raise :class:`CdiSpecError` unless a CDI loader would accept ``spec``.

    Checks the kind, every device name (unique, valid), env entries (``NAME=value``), absolute
    paths, device node types and permissions, hook names, and additional GIDs (1 to 2**32-1).
    """
    try:
        validate_kind(spec.kind)
    except CdiNameError as exc:
        raise CdiSpecError(str(exc)) from exc
    if not spec.devices:
        raise CdiSpecError(f"spec {spec.kind}: no devices")
    seen: set[str] = set()
    for device in spec.devices:
        try:
            validate_device_name(device.name)
        except CdiNameError as exc:
            raise CdiSpecError(f"spec {spec.kind}: {exc}") from exc
        if device.name in seen:
            raise CdiSpecError(f"spec {spec.kind}: duplicate device name {device.name!r}")
        seen.add(device.name)
        _validate_edits(device.edits, spec.kind, device.name)
    _validate_edits(spec.edits, spec.kind, None)


def _read_back(host_path: str | None) -> CheckedHostPath | None:
    return None if host_path is None else CheckedHostPath(host_path)


def spec_from_json(obj: Mapping[str, Any]) -> Spec:
    """Rebuild a :class:`Spec` from the JSON this module writes (used to re-read written files)."""

    def edits(raw: Mapping[str, Any]) -> ContainerEdits:
        return ContainerEdits(
            env=tuple(raw.get("env", ())),
            device_nodes=tuple(
                DeviceNode(
                    path=n["path"],
                    host_path=_read_back(n.get("hostPath")),
                    type=n.get("type", ""),
                    major=n.get("major"),
                    minor=n.get("minor"),
                    permissions=n.get("permissions", ""),
                    file_mode=n.get("fileMode"),
                    uid=n.get("uid"),
                    gid=n.get("gid"),
                )
                for n in raw.get("deviceNodes", ())
            ),
            mounts=tuple(
                Mount(
                    CheckedHostPath(m["hostPath"]),
                    m["containerPath"],
                    tuple(m.get("options", ())),
                    m.get("type", ""),
                )
                for m in raw.get("mounts", ())
            ),
            hooks=tuple(
                Hook(
                    h["hookName"],
                    h["path"],
                    tuple(h.get("args", ())),
                    tuple(h.get("env", ())),
                    h.get("timeout"),
                )
                for h in raw.get("hooks", ())
            ),
            additional_gids=tuple(raw.get("additionalGids", ())),
        )

    return Spec(
        kind=obj["kind"],
        devices=tuple(Device(d["name"], edits(d.get("containerEdits", {}))) for d in obj["devices"]),
        edits=edits(obj.get("containerEdits", {})),
    )
