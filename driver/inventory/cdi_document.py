"""A CDI spec file another program wrote, decoded and checked field by field into a :class:`cdi.Spec`.

The CDI dirs are shared: the NVIDIA Container Toolkit writes its spec there, and so may any CDI
producer of the node (another vendor's generator, an operator, a user with a hostPath). numadra
reads the specs of the toolkit's kind to hand their devices to claims
(:mod:`driver.inventory.nvidia_toolkit`), so every field it reads from them is checked here by
type and bounds before any of it is used (:mod:`driver.untrusted.shape`): a number where a path
belongs, a list where a string belongs, a device named by an integer is a refusal naming the
field (``devices[0].containerEdits.mounts[2].hostPath: must be a string, got a number``). YAML
is read without aliases and with bounded nesting (:mod:`driver.untrusted.yamldoc`), so the bytes
the read allows are all the work a spec can cause. What CDI itself requires of the values
(absolute paths, ``NAME=value`` env entries, hook names) is :func:`cdi.validate_spec`'s, after.

The bounds are far above what the toolkit writes (a few devices per GPU, a hundred mounts) and
below what would make one spec cost a prepare seconds.
"""

from __future__ import annotations

from typing import Any

from cdi import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec
from driver.errors import UntrustedValueError
from driver.untrusted.shape import Field, Integer, ListOf, Record, Shape, Text
from driver.untrusted.values import loads_json
from driver.untrusted.yamldoc import load_yaml

__all__ = ["MAX_SPEC_DEVICES", "SPEC_SHAPE", "decode_spec_document", "spec_from_document"]

#: devices of one spec (the toolkit writes three per GPU and more per MIG profile)
MAX_SPEC_DEVICES = 4096
#: the YAML nodes of one spec file (a spec of 64 GPUs with their MIG devices holds ~50,000)
MAX_SPEC_NODES = 250_000
_MAX_EDITS = 4096  # env entries, device nodes, mounts, hooks, GIDs, arguments of one edit list
_PATH = Text(min_len=1)
_WORD = Text(max_len=256)
_ENTRY = Text(max_len=32768)  # an env entry or a hook argument (a long LD_LIBRARY_PATH)
_U32 = Integer(0, 2**32 - 1)
_I64 = Integer(-(2**63), 2**63 - 1)


def _strings(item: Shape[str] = _ENTRY) -> ListOf[str]:
    return ListOf(item, _MAX_EDITS)


_DEVICE_NODE = Record(
    DeviceNode,
    {
        "path": Field("path", _PATH, required=True),
        "hostPath": Field("host_path", _PATH),
        "type": Field("type", _WORD),
        "major": Field("major", _I64),
        "minor": Field("minor", _I64),
        "permissions": Field("permissions", _WORD),
        "fileMode": Field("file_mode", _U32),
        "uid": Field("uid", _U32),
        "gid": Field("gid", _U32),
    },
)
_MOUNT = Record(
    Mount,
    {
        "hostPath": Field("host_path", _PATH, required=True),
        "containerPath": Field("container_path", _PATH, required=True),
        "options": Field("options", _strings(_WORD)),
        "type": Field("type", _WORD),
    },
)
_HOOK = Record(
    Hook,
    {
        "hookName": Field("hook_name", _WORD, required=True),
        "path": Field("path", _PATH, required=True),
        "args": Field("args", _strings()),
        "env": Field("env", _strings()),
        "timeout": Field("timeout", Integer(0, 2**31 - 1)),
    },
)
_EDITS = Record(
    ContainerEdits,
    {
        "env": Field("env", _strings()),
        "deviceNodes": Field("device_nodes", ListOf(_DEVICE_NODE, _MAX_EDITS)),
        "mounts": Field("mounts", ListOf(_MOUNT, _MAX_EDITS)),
        "hooks": Field("hooks", ListOf(_HOOK, _MAX_EDITS)),
        "additionalGids": Field("additional_gids", ListOf(_U32, _MAX_EDITS)),
    },
)
_DEVICE = Record(
    Device,
    {
        "name": Field("name", Text(max_len=256, min_len=1), required=True),
        "containerEdits": Field("edits", _EDITS),
    },
)
#: every field numadra reads from another program's CDI spec, with its type and bounds
SPEC_SHAPE: Shape[Spec] = Record(
    Spec,
    {
        "kind": Field("kind", Text(max_len=256), required=True),
        "devices": Field("devices", ListOf(_DEVICE, MAX_SPEC_DEVICES), required=True),
        "containerEdits": Field("edits", _EDITS),
    },
)


def decode_spec_document(path: str, data: bytes) -> Any:
    """The decoded document of a spec file (JSON for ``*.json``, else YAML without aliases).

    Raises UntrustedValueError naming ``path`` when it does not decode.
    """
    if path.endswith(".json"):
        return loads_json(data, what=path)
    return load_yaml(data, what=path, max_nodes=MAX_SPEC_NODES)


def spec_from_document(document: object) -> Spec:
    """The spec a decoded document describes; UntrustedValueError naming the first wrong field."""
    if not isinstance(document, dict):
        raise UntrustedValueError("the document", "must be an object (a CDI spec)")
    return SPEC_SHAPE.check(document)
