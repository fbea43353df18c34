"""Unit tests of opaque config decoding and precedence, request names and CPU quantities."""

from __future__ import annotations

from typing import Any

import pytest

from driver.claims.config import (
    API_VERSION,
    ConfigEntry,
    OpaqueConfig,
    applies_to_request,
    decode_parameters,
    effective_config,
)
from driver.claims.selection import parse_cpu_quantity
from driver.inventory.model import DeviceKind
from driver.names import (
    base_request_name,
    check_claim_name,
    check_claim_uid,
    check_namespace,
    check_request_name,
)
from driver.pinning.types import CpuMode


def _entry(
    kind: str, requests: tuple[str, ...] = (), source: str = "FromClaim", **fields: Any
) -> ConfigEntry:
    return ConfigEntry(
        requests, decode_parameters({"apiVersion": API_VERSION, "kind": kind, **fields}), source
    )


@pytest.mark.parametrize(
    ("config_requests", "result_request", "applies"),
    [
        pytest.param((), "gpu", True, id="empty-means-all"),
        pytest.param(("gpu",), "gpu", True, id="exact"),
        pytest.param(("gpu",), "gpu/big", True, id="parent-of-subrequest"),
        pytest.param(("gpu/big",), "gpu/big", True, id="exact-subrequest"),
        pytest.param(("gpu/small",), "gpu/big", False, id="other-subrequest"),
        pytest.param(("gpu/big",), "gpu", False, id="subrequest-does-not-cover-parent"),
        pytest.param(("nic",), "gpu", False, id="other-request"),
        pytest.param(("gp",), "gpu", False, id="prefix-is-not-parent"),
        pytest.param(("nic", "gpu"), "gpu/x", True, id="one-of-several"),
    ],
)
def test_applies_to_request(config_requests: tuple[str, ...], result_request: str, applies: bool) -> None:
    """A config targets empty=all, the exact request, or the parent of a <req>/<sub> result."""
    assert applies_to_request(config_requests, result_request) is applies


def test_claim_config_beats_class_config_regardless_of_list_order() -> None:
    """Class configs fold first, claim configs after; within each source later ones win."""
    entries = [
        _entry("CpuConfig", mode="shared", env={"A": "claim1"}),
        _entry("CpuConfig", ("cpu",), source="FromClass", mode="exclusive", env={"A": "class", "B": "class"}),
        _entry("CpuConfig", ("cpu",), env={"A": "claim2"}),
    ]
    eff = effective_config(entries, "cpu", DeviceKind.CPU)
    assert eff.mode is CpuMode.SHARED
    assert dict(eff.env) == {"A": "claim2", "B": "class"}


def test_config_applies_only_to_its_device_type() -> None:
    """GpuConfig never reaches a NIC; DeviceConfig reaches every type."""
    entries = [_entry("GpuConfig", env={"G": "1"}), _entry("DeviceConfig", env={"D": "1"})]
    assert dict(effective_config(entries, "x", DeviceKind.NIC).env) == {"D": "1"}
    assert dict(effective_config(entries, "x", DeviceKind.GPU).env) == {"G": "1", "D": "1"}


def test_default_effective_config() -> None:
    """No config means exclusive CPUs and no extra env."""
    eff = effective_config([], "cpu", DeviceKind.CPU)
    assert eff.mode is CpuMode.EXCLUSIVE
    assert dict(eff.env) == {}


def test_decode_good_config() -> None:
    """A valid CpuConfig decodes to its kind, env and mode."""
    cfg = decode_parameters(
        {"apiVersion": API_VERSION, "kind": "CpuConfig", "mode": "shared", "env": {"OMP_X": "4"}}
    )
    assert cfg == OpaqueConfig("CpuConfig", DeviceKind.CPU, (("OMP_X", "4"),), CpuMode.SHARED)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param(None, "got null", id="null"),
        pytest.param(True, "got boolean", id="bool"),
        pytest.param(3, "got number", id="number"),
        pytest.param({"kind": "GpuConfig"}, "apiVersion must be", id="no-api-version"),
        pytest.param({"apiVersion": API_VERSION}, "kind must be one of", id="no-kind"),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "GpuConfig", "mode": "shared"},
            "unknown field(s) mode",
            id="mode-on-gpu",
        ),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "CpuConfig", "mode": "Shared"}, "got 'Shared'", id="mode-case"
        ),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "GpuConfig", "env": {f"V{i}": "" for i in range(33)}},
            "at most 32",
            id="too-many-env",
        ),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "GpuConfig", "env": {"A": "x" * 1025}},
            "longer than 1024",
            id="long-value",
        ),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "GpuConfig", "env": {"A": "a\x00b"}}, "NUL", id="nul"
        ),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "GpuConfig", "env": {"lower": "x"}},
            "invalid variable name",
            id="lowercase-name",
        ),
    ],
)
def test_decode_rejects(params: Any, message: str) -> None:
    """Strict decoding refuses anything not in the schema, quoting the field."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_parameters(params)


@pytest.mark.parametrize(
    ("request_name", "base", "ok"),
    [
        pytest.param("gpu", "gpu", True, id="plain"),
        pytest.param("gpu/high-mem", "gpu", True, id="subrequest"),
        pytest.param("a/b/c", "a", False, id="two-slashes"),
        pytest.param("../x", "..", False, id="path-like"),
        pytest.param("GPU", "GPU", False, id="upper-case"),
        pytest.param("", "", False, id="empty"),
        pytest.param("gpu/", "gpu", False, id="empty-subrequest"),
        pytest.param("a" * 64, "a" * 64, False, id="too-long"),
    ],
)
def test_request_names(request_name: str, base: str, ok: bool) -> None:
    """Request names are DNS labels, optionally /sub; the base name drops the sub-request."""
    assert base_request_name(request_name) == base
    assert (check_request_name(request_name) == "") is ok


@pytest.mark.parametrize(
    ("check", "value", "ok"),
    [
        pytest.param(check_namespace, "kube-system", True, id="ns-ok"),
        pytest.param(check_namespace, "a/b", False, id="ns-slash"),
        pytest.param(check_namespace, "a.b", False, id="ns-dot"),
        pytest.param(check_claim_name, "pod-1.gpu", True, id="name-subdomain"),
        pytest.param(check_claim_name, "../x", False, id="name-path"),
        pytest.param(check_claim_name, "x" * 254, False, id="name-too-long"),
        pytest.param(check_claim_uid, "5f2c8a9e-0d1b-4c3a-9e8f-000000000001", True, id="uid-uuid"),
        pytest.param(check_claim_uid, "", False, id="uid-empty"),
        pytest.param(check_claim_uid, "a_b", False, id="uid-underscore"),
        pytest.param(check_claim_uid, "../a", False, id="uid-path"),
    ],
)
def test_name_checks(check: Any, value: str, ok: bool) -> None:
    """Names that reach file paths must match the apiserver's own rules."""
    assert (check(value) == "") is ok


@pytest.mark.parametrize(
    ("text", "count"),
    [pytest.param("4", 4, id="plain"), pytest.param("0", 0, id="zero"), pytest.param("3000m", 3, id="milli")],
)
def test_parse_cpu_quantity(text: str, count: int) -> None:
    """Whole CPU counts parse from plain and milli quantities."""
    assert parse_cpu_quantity(text) == count


@pytest.mark.parametrize("text", ["1500m", "1.5", "-1", "2k", ""])
def test_parse_cpu_quantity_rejects(text: str) -> None:
    """Fractions and foreign suffixes are refused."""
    with pytest.raises(ValueError, match="whole CPU count"):
        parse_cpu_quantity(text)
