"""What the NVIDIA user space adds to a prepare: one NVIDIA GPU claim, three ways, in one run.

On a generated host tree with 8 NVIDIA GPUs and a stand-in driver (harness/nvidia.py), the
real ``ClaimsDriver`` prepares and unprepares one-GPU claims (files on ``--base``, /dev/shm by
default) with:

* ``off``: no host edits (the claim's spec without any NVIDIA user space);
* ``driver_root``: the driver root's files mounted by numadra's spec (the driver root's lookup is
  cached; the toolkit dirs are still listed per prepare);
* ``toolkit``: a toolkit spec in the CDI dir, checked against the host per prepare (every mount
  source, node and hook of the device resolved in the host root).

The three run interleaved, ``--rounds`` rounds of ``--claims`` claims each; the figure is each
way's median prepare time and its ratio to ``off`` measured in the same run (only ratios mean
anything on a shared machine). Needs root (the tree's device nodes are character devices).

``--events``: whether the Events of a node without NVIDIA user space slow the calls after them.
Two ``numadra run`` processes with the DaemonSet's flags, one on an ``nvidia`` node (toolkit spec,
driver files) and one on a ``no-userspace`` node (the GPUs alone: every claim warns, and numadra
posts a Warning Event on its pod), both laid by bench/_common.py's ``nvidia_node``, share one fake
apiserver that answers every Event POST ``--event-delay`` late (200 ms by default). The test
kubelet prepares and unprepares a one-GPU claim on each node in turn, ``--calls`` times; every
``no-userspace`` prepare after the first follows one whose Event is still being posted. The
figure is each node's prepare p50 over those calls and their ratio; the Events the apiserver
stored say the warnings were posted (none from the ``nvidia`` node).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import NodeKind, nvidia_node  # noqa: E402 (needs REPO on sys.path)
from driver.claims import ClaimsDriver, claims_journal  # noqa: E402
from driver.claims.hostedits import HostEdits  # noqa: E402
from driver.inventory.discovery import discover  # noqa: E402
from driver.inventory.model import Inventory  # noqa: E402
from driver.plugin import Claim, ClaimRef  # noqa: E402
from harness.hostspec import GpuSpec, Topology  # noqa: E402
from harness.hosttree import write_host_tree  # noqa: E402
from harness.nvidia import (  # noqa: E402
    NvidiaDriver,
    ToolkitGpu,
    make_char_devices,
    toolkit_spec,
    write_nvidia_driver,
    write_toolkit_spec,
)

WAYS = ("off", "driver_root", "toolkit")
UUIDS = [f"GPU-{k:08x}-0000-4000-8000-000000000000" for k in range(8)]
NODES = [*(f"/dev/nvidia{k}" for k in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def host(base: Path) -> tuple[Path, Inventory]:
    topo = Topology(
        name="bench",
        gpus=tuple(
            GpuSpec(bus_id=f"0000:{0x17 + k:02x}:00.0", nvidia_minor=k, nvidia_uuid=UUIDS[k])
            for k in range(8)
        ),
    )
    tree = write_host_tree(base / "tree", topo)
    write_nvidia_driver(tree, NvidiaDriver())
    make_char_devices(tree, NODES)
    hook = tree / "usr/bin/nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    return tree, discover(tree, use_nvml=False)


def claim(uid: str, device: str) -> dict[str, Any]:
    result = {"request": "gpu", "driver": "numadra.dev", "pool": "node", "device": device}
    return {
        "metadata": {"namespace": "bench", "name": f"c-{uid}", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
        "status": {"allocation": {"devices": {"results": [result], "config": []}}},
    }


def driver(way: str, base: Path, tree: Path, inventory: Inventory) -> ClaimsDriver:
    cdi = base / way / "cdi"
    cdi.mkdir(parents=True)
    if way == "toolkit":
        gpus = [ToolkitGpu(k, UUIDS[k], k) for k in range(8)]
        write_toolkit_spec(cdi / "nvidia.yaml", toolkit_spec(gpus, NvidiaDriver()))
    edits = None
    if way != "off":
        edits = HostEdits(
            host_root=str(tree), driver_root="/", cdi_dir=str(cdi), claim_kind="numadra.dev/claim"
        )
    return ClaimsDriver(
        driver_name="numadra.dev",
        node_name="node",
        inventory=lambda: inventory,
        cdi_dir=cdi,
        plugin_dir=base / way / "plugin",
        journal=claims_journal(
            cdi_dir=cdi, plugin_dir=base / way / "plugin", driver_name="numadra.dev", pool="node"
        ),
        host_edits=edits,
    )


def _events_node(root: Path, kind: NodeKind, kubeconfig: str, kubelet: Any, env: dict[str, str]) -> Any:
    """``numadra run`` on a ``kind`` node in ``root``, registered: (process, DRA endpoint, node name)."""
    from bench.startup import _registered
    from harness.hostspec import Topology

    for sub in ("reg", "plugin", "cdi"):
        (root / sub).mkdir(parents=True)
    nvidia_node(
        root / "host", Topology(name="events", sockets=2, cores_per_socket=8, threads_per_core=2), kind
    )
    node = f"events-{kind}"
    argv = [sys.executable, "-m", "driver.cli", "run", f"--node-name={node}", f"--host-root={root / 'host'}"]
    argv += [
        f"--kubeconfig={kubeconfig}",
        f"--registrar-dir={root / 'reg'}",
        f"--plugin-dir={root / 'plugin'}",
    ]
    argv += [
        f"--cdi-dir={root / 'cdi'}",
        "--metrics-address=127.0.0.1:0",
        "--log-format=json",
        "--hotplug=off",
    ]
    child, _, _, endpoint = _registered(argv, root / "reg" / "numadra.dev-reg.sock", kubelet, env)
    return child, endpoint, node


def events_main(rounds: int, delay_s: float, base: str) -> dict[str, Any]:
    """The ``--events`` comparison (module docstring)."""
    from bench.startup import _stop, child_env
    from driver.inventory.discovery import discover
    from harness.fakeapiserver import FakeApiServer
    from harness.kubeletclient import KubeletClient

    kinds: tuple[NodeKind, ...] = ("nvidia", "no-userspace")
    root = Path(tempfile.mkdtemp(prefix="gpuev", dir=base))
    children: dict[str, Any] = {}
    try:
        with FakeApiServer() as api, KubeletClient() as kubelet:
            api.add_latency(delay_s, method="POST", path_contains="/events")
            env = child_env(root / "pycache")
            for kind in kinds:
                api.put_object(
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"events-{kind}", "uid": kind}}
                )
                children[kind] = _events_node(root / kind, kind, api.kubeconfig_path, kubelet, env)
            gpus = [
                g.name
                for g in discover(root / "nvidia" / "host", use_nvml=False).gpus
                if g.vendor == "nvidia"
            ]
            samples: dict[str, list[float]] = {kind: [] for kind in kinds}
            for i in range(rounds + 1):
                for kind in kinds:
                    _, endpoint, node = children[kind]
                    uid = str(uuid.uuid4())
                    obj = {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        **claim(uid, gpus[i % len(gpus)]),
                    }
                    obj["status"]["allocation"]["devices"]["results"][0]["pool"] = node
                    obj["status"]["reservedFor"] = [
                        {"resource": "pods", "name": f"pod-{uid}", "uid": f"p-{uid}"}
                    ]
                    api.put_object(obj)
                    ref = ClaimRef("bench", f"c-{uid}", uid)
                    t0 = time.perf_counter()
                    out = kubelet.prepare(endpoint, [ref])
                    took = time.perf_counter() - t0
                    if out.claims[uid].error:
                        raise SystemExit(f"{kind}: prepare failed: {out.claims[uid].error}")
                    kubelet.unprepare(endpoint, [ref])
                    if i:  # the first call of each warms up; on no-userspace the rest follow an Event
                        samples[kind].append(took)
            stored = [e["source"]["host"] for e in api.objects("Event")]
    finally:
        for child, _, _ in children.values():
            _stop(child)
        shutil.rmtree(root, ignore_errors=True)
    p50 = {kind: statistics.median(samples[kind]) * 1e3 for kind in kinds}
    return {
        "calls_per_node": rounds,
        "event_post_delay_ms": round(delay_s * 1e3),
        "prepare_p50_ms": {kind: round(v, 2) for kind, v in p50.items()},
        "no_userspace_over_nvidia": round(p50["no-userspace"] / p50["nvidia"], 2),
        "events_stored_by_node": {f"events-{kind}": stored.count(f"events-{kind}") for kind in kinds},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--base", default="/dev/shm")
    parser.add_argument("--events", action="store_true", help="the Events comparison (module docstring)")
    parser.add_argument("--calls", type=int, default=40, help="timed prepares on each node (--events)")
    parser.add_argument(
        "--event-delay", type=float, default=0.2, help="seconds the apiserver takes per Event"
    )
    args = parser.parse_args()
    if args.events:
        import logging

        from driver.log import configure_logging

        configure_logging("json", logging.CRITICAL)
        result = events_main(args.calls, args.event_delay, args.base)
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(result, indent=2))
        return
    import structlog

    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())  # no log output in the figures
    base = Path(tempfile.mkdtemp(prefix="numadra-bench-gpu-", dir=args.base))
    try:
        tree, inventory = host(base)
        drivers = {way: driver(way, base, tree, inventory) for way in WAYS}
        device = inventory.gpus[0].name
        samples: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:
                for _ in range(args.claims):
                    uid = str(uuid.uuid4())
                    ref = ClaimRef("bench", f"c-{uid}", uid)
                    t0 = time.perf_counter()
                    out = drivers[way].prepare_claims([Claim(ref, claim(uid, device))])
                    samples[way].append(time.perf_counter() - t0)
                    assert out[uid].ok, out[uid].error
                    drivers[way].unprepare_claims([ref])
        for d in drivers.values():
            d.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    median = {way: statistics.median(samples[way]) * 1e6 for way in WAYS}
    print(
        json.dumps(
            {
                "claims_per_way": args.rounds * args.claims,
                "median_prepare_us": {way: round(v) for way, v in median.items()},
                "ratio_to_off": {way: round(v / median["off"], 2) for way, v in median.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
