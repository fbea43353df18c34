"""The two pinning examples in deploy/examples are well-formed and mean what their comments say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from driver.claims.config import decode_parameters
from driver.pinning.planner import CpuPlanner
from driver.pinning.types import CpuMode, CpuRequest
from harness.synthetic import synthetic_inventory

EXAMPLES = Path(__file__).resolve().parents[3] / "deploy" / "examples"
NUMA = "resource.kubernetes.io/numaNode"


def _load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    return template, pod


def _requests(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r["exactly"] for r in template["spec"]["spec"]["devices"]["requests"]}


def _claim_refs(pod: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """container name -> [(pod claim name, request)] over containers and init containers."""
    containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    return {
        c["name"]: [(r["name"], r["request"]) for r in c["resources"].get("claims", [])] for c in containers
    }


@pytest.mark.parametrize(
    "name", ["numa-aligned-gpu-nic-cpu.yaml", "sidecar-shared-pool.yaml"], ids=["aligned", "sidecar"]
)
def test_container_references_exist(name: str) -> None:
    """Every container's claim reference names a pod claim of the template and an existing request."""
    template, pod = _load(name)
    claims = {c["name"]: c for c in pod["spec"]["resourceClaims"]}
    assert {c["resourceClaimTemplateName"] for c in claims.values()} == {template["metadata"]["name"]}
    requests = _requests(template)
    refs = _claim_refs(pod)
    assert refs
    for container, pairs in refs.items():
        assert pairs, f"{container} references no request"
        for claim, request in pairs:
            assert claim in claims
            assert request in requests, f"{container} references unknown request {request}"
    for spec in requests.values():
        assert spec["deviceClassName"].endswith(".numadra.dev")


def test_aligned_example_constrains_all_three_to_one_numa_node() -> None:
    """gpu(1), nic(1) and cpus(8 via capacity) sit under one matchAttribute numaNode constraint."""
    template, pod = _load("numa-aligned-gpu-nic-cpu.yaml")
    requests = _requests(template)
    assert requests["gpu"]["deviceClassName"] == "gpu.numadra.dev" and requests["gpu"]["count"] == 1
    assert requests["nic"]["deviceClassName"] == "nic.numadra.dev" and requests["nic"]["count"] == 1
    assert requests["cpus"]["deviceClassName"] == "cpu.numadra.dev"
    assert requests["cpus"]["capacity"]["requests"]["cpus"] == "8"
    (constraint,) = template["spec"]["spec"]["devices"]["constraints"]
    assert constraint["matchAttribute"] == NUMA
    assert set(constraint["requests"]) == {"gpu", "nic", "cpus"}
    (trainer,) = _claim_refs(pod).values()
    assert {r for _, r in trainer} == {"gpu", "nic", "cpus"}


def test_sidecar_example_is_exclusive_app_plus_shared_pool() -> None:
    """The app alone uses the exclusive request; two sidecars share the request configured shared."""
    template, pod = _load("sidecar-shared-pool.yaml")
    devices = template["spec"]["spec"]["devices"]
    (config,) = devices["config"]
    assert config["requests"] == ["sidecars"]
    assert config["opaque"]["driver"] == "numadra.dev"
    assert decode_parameters(config["opaque"]["parameters"]).mode is CpuMode.SHARED  # claims/ schema
    (constraint,) = devices["constraints"]
    assert constraint["matchAttribute"] == NUMA and set(constraint["requests"]) == {"app", "sidecars"}
    by_request: dict[str, list[str]] = {}
    for container, pairs in _claim_refs(pod).items():
        for _, request in pairs:
            by_request.setdefault(request, []).append(container)
    assert by_request["app"] == ["app"]
    assert len(by_request["sidecars"]) == 2


def test_sidecar_example_plans_disjoint_slice_and_shared_pool() -> None:
    """Planned on one node, the app's 4 CPUs and the sidecars' 2-CPU pool do not overlap."""
    template, _ = _load("sidecar-shared-pool.yaml")
    requests = _requests(template)
    cpu_requests = [
        CpuRequest("app", (0,), int(requests["app"]["capacity"]["requests"]["cpus"])),
        CpuRequest(
            "sidecars", (0,), int(requests["sidecars"]["capacity"]["requests"]["cpus"]), CpuMode.SHARED
        ),
    ]
    inventory = synthetic_inventory(nodes=2, cores_per_node=8)
    app, sidecars = CpuPlanner(lambda: inventory).plan("uid", cpu_requests, taken=()).assignments
    assert len(app.cpus) == 4 and len(sidecars.cpus) == 2
    assert not app.cpus & sidecars.cpus
    assert app.mems == sidecars.mems == frozenset({0})
