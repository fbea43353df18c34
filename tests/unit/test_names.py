"""One set of name rules, applied as full matches everywhere a name is checked.

The attacker's inputs are names with a trailing newline: ``^...$`` with ``re.match`` accepted them
(``$`` matches before a final ``\\n``), so ``"numadra.dev\\n"`` became a driver name and
``"default\\n"`` a namespace that reached file names.
"""

from __future__ import annotations

import pytest

from cdi.naming import CdiNameError, transient_spec_file_name, validate_device_name, validate_vendor
from driver.claims.config import API_VERSION, decode_parameters
from driver.cli.discover import check_driver_name, check_node_name
from driver.errors import ConfigError
from driver.kubelet.translate import check_claims
from driver.names import (
    check_claim_name,
    check_claim_uid,
    check_namespace,
    check_request_name,
    is_c_identifier,
    is_claim_uid,
    is_dns_label,
    is_dns_subdomain,
)
from driver.plugin import ClaimRef
from driver.slices.validation import validate_slices

UID = "2f1c9b5e-8a7d-4c3b-9e1f-0a1b2c3d4e5f"


@pytest.mark.parametrize("suffix", ["\n", "\r\n", "\x00", " ", "/.."])
def test_the_rules_refuse_a_trailing_newline_or_junk(suffix: str) -> None:
    """Every rule of driver.names refuses a valid name with anything after it."""
    assert is_dns_label("default") and not is_dns_label("default" + suffix)
    assert is_dns_subdomain("numadra.dev") and not is_dns_subdomain("numadra.dev" + suffix)
    assert is_c_identifier("model") and not is_c_identifier("model" + suffix)
    assert is_claim_uid(UID) and not is_claim_uid(UID + suffix)


def test_the_length_limits_travel_with_the_rules() -> None:
    assert is_dns_label("a" * 63) and not is_dns_label("a" * 64)
    assert is_dns_subdomain("a." * 126 + "a") and not is_dns_subdomain("a." * 127)
    assert is_claim_uid("a" * 128) and not is_claim_uid("a" * 129)
    assert not is_c_identifier("x" * 33, 32)


@pytest.mark.parametrize("check", [check_driver_name, check_node_name], ids=["driver-name", "node-name"])
def test_cli_names_with_a_newline_are_refused(check: object) -> None:
    assert callable(check)
    with pytest.raises(ConfigError, match="not a"):
        check("numadra.dev\n")
    with pytest.raises(ConfigError):
        check("node1\n")


def test_claim_names_with_a_newline_are_refused() -> None:
    assert check_namespace("default\n")
    assert check_claim_name("gpu\n")
    assert check_claim_uid(UID + "\n")
    assert check_request_name("gpu\n")
    assert check_request_name("gpu/big\n")
    assert (
        not check_namespace("default") and not check_claim_name("gpu") and not check_request_name("gpu/big")
    )


@pytest.mark.parametrize(
    "ref",
    [
        ClaimRef(namespace="default\n", name="gpu", uid=UID),
        ClaimRef(namespace="default", name="gpu\n", uid=UID),
        ClaimRef(namespace="default", name="gpu", uid=UID + "\n"),
        ClaimRef(namespace="default", name="gpu", uid="a.b"),
    ],
    ids=["namespace", "name", "uid", "uid-with-dot"],
)
def test_kubelet_claim_refs_with_junk_are_rejected_per_claim(ref: ClaimRef) -> None:
    check = check_claims([ref, ClaimRef(namespace="default", name="ok", uid="u-ok")])
    assert [c.uid for c in check.valid] == ["u-ok"]
    assert "invalid claim reference" in check.rejected[ref.uid]


def test_cdi_names_with_a_newline_are_refused() -> None:
    with pytest.raises(CdiNameError):
        validate_vendor("numadra.dev\n")
    with pytest.raises(CdiNameError):
        validate_device_name("gpu-0\n")
    with pytest.raises(CdiNameError):
        transient_spec_file_name("numadra.dev/gpu", UID + "\n")


def test_config_env_names_with_a_newline_are_refused() -> None:
    with pytest.raises(ValueError, match="invalid variable name"):
        decode_parameters({"apiVersion": API_VERSION, "kind": "DeviceConfig", "env": {"FOO\n": "x"}})


def test_slice_attribute_names_with_a_newline_are_invalid() -> None:
    device = {"name": "gpu-0", "attributes": {"model\n": {"string": "x"}}}
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-numadra.dev-gpu"},
        "spec": {
            "driver": "numadra.dev",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }
    problems = validate_slices([obj])
    assert any("C identifier" in p for p in problems), problems
