"""The driver is SIGKILLed while a claim is prepared and restarted: nothing lost, nothing handed out twice."""

from __future__ import annotations

import time
from typing import Any

import pytest

from driver.plugin import ClaimRef
from harness.controlplane import wait_for
from harness.kubeletclient import KubeletClient
from tests.e2e.conftest import DRIVER, Cluster
from tests.e2e.test_claims import device_numa, generated_claim, numa_pod, numa_template

pytestmark = pytest.mark.e2e


def _start(cluster: Cluster, ns: str, name: str, numa: int | None = None) -> dict[str, Any]:
    cluster.admin.create(
        f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates", numa_template(name, numa=numa)
    )
    cluster.create_pod(ns, numa_pod(name, name))
    return cluster.wait_bound(ns, name)


def test_sigkill_and_restart_keeps_prepared_claims_and_never_double_allocates_cpus(
    cluster: Cluster, record_property: Any
) -> None:
    """SIGKILL, a pod arrives meanwhile, restart: same files/CDI IDs on re-prepare; disjoint new CPUs."""
    ns = cluster.new_namespace("restart")
    first = _start(cluster, ns, "first")
    first_claim = generated_claim(cluster, first)
    uid = first_claim["metadata"]["uid"]
    first_ids = cluster.prepared(first)["trainer"]
    first_cpus = cluster.claim_cpus(uid)
    files_before = {p.name: p.read_bytes() for p in cluster.claim_files(uid)}
    numa = device_numa(cluster)[first_claim["status"]["allocation"]["devices"]["results"][0]["device"]]

    assert cluster.driver is not None
    devices = cluster.published_devices()
    registrations = cluster.registrations()
    cluster.kill_driver()

    # while the driver is down a new pod lands (same NUMA node): kubelet's prepare fails and retries
    second = _start(cluster, ns, "second", numa=numa)
    cluster.wait_event(30, "a failed prepare while the driver is down", event="error", op="prepare",
                       uid=second["metadata"]["uid"])  # fmt: skip
    t0 = time.monotonic()
    cluster.start_driver()
    wait_for(lambda: cluster.registrations() > registrations, 30, "the restarted driver to register again")
    record_property("restart_to_registered_s", round(time.monotonic() - t0, 2))
    wait_for(lambda: cluster.published_devices() == devices, 10, "the slices of the restarted driver")

    # the prepared claim survived: journal entry and byte-identical files
    assert uid in cluster.journal_uids()
    assert {p.name: p.read_bytes() for p in cluster.claim_files(uid)} == files_before

    # kubelet re-sending NodePrepareResources (as after its own restart) gets the same CDI IDs
    registered = [e for e in cluster.events() if e.get("event") == "registered" and e.get("driver") == DRIVER]
    endpoint = registered[-1]["endpoint"]
    ref = ClaimRef(ns, first_claim["metadata"]["name"], uid)
    with KubeletClient() as kubelet:
        answer = kubelet.prepare(endpoint, [ref])
    entry = answer.claims[uid]
    assert not entry.error, entry.error
    assert sorted(i for d in entry.devices for i in d.cdi_device_ids) == sorted(first_ids)

    # kubelet's retry now succeeds; the new claim's CPUs are not the first claim's
    cluster.prepared(second, timeout=30)
    record_property("restart_to_retried_prepare_s", round(time.monotonic() - t0, 2))
    second_uid = generated_claim(cluster, second)["metadata"]["uid"]
    second_cpus = cluster.claim_cpus(second_uid)
    assert len(second_cpus) == 8
    assert not first_cpus & second_cpus, f"CPUs {sorted(first_cpus & second_cpus)} handed out twice"

    for name in ("first", "second"):
        cluster.delete_pod(ns, name)
    assert not {uid, second_uid} & cluster.journal_uids()
    assert cluster.claim_files(uid) == cluster.claim_files(second_uid) == []
