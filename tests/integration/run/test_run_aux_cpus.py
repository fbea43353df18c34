"""``numadra run --node-allocatable --aux-cpus gpu=2``: a plain GPU pod's exclusive CPUs, end to end.

The process as the kubelet and the runtime meet it: slices on the fake apiserver, prepare and
unprepare over the kubelet's real gRPC, containers over the real NRI wire protocol. The
workstation host (one NUMA node, CPUs 0-15). A GPU-only claim, as the scheduler makes it for
``nvidia.com/gpu: 1``, is shared by two pods: both pods' containers run on the claim's two
auxiliary CPUs, which no other claim gets while it is prepared and which come back at unprepare.
"""

from __future__ import annotations

import json
import signal
import uuid
from typing import Any

from driver.claims.render import claim_spec_file_name
from driver.pinning.types import ENV_CPU_MODE, ENV_CPUS, parse_cpulist
from driver.plugin import ClaimRef
from harness.fake_nri_runtime import FakeNriRuntime, pod
from harness.fake_nri_runtime import container as nri_container
from harness.kubeletclient import KubeletClient
from harness.poll import wait_for
from tests.integration.run.conftest import DRIVER, GPU, NODE, OTHER_GPU, RunNode, gpu_cpu_claim, load_slack

AUX = ("--node-allocatable", "--aux-cpus", "gpu=2")
POD_A = pod("sb-a", "0c1d2e3f-aaaa-4c3a-9e8f-00000000000a", name="infer-a")
POD_B = pod("sb-b", "0c1d2e3f-bbbb-4c3a-9e8f-00000000000b", name="infer-b")
ALL_CPUS = frozenset(range(16))


def _uid(node: RunNode, what: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.root.name}-{what}"))


def _put(node: RunNode, obj: dict[str, Any], *pods: Any) -> ClaimRef:
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": p.name, "uid": p.uid} for p in pods]
    node.api.put_object(obj)
    meta = obj["metadata"]
    return ClaimRef(meta["namespace"], meta["name"], meta["uid"])


def _gpu_only(uid: str, gpu: str = GPU) -> dict[str, Any]:
    """The claim the scheduler makes for ``nvidia.com/gpu: 1``: one GPU, no CPUs asked."""
    obj = gpu_cpu_claim(uid, f"plain-{uid[:8]}", gpu=gpu)
    obj["spec"]["devices"]["requests"] = [
        {"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu.numadra.dev"}}
    ]
    obj["status"]["allocation"]["devices"]["results"] = [
        {"request": "container-0-request-0", "driver": DRIVER, "pool": NODE, "device": gpu}
    ]
    return obj


def _env(node: RunNode, uid: str) -> list[str]:
    spec = json.loads((node.cdi_dir / claim_spec_file_name(DRIVER, uid)).read_text())
    (device,) = spec["devices"]
    return list(device["containerEdits"]["env"])


def _marker(env: list[str], key: str) -> str:
    return next(e.split("=", 1)[1] for e in env if e.startswith(f"{key}="))


def test_a_shared_plain_gpu_claim_pins_both_pods_to_its_aux_cpus(node: RunNode) -> None:
    """Slices carry the overhead; the claim gets 2 exclusive CPUs; both pods run on them; a CPU
    claim never gets them; after unprepare they are free again."""
    runtime = FakeNriRuntime(node.root / "nri.sock")
    try:
        process = node.spawn("--pinning", "nri", "--nri-socket", str(node.root / "nri.sock"), *AUX)
        node.register(process)
        wait_for(lambda: GPU in node.device_names(), 20, "published slices")
        gpus = [
            d
            for s in node.slices()
            for d in s["spec"]["devices"]
            if d["attributes"]["type"]["string"] == "gpu"
        ]
        assert {d["name"] for d in gpus} == {GPU, OTHER_GPU}
        assert all(d["nodeAllocatableResources"] == {"cpu": {"overhead": {"perPod": "2"}}} for d in gpus)

        gpu_uid = _uid(node, "gpu")
        gpu_ref = _put(node, _gpu_only(gpu_uid), POD_A, POD_B)
        out = node.kubelet.prepare(node.dra_socket, [gpu_ref])
        assert out.claims[gpu_uid].error == ""
        env = _env(node, gpu_uid)
        aux = parse_cpulist(_marker(env, ENV_CPUS))
        assert len(aux) == 2
        assert _marker(env, ENV_CPU_MODE) == "shared"  # shared by the claim's containers, no one else's

        # every other CPU to a claim (12 of its own, 2 for its GPU: --aux-cpus adds to a claim's
        # CPU request): it is handed none of the GPU claim's
        cpus_uid = _uid(node, "cpus")
        cpu_ref = _put(node, gpu_cpu_claim(cpus_uid, "with-cpus", cpus=12, gpu=OTHER_GPU), POD_A)
        out = node.kubelet.prepare(node.dra_socket, [cpu_ref])
        assert out.claims[cpus_uid].error == ""
        spec = json.loads((node.cdi_dir / claim_spec_file_name(DRIVER, cpus_uid)).read_text())
        taken = next(
            parse_cpulist(_marker(list(d["containerEdits"]["env"]), ENV_CPUS))
            for d in spec["devices"]
            if any(e.startswith(f"{ENV_CPUS}=") for e in d["containerEdits"]["env"])
        )
        assert taken == ALL_CPUS - aux

        conn = runtime.accept(timeout=10 * load_slack())
        try:
            conn.configure()
            conn.synchronize([], pods=[POD_A, POD_B])
            for sandbox in (POD_A, POD_B):
                ctr = nri_container(f"c-{sandbox.name}", "infer", env=env, sandbox=sandbox.id)
                cpu = conn.create_container(ctr, pod=sandbox).adjust.linux.resources.cpu
                assert (parse_cpulist(cpu.cpus), cpu.mems) == (aux, "0"), sandbox.name
        finally:
            conn.close()

        assert node.kubelet.unprepare(node.dra_socket, [cpu_ref, gpu_ref]).claims[gpu_uid].error == ""
        again_uid = _uid(node, "all")
        again = _put(node, gpu_cpu_claim(again_uid, "all-cpus", cpus=14, gpu=OTHER_GPU), POD_A)
        out = node.kubelet.prepare(node.dra_socket, [again])
        assert out.claims[again_uid].error == ""  # 14 + 2: every CPU, the released ones too
        assert process.stop() == 0
    finally:
        runtime.close()


def test_too_few_cpus_left_is_a_per_claim_error_naming_the_aux_cpus(node: RunNode) -> None:
    """15 CPUs held by a claim: a GPU claim needing 2 fails with a message that says why; the
    claim that fits in the same call is prepared."""
    process = node.spawn(*AUX)
    node.register(process)
    big_uid = _uid(node, "big")
    big = _put(node, gpu_cpu_claim(big_uid, "big", cpus=13, gpu=OTHER_GPU), POD_A)  # 13 + 2 aux
    assert node.kubelet.prepare(node.dra_socket, [big]).claims[big_uid].error == ""
    gpu_uid = _uid(node, "gpu")
    gpu_ref = _put(node, _gpu_only(gpu_uid), POD_B)
    error = node.kubelet.prepare(node.dra_socket, [gpu_ref]).claims[gpu_uid].error
    assert "auxiliary CPUs of device(s) gpu-0000-03-00-0 (2)" in error
    assert "--aux-cpus gpu=2" in error
    assert f"{gpu_ref.namespace}/{gpu_ref.name}" in error
    assert not (node.cdi_dir / claim_spec_file_name(DRIVER, gpu_uid)).exists()
    assert process.stop() == 0


def test_a_kill_and_restart_keeps_the_aux_cpus_held(node: RunNode) -> None:
    """kill -9 and restart: the journal still holds the GPU claim's 2 CPUs, so a claim asking
    every other CPU is prepared and one asking one more is refused."""
    process = node.spawn(*AUX)
    node.register(process)
    gpu_uid = _uid(node, "gpu")
    gpu_ref = _put(node, _gpu_only(gpu_uid), POD_A)
    assert node.kubelet.prepare(node.dra_socket, [gpu_ref]).claims[gpu_uid].error == ""
    aux = parse_cpulist(_marker(_env(node, gpu_uid), ENV_CPUS))
    stale = node.socket_identity()
    process.stop(signal.SIGKILL)

    restarted = node.spawn(*AUX)
    node.kubelet.close()  # a fresh kubelet connection, as after a real restart
    node.kubelet = KubeletClient()
    node.register(restarted, stale=stale)
    assert node.kubelet.prepare(node.dra_socket, [gpu_ref]).claims[gpu_uid].error == ""
    assert parse_cpulist(_marker(_env(node, gpu_uid), ENV_CPUS)) == aux
    greedy_uid = _uid(node, "greedy")
    greedy = _put(node, gpu_cpu_claim(greedy_uid, "greedy", cpus=13, gpu=OTHER_GPU), POD_B)  # 13 + 2 > 14
    assert "auxiliary CPUs" in node.kubelet.prepare(node.dra_socket, [greedy]).claims[greedy_uid].error
    rest_uid = _uid(node, "rest")
    rest = _put(node, gpu_cpu_claim(rest_uid, "rest", cpus=12, gpu=OTHER_GPU), POD_B)  # 12 + 2 = 14
    assert node.kubelet.prepare(node.dra_socket, [rest]).claims[rest_uid].error == ""
    assert restarted.stop() == 0
