"""A slices file given to ``numadra explain``, with any field of any JSON type: devices, or a
ConfigError naming the field; never a traceback."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.errors import ConfigError
from driver.explain.devices import devices_from_slices

SLICE: dict[str, Any] = {
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-numadra.dev-0"},
    "spec": {
        "driver": "numadra.dev",
        "nodeName": "node-a",
        "pool": {"name": "node-a"},
        "devices": [
            {
                "name": "cpu-numa0",
                "attributes": {"type": {"string": "cpu"}, "cpuCount": {"int": 8}, "smt": {"bool": True}},
                "capacity": {"cpus": {"value": "8"}},
                "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
                "allowMultipleAllocations": True,
            }
        ],
    },
}


def _fields(value: object, keys: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    out: list[tuple[str | int, ...]] = []
    children = (
        value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    )
    for key, child in children:
        out.append((*keys, key))
        out += _fields(child, (*keys, key))
    return out


FIELDS = _fields(SLICE)


def _replaced(keys: tuple[str | int, ...], value: object) -> dict[str, Any]:
    doc = copy.deepcopy(SLICE)
    target: Any = doc
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return doc


def test_the_reference_slice_reads() -> None:
    (device,) = devices_from_slices(copy.deepcopy(SLICE))
    assert device.attribute("numadra.dev/cpuCount") == 8


@pytest.mark.parametrize("value", [None, True, 7, 1.5, "text", [1], {"a": 1}], ids=repr)
def test_each_field_of_each_type(value: object) -> None:
    refused = 0
    for keys in FIELDS:
        try:
            devices_from_slices(_replaced(keys, value))
        except ConfigError as exc:
            refused += 1
            assert str(exc)  # names the field (ours) or the device (the quantity parser)
    assert refused > 0


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(index=st.integers(min_value=0, max_value=len(FIELDS) - 1), value=_JSON)
def test_any_value_anywhere(index: int, value: object) -> None:
    try:
        devices = devices_from_slices(_replaced(FIELDS[index], value))
    except ConfigError as exc:
        assert str(exc)
        return
    assert all(isinstance(d.name, str) for d in devices)
