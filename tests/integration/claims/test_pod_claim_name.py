"""A hostile pod-claim-name annotation never reaches the metadata mount's container path.

Anyone who may edit a ResourceClaim sets its annotations; the value went unchecked into
``/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/<value>/...`` (issue 13).
"""

from __future__ import annotations

import pytest

from driver.claims.metadata import container_path, pod_claim_name_problem
from tests.integration.claims._world import DRIVER, GPU0, World, claim, result

pytestmark = pytest.mark.fault

UID = "5f2c8a9e-0d1b-4c3a-9e8f-0000000000c1"
HOSTILE = [
    "../../../etc",
    "..",
    "gpu/../../x",
    "gpu\x00evil",
    "gpu\n",
    "gpu\nx",
    "Gpu",
    "a" * 64,
    "-gpu",
    "gpu_1",
    " gpu",
]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_values_skip_the_metadata_with_a_warning(
    world: World, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    obj = claim(
        UID,
        "pod-1-gpu-x7k2",
        results=[result("gpu", GPU0)],
        annotations={"resource.kubernetes.io/pod-claim-name": value},
    )
    ref = world.getter.add(obj)
    got = world.driver().prepare_claims([ref])[UID]
    assert got.ok, got.error  # the devices are prepared: metadata is optional
    assert world.cdi_files() == [f"{DRIVER}_claim_{UID}.json"]
    spec = (world.cdi_dir / f"{DRIVER}_claim_{UID}.json").read_text()
    assert '"mounts"' not in spec  # no metadata mount, so no container path built from the value
    assert not (world.plugin_dir / "dra-device-metadata").exists()
    out = capsys.readouterr().out
    assert "claim prepared without device metadata" in out
    assert "is not a DNS label" in out and UID in out


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_container_path_refuses_them_too(value: str) -> None:
    """The path builder itself refuses, for any caller that did not check first."""
    from driver.claims.selection import ClaimView

    view = ClaimView(namespace="default", name="c", uid=UID, devices=(), pod_claim_name=value)
    assert pod_claim_name_problem(value)
    with pytest.raises(ValueError, match="is not a DNS label"):
        container_path(view, "gpu", DRIVER)


@pytest.mark.parametrize("value", ["gpu", "g", "gpu-1", "a" * 63, "0gpu"])
def test_dns_labels_pass(value: str) -> None:
    assert pod_claim_name_problem(value) == ""
