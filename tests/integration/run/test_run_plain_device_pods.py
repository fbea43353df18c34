"""``numadra run --pinning nri`` aligns a plain device pod: the wiring of the running process.

The workstation host (one NUMA node, CPUs 0-15, two GPUs): a claim takes 4 CPUs, then a GPU-only
claim's container is created through the fake runtime over the NRI socket. It gets node 0's
CPUs that no claim holds, which only the process's own journal and inventory can tell it.
"""

from __future__ import annotations

import json
import uuid

from driver.claims.render import claim_spec_file_name
from driver.pinning.types import ENV_CPUS, parse_cpulist
from driver.plugin import ClaimRef
from harness.fake_nri_runtime import POD as NRI_POD
from harness.fake_nri_runtime import FakeNriRuntime
from harness.fake_nri_runtime import container as nri_container
from tests.integration.run.conftest import DRIVER, GPU, NODE, RunNode, gpu_cpu_claim, load_slack


def _put(node: RunNode, obj: dict[str, object]) -> ClaimRef:
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "app", "uid": NRI_POD.uid}]  # type: ignore[index]
    node.api.put_object(obj)
    meta = obj["metadata"]
    return ClaimRef(meta["namespace"], meta["name"], meta["uid"])  # type: ignore[index]


def _gpu_only(uid: str) -> dict[str, object]:
    obj = gpu_cpu_claim(uid, "plain-gpu", gpu=GPU)
    obj["spec"]["devices"]["requests"] = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.numadra.dev"}}]
    obj["status"]["allocation"]["devices"]["results"] = [
        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": GPU}
    ]
    return obj


def _env(node: RunNode, uid: str, key: str) -> list[str]:
    spec = json.loads((node.cdi_dir / claim_spec_file_name(DRIVER, uid)).read_text())
    return next(
        list(env)
        for device in spec["devices"]
        for env in [device["containerEdits"].get("env", [])]
        if any(e.startswith(f"{key}=") for e in env)
    )


def test_a_gpu_only_claims_container_gets_the_cpus_no_claim_holds(node: RunNode) -> None:
    runtime = FakeNriRuntime(node.root / "nri.sock")
    try:
        process = node.spawn("--pinning", "nri", "--nri-socket", str(node.root / "nri.sock"))
        node.register(process)
        cpus_uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.root.name}-cpus"))
        cpu_ref = _put(node, gpu_cpu_claim(cpus_uid, "with-cpus", cpus=4, gpu="gpu-0000-00-02-0"))
        gpu_uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.root.name}-gpu"))
        gpu_ref = _put(node, _gpu_only(gpu_uid))
        out = node.kubelet.prepare(node.dra_socket, [cpu_ref, gpu_ref])  # type: ignore[arg-type]
        assert [out.claims[u].error for u in (cpus_uid, gpu_uid)] == ["", ""]
        taken = parse_cpulist(
            next(e for e in _env(node, cpus_uid, ENV_CPUS) if e.startswith(f"{ENV_CPUS}=")).split("=", 1)[1]
        )
        assert len(taken) == 4
        conn = runtime.accept(timeout=10 * load_slack())
        try:
            conn.configure()
            conn.synchronize([])
            resp = conn.create_container(
                nri_container("c-gpu", "train", env=_env(node, gpu_uid, "NUMADRA_MEMS"))
            )
            cpu = resp.adjust.linux.resources.cpu
            assert (parse_cpulist(cpu.cpus), cpu.mems) == (frozenset(range(16)) - taken, "0")
            assert process.stop() == 0
        finally:
            conn.close()
    finally:
        runtime.close()
