"""validate_slices finds every kind of limit violation the apiserver would reject."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from driver.inventory.model import Inventory
from driver.kube.quantity import format_quantity
from driver.slices.builder import build_slices
from driver.slices.limits import clip_utf8, sanitize_subdomain
from driver.slices.validation import validate_slices
from tests.unit.inventory.trees import inventory

Slices = list[dict[str, Any]]


def _base() -> Slices:
    return build_slices(inventory("workstation"), node_name="ws")


def _gpu(s: Slices) -> dict[str, Any]:
    dev: dict[str, Any] = s[0]["spec"]["devices"][0]
    return dev


def _many(n: int, tainted: bool) -> Slices:
    s = _base()
    template = _gpu(s)
    devices = []
    for i in range(n):
        d = copy.deepcopy(template)
        d["name"] = f"gpu-{i}"
        if tainted and i == 0:
            d["taints"] = [{"key": "k", "effect": "NoSchedule"}]
        devices.append(d)
    s[0]["spec"]["devices"] = devices
    return s


def _set(path: Callable[[Slices], dict[str, Any]], key: str, value: Any) -> Callable[[], Slices]:
    def make() -> Slices:
        s = _base()
        path(s)[key] = value
        return s

    return make


def _attrs(s: Slices) -> dict[str, Any]:
    attrs: dict[str, Any] = _gpu(s)["attributes"]
    return attrs


def _pool(s: Slices) -> dict[str, Any]:
    pool: dict[str, Any] = s[0]["spec"]["pool"]
    return pool


def _second_slice() -> Slices:
    s = _base()
    other = copy.deepcopy(s[0])
    other["metadata"]["name"] = "ws-numadra-dev-1"
    other["spec"]["pool"]["generation"] = 2
    return [s[0], other]


def _too_many_attributes() -> Slices:
    s = _base()
    for i in range(30):
        _attrs(s)[f"extra{i}"] = {"int": i}
    return s


def _duplicate_device() -> Slices:
    s = _base()
    s[0]["spec"]["devices"].append(copy.deepcopy(_gpu(s)))
    return s


CASES = [
    pytest.param(_set(_attrs, "productName", {"string": "é" * 33}), "longer than 64 bytes", id="long-string"),
    pytest.param(_set(_attrs, "bad-name", {"int": 1}), "C identifier", id="attribute-hyphen"),
    pytest.param(_set(_attrs, "x" * 33, {"int": 1}), "C identifier", id="attribute-too-long"),
    pytest.param(_set(_attrs, "Bad_Domain/x", {"int": 1}), "invalid domain", id="bad-domain"),
    pytest.param(_set(_attrs, "two", {"int": 1, "string": "a"}), "exactly one value", id="two-values"),
    pytest.param(_set(_attrs, "big", {"int": 2**63}), "64-bit", id="int-overflow"),
    pytest.param(_set(_attrs, "flag", {"bool": "yes"}), "not a bool", id="bool-type"),
    pytest.param(_set(_attrs, "empty", {"strings": []}), "empty list", id="empty-list"),
    pytest.param(_set(_gpu, "name", "GPU_0"), "DNS label", id="device-name"),
    pytest.param(_set(_gpu, "capacity", {"memory": {"value": "lots"}}), "invalid quantity", id="quantity"),
    pytest.param(
        _set(_gpu, "nodeAllocatableResources", {"cpu": {"mapping": {"capacityKey": "cpus"}}}),
        "unknown capacity",
        id="node-allocatable-key",
    ),
    pytest.param(
        _set(_gpu, "taints", [{"key": "k", "effect": "PreferNoSchedule"}]), "effect", id="taint-effect"
    ),
    pytest.param(_set(_pool, "resourceSliceCount", 2), "resourceSliceCount 2 but 1", id="slice-count"),
    pytest.param(_set(_pool, "resourceSliceCount", 0), "must be > 0", id="slice-count-zero"),
    pytest.param(lambda: _many(129, tainted=False), "129 devices, at most 128", id="129-devices"),
    pytest.param(lambda: _many(65, tainted=True), "65 devices, at most 64", id="65-tainted"),
    pytest.param(_too_many_attributes, "attributes+capacities, at most 32", id="33-attributes"),
    pytest.param(_duplicate_device, "used twice", id="duplicate-device"),
    pytest.param(_second_slice, "disagree on pool.generation", id="generation-mismatch"),
    pytest.param(
        lambda: [{**_base()[0], "metadata": {"name": "Not_A_Name"}}], "metadata.name", id="slice-name"
    ),
]


@pytest.mark.parametrize(("make", "expected"), CASES)
def test_violation_is_reported(make: Callable[[], Slices], expected: str) -> None:
    """Each broken slice yields a problem that names the violated rule."""
    problems = validate_slices(make())
    assert any(expected in p for p in problems), problems


def test_valid_limits_pass() -> None:
    """128 untainted devices and 64 tainted ones are exactly at the limits and pass."""
    assert validate_slices(_many(128, tainted=False)) == []
    assert validate_slices(_many(64, tainted=True)) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(0, "0", id="zero"),
        pytest.param(999, "999", id="small"),
        pytest.param(1000, "1k", id="decimal-k"),
        pytest.param(2_000_000, "2M", id="decimal-M"),
        pytest.param(1536, "1536", id="not-multiple"),
        pytest.param(1500, "1500", id="not-multiple-of-1000"),
        pytest.param(2 * 1024**2, "2Mi", id="2Mi"),
        pytest.param(24684092 * 1024, "24684092Ki", id="meminfo"),
        pytest.param(1024**4, "1Ti", id="1Ti"),
        pytest.param(1024**7, "1024Ei", id="beyond-Ei"),
    ],
)
def test_format_quantity_canonical(value: int, expected: str) -> None:
    """The apiserver's canonical form (checked against kube-apiserver 1.37): exact binary, else decimal."""
    assert format_quantity(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("short", "short", id="short"),
        pytest.param("a" * 70, "a" * 64, id="ascii"),
        pytest.param("a" + "€" * 30, "a" + "€" * 21, id="3-byte-boundary"),
        pytest.param("nul\x00and\ttab", "nulandtab", id="control-chars"),
    ],
)
def test_clip_utf8(text: str, expected: str) -> None:
    """Strings are clipped to 64 bytes without splitting a character, control characters dropped."""
    assert clip_utf8(text) == expected
    assert len(clip_utf8(text).encode()) <= 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("Node_1.Example.COM", "node-1.example.com", id="case-underscore"),
        pytest.param("-a..b-", "a.b", id="empty-labels"),
        pytest.param("!!!", "x", id="nothing-left"),
    ],
)
def test_sanitize_subdomain(text: str, expected: str) -> None:
    """Any text becomes a valid DNS subdomain."""
    assert sanitize_subdomain(text) == expected


def test_empty_pool_is_valid() -> None:
    """An empty inventory's single slice validates."""
    assert validate_slices(build_slices(Inventory(), node_name="n")) == []


def test_malformed_slice_is_reported_not_crashed() -> None:
    """A slice without spec or metadata yields problems instead of an exception."""
    problems = validate_slices([{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"}])
    assert any("metadata.name" in p for p in problems)
    assert any("spec.driver" in p for p in problems)
    assert any("resourceSliceCount" in p for p in problems)
