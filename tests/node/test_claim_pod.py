"""(a) A pod with a cpu.numadra.dev claim runs under the real kubelet, pinned, with its CDI edits."""

from __future__ import annotations

import json
import os
import time

import pytest

from driver.claims.metadata import CONTAINER_DIR
from driver.pinning.types import ENV_CLAIM_UID, ENV_CPUS, ENV_MEMS, format_cpulist
from tests.node.conftest import DRIVER, NodeCluster, busybox_pod, figure

pytestmark = pytest.mark.node


def test_claim_pod_runs_pinned_with_cdi_env_and_device_metadata(node: NodeCluster) -> None:
    """Inside the container: the CDI env, the KEP-5304 metadata file, and /proc/self/status
    Cpus_allowed_list / Mems_allowed_list equal to the claim's CPUs and NUMA node."""
    ns = node.new_namespace("claim")
    try:
        node.create_template(ns, "one-cpu", cpus=1)
        t0 = time.monotonic()
        node.create_pod(ns, busybox_pod("p", "one-cpu"))
        pod = node.wait_running(ns, "p")
        figure("pod with a claim: creation to Running (s)", round(time.monotonic() - t0, 2))

        claim = node.claim_of(pod)
        uid = claim["metadata"]["uid"]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == DRIVER and result["device"].startswith("cpu-numa")
        numa = int(result["device"].removeprefix("cpu-numa"))
        pinning = node.claim_pinning(uid)
        assert len(pinning.cpus) == 1
        assert pinning.cpus <= os.sched_getaffinity(0) | set(range(os.cpu_count() or 1))
        assert pinning.mems == {numa}
        assert uid in node.journal_uids()

        cid = node.container_id(pod)
        # the CDI env edits, as the container sees them
        env = dict(line.split("=", 1) for line in node.exec(cid, "env").splitlines() if "=" in line)
        assert env[ENV_CLAIM_UID] == uid
        assert env[ENV_CPUS] == format_cpulist(pinning.cpus)
        assert env[ENV_MEMS] == format_cpulist(pinning.mems)
        # the device metadata (KEP-5304) at its well-known path for a template claim
        path = f"{CONTAINER_DIR}/resourceclaimtemplates/cpus/cpus/{DRIVER}-metadata.json"
        stream = [json.loads(line) for line in node.exec(cid, "cat", path).splitlines() if line.strip()]
        assert stream and stream[0]["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
        assert result["device"] in json.dumps(stream[0])
        # the pinning: a process started in the container, and the container's first process
        assert node.proc_status(cid) == pinning
        assert node.main_process_status(cid) == pinning
    finally:
        node.delete_all_pods(ns)
