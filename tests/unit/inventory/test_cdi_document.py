"""Another program's CDI spec is checked by type before numadra uses any of it.

The attacker writes a spec of the toolkit's kind into a shared CDI dir. Three of ~100 bytes (a
number in ``env``, as a device's name, as a mount's ``hostPath``) used to raise AttributeError or
TypeError out of the finder and fail every NVIDIA GPU claim; a YAML file of 129 KiB made of one
device aliased 3,000 times expanded to hundreds of MiB under the claims lock. Each is now a
refusal that names the file and the field, and the file is skipped.

The properties replace every field of a spec holding every field numadra reads by each JSON
type, nest documents deeply and build alias bombs: the answer is always our error naming the
field, in bounded time and memory, never another exception.
"""

from __future__ import annotations

import copy
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdi import validate_spec
from cdi.spec import CdiSpecError
from driver.errors import UntrustedValueError
from driver.inventory.cdi_document import decode_spec_document, spec_from_document
from driver.inventory.nvidia_toolkit import ToolkitSpecFinder
from driver.untrusted.values import json_type

UUID = "GPU-0a0a0a0a-1111-2222-3333-444444444444"

#: a spec that holds every field numadra reads from another program's spec
FULL: dict[str, Any] = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [
        {
            "name": UUID,
            "containerEdits": {
                "deviceNodes": [
                    {
                        "path": "/dev/nvidia0",
                        "hostPath": "/dev/nvidia0",
                        "type": "c",
                        "major": 195,
                        "minor": 0,
                        "permissions": "rw",
                        "fileMode": 438,
                        "uid": 0,
                        "gid": 0,
                    }
                ],
                "env": ["NVIDIA_VISIBLE_DEVICES=void"],
                "additionalGids": [44],
            },
        }
    ],
    "containerEdits": {
        "env": ["A=1"],
        "mounts": [
            {"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1", "options": ["ro"]}
        ],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvidia-cdi-hook",
                "args": ["nvidia-cdi-hook", "update-ldcache"],
                "env": ["X=1"],
                "timeout": 5,
            }
        ],
    },
}
#: one value of each JSON type
EACH_TYPE: tuple[object, ...] = (None, True, 7, 1.5, "text", [1], {"a": 1})
#: fields numadra does not read: a value of any type there is the writer's business
UNREAD = frozenset({"cdiVersion"})


def _paths(node: object, path: str = "") -> Iterator[tuple[str, tuple[str | int, ...]]]:
    """(printed path, key sequence) of every value below ``node``."""

    def walk(
        value: object, printed: str, keys: tuple[str | int, ...]
    ) -> Iterator[tuple[str, tuple[str | int, ...]]]:
        if isinstance(value, dict):
            for key, child in value.items():
                if not keys and key in UNREAD:
                    continue
                here = f"{printed}.{key}" if printed else key
                yield here, (*keys, key)
                yield from walk(child, here, (*keys, key))
        elif isinstance(value, list):
            for index, child in enumerate(value):
                here = f"{printed}[{index}]"
                yield here, (*keys, index)
                yield from walk(child, here, (*keys, index))

    yield from walk(node, path, ())


def _replaced(keys: tuple[str | int, ...], value: object) -> dict[str, Any]:
    doc = copy.deepcopy(FULL)
    target: Any = doc
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return doc


def _at(keys: tuple[str | int, ...]) -> object:
    target: Any = FULL
    for key in keys:
        target = target[key]
    return target


FIELDS = list(_paths(FULL))


def test_the_full_spec_is_accepted() -> None:
    """The reference document is valid, so each refusal below comes from the one field replaced."""
    spec = spec_from_document(copy.deepcopy(FULL))
    validate_spec(spec)
    assert spec.devices[0].edits.device_nodes[0].file_mode == 438
    assert spec.edits.hooks[0].timeout == 5


@pytest.mark.parametrize("value", EACH_TYPE, ids=lambda v: json_type(v).replace(" ", "-"))
def test_every_field_of_the_wrong_type_is_refused_by_its_path(value: object) -> None:
    """Every field replaced by a value of another JSON type: our error, naming that field."""
    checked = 0
    for printed, keys in FIELDS:
        if json_type(_at(keys)) == json_type(value):
            continue  # the same type: a value check's business, not a type check's
        with pytest.raises(UntrustedValueError) as caught:
            spec_from_document(_replaced(keys, value))
        assert caught.value.what.startswith(printed), (printed, caught.value)
        assert f"got {json_type(value)}" in caught.value.reason or "is required" in caught.value.reason
        checked += 1
    assert checked >= 10  # fields of FULL were replaced, not paths that matched nothing


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(min_value=0, max_value=len(FIELDS) - 1), value=_JSON)
def test_any_value_anywhere_is_accepted_or_refused_by_name(index: int, value: object) -> None:
    """A generated value at any field: a spec, or our error (or CDI's) naming the field; nothing else."""
    printed, keys = FIELDS[index]
    try:
        spec = spec_from_document(_replaced(keys, value))
    except UntrustedValueError as exc:
        assert exc.what.startswith(printed), (printed, exc)
        return
    try:
        validate_spec(spec)
    except CdiSpecError as exc:
        assert str(exc)  # CDI's own value rules, on values of the right types


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(min_value=1, max_value=200_000), yaml_text=st.booleans())
def test_deep_nesting_is_refused_by_name(depth: int, yaml_text: bool) -> None:
    """Lists nested to any depth, JSON or YAML: parsed and refused, or refused as too deep."""
    body = "[" * (depth + 1) + "]" * (depth + 1)  # devices holds a list, not objects
    text = f'{{"kind": "nvidia.com/gpu", "devices": {body}}}'
    path = "/cdi/nvidia.yaml" if yaml_text else "/cdi/nvidia.json"
    with pytest.raises(UntrustedValueError) as caught:
        spec_from_document(decode_spec_document(path, text.encode()))
    assert caught.value.what.startswith(("devices", path)), caught.value


def _bomb(mounts: int, copies: int) -> bytes:
    """One device of ``mounts`` mounts, named by an anchor and aliased ``copies`` times."""
    lines = [
        "cdiVersion: 0.5.0",
        "kind: nvidia.com/gpu",
        "x-device: &gpu",
        "  name: all",
        "  containerEdits:",
    ]
    lines.append("    mounts:")
    lib = "/usr/lib/x86_64-linux-gnu/libnvidia"
    lines += [
        f"    - {{hostPath: {lib}-{k:05d}.so.550.54.15, containerPath: /usr/lib/nvidia/{k:05d}}}"
        for k in range(mounts)
    ]
    lines.append("devices: [" + ", ".join(["*gpu"] * copies) + "]")
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=30, deadline=None)
@given(mounts=st.integers(min_value=0, max_value=50), copies=st.integers(min_value=1, max_value=2000))
def test_generated_alias_bombs_are_refused_by_name(mounts: int, copies: int) -> None:
    with pytest.raises(UntrustedValueError) as caught:
        decode_spec_document("/cdi/nvidia.yaml", _bomb(mounts, copies))
    assert caught.value.what == "/cdi/nvidia.yaml"
    assert "anchor" in caught.value.reason or "alias" in caught.value.reason


def _finder_with(tmp_path: Path, name: str, content: bytes) -> ToolkitSpecFinder:
    cdi = tmp_path / "cdi"
    cdi.mkdir(exist_ok=True)
    (cdi / name).write_bytes(content)
    return ToolkitSpecFinder(str(tmp_path / "host"), [str(cdi)])


#: the three specs of the report, each about 100 bytes of JSON
SMALL_SPECS = {
    "env-number": (
        {"kind": "nvidia.com/gpu", "devices": [{"name": UUID, "containerEdits": {"env": [5]}}]},
        "devices[0].containerEdits.env[0]: must be a string, got a number",
    ),
    "name-number": (
        {"kind": "nvidia.com/gpu", "devices": [{"name": 5, "containerEdits": {}}]},
        "devices[0].name: must be a string, got a number",
    ),
    "hostpath-number": (
        {
            "kind": "nvidia.com/gpu",
            "devices": [{"name": UUID, "containerEdits": {}}],
            "containerEdits": {"mounts": [{"hostPath": 5, "containerPath": "/x"}]},
        },
        "containerEdits.mounts[0].hostPath: must be a string, got a number",
    ),
}


@pytest.mark.parametrize("case", sorted(SMALL_SPECS))
def test_a_small_spec_of_the_wrong_types_is_skipped_naming_the_field(tmp_path: Path, case: str) -> None:
    """The reported specs: the finder names the file and the field; looking the GPU up raises nothing."""
    document, field = SMALL_SPECS[case]
    content = json.dumps(document, separators=(",", ":")).encode()
    assert len(content) < 200
    specs = _finder_with(tmp_path, "nvidia.json", content).find()
    assert specs.files == ()
    assert specs.problems == (f"{tmp_path / 'cdi' / 'nvidia.json'}: {field}",)
    assert "no device" in specs.check(UUID)


def test_the_alias_bomb_is_refused_fast_and_small(tmp_path: Path) -> None:
    """129 KiB of YAML: one device of 1,000 mounts aliased 3,000 times. Refused before it is built."""
    content = _bomb(1000, 3000)
    assert 120 << 10 < len(content) < 140 << 10
    finder = _finder_with(tmp_path, "nvidia.yaml", content)
    tracemalloc.start()
    try:
        specs = finder.find()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert specs.files == ()
    assert len(specs.problems) == 1
    assert "anchor &gpu" in specs.problems[0]
    assert peak < 16 << 20, f"peak {peak >> 20} MiB"  # the expanded spec took hundreds of MiB
