"""Prepare latency of the whole node path: kubelet gRPC -> ClaimsDriver -> claim GET -> files.

The driver runs in a child process exactly as ``numadra run`` wires the prepare path
(``KubeletPluginServer`` + ``ClaimsDriver`` + ``KubeClient`` + ``CpuPlanner``) on an inventory
discovered from a generated DGX-class host tree. This process plays the kubelet (gRPC client over
the unix socket) and the apiserver (the fake apiserver on loopback HTTP). Each claim holds one
NIC VF and a 2-CPU share of a ``cpu-numa<N>`` device, so every prepare does a GET, config
resolution, CPU planning, one CDI spec, a metadata file + spec per request and one journal write.

Prints one JSON object: p50/p99 (ms) of NodePrepareResources for 1 claim and for 32 claims in one
call, their ratio, start-to-registered time, the steady RSS of the driver process (also of the
whole ``numadra run`` process: ``run_*``, from bench/startup.py), and two figures that show where
the time goes: the same prepares through ``ClaimsDriver`` alone (``driver_only_*``: no gRPC, no
HTTP), and the ``floor_*``: the same calls served by a plugin that only reads the claims (same
fetcher, same apiserver) and prepares nothing, i.e. what gRPC and the claim reads cost on this
machine before the driver does any work.

Directories follow a node's layout by default: the plugin dir (journal, metadata files, lock) on
disk under ``--base`` (/tmp here, /var/lib/kubelet/plugins on a node) and the CDI dir on tmpfs
under ``--cdi-base`` (/dev/shm here, /var/run/cdi on a node); ``--cdi-base /tmp`` puts both on
disk, ``--base /dev/shm`` both on tmpfs. ``--claim-reads get`` hides the client's LIST, as the
default RBAC (get only) does, so 32 claims are 32 GETs. ``--background N`` keeps N other claims
(one exclusive CPU each) prepared during the measurement, as on a busy node.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import cpu_claim, nic_cpu_claim, rss_mib  # noqa: E402 (needs REPO on sys.path)

DRIVER = "numadra.dev"
NODE = "bench-node"


class _GetOnly:
    """The client without its LIST: what the driver sees under the default (get-only) RBAC."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def get_resource_claim(self, namespace: str, name: str) -> Any:
        return self._client.get_resource_claim(namespace, name)


class _ReadsOnly:
    """The floor: reads every claim as ``ClaimsDriver`` does (``ClaimFetcher``), prepares nothing.

    Served in place of the driver, it measures the kubelet's gRPC call plus the claim reads alone;
    a latency target minus this floor is what is left for the driver's own work.
    """

    def __init__(self, claims: Any) -> None:
        from driver.claims.fetch import ClaimFetcher

        self._fetcher = ClaimFetcher(claims)

    def prepare_claims(self, claims: Any) -> dict[str, Any]:
        from driver.plugin import PrepareResult

        fetched = self._fetcher.fetch(claims)
        return {
            uid: PrepareResult(error=got) if isinstance(got, str) else PrepareResult()
            for uid, got in fetched.items()
        }

    def unprepare_claims(self, claims: Any) -> dict[str, str]:
        return {claim.uid: "" for claim in claims}

    def handle_error(self, err: BaseException, msg: str) -> None:
        raise err


def _serve(root: Path, cdi_dir: Path, kubeconfig: str, claim_reads: str, plugin: str) -> None:
    """Child: the driver's prepare path (or, ``plugin == "floor"``, only its reads) until stdin closes."""
    import logging

    from driver.claims import ClaimsDriver
    from driver.heap import freeze_startup_heap
    from driver.inventory.discovery import discover
    from driver.kube.client import shared_client
    from driver.kubelet.server import KubeletPluginServer
    from driver.log import configure_logging
    from driver.pinning.planner import CpuPlanner

    configure_logging("json", logging.INFO)
    inventory = discover(root / "host", use_nvml=False)
    claims = shared_client(kubeconfig) if claim_reads == "list" else _GetOnly(shared_client(kubeconfig))
    served: Any
    if plugin == "floor":
        served = _ReadsOnly(claims)
    else:
        served = ClaimsDriver(
            driver_name=DRIVER,
            node_name=NODE,
            inventory=lambda: inventory,
            claims=claims,
            cdi_dir=cdi_dir,
            plugin_dir=root / "plugin",
            planner=CpuPlanner(lambda: inventory),
        )
        served.reconcile()
    server = KubeletPluginServer(
        driver_name=DRIVER,
        node_name=NODE,
        registrar_dir=root / "reg",
        plugin_dir=root / "plugin",
        plugin=served,
    )
    server.start()
    freeze_startup_heap()  # as ``numadra run`` does once started
    sys.stdin.read()  # the parent closes stdin to stop us
    server.stop(grace=0)


def _in_process(
    root: Path, cdi_dir: Path, claims: dict[tuple[str, str], Any], refs: list[Any], rounds: int
) -> dict[str, float]:
    """The driver logic alone (no gRPC, no HTTP): ClaimsDriver with an in-memory claim source."""
    import logging

    from driver.claims import ClaimsDriver
    from driver.inventory.discovery import discover
    from driver.log import configure_logging
    from driver.pinning.planner import CpuPlanner

    configure_logging("json", logging.WARNING)

    class DictClaims:
        def get_resource_claim(self, namespace: str, name: str) -> Any:
            return claims[(namespace, name)]

    inventory = discover(root / "host", use_nvml=False)
    driver = ClaimsDriver(
        driver_name=DRIVER,
        node_name=NODE,
        inventory=lambda: inventory,
        claims=DictClaims(),
        cdi_dir=cdi_dir,
        plugin_dir=root / "plugin2",
        planner=CpuPlanner(lambda: inventory),
    )

    def cycle(batch: list[Any]) -> float:
        t0 = time.perf_counter()
        driver.prepare_claims(batch)
        dt = (time.perf_counter() - t0) * 1000
        driver.unprepare_claims(batch)
        return dt

    for _ in range(10):
        cycle(refs[:1])
    single = [cycle([refs[i % len(refs)]]) for i in range(rounds * 5)]
    batch = [cycle(refs[1:33]) for _ in range(rounds)]
    driver.close()
    return {
        "driver_only_1_claim_p50_ms": round(statistics.median(single), 2),
        "driver_only_32_claims_p50_ms": round(statistics.median(batch), 2),
    }


@dataclass
class _Run:
    single: list[float]
    batch: list[float]
    registered_s: float
    rss_mib: float


def _measure(
    kubelet: Any,
    child_args: tuple[str, str, str, str],
    plugin: str,
    refs: list[Any],
    background: list[Any],
    n_single: int,
    n_batch: int,
) -> _Run:
    """Start a serving child, register it, prepare ``background``, then time the two call sizes.

    Each timed prepare is followed by an untimed unprepare of the same claims.
    """
    reg_sock = Path(child_args[0]) / "reg" / f"{DRIVER}-reg.sock"
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", *child_args, plugin],
        stdin=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not reg_sock.exists():
            time.sleep(0.005)
        reg = kubelet.register(reg_sock)
        registered_s = time.monotonic() - started
        endpoint = reg.info.endpoint

        def timed(batch: list[Any]) -> float:
            t0 = time.perf_counter()
            out = kubelet.prepare(endpoint, batch)
            dt = (time.perf_counter() - t0) * 1000
            errors = [c.error for c in out.claims.values() if c.error]
            if errors or len(out.claims) != len(batch):
                raise SystemExit(f"prepare failed: {errors[:3]}")
            kubelet.unprepare(endpoint, batch)
            return dt

        for start in range(0, len(background), 32):
            chunk = background[start : start + 32]
            out = kubelet.prepare(endpoint, chunk)
            errors = [c.error for c in out.claims.values() if c.error]
            if errors:
                raise SystemExit(f"background prepare failed: {errors[:3]}")
        for _ in range(20):  # warm-up: connections, imports, caches
            timed(refs[:1])
        single = [timed([refs[i % len(refs)]]) for i in range(n_single)]
        batch = [timed(refs[1:33]) for _ in range(n_batch)]
        rss = rss_mib(child.pid)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)
        kubelet.close()  # the next child listens on new sockets
        reg_sock.unlink(missing_ok=True)
    return _Run(single, batch, registered_s, rss)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.contextmanager
def _apiserver(kind: str, workdir: Path) -> Iterator[tuple[str, Callable[[dict[str, Any]], str]]]:
    """Yield (kubeconfig path, put_claim) for the fake apiserver or the real kube-apiserver.

    ``put_claim`` stores an allocated claim and returns its UID. The real one (etcd +
    kube-apiserver v1.37.2 from tests/e2e/build-bins.sh) makes the claim GET what it is in a
    cluster: a Go server on loopback; the fake one is Python in this process, so its GETs also
    compete with the bench's own gRPC client for the GIL.
    """
    if kind == "fake":
        from driver.testing.fakeapiserver import FakeApiServer

        with FakeApiServer() as api:

            def put_fake(obj: dict[str, Any]) -> str:
                api.put_object(obj)
                return str(obj["metadata"]["uid"])

            yield api.kubeconfig_path, put_fake
        return

    sys.path.insert(0, str(REPO / "tests" / "e2e"))
    from controlplane import ControlPlane, binary_dir, missing_binaries, write_kubeconfig

    bins = binary_dir()
    if missing_binaries(bins):
        raise SystemExit(f"--apiserver real needs {bins} (run tests/e2e/build-bins.sh)")
    plane = ControlPlane(bin_dir=bins, root=workdir / "cp", node_name=NODE)
    plane.root.mkdir()
    try:
        plane.start()
        admin = plane.admin
        assert admin is not None
        token = admin.token
        kubeconfig = write_kubeconfig(
            plane.root / "bench.kubeconfig", plane.server, plane.ca_file, token, "admin"
        )
        for namespace in ("bench", "background"):
            admin.create("/api/v1/namespaces", {"metadata": {"name": namespace}})

        def put_real(obj: dict[str, Any]) -> str:
            namespace = obj["metadata"]["namespace"]
            base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
            body = {k: v for k, v in obj.items() if k != "status"}
            body["metadata"] = {"name": obj["metadata"]["name"], "namespace": namespace}
            created = admin.create(base, body)
            created["status"] = obj["status"]
            stored = admin.put(f"{base}/{obj['metadata']['name']}/status", created)
            return str(stored["metadata"]["uid"])

        yield str(kubeconfig), put_real
    finally:
        plane.stop()


def _real_process(base: str) -> dict[str, Any]:
    """The same two figures for the whole ``numadra run`` process (bench/startup.py)."""
    from bench.startup import measure

    run = measure(base, starts=3, prepares=100)
    return {
        "run_start_to_registered_s": run["start_to_registered_s_median"],
        "run_steady_rss_mib": run["steady_rss_mib"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--serve", nargs=5, metavar=("ROOT", "CDI", "KUBECONFIG", "READS", "PLUGIN"), help=argparse.SUPPRESS
    )
    parser.add_argument("--single", type=int, default=300, help="prepare calls with 1 claim")
    parser.add_argument("--batch", type=int, default=40, help="prepare calls with 32 claims")
    parser.add_argument("--base", default="/tmp", help="where the plugin dir (journal, metadata) lives")
    parser.add_argument("--cdi-base", default="/dev/shm", help="where the CDI dir lives (tmpfs on a node)")
    parser.add_argument(
        "--claim-reads",
        choices=("list", "get"),
        default="list",
        help="list: the client may LIST claims (rbac.listClaims); get: GETs only (default RBAC)",
    )
    parser.add_argument("--background", type=int, default=0, help="other claims kept prepared meanwhile")
    parser.add_argument(
        "--apiserver",
        choices=("auto", "real", "fake"),
        default="auto",
        help="where claims are fetched from: the real kube-apiserver (auto: when its binaries exist)",
    )
    args = parser.parse_args()
    if args.serve:
        _serve(Path(args.serve[0]), Path(args.serve[1]), args.serve[2], args.serve[3], args.serve[4])
        return

    from driver.inventory.model import DeviceKind
    from driver.plugin import ClaimRef
    from driver.testing.hosttree import write_host_tree
    from driver.testing.kubeletclient import KubeletClient
    from driver.testing.topologies import TOPOLOGIES

    root = Path(tempfile.mkdtemp(prefix="bp", dir=args.base))
    cdi_root = Path(tempfile.mkdtemp(prefix="bp", dir=args.cdi_base))
    try:
        for sub in ("reg", "plugin"):
            (root / sub).mkdir()
        for sub in ("cdi", "cdi2"):
            (cdi_root / sub).mkdir()
        write_host_tree(root / "host", TOPOLOGIES["dgx"])
        from driver.inventory.discovery import discover

        inventory = discover(root / "host", use_nvml=False)
        vfs = [
            (nic.name, nic.pci.numa_node or 0) for kind, nic in inventory.devices() if kind is DeviceKind.NIC
        ]
        vfs = [v for v in vfs if v[0].startswith("nic-")][:33]
        # CPUs left per NUMA node once the measured claims (2 CPUs each) hold theirs: the
        # background claims (1 CPU each) go to the node with the most left
        room = {node.id: 0 for node in inventory.numa_nodes}
        for cpu in inventory.cpus:
            room[cpu.numa_node] = room.get(cpu.numa_node, 0) + 1
        for _, node_id in vfs:
            room[node_id] = room.get(node_id, 0) - 2

        apiserver = args.apiserver
        if apiserver == "auto":
            sys.path.insert(0, str(REPO / "tests" / "e2e"))
            from controlplane import binary_dir, missing_binaries

            apiserver = "fake" if missing_binaries(binary_dir()) else "real"
        with _apiserver(apiserver, root) as (kubeconfig, put_claim), KubeletClient() as kubelet:
            refs: list[ClaimRef] = []
            objects: dict[tuple[str, str], Any] = {}
            for i, (vf, node) in enumerate(vfs):
                name = f"claim-{i}"
                obj = nic_cpu_claim(
                    str(uuid.uuid5(uuid.NAMESPACE_DNS, f"bench-{i}")),
                    name,
                    vf,
                    node,
                    driver=DRIVER,
                    node=NODE,
                )
                uid = put_claim(obj)
                obj["metadata"]["uid"] = uid
                objects[("bench", name)] = obj
                refs.append(ClaimRef("bench", name, uid))
            background: list[ClaimRef] = []
            for i in range(args.background):
                name = f"background-{i}"
                numa = max(room, key=lambda n: room[n])
                room[numa] -= 1
                obj = cpu_claim(str(uuid.uuid4()), name, numa, driver=DRIVER, node=NODE)
                obj["metadata"]["namespace"] = "background"  # other pods' claims, not in the LIST
                uid = put_claim(obj)
                background.append(ClaimRef("background", name, uid))
            child_args = (str(root), str(cdi_root / "cdi"), kubeconfig, args.claim_reads)
            run = _measure(kubelet, child_args, "driver", refs, background, args.single, args.batch)
            floor = _measure(kubelet, child_args, "floor", refs, [], args.single, args.batch)
        single, batch = run.single, run.batch
        result: dict[str, Any] = {
            "claims_per_batch": 32,
            "single_calls": len(single),
            "batch_calls": len(batch),
            "prepare_1_claim_p50_ms": round(statistics.median(single), 2),
            "prepare_1_claim_p99_ms": round(_pct(single, 0.99), 2),
            "prepare_32_claims_p50_ms": round(statistics.median(batch), 2),
            "prepare_32_claims_p99_ms": round(_pct(batch, 0.99), 2),
            "ratio_32_to_1_p50": round(statistics.median(batch) / statistics.median(single), 2),
            "start_to_registered_s": round(run.registered_s, 3),
            "driver_steady_rss_mib": round(run.rss_mib, 1),
            **_real_process(args.base),
            **_in_process(root, cdi_root / "cdi2", objects, refs, max(10, args.batch)),
            "floor_1_claim_p50_ms": round(statistics.median(floor.single), 2),
            "floor_32_claims_p50_ms": round(statistics.median(floor.batch), 2),
            "plugin_dir_on": args.base,
            "cdi_dir_on": args.cdi_base,
            "claim_reads": args.claim_reads,
            "background_claims": args.background,
            "apiserver": apiserver,
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cdi_root, ignore_errors=True)


if __name__ == "__main__":
    main()
