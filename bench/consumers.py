"""What a shared claim's later pod costs on the NRI path: the consumer read, beside a recorded pod.

The NRI plugin over a real unix socket (the fake runtime of the integration tests), the claim on
the fake apiserver over HTTP, read by the real client; one claim with CPUs, prepared for pod A.
Timed end to end, CreateContainer round trips of, interleaved in one run:

* ``recorded``: a container of pod A (the record lists it: no read);
* ``first_of_new_pod``: the first container of a new pod the claim was shared with since (one
  GET of the claim, then the pod is remembered);
* ``next_of_that_pod``: a second container of that pod (remembered: no read).

Prints one JSON object with p50/p99 in milliseconds and the ratio of each to ``recorded``; only
the ratios mean anything on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _pct(ms: list[float], q: float) -> float:
    ordered = sorted(ms)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1e3 for s in samples_s]
    return {"p50_ms": round(statistics.median(ms), 3), "p99_ms": round(_pct(ms, 0.99), 3), "n": len(ms)}


def run(pods: int) -> dict[str, Any]:
    """Time the three kinds of CreateContainer over ``pods`` new pods."""
    from driver.claims.consumers import ApiConsumerReader
    from driver.kube.client import KubeClient
    from driver.pinning.consumers import READ_DEADLINE_S, ConsumerCheck
    from driver.pinning.nri import NriPlugin
    from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode
    from harness.fake_nri_runtime import FakeNriRuntime, connect_plugin, container, pod
    from harness.fakeapiserver import FakeApiServer

    uid = "00000000-0000-4000-8000-0000000000b1"
    cpus = frozenset({4, 5, 6, 7})
    pinning = ClaimPinning(uid, (CpuAssignment("main", CpuMode.EXCLUSIVE, cpus, frozenset({0})),))
    holder = pod("sb-a", "pod-a", name="a", namespace="bench")
    binding = ClaimBinding(uid, "bench", "shared", frozenset({holder.uid}), pinning)
    new_pods = [pod(f"sb-{i}", f"pod-{i}", name=f"p{i}", namespace="bench") for i in range(pods)]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": "bench", "uid": uid},
        "status": {"reservedFor": [{"resource": "pods", "name": holder.name, "uid": holder.uid}]},
    }
    env = ["NUMADRA_CPUS=4-7", "NUMADRA_MEMS=0", f"NUMADRA_CLAIM_UID={uid}", "NUMADRA_REQUEST=main"]
    tmp = Path(tempfile.mkdtemp(prefix="nri-bench-", dir="/tmp"))
    api = FakeApiServer()
    api.start()
    api.put_object(claim)
    kube = KubeClient(api.kubeconfig_path, read_deadline=READ_DEADLINE_S)
    kube.configure()
    runtime = FakeNriRuntime(tmp / "nri.sock")
    check = ConsumerCheck(ApiConsumerReader(kube))
    plugin = NriPlugin(claim_lookup={uid: binding}.get, consumers=check, socket_path=runtime.socket_path)
    out: dict[str, list[float]] = {"recorded": [], "first_of_new_pod": [], "next_of_that_pod": []}
    try:
        conn = connect_plugin(runtime, plugin.connect)
        conn.configure()
        conn.synchronize([])

        def timed(kind: str, cid: str, where: Any, keep: bool) -> None:
            t0 = time.perf_counter()
            resp = conn.create_container(container(cid, "app", env, sandbox=where.id), pod=where)
            took = time.perf_counter() - t0
            assert resp.adjust.linux.resources.cpu.cpus == "4-7", resp
            if keep:
                out[kind].append(took)

        for i in range(20):  # warm-up: thread pools, the client's connection, first protobuf use
            timed("recorded", f"w{i}", holder, keep=False)
        for i, new in enumerate(new_pods):
            # the scheduler reserves the claim for one more pod (untimed), as before its start
            claim["status"]["reservedFor"].append({"resource": "pods", "name": new.name, "uid": new.uid})
            api.put_object(claim)
            timed("recorded", f"a{i}", holder, keep=True)
            timed("first_of_new_pod", f"n{i}", new, keep=True)
            timed("next_of_that_pod", f"m{i}", new, keep=True)
        assert check.reads == pods, check.reads
    finally:
        plugin.close()
        runtime.close()
        kube.close()
        api.close()
        shutil.rmtree(tmp, ignore_errors=True)
    figures: dict[str, Any] = {kind: _summary(samples) for kind, samples in out.items()}
    base = figures["recorded"]["p50_ms"]
    for kind in ("first_of_new_pod", "next_of_that_pod"):
        figures[kind]["p50_ratio_to_recorded"] = round(figures[kind]["p50_ms"] / base, 2)
    figures["reads"] = pods
    return figures


def main() -> int:
    """Run and print the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=300, help="new pods of the shared claim")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    from driver.log import configure_logging

    configure_logging("json", logging.CRITICAL)
    print(json.dumps(run(args.pods), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
