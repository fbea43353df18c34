"""The written text of a spec is ``json.dumps`` of its object, whatever the spec holds.

``Spec.json_text()`` spells each part straight from the fields (it runs on every prepare) rather
than encoding ``to_json()``; these tests keep the two spellings in step, for arbitrary strings
(non-ASCII, control characters, lone surrogates, quotes) and numbers, and for fields of types
the model does not declare (the text falls back to encoding the object).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi import (
    CheckedHostPath,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    Mount,
    Spec,
    spec_bytes,
    validate_spec,
)

_text = st.text(max_size=12)
_strings = st.lists(_text, max_size=3).map(tuple)
_maybe_int = st.none() | st.integers(min_value=-(2**70), max_value=2**70)

_nodes = st.builds(
    DeviceNode,
    path=_text,
    host_path=st.none() | _text.map(CheckedHostPath),
    type=_text,
    major=_maybe_int,
    minor=_maybe_int,
    permissions=_text,
    file_mode=_maybe_int,
    uid=_maybe_int,
    gid=_maybe_int,
)
_mounts = st.builds(Mount, _text.map(CheckedHostPath), _text, _strings, _text)
_hooks = st.builds(Hook, _text, _text, _strings, _strings, _maybe_int)
_edits = st.builds(
    ContainerEdits,
    env=_strings,
    device_nodes=st.lists(_nodes, max_size=2).map(tuple),
    mounts=st.lists(_mounts, max_size=2).map(tuple),
    hooks=st.lists(_hooks, max_size=2).map(tuple),
    additional_gids=st.lists(st.integers(min_value=-5, max_value=2**40), max_size=3).map(tuple),
)
_specs = st.builds(
    Spec,
    kind=_text,
    devices=st.lists(st.builds(Device, _text, _edits), max_size=3).map(tuple),
    edits=_edits,
)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


@settings(max_examples=300, deadline=None)
@given(spec=_specs, version=st.none() | st.sampled_from(["0.3.0", "0.7.0", "é\n"]))
def test_json_text_is_json_dumps_of_to_json(spec: Spec, version: str | None) -> None:
    assert spec.json_text(version) == _dumps(spec.to_json(version))


@settings(max_examples=100, deadline=None)
@given(spec=_specs)
def test_spec_bytes_of_a_valid_spec_are_json_dumps(spec: Spec) -> None:
    try:
        validate_spec(spec)
    except ValueError:
        return  # spec_bytes refuses it; test_cdi covers what it refuses
    assert spec_bytes(spec) == (_dumps(spec.to_json()) + "\n").encode()


_ODD: list[Any] = [
    # what a spec read back from a tampered file may hold where the model declares str or int
    DeviceNode("/dev/x", major=True, minor=1.5, uid=-1),
    DeviceNode(7),
    Hook("prestart", "/h", timeout=2.5),
    Mount(CheckedHostPath("/h"), "/c", ("ro", None)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("part", _ODD, ids=repr)
def test_fields_of_undeclared_types_are_encoded_as_json_dumps_does(part: Any) -> None:
    if isinstance(part, DeviceNode):
        edits = ContainerEdits(device_nodes=(part,))
    elif isinstance(part, Hook):
        edits = ContainerEdits(hooks=(part,))
    else:
        edits = ContainerEdits(mounts=(part,))
    spec = Spec("numadra.dev/claim", (Device("a", edits),))
    assert spec.json_text() == _dumps(spec.to_json())


@pytest.mark.parametrize(
    "spec",
    [
        Spec(5, ()),  # type: ignore[arg-type]
        Spec("v/c", (Device("a", ContainerEdits(additional_gids=(True, 2))),)),  # type: ignore[arg-type]
        Spec("v/c", (Device("a"),), ContainerEdits(env=("A=1", 3))),  # type: ignore[arg-type]
    ],
    ids=["kind", "gids", "env"],
)
def test_specs_of_undeclared_types_are_encoded_as_json_dumps_does(spec: Spec) -> None:
    assert spec.json_text() == _dumps(spec.to_json())


def test_env_names_checked_before_are_still_checked_as_entries() -> None:
    # the check remembers names that passed; an entry is still NAME=value, and a bad name never passes
    def spec(*env: str) -> Spec:
        return Spec("numadra.dev/claim", (Device("a", ContainerEdits(env=env)),))

    validate_spec(spec("GOOD=1", *(f"N{i}=x" for i in range(1500))))  # more names than are remembered
    validate_spec(spec("GOOD=2"))
    for bad in ("GOOD", "1BAD=1", "BAD-NAME=1", "=1"):
        for _ in range(2):
            with pytest.raises(ValueError, match="invalid env entry"):
                validate_spec(spec("GOOD=1", bad))


def test_env_and_nodes_shared_by_many_specs_are_spelled_right_each_time() -> None:
    # a renderer hands one tuple to many specs; the text of each spec is still its own
    env = ("A=1", "B=2")
    nodes = (DeviceNode("/dev/x"), DeviceNode("/dev/y", host_path=CheckedHostPath("/dev/z")))
    for index in range(3000):  # more specs than texts are remembered, each with tuples of its own too
        own_env = (*env, f"C={index}")
        for edits in (
            ContainerEdits(env=env, device_nodes=nodes),
            ContainerEdits(env=own_env, device_nodes=(DeviceNode(f"/dev/n{index}"),)),
        ):
            spec = Spec("numadra.dev/claim", (Device(f"d{index}", edits),))
            assert spec.json_text() == _dumps(spec.to_json())
