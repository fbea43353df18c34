"""Our ResourceSlices against the real kube-apiserver: strict validation, inventory match, wipe repair."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from harness.controlplane import wait_for
from tests.e2e.conftest import DRIVER, NODE, NODE_NAME_EXTRA, REPO, RESOURCE, Cluster

pytestmark = pytest.mark.e2e


def _discovered(cluster: Cluster) -> list[dict[str, Any]]:
    """``numadra discover -o json`` for the same host tree and node: what should be published."""
    out = subprocess.run(
        [sys.executable, "-m", "driver.cli", "discover", "--host-root", str(cluster.host),
         "--node-name", NODE, "-o", "json"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return list(json.loads(out)["items"])


def _devices(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def test_versions_of_the_real_components(cluster: Cluster) -> None:
    """The apiserver we talk to is the v1.37.2 build (logged with every component's version)."""
    version = cluster.admin.get("/version")
    print(f"apiserver /version: {version['gitVersion']} {version['goVersion']}; "
          f"binaries: {cluster.plane.versions()}; startup: {cluster.timings}")  # fmt: skip
    assert version["gitVersion"] == "v1.37.2"
    assert cluster.plane.timings["control_plane_s"] > 0


def test_slices_match_the_inventory_and_pass_strict_validation(cluster: Cluster) -> None:
    """Every published device equals the discover output; each slice re-submits cleanly with Strict."""
    slices = cluster.slices()
    expected = _discovered(cluster)
    assert _devices(slices) == _devices(expected), "published devices differ from `numadra discover`"
    assert {s["spec"]["pool"]["name"] for s in slices} == {NODE}
    for obj in slices:
        assert obj["spec"]["driver"] == DRIVER
        assert obj["metadata"]["ownerReferences"][0]["kind"] == "Node"
        # the exact stored object, back through the apiserver's strict decoder (dry run: no change)
        cluster.admin.put(
            f"{RESOURCE}/resourceslices/{obj['metadata']['name']}",
            obj,
            fieldValidation="Strict",
            dryRun="All",
        )


def test_policy_rejects_a_slice_for_another_node(cluster: Cluster) -> None:
    """The deploy/ admission policy stops the driver's identity from writing another node's slice."""
    from harness.controlplane import ApiClient, ApiError

    as_driver = ApiClient(cluster.plane.server, cluster.driver_token, cluster.plane.ca_file)
    review = as_driver.create(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    user = review["status"]["userInfo"]
    assert user["username"] == "system:serviceaccount:numadra-system:numadra"
    assert user["extra"][NODE_NAME_EXTRA] == [NODE]
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "foreign-node-slice"},
        "spec": {"driver": DRIVER, "nodeName": "other-node", "pool": {"name": "other-node", "generation": 1,
                 "resourceSliceCount": 1}, "devices": []},
    }  # fmt: skip
    with pytest.raises(ApiError) as err:
        as_driver.create(f"{RESOURCE}/resourceslices", foreign, dryRun="All")
    # a ValidatingAdmissionPolicy denial is 422 Invalid (RBAC alone would have allowed it)
    assert err.value.status == 422
    assert "numadra-resourceslices" in str(err.value)
    assert "may not modify resourceslices on node 'other-node'" in str(err.value)


def test_wiped_slices_are_repaired_within_5s(cluster: Cluster, record_property: Any) -> None:
    """Deleting all our slices (kubelet's wipe) is undone by the driver within 5 s."""
    old = cluster.slices()
    before = _devices(old)
    t0 = time.monotonic()
    cluster.admin.request(
        "DELETE", f"{RESOURCE}/resourceslices", query={"fieldSelector": f"spec.nodeName={NODE}"}
    )
    wait_for(lambda: _devices(cluster.slices()) == before, 5.0, "the slices to be re-published")
    seconds = time.monotonic() - t0
    old_uids = {s["metadata"]["uid"] for s in old}
    assert not old_uids & {s["metadata"]["uid"] for s in cluster.slices()}, "the slices were never deleted"
    record_property("slice_repair_s", round(seconds, 2))
    print(f"slices repaired in {seconds:.2f}s")


def test_capacity_quantities_are_stored_as_written(cluster: Cluster) -> None:
    """format_quantity writes the apiserver's canonical form, so a publish never sees a false diff."""
    from driver.kube.quantity import format_quantity

    values = [0, 999, 1000, 1536, 2_000_000, 2048, 2**30, 1000 * 1024, 24684092 * 1024, 3 * 10**12]
    devices = [
        {"name": f"q{i}", "capacity": {"c": {"value": format_quantity(v)}}} for i, v in enumerate(values)
    ]
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "quantity-check"},
        "spec": {
            "driver": "quantity-check.numadra.dev",
            "nodeName": NODE,
            "pool": {"name": "quantity-check", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    stored = cluster.admin.request(
        "POST", "/apis/resource.k8s.io/v1/resourceslices", body, query={"dryRun": "All"}
    )
    assert [d["capacity"]["c"]["value"] for d in stored["spec"]["devices"]] == [
        d["capacity"]["c"]["value"] for d in devices
    ]
