"""A cluster that lacks a DRA feature: the driver names the gate, keeps publishing, claims behave.

Each scenario runs on a control plane of its own (``start_cluster``), with the gate off on
kube-apiserver, kube-scheduler and kube-controller-manager alike:

* ``DRAConsumableCapacity=false``: the apiserver stores the cpu devices without
  ``allowMultipleAllocations`` and request policies (and claims without capacity requests). The
  driver names the gate once (its log, a Warning Event on the Node, ``numadra_api_fields_dropped``,
  ``numadra state``), publishes the slices as kept, a GPU claim is prepared, and a claim for a cpu
  device, which the scheduler now hands out whole, is refused at prepare naming the gate. Then,
  ``--numa-node-list`` on the same apiserver (``DRAListTypeAttributes`` is alpha, off by
  default), on an apiserver of its own: the slices are refused with 422 and the driver names that
  gate and the flag.
* ``DRADeviceTaints=false`` (and ``DRADeviceTaintRules=false``, which kube-apiserver 1.37 requires
  with it): nothing is missing until a device is unhealthy; then its taint is dropped, the driver
  names the gate and leaves the device out of its slices, so a claim for it stays unschedulable
  until the device is reset.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from harness.hosttree import TOPOLOGIES, aer_fatal_text
from harness.poll import free_port, wait_for
from tests.e2e.conftest import (
    DRIVER,
    NODE,
    REPO,
    RESOURCE,
    Cluster,
    claim_pod,
    condition,
    start_cluster,
)

pytestmark = pytest.mark.e2e

CONSUMABLE = "DRAConsumableCapacity"
TAINTS = "DRADeviceTaints"
LISTS = "DRAListTypeAttributes"
EVENT_REASON = "ApiFieldsDropped"
#: the dgx node with an AER fatal counter on every GPU (0: healthy), so a test can raise one
DGX = dataclasses.replace(
    TOPOLOGIES["dgx"], gpus=tuple(dataclasses.replace(g, aer_fatal=0) for g in TOPOLOGIES["dgx"].gpus)
)


@dataclasses.dataclass
class GatedCluster:
    """A cluster of its own and the driver's metrics address."""

    cluster: Cluster
    metrics: str

    def log(self) -> list[dict[str, Any]]:
        """Every JSON line the driver runs of this cluster wrote so far (stdout and stderr)."""
        lines = []
        for path in sorted(self.cluster.root.glob("numadra-run-*")):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        lines.append(json.loads(line))
                    except ValueError:
                        continue
        return lines

    def named(self, message: str) -> list[dict[str, Any]]:
        return [entry for entry in self.log() if entry.get("event") == message]

    def node_events(self) -> list[dict[str, Any]]:
        return [
            e
            for e in self.cluster.admin.items("/api/v1/namespaces/default/events")
            if e["reason"] == EVENT_REASON and e["involvedObject"]["kind"] == "Node"
        ]

    def dropped_metric(self) -> dict[str, float]:
        """``numadra_api_fields_dropped`` per feature, scraped from the driver's /metrics."""
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        pattern = re.compile(r'^numadra_api_fields_dropped\{feature="([^"]+)"\} ([0-9.e+]+)$', re.M)
        return {feature: float(value) for feature, value in pattern.findall(text)}

    def state(self) -> str:
        """``numadra state`` on the node, as an operator runs it."""
        argv = [sys.executable, "-m", "driver.cli", "state", "--plugin-dir", str(self.cluster.plugin_dir),
                "--cdi-dir", str(self.cluster.cdi_dir), "--node-name", NODE]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout


def _gated(
    feature_gates: dict[str, bool], *driver_args: str, slices_expected: bool = True
) -> Iterator[GatedCluster]:
    address = f"127.0.0.1:{free_port()}"
    with start_cluster(
        topology=DGX,
        feature_gates=feature_gates,
        driver_args=("--metrics-address", address, *driver_args),
        slices_expected=slices_expected,
    ) as cluster:
        yield GatedCluster(cluster, address)


@pytest.fixture(scope="module")
def no_consumable() -> Iterator[GatedCluster]:
    yield from _gated({CONSUMABLE: False})


@pytest.fixture(scope="module")
def lists_without_their_gate() -> Iterator[GatedCluster]:
    """The apiserver's default gates (DRAListTypeAttributes is alpha, off) and --numa-node-list."""
    yield from _gated({}, "--numa-node-list", slices_expected=False)


@pytest.fixture(scope="module")
def no_taints() -> Iterator[GatedCluster]:
    yield from _gated({TAINTS: False, "DRADeviceTaintRules": False})


def _devices(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in cluster.slices() for d in s["spec"].get("devices", [])}


def _claim_pod(cluster: Cluster, namespace: str, name: str, request: dict[str, Any]) -> dict[str, Any]:
    """A claim of one request ``req`` and a pod using it; returns the claim as the apiserver stored it."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "req", "exactly": request}]}},
    }
    stored = cluster.admin.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", claim)
    cluster.create_pod(namespace, claim_pod(name, ["req"], claim=name))
    return dict(stored)


def _prepare_error(cluster: Cluster, pod: dict[str, Any], naming: str) -> str:
    """drakubelet's first failed prepare of ``pod`` whose error names ``naming``: the text the kubelet
    would show. Earlier failures are retried, as the kubelet retries them: the Node authorizer may
    refuse the claim read for as long as its graph has not seen the pod bound to this node."""
    uid = pod["metadata"]["uid"]
    seen: list[str] = []

    def failed() -> str | None:
        cluster.check_running()
        seen[:] = [
            str(e["error"])
            for e in cluster.events()
            if e.get("event") == "error" and e.get("op") == "prepare" and e.get("uid") == uid
        ]
        return next((error for error in seen if naming in error), None)

    try:
        return wait_for(failed, 60, f"a failed prepare of pod {uid} naming {naming}", interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the prepares that failed said: {seen}") from None


def _finish(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.admin.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})
    cluster.admin.delete(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")


# -- DRAConsumableCapacity off -----------------------------------------------------------------------


def test_consumable_capacity_off_is_named_once_and_slices_are_published(no_consumable: GatedCluster) -> None:
    gated, cluster = no_consumable, no_consumable.cluster
    devices = wait_for(
        lambda: (d := _devices(cluster)) and {"cpu-numa0", "cpu-numa1"} <= set(d) and d, 30, "the cpu devices"
    )
    for name in ("cpu-numa0", "cpu-numa1"):
        assert "allowMultipleAllocations" not in devices[name]
        assert all("requestPolicy" not in c for c in devices[name]["capacity"].values())
    assert any(name.startswith("gpu-") for name in devices)

    wait_for(lambda: gated.named("apiserver dropped fields"), 30, "the driver's warning")
    (warning,) = gated.named("apiserver dropped fields")
    assert warning["feature"] == CONSUMABLE, warning
    assert warning["fields"] == ["devices[].allowMultipleAllocations", "devices[].capacity[].requestPolicy"]
    (event,) = wait_for(gated.node_events, 30, "the Node event")
    node = cluster.admin.get(f"/api/v1/nodes/{NODE}")
    assert (
        event["involvedObject"]["name"] == NODE and event["involvedObject"]["uid"] == node["metadata"]["uid"]
    )
    assert event["type"] == "Warning" and f"feature gate {CONSUMABLE} is off" in event["message"]
    metric = wait_for(
        lambda: (m := gated.dropped_metric()).get(CONSUMABLE) and m, 30, "numadra_api_fields_dropped"
    )
    assert metric[CONSUMABLE] == 2 and sum(metric.values()) == 2, metric
    out = gated.state()
    assert "API FEATURES MISSING" in out and f"  {CONSUMABLE}: the apiserver dropped" in out, out
    # once per cause, though every slice of the pool lost the same fields
    assert len(gated.named("apiserver dropped fields")) == 1 and len(gated.node_events()) == 1


def test_consumable_capacity_off_still_prepares_a_gpu(no_consumable: GatedCluster) -> None:
    cluster = no_consumable.cluster
    ns = cluster.new_namespace("gpu")
    _claim_pod(cluster, ns, "gpu", {"deviceClassName": "gpu.numadra.dev"})
    pod = cluster.wait_bound(ns, "gpu")
    ids = cluster.prepared(pod)["app"]
    assert len(ids) == 1 and ids[0].startswith(f"{DRIVER}/claim="), ids
    cluster.delete_pod(ns, "gpu")
    cluster.admin.delete(f"{RESOURCE}/namespaces/{ns}/resourceclaims/gpu")


def test_consumable_capacity_off_refuses_a_whole_cpu_device_naming_the_gate(
    no_consumable: GatedCluster,
) -> None:
    """The apiserver dropped the claim's cpus request too; the scheduler gives a whole cpu device."""
    cluster = no_consumable.cluster
    ns = cluster.new_namespace("cpu")
    stored = _claim_pod(
        cluster, ns, "cpus", {"deviceClassName": "cpu.numadra.dev", "capacity": {"requests": {"cpus": "2"}}}
    )
    assert "capacity" not in stored["spec"]["devices"]["requests"][0]["exactly"], stored
    pod = cluster.wait_bound(ns, "cpus")
    (result,) = cluster.claim(ns, "cpus")["status"]["allocation"]["devices"]["results"]
    assert result["device"].startswith("cpu-numa") and "shareID" not in result, result
    error = _prepare_error(cluster, pod, CONSUMABLE)
    assert "allocated whole" in error, error
    print(f"prepare refused: {error}")
    assert stored["metadata"]["uid"] not in cluster.journal_uids()
    _finish(cluster, ns, "cpus")


def test_a_list_attribute_without_its_gate_names_the_gate_and_the_flag(
    lists_without_their_gate: GatedCluster,
) -> None:
    """--numa-node-list on an apiserver without DRAListTypeAttributes: 422, said once, with the flag."""
    gated, cluster = lists_without_their_gate, lists_without_their_gate.cluster
    wait_for(lambda: gated.named("apiserver refused a slice: feature gate off"), 60, "the refusal")
    wait_for(lambda: any(LISTS in e["message"] for e in gated.node_events()), 30, "the Node event")
    (refused,) = gated.named("apiserver refused a slice: feature gate off")
    assert refused["feature"] == LISTS and refused["fields"] == ["devices[].attributes[].ints"], refused
    (event,) = [e for e in gated.node_events() if LISTS in e["message"]]
    assert "remove --numa-node-list" in event["message"]
    assert wait_for(lambda: gated.dropped_metric().get(LISTS), 30, "the metric") == 1
    assert f"{LISTS}: the apiserver refused a slice that needs" in gated.state()
    assert all("ints" not in json.dumps(d) for d in _devices(cluster).values())  # nothing stored


# -- DRADeviceTaints off ------------------------------------------------------------------------------


def test_device_taints_off_withholds_an_unhealthy_gpu_until_it_is_reset(no_taints: GatedCluster) -> None:
    gated, cluster = no_taints, no_taints.cluster
    gpus = sorted(name for name in _devices(cluster) if name.startswith("gpu-"))
    broken = gpus[0]
    bus = next(g.bus_id for g in DGX.gpus if f"gpu-{g.bus_id.replace(':', '-').replace('.', '-')}" == broken)
    assert gated.node_events() == [] and not gated.named("apiserver dropped fields")  # nothing sent yet

    aer = cluster.host / "sys/bus/pci/devices" / bus / "aer_dev_fatal"
    aer.write_text(aer_fatal_text(1) + "\n")
    wait_for(lambda: broken not in _devices(cluster), 30, f"{broken} left out of the slices", interval=0.2)
    assert set(gpus) - {broken} <= set(_devices(cluster)), "the healthy GPUs stay published"
    assert not any("taints" in d for d in _devices(cluster).values())
    (warning,) = wait_for(lambda: gated.named("apiserver dropped fields"), 30, "the driver's warning")
    assert warning["feature"] == TAINTS and warning["fields"] == ["devices[].taints"], warning
    (event,) = wait_for(gated.node_events, 30, "the Node event")
    assert f"feature gate {TAINTS} is off" in event["message"]
    assert wait_for(lambda: gated.dropped_metric().get(TAINTS), 30, "the metric") == 1

    ns = cluster.new_namespace("taint")
    selector = {"cel": {"expression": f'device.attributes["resource.kubernetes.io"].pciBusID == "{bus}"'}}
    _claim_pod(cluster, ns, "broken", {"deviceClassName": "gpu.numadra.dev", "selectors": [selector]})

    def gave_up() -> dict[str, Any] | None:
        cond = condition(cluster.pod(ns, "broken"), "PodScheduled")
        return cond if cond is not None and cond["status"] == "False" else None

    cond = wait_for(gave_up, 60, "the scheduler to give up on the broken GPU", interval=0.2)
    assert cond["reason"] == "Unschedulable", cond

    aer.write_text(aer_fatal_text(0) + "\n")  # a new device instance after a reset
    wait_for(lambda: broken in _devices(cluster), 30, f"{broken} published again", interval=0.2)
    pod = cluster.wait_bound(ns, "broken", timeout=60)
    assert cluster.prepared(pod)["app"], "the reset GPU is prepared"
    (result,) = cluster.claim(ns, "broken")["status"]["allocation"]["devices"]["results"]
    assert result["device"] == broken
    cluster.delete_pod(ns, "broken")
    cluster.admin.delete(f"{RESOURCE}/namespaces/{ns}/resourceclaims/broken")
    assert len(gated.node_events()) == 1, "said once"


# -- every gate at its 1.37 default ------------------------------------------------------------------


def test_the_session_cluster_misses_no_feature_numadra_uses(cluster: Cluster) -> None:
    """No false alarm: with the 1.37.2 defaults the apiserver keeps every field the driver sends."""
    gated = GatedCluster(cluster, "")
    wait_for(cluster.slices, 30, "our slices")
    assert gated.node_events() == []
    assert not gated.named("apiserver dropped fields")
    assert "the apiserver kept every field of this node's slices" in gated.state()
