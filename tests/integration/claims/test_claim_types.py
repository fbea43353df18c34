"""A ResourceClaim from the apiserver, with any field of any JSON type: a claim error, nothing else.

The claims driver reads the claim the kubelet layer fetched: its spec's requests, the allocation's
results and configs, its annotations and ``reservedFor``. Whatever the apiserver (or whoever
answers in its place) puts there, the driver's reading of it raises :class:`ClaimError` naming
the claim (and, for the checked shapes, the field), so one claim fails alone, never an
``AttributeError`` or ``TypeError`` that the batch's catch-all would turn into an internal error.
Every field of a claim that uses all of them is replaced by a value of each JSON type, and by
generated values.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.claims.consumers import other_consumers
from driver.claims.driver import reserved_pods
from driver.claims.selection import cpu_requests, select_devices
from driver.errors import ClaimError
from driver.kubelet.claims import check_claim
from tests.integration.claims._world import (
    DRIVER,
    GPU0,
    NODE,
    claim,
    cpu_result,
    make_inventory,
    opaque,
    ref_of,
    result,
)

UID = "00000000-0000-4000-8000-0000000000aa"
API = "numadra.dev/v1alpha1"
INVENTORY = make_inventory()


def _full() -> dict[str, Any]:
    """A claim that uses every field the driver reads."""
    obj = claim(
        UID,
        results=[result("gpu", GPU0), cpu_result("cpu", 1)],
        configs=[opaque({"apiVersion": API, "kind": "GpuConfig", "env": {"A": "1"}}, requests=["gpu"])],
        annotations={"resource.kubernetes.io/pod-claim-name": "x"},
    )
    obj["spec"]["devices"]["requests"][0]["firstAvailable"] = [{"name": "a"}]
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u1"}]
    return obj


FULL = _full()


def _fields(value: object, keys: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*keys, key)
            yield from _fields(child, (*keys, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*keys, index)
            yield from _fields(child, (*keys, index))


FIELDS = list(_fields(FULL))


def _printed(keys: tuple[str | int, ...]) -> str:
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def _replaced(keys: tuple[str | int, ...], value: object) -> dict[str, Any]:
    doc = copy.deepcopy(FULL)
    target: Any = doc
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return doc


def _read(obj: dict[str, Any]) -> int:
    """Everything the kubelet layer and the claims driver read of a claim before it is rendered
    (and the consumer count pinning reads); how many devices it has."""
    check_claim(ref_of(FULL), obj)
    other_consumers(obj)
    view = select_devices(obj, ref_of(FULL), driver_name=DRIVER, node_name=NODE, inventory=INVENTORY)
    cpu_requests(view)
    reserved_pods(obj)
    return len(view.devices)


def test_the_full_claim_is_read() -> None:
    """The reference claim is valid, so each refusal below comes from the one field replaced."""
    assert _read(copy.deepcopy(FULL)) == 2


@pytest.mark.parametrize("value", [None, True, 7, 1.5, "text", [1], {"a": 1}], ids=repr)
def test_every_field_of_each_type_gives_a_claim_error_or_none(value: object) -> None:
    """Each field replaced by a value of each JSON type: read, or refused with a ClaimError; a
    field of the spec's requests is named by its path."""
    refused = 0
    for keys in FIELDS:
        try:
            _read(_replaced(keys, value))
        except ClaimError as exc:
            refused += 1
            assert exc.claim_uid == UID
            printed = _printed(keys)
            if printed.startswith("spec.devices.requests") and not isinstance(value, str):
                assert printed.rsplit(".", 1)[0].split("[")[0] in exc.reason, (printed, exc.reason)
    assert refused > 0


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(index=st.integers(min_value=0, max_value=len(FIELDS) - 1), value=_JSON)
def test_any_value_anywhere_gives_a_claim_error_or_none(index: int, value: object) -> None:
    try:
        _read(_replaced(FIELDS[index], value))
    except ClaimError as exc:
        assert exc.claim_uid == UID
