"""The cost as the node fills: how each figure grows from an empty node to a full one.

Every figure elsewhere in bench/ is taken on an empty node. A busy node holds hundreds of
prepared claims, up to a thousand devices (SR-IOV VFs) and 512 CPUs, so this one command measures
how each cost grows with them, and draws each curve as an SVG beside its JSON:

* **claims** (``--claims``, default 0, 100, 1000 prepared claims): the real ``numadra run``
  process (the DaemonSet's entrypoint with its default flags) on a generated 1,024-CPU, 8-node
  host tree with 8 NVIDIA GPUs, their driver's files and the NVIDIA container toolkit's CDI spec
  (``/etc/cdi/nvidia.yaml``, about 22 KB, as ``nvidia-ctk cdi generate`` writes it; ``--node``
  picks another node, bench/_common.py's ``nvidia_node``), played by the test kubelet over its
  DRA socket, claims from the fake apiserver. At
  each level, after filling the node with that many one-CPU claims (32 a call, untimed):
  one-claim prepare and unprepare p50 (``--rounds`` cycles) and the process's CPU per cycle,
  each prepare in turn with one on an empty twin (a second ``numadra run`` on the same host tree,
  no claims, a node of its own): ``prepare_over_empty_twin`` is the filled process's p50 over the
  twin's from the same minutes, so the growth target (``prepare_p50_growth_vs_twin``: that ratio
  at the most claims over the one at none) holds still while the shared machine's load moves;
  its RSS; the journal's size; start-to-registered of a restart on that journal (median of 3);
  NRI CreateContainer p50 of a claim's container (the NRI plugin in this process over a real unix
  socket, its claims read from the filled journal, as ``numadra run`` wires it); the idle CPU
  of the restarted process over ``--idle`` seconds, as seconds per hour; and the driver's own CPU
  per cycle in this process (``driver_cpu``: the kubelet layer, ``ClaimsDriver`` and the index's
  refresh after each call, thread CPU time: the figure a loaded machine bends least).
* **devices** (``--devices``, default 8, 128, 1024 NIC devices: PFs, then 15 VFs each): the
  slices' bytes, and the time of the first publish (every slice created) and of a re-publish
  that changes nothing, through the real client and publisher to the fake apiserver. The fake
  apiserver is Python in this process, so the wall times include its work; the publisher's own
  cost is its thread's CPU time (``*_cpu_ms``), which is what the curve draws.
* **cpus** (``--cpus``, default 2, 224, 512): discovery and slice build of a host with that
  many CPUs (p50 of 10).

Targets: prepare p50 and NRI p50 at the most claims <= 1.2x their value at none; RSS <= 4 KiB a
prepared claim; restart with 1,000 journaled claims registered <= 1 s. ``growth`` in the JSON
is each figure at the last level over the first, and ``per_unit`` what each added claim,
device or CPU cost. The SVGs go to ``--out`` (bench/figures by default).

Run as root on the repo's venv: ``python bench/fill.py`` (about 4 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import logging
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

from bench._common import NODE_KINDS, NodeKind, cpu_claim, nvidia_node, rss_mib  # noqa: E402 (REPO)
from bench._svg import line_chart  # noqa: E402
from bench.startup import _argv, _cpu_s, _registered, _stop, child_env  # noqa: E402

DRIVER = "numadra.dev"
NODE = "bench-run"
NAMESPACE = "bench"
#: the empty twin's node: a node of its own, so the two processes' slices never meet
TWIN_NODE = "bench-twin"


def _p50_ms(samples_s: list[float]) -> float:
    return round(statistics.median(samples_s) * 1e3, 3)


def _fill_topology(cpus: int, nodes: int = 8) -> Any:
    """A host of ``cpus`` CPUs (2 threads a core) on ``nodes`` NUMA nodes, one node a socket."""
    from harness.hostspec import Topology

    if cpus < 2 * nodes:
        return Topology(name=f"cpus{cpus}", sockets=1, cores_per_socket=cpus, threads_per_core=1)
    return Topology(
        name=f"cpus{cpus}", sockets=nodes, cores_per_socket=cpus // nodes // 2, threads_per_core=2
    )


def _nic_topology(devices: int) -> Any:
    """A host whose NIC devices number ``devices``: PFs of 15 VFs each (16 devices), or PFs alone."""
    from harness.hostspec import NicSpec, Topology, VfSpec
    from harness.topologies import vf_bus_id

    per_pf = 16 if devices >= 16 else 1
    nics = []
    for k in range(devices // per_pf):
        pf = f"0000:{0x10 + k:02x}:00.0"  # one bus a PF: its VFs take the next slots
        vfs = tuple(
            VfSpec(
                bus_id=vf_bus_id(pf, j),
                interface=f"p{k}v{j}",
                mac=f"02:20:{k // 256:02x}:{k % 256:02x}:{j:02x}:00",
            )
            for j in range(per_pf - 1)
        )
        nics.append(
            NicSpec(
                bus_id=pf,
                interface=f"p{k}",
                mac=f"02:20:{k // 256:02x}:{k % 256:02x}:ff:00",
                numa_node=k % 2,
                sriov_total_vfs=per_pf - 1,
                vfs=vfs,
            )
        )
    return Topology(
        name=f"nics{devices}", sockets=2, cores_per_socket=8, threads_per_core=2, nics=tuple(nics)
    )


def _claim(i: int, tag: str, node: str = NODE) -> tuple[str, str, dict[str, Any]]:
    """A one-CPU claim of NUMA node ``i % 8``, reserved for its own pod: (uid, pod uid, object)."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"fill-{tag}-{i}"))
    pod_uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"fill-pod-{tag}-{i}"))
    obj = cpu_claim(uid, f"{tag}-{i}", i % 8, driver=DRIVER, node=node)
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": f"pod-{tag}-{i}", "uid": pod_uid}]
    return uid, pod_uid, obj


def _run_argv(root: Path, kubeconfig: str) -> list[str]:
    """``numadra run`` as bench/startup.py starts it, with the runtime's NRI socket in ``root``."""
    return [*_argv(root, kubeconfig), "--nri-socket", str(root / "nri.sock")]


def _twin_argv(root: Path, twin: Path, kubeconfig: str) -> list[str]:
    """The empty twin's ``numadra run``: its own dirs in ``twin`` and node name, ``root``'s host tree."""
    argv = _run_argv(twin, kubeconfig)
    argv[argv.index("--node-name") + 1] = TWIN_NODE
    argv[argv.index("--host-root") + 1] = str(root / "host")
    return argv


def _nri_p50(root: Path, inventory: Any, claim_uid: str, pod_uid: str, rounds: int) -> float:
    """CreateContainer p50 (ms) of a container of ``claim_uid``'s pod, its claim found among every
    claim journaled in ``root`` (the NRI plugin and the index as ``numadra run`` wires them)."""
    from driver.claims import ClaimsDriver, claims_journal
    from driver.pinning.binding import binding_lookup
    from driver.pinning.nri import NriPlugin
    from driver.pinning.types import marker_env
    from driver.state.index import PreparedIndex
    from harness.fake_nri_runtime import FakeNriRuntime, connect_plugin, container, pod

    claims = ClaimsDriver(
        driver_name=DRIVER,
        node_name=NODE,
        inventory=lambda: inventory,
        cdi_dir=root / "cdi",
        plugin_dir=root / "plugin",
        journal=claims_journal(
            cdi_dir=root / "cdi", plugin_dir=root / "plugin", driver_name=DRIVER, pool=NODE
        ),
    )
    index = PreparedIndex(claims.prepared_claims, claims.journal_changes)
    index.refresh()
    binding = index.view(claim_uid)
    assert binding is not None and binding.pinning is not None, claim_uid
    assignment = binding.pinning.assignments[0]
    env = [f"{k}={v}" for k, v in marker_env(assignment, claim_uid).items()]  # what the CDI spec sets
    holder = pod("sb-fill", pod_uid, name="holder", namespace=NAMESPACE)
    runtime = FakeNriRuntime(root / "bench-nri.sock")
    plugin = NriPlugin(
        claim_lookup=binding_lookup(index.view, lambda: inventory), socket_path=runtime.socket_path
    )
    samples: list[float] = []
    try:
        conn = connect_plugin(runtime, plugin.connect)
        conn.configure()
        conn.synchronize([])
        for i in range(rounds + 20):  # the first 20 warm the pools and protobuf
            t0 = time.perf_counter()
            resp = conn.create_container(container(f"c{i}", "app", env, sandbox=holder.id), pod=holder)
            took = time.perf_counter() - t0
            assert resp.adjust.linux.resources.cpu.cpus, resp
            if i >= 20:
                samples.append(took)
    finally:
        plugin.close()
        runtime.close()
        claims.close()
    return _p50_ms(samples)


def claims_level(
    base: str, prepared: int, rounds: int, idle_s: float, env: dict[str, str], node: NodeKind = "nvidia"
) -> dict[str, Any]:
    """Every claims figure at ``prepared`` prepared claims (see the module docstring)."""
    from driver.inventory.discovery import discover
    from driver.plugin import ClaimRef
    from harness.fakeapiserver import FakeApiServer
    from harness.kubeletclient import KubeletClient

    root = Path(tempfile.mkdtemp(prefix="fill", dir=base))
    try:
        for sub in ("reg", "cdi", "plugin", "twin/reg", "twin/cdi", "twin/plugin"):
            (root / sub).mkdir(parents=True)
        nvidia_node(root / "host", _fill_topology(1024), node)
        inventory = discover(root / "host", use_nvml=False)
        reg_sock = root / "reg" / f"{DRIVER}-reg.sock"
        with FakeApiServer() as api, KubeletClient() as kubelet:
            for name in (NODE, TWIN_NODE):
                api.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name}})
            fill = [_claim(i, "fill") for i in range(prepared + 1)]  # the last one: the NRI probe
            probes = [_claim(i, "probe") for i in range(rounds)]
            twin_probes = [_claim(i, "twin", TWIN_NODE) for i in range(rounds)]
            for _, _, obj in (*fill, *probes, *twin_probes):
                api.put_object(obj)
            argv = _run_argv(root, api.kubeconfig_path)
            child, _, _, endpoint = _registered(argv, reg_sock, kubelet, env)
            twin_argv = _twin_argv(root, root / "twin", api.kubeconfig_path)
            twin, _, _, twin_endpoint = _registered(
                twin_argv, root / "twin/reg" / f"{DRIVER}-reg.sock", kubelet, env
            )
            try:
                refs = [ClaimRef(NAMESPACE, obj["metadata"]["name"], uid) for uid, _, obj in fill]
                filled_at = time.monotonic()
                for start in range(0, len(refs), 32):
                    batch = refs[start : start + 32]
                    out = kubelet.prepare(endpoint, batch)
                    bad = [out.claims[r.uid].error for r in batch if out.claims[r.uid].error]
                    if bad:
                        raise SystemExit(f"fill prepare failed: {bad[0]}")
                fill_s = time.monotonic() - filled_at
                prep: list[float] = []
                unprep: list[float] = []
                twin_prep: list[float] = []
                cpu_before = _cpu_s(child.pid)
                for k, (filled_probe, twin_probe) in enumerate(zip(probes, twin_probes, strict=True)):
                    # the filled node's call and the empty twin's, in turns (each first every other
                    # round): load on the shared machine hits both alike
                    pair = [
                        (endpoint, filled_probe, prep, unprep),
                        (twin_endpoint, twin_probe, twin_prep, []),
                    ]
                    for where, (uid, _, obj), prepared_s, unprepared_s in pair[:: 1 if k % 2 else -1]:
                        ref = ClaimRef(NAMESPACE, obj["metadata"]["name"], uid)
                        t0 = time.perf_counter()
                        out = kubelet.prepare(where, [ref])
                        prepared_s.append(time.perf_counter() - t0)
                        if out.claims[uid].error:
                            raise SystemExit(f"prepare failed: {out.claims[uid].error}")
                        t0 = time.perf_counter()
                        kubelet.unprepare(where, [ref])
                        unprepared_s.append(time.perf_counter() - t0)
                cpu_per_cycle_ms = (_cpu_s(child.pid) - cpu_before) / rounds * 1e3
                time.sleep(1.0)  # background work after the calls (status, metrics) settles
                rss = rss_mib(child.pid)
            finally:
                _stop(child)
                _stop(twin)
            journal_bytes = (root / "plugin" / "state" / "journal.log").stat().st_size
            restarts: list[float] = []
            idle_cpu_s_per_hour = float("nan")
            for attempt in range(3):
                child, seconds, _, _ = _registered(argv, reg_sock, kubelet, env)
                restarts.append(seconds)
                try:
                    if attempt == 2 and idle_s > 0:
                        time.sleep(2.0)  # the start's own work (publish, first health reading) ends
                        before = _cpu_s(child.pid)
                        time.sleep(idle_s)
                        idle_cpu_s_per_hour = (_cpu_s(child.pid) - before) / idle_s * 3600
                finally:
                    _stop(child)
        probe_uid, probe_pod, _ = fill[-1]
        nri = _nri_p50(root, inventory, probe_uid, probe_pod, rounds)
        return {
            "prepared": prepared,
            "fill_s": round(fill_s, 2),
            "prepare_p50_ms": _p50_ms(prep),
            "empty_twin_prepare_p50_ms": _p50_ms(twin_prep),
            "prepare_over_empty_twin": round(statistics.median(prep) / statistics.median(twin_prep), 3),
            "unprepare_p50_ms": _p50_ms(unprep),
            "cpu_per_cycle_ms": round(cpu_per_cycle_ms, 3),
            "rss_mib": round(rss, 1),
            "journal_bytes": journal_bytes,
            "restart_to_registered_s": round(statistics.median(restarts), 3),
            "nri_create_p50_ms": nri,
            "idle_cpu_s_per_hour": round(idle_cpu_s_per_hour, 2),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def driver_cpu_level(base: str, prepared: int, rounds: int, node: NodeKind = "nvidia") -> dict[str, Any]:
    """The driver's own CPU per one-claim prepare+unprepare cycle at ``prepared`` claims, in this
    process: the kubelet layer's prepare, ``ClaimsDriver`` and the prepared-claims index's refresh
    after each call (as ``numadra run`` wires it), no gRPC or HTTP. Thread CPU time, so it is the
    figure a loaded machine bends least."""
    from bench._common import in_memory_driver
    from driver.inventory.discovery import discover
    from driver.kubelet import claims as layer
    from driver.plugin import ClaimRef
    from driver.state.index import PreparedIndex

    root = Path(tempfile.mkdtemp(prefix="filldrv", dir=base))
    try:
        nvidia_node(root / "host", _fill_topology(1024), node)
        inventory = discover(root / "host", use_nvml=False)
        fill = [_claim(i, "fill") for i in range(prepared)]
        probes = [_claim(i, "probe") for i in range(rounds + 20)]
        store = {(NAMESPACE, obj["metadata"]["name"]): obj for _, _, obj in (*fill, *probes)}
        driver, fetcher = in_memory_driver(
            inventory,
            store,
            driver=DRIVER,
            node=NODE,
            cdi_dir=root / "cdi",
            plugin_dir=root / "plugin",
            host_root=root / "host",
        )
        index = PreparedIndex(driver.prepared_claims, driver.journal_changes)
        refs = [ClaimRef(NAMESPACE, obj["metadata"]["name"], uid) for uid, _, obj in fill]
        for start in range(0, len(refs), 32):
            layer.prepare(driver, fetcher, None, refs[start : start + 32])
        index.refresh()
        spent: list[float] = []
        for k, (uid, _, obj) in enumerate(probes):
            ref = ClaimRef(NAMESPACE, obj["metadata"]["name"], uid)
            t0 = time.thread_time()
            layer.prepare(driver, fetcher, None, [ref])
            index.invalidate()
            index.refresh()
            driver.unprepare_claims([ref])
            index.invalidate()
            index.refresh()
            if k >= 20:  # the first 20 warm the caches
                spent.append(time.thread_time() - t0)
        driver.close()
        return {"prepared": prepared, "driver_cpu_per_cycle_ms": _p50_ms(spent)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def devices_level(base: str, devices: int) -> dict[str, Any]:
    """Slice bytes, first publish and no-change re-publish at ``devices`` NIC devices."""
    from driver.inventory.discovery import discover
    from driver.kube.client import KubeClient
    from driver.slices.builder import build_slices
    from driver.slices.publisher import SlicePublisher
    from harness.fakeapiserver import FakeApiServer
    from harness.hosttree import write_host_tree

    root = Path(tempfile.mkdtemp(prefix="fillnic", dir=base))
    try:
        write_host_tree(root, _nic_topology(devices))
        inventory = discover(root, use_nvml=False)
        nics = len(inventory.nics)
        t0 = time.perf_counter()
        slices = build_slices(inventory, node_name=NODE, driver_name=DRIVER)
        build_s = time.perf_counter() - t0
        with FakeApiServer() as api:
            for name in (NODE, "warm-up"):
                api.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name}})
            client = KubeClient(api.kubeconfig_path)
            try:
                # an untimed publish of another node first: the client's connection, first encodings
                SlicePublisher(client, node_name="warm-up", driver_name=DRIVER).sync(
                    build_slices(inventory, node_name="warm-up", driver_name=DRIVER)
                )
                publisher = SlicePublisher(client, node_name=NODE, driver_name=DRIVER)
                t0, c0 = time.perf_counter(), time.thread_time()
                publisher.sync(slices)
                first_s, first_cpu = time.perf_counter() - t0, time.thread_time() - c0
                t0, c0 = time.perf_counter(), time.thread_time()
                publisher.sync(slices)
                again_s, again_cpu = time.perf_counter() - t0, time.thread_time() - c0
                stored = [s for s in api.objects("ResourceSlice") if s["spec"]["nodeName"] == NODE]
            finally:
                client.close()
        return {
            "devices": devices,
            "nic_devices_found": nics,
            "slices": len(stored),
            "slice_bytes": sum(len(json.dumps(s, separators=(",", ":"))) for s in stored),
            "build_ms": round(build_s * 1e3, 2),
            "first_publish_ms": round(first_s * 1e3, 2),
            "first_publish_cpu_ms": round(first_cpu * 1e3, 2),
            "republish_ms": round(again_s * 1e3, 2),
            "republish_cpu_ms": round(again_cpu * 1e3, 2),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cpus_level(base: str, cpus: int, runs: int = 10) -> dict[str, Any]:
    """Discovery plus slice build of a ``cpus``-CPU host (p50 of ``runs``, after one warm-up)."""
    from driver.inventory.discovery import discover
    from driver.slices.builder import build_slices
    from harness.hosttree import write_host_tree
    from harness.topologies import TOPOLOGIES

    root = Path(tempfile.mkdtemp(prefix="fillcpu", dir=base))
    try:
        write_host_tree(root, TOPOLOGIES["dgx"] if cpus == 224 else _fill_topology(cpus, nodes=4))
        found = 0
        samples: list[float] = []
        for attempt in range(runs + 1):
            t0 = time.perf_counter()
            inventory = discover(root, use_nvml=False)
            build_slices(inventory, node_name=NODE, driver_name=DRIVER)
            if attempt:
                samples.append(time.perf_counter() - t0)
            found = len(inventory.cpus)
        return {"cpus": cpus, "cpus_found": found, "discover_and_build_p50_ms": _p50_ms(samples)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _growth(levels: list[dict[str, Any]], key: str, unit: str) -> dict[str, Any]:
    """Each figure at the last level over the first, and its cost per added unit."""
    first, last = levels[0], levels[-1]
    added = last[unit] - first[unit]
    out: dict[str, Any] = {}
    for name, value in last.items():
        if name == unit or not isinstance(value, int | float) or not isinstance(first.get(name), int | float):
            continue
        if first[name]:
            out[f"{name}_x"] = round(value / first[name], 2)
        if added:
            out[f"{name}_per_{key}"] = round((value - first[name]) / added, 4)
    return out


def _draw(out_dir: Path, result: dict[str, Any]) -> list[str]:
    """One SVG per curve; returns the file names."""
    out_dir.mkdir(parents=True, exist_ok=True)
    claims, devices, cpus = result["claims"], result["devices"], result["cpus"]
    cx = [c["prepared"] for c in claims]
    charts = {
        "fill-claims-calls.svg": line_chart(
            "One-claim calls as the node fills",
            cx,
            {
                "prepare p50 (ms)": [c["prepare_p50_ms"] for c in claims],
                "empty twin's prepare p50 (ms)": [c["empty_twin_prepare_p50_ms"] for c in claims],
                "unprepare p50 (ms)": [c["unprepare_p50_ms"] for c in claims],
                "CPU per cycle (ms)": [c["cpu_per_cycle_ms"] for c in claims],
                "NRI CreateContainer p50 (ms)": [c["nri_create_p50_ms"] for c in claims],
                "driver's own CPU per cycle (ms)": [
                    d["driver_cpu_per_cycle_ms"] for d in result["driver_cpu"]
                ],
            },
            x_label="prepared claims",
            y_label="milliseconds",
        ),
        "fill-claims-memory.svg": line_chart(
            "RSS and journal as the node fills",
            cx,
            {
                "RSS (MiB)": [c["rss_mib"] for c in claims],
                "journal (MiB)": [c["journal_bytes"] / 2**20 for c in claims],
            },
            x_label="prepared claims",
            y_label="MiB",
        ),
        "fill-claims-restart.svg": line_chart(
            "Restart to registered, and idle CPU",
            cx,
            {
                "restart to registered (s)": [c["restart_to_registered_s"] for c in claims],
                "idle CPU (s per hour)": [c["idle_cpu_s_per_hour"] / 10 for c in claims],
            },
            x_label="prepared claims (idle CPU drawn / 10)",
            y_label="seconds",
            target=1.0,
        ),
        "fill-devices.svg": line_chart(
            "Publishing as devices grow",
            [d["devices"] for d in devices],
            {
                "first publish, CPU (ms)": [d["first_publish_cpu_ms"] for d in devices],
                "re-publish, no change, CPU (ms)": [d["republish_cpu_ms"] for d in devices],
                "slice KiB": [d["slice_bytes"] / 1024 for d in devices],
            },
            x_label="NIC devices",
            y_label="ms / KiB",
        ),
        "fill-cpus.svg": line_chart(
            "Discovery and slice build as CPUs grow",
            [c["cpus"] for c in cpus],
            {"discover + build p50 (ms)": [c["discover_and_build_p50_ms"] for c in cpus]},
            x_label="CPUs",
            y_label="milliseconds",
        ),
    }
    for name, svg in charts.items():
        (out_dir / name).write_text(svg)
    return sorted(charts)


def _levels(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> int:
    """Run every level and print one JSON object; draw the curves."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=_levels, default=[0, 100, 1000])
    parser.add_argument("--devices", type=_levels, default=[8, 128, 1024])
    parser.add_argument("--cpus", type=_levels, default=[2, 224, 512])
    parser.add_argument("--rounds", type=int, default=60, help="timed calls at each claims level")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU at each claims level")
    parser.add_argument("--base", default="/tmp", help="where the plugin and CDI dirs go (/dev/shm: tmpfs)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "figures")
    parser.add_argument(
        "--node",
        choices=NODE_KINDS,
        default="nvidia",
        help="the claims levels' node: nvidia (GPUs, driver files, the toolkit's CDI spec), bare (no "
        "GPU), no-userspace (GPUs without their user space)",
    )
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    from driver.log import configure_logging

    configure_logging("json", logging.CRITICAL)
    pycache = Path(tempfile.mkdtemp(prefix="fillpyc", dir=args.base))
    env = child_env(pycache)
    try:
        claims = [claims_level(args.base, n, args.rounds, args.idle, env, args.node) for n in args.claims]
    finally:
        shutil.rmtree(pycache, ignore_errors=True)
    driver_cpu = [driver_cpu_level(args.base, n, args.rounds * 4, args.node) for n in args.claims]
    devices = [devices_level(args.base, n) for n in args.devices]
    cpus = [cpus_level(args.base, n) for n in args.cpus]
    result: dict[str, Any] = {
        "claims": claims,
        "claims_growth": _growth(claims, "claim", "prepared"),
        "driver_cpu": driver_cpu,
        "devices": devices,
        "devices_growth": _growth(devices, "device", "devices"),
        "cpus": cpus,
        "cpus_growth": _growth(cpus, "cpu", "cpus"),
        "node": args.node,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    first, last = claims[0], claims[-1]
    result["targets"] = {
        "prepare_p50_growth<=1.2": round(last["prepare_p50_ms"] / first["prepare_p50_ms"], 2),
        # the same, each level's p50 over its empty twin's in the same minutes (load cancels)
        "prepare_p50_growth_vs_twin<=1.2": round(
            last["prepare_over_empty_twin"] / first["prepare_over_empty_twin"], 2
        ),
        "driver_cpu_growth": round(
            driver_cpu[-1]["driver_cpu_per_cycle_ms"] / driver_cpu[0]["driver_cpu_per_cycle_ms"], 2
        ),
        "nri_p50_growth<=1.2": round(last["nri_create_p50_ms"] / first["nri_create_p50_ms"], 2),
        "rss_kib_per_claim<=4": round(
            (last["rss_mib"] - first["rss_mib"]) * 1024 / max(1, last["prepared"] - first["prepared"]), 2
        ),
        "restart_s_at_most_claims<=1": last["restart_to_registered_s"],
    }
    result["svgs"] = _draw(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
