"""What a fleet of numadra nodes costs the control plane: one real kube-apiserver + etcd, N nodes.

The publishers of N simulated nodes (``SlicePublisher`` exactly as ``numadra run`` wires it, each
with its own :class:`KubeClient`, so its own TLS connections) run in a few worker processes
(``--workers``; this 2-core machine fits 4). Each node publishes the inventory of a generated host
tree, the shapes taken in turn from ``--shapes`` (dgx: 8 GPUs + 72 NICs, huge, workstation,
cloud_vm). The Node objects exist; the apiserver is the e2e tier's (harness/controlplane.py,
binaries from tests/e2e/build-bins.sh), with the scheduler running as the one real slice watcher.

Phases per N, each measured from both sides (client-side calls per verb counted by a thin
wrapper around each node's client; server-side ``apiserver_request_total`` by verb/resource and
the open watches ``apiserver_longrunning_requests``):

* ``start``: every node starts at once (start jitter ``--start-jitter``); time until all N have
  published, calls and writes per node, sync latency (first call -> published) p50/p99;
* ``idle``: ``--idle`` seconds with nothing changing; writes and LISTs per node-hour (must be 0),
  watch renewals seen, and the spread of the watch timeouts the nodes drew;
* ``restart``: all workers stopped (slices stay, owned by the Node) and started again, with the
  start jitter: calls and writes per node (0 writes: the stored slices match), peak calls/s;
* ``restart_no_jitter``: the same with no start jitter, the stampede the jitter spreads;
* slice bytes per node (stored JSON, per shape) and TLS connections per node.

Prints one JSON object. Ratios are what to compare (jitter vs no jitter in the same run); absolute
times are this loaded 2-core machine's. docs/scale.md extrapolates to 5,000 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DRIVER = "numadra.dev"
VERBS = ("get_node", "list", "watch", "create", "update", "delete")
WRITES = ("create", "update", "delete")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+([0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# -- worker: the publishers of some nodes ---------------------------------------------------------


class _CountingApi:
    """The node's real KubeClient, with every call counted (the bench's own instrument)."""

    def __init__(self, api: Any, node: str) -> None:
        self._api = api
        self.node = node
        self.calls: Counter[str] = Counter()
        self.first_call = 0.0
        self.watch_timeouts: list[int] = []
        self._lock = threading.Lock()

    def _count(self, verb: str) -> None:
        with self._lock:
            if not self.first_call:
                self.first_call = time.time()
            self.calls[verb] += 1

    def get_node(self, name: str) -> Any:
        self._count("get_node")
        return self._api.get_node(name)

    def list_resource_slices(self, **kw: Any) -> Any:
        self._count("list")
        return self._api.list_resource_slices(**kw)

    def create_resource_slice(self, obj: Any) -> Any:
        self._count("create")
        return self._api.create_resource_slice(obj)

    def update_resource_slice(self, obj: Any) -> Any:
        self._count("update")
        return self._api.update_resource_slice(obj)

    def delete_resource_slice(self, name: str, **kw: Any) -> Any:
        self._count("delete")
        return self._api.delete_resource_slice(name, **kw)

    def watch_resource_slices(self, **kw: Any) -> Any:
        self._count("watch")
        with self._lock:
            self.watch_timeouts.append(int(kw.get("timeout_seconds", 0)))
        return self._api.watch_resource_slices(**kw)


_REPORTS: list[Any] = []  # the worker's report stream: the original stdout (logs go to stderr)


def _emit(obj: Mapping[str, Any]) -> None:
    _REPORTS[0].write(json.dumps(obj) + "\n")
    _REPORTS[0].flush()


def worker(spec_path: Path) -> int:
    """Run the publishers of the nodes in the spec until SIGTERM; report on stdout (JSON lines)."""
    import logging

    from driver.inventory.discovery import discover
    from driver.kube.client import KubeClient
    from driver.slices.publisher import SlicePublisher

    _REPORTS.append(os.fdopen(os.dup(1), "w"))
    os.dup2(2, 1)  # structlog and anything else printing: to the worker's log file
    sys.stdout = sys.stderr
    logging.disable(logging.INFO)
    spec = json.loads(spec_path.read_text())
    stop = threading.Event()
    dump = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: dump.set())
    inventories = {tree: discover(tree, use_nvml=False) for tree in {t for _, t in spec["nodes"]}}
    nodes: list[tuple[_CountingApi, SlicePublisher, KubeClient]] = []
    for name, tree in spec["nodes"]:
        client = KubeClient(spec["kubeconfig"], timeout=60.0, connect_timeout=10.0)
        client.configure()  # the client's import and config load stay out of the measured sync
        api = _CountingApi(client, name)
        pub = SlicePublisher(
            api,
            node_name=name,
            driver_name=DRIVER,
            start_jitter=float(spec["start_jitter"]),
            watch_timeout=int(spec["watch_timeout"]),
        )
        pub.republish(inventories[tree])
        nodes.append((api, pub, client))
    _emit({"ready": len(nodes), "pid": os.getpid()})
    for _, pub, _ in nodes:
        pub.start()
    waiting = {api.node: (api, pub) for api, pub, _ in nodes}
    while not stop.is_set():
        for name, (api, pub) in list(waiting.items()):
            if pub.published.is_set():
                _emit({"node": name, "first_call": api.first_call, "published": time.time()})
                del waiting[name]
        if dump.is_set():
            dump.clear()
            _emit(_totals(nodes))
        stop.wait(0.05)
    for _, pub, client in nodes:
        pub.stop(timeout=2.0)
        client.close()
    _emit({**_totals(nodes), "final": True})
    return 0


def _totals(nodes: list[tuple[Any, Any, Any]]) -> dict[str, Any]:
    calls: Counter[str] = Counter()
    timeouts: list[int] = []
    for api, _, _ in nodes:
        calls.update(api.calls)
        timeouts.extend(api.watch_timeouts)
    return {"calls": dict(calls), "watch_timeouts": timeouts}


# -- parent: control plane, workers, measurements -------------------------------------------------


class _Workers:
    """The worker processes of one phase, and what they reported (a reader thread per worker)."""

    def __init__(self, specs: list[Path], log_dir: Path) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec)],
                stdout=subprocess.PIPE,
                stderr=(log_dir / f"{spec.stem}.err").open("ab"),
                cwd=REPO,
                text=True,
            )
            for spec in specs
        ]
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.published: dict[str, tuple[float, float]] = {}
        self.ready = 0
        self.totals: list[dict[str, Any]] = []
        self._readers = [threading.Thread(target=self._reader, args=(p,), daemon=True) for p in self.procs]
        for t in self._readers:
            t.start()

    def _reader(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                self.messages.put(json.loads(line))
            except ValueError:
                continue

    def _drain(self, timeout: float) -> None:
        try:
            msg = self.messages.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            if "node" in msg:
                self.published[msg["node"]] = (msg["first_call"], msg["published"])
            elif "calls" in msg:
                self.totals.append(msg)
            elif "ready" in msg:
                self.ready += 1
            try:
                msg = self.messages.get_nowait()
            except queue.Empty:
                return

    def _until(self, done: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            for p in self.procs:
                if p.poll() is not None and p.returncode != 0:
                    raise RuntimeError(f"worker exited {p.returncode} while waiting for {what}")
            self._drain(0.5)

    def wait_ready(self, timeout: float) -> None:
        self._until(lambda: self.ready >= len(self.procs), timeout, "workers to build their nodes")

    def wait_published(self, count: int, timeout: float) -> None:
        self._until(lambda: len(self.published) >= count, timeout, f"{count} nodes to publish")

    def counts(self) -> tuple[Counter[str], list[int]]:
        """Cumulative calls per verb of all workers (asks each with SIGUSR1)."""
        self.totals = []
        for p in self.procs:
            p.send_signal(signal.SIGUSR1)
        self._until(lambda: len(self.totals) >= len(self.procs), 60, "call counts")
        return _sum_totals(self.totals)

    def stop(self) -> tuple[Counter[str], list[int]]:
        self.totals = []
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        self._until(lambda: len(self.totals) >= len(self.procs), 120, "workers to stop")
        for p in self.procs:
            p.wait(30)
        return _sum_totals(self.totals)


def _sum_totals(totals: list[dict[str, Any]]) -> tuple[Counter[str], list[int]]:
    calls: Counter[str] = Counter()
    timeouts: list[int] = []
    for t in totals:
        calls.update(t["calls"])
        timeouts.extend(t["watch_timeouts"])
    return calls, timeouts


def _scrape(admin: Any) -> dict[str, float]:
    """apiserver metrics we use, flattened: request totals by verb/resource, open watches, objects."""
    text = admin.request("GET", "/metrics", timeout=60.0)
    out: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        out[key] = out.get(key, 0.0) + value

    for line in str(text).splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, value = m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))
        resource = labels.get("resource", "")
        if name == "apiserver_request_total" and resource in ("resourceslices", "nodes"):
            add(f"requests:{labels.get('verb')}:{resource}", value)
        elif name == "apiserver_longrunning_requests" and resource == "resourceslices":
            add(f"open:{labels.get('verb')}:{resource}", value)
        elif (
            name == "apiserver_watch_events_total"
            and "resourceslice" in (labels.get("kind", "") + resource).lower()
        ):
            add("watch_events:resourceslices", value)
        elif (
            name == "apiserver_watch_events_sizes_sum"
            and "resourceslice" in (labels.get("kind", "") + resource).lower()
        ):
            add("watch_event_bytes:resourceslices", value)
        elif name in ("apiserver_resource_objects", "apiserver_storage_objects") and resource.startswith(
            "resourceslices"
        ):
            add("stored:resourceslices", value)
        elif name == "process_cpu_seconds_total":
            add("apiserver_cpu_seconds", value)
        elif name in ("apiserver_storage_size_bytes", "apiserver_storage_db_total_size_in_bytes"):
            out["etcd_db_bytes"] = max(out.get("etcd_db_bytes", 0.0), value)
    return out


def _delta(after: Mapping[str, float], before: Mapping[str, float], prefix: str) -> dict[str, float]:
    return {
        k.removeprefix(prefix): after[k] - before.get(k, 0.0)
        for k in sorted(after)
        if k.startswith(prefix) and after[k] - before.get(k, 0.0)
    }


def _load(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """Watch events sent for slices (all watchers: the nodes' and the scheduler's) and apiserver CPU."""
    keys = ("watch_events:resourceslices", "watch_event_bytes:resourceslices", "apiserver_cpu_seconds")
    return {k.replace(":", "_"): round(after.get(k, 0.0) - before.get(k, 0.0), 2) for k in keys}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _peak_per_second(times: list[float]) -> int:
    buckets = Counter(int(t) for t in times if t)
    return max(buckets.values(), default=0)


def _sync_stats(published: Mapping[str, tuple[float, float]], t0: float) -> dict[str, float]:
    latencies = [p - f for f, p in published.values() if f]
    return {
        "all_published_s": round(max(p for _, p in published.values()) - t0, 2),
        "sync_p50_s": round(_pct(latencies, 0.5), 3),
        "sync_p99_s": round(_pct(latencies, 0.99), 3),
        "sync_max_s": round(max(latencies, default=float("nan")), 3),
        "peak_first_calls_per_s": _peak_per_second([f for f, _ in published.values()]),
    }


def _per_node(calls: Mapping[str, int], n: int) -> dict[str, float]:
    return {verb: round(calls.get(verb, 0) / n, 3) for verb in VERBS}


def _tls_connections(pids: list[int], port: int) -> int:
    """Established TCP connections of these processes to the apiserver's port (from /proc)."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            for fd in fd_dir.iterdir():
                try:
                    target = str(fd.readlink())
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            remote_port = int(parts[2].rsplit(":", 1)[1], 16)
            if parts[3] == "01" and remote_port == port and parts[9] in inodes:
                count += 1
    return count


def _specs(
    root: Path,
    phase: str,
    nodes: list[tuple[str, str]],
    workers: int,
    *,
    kubeconfig: str,
    jitter: float,
    timeout: int,
) -> list[Path]:
    out = []
    for k in range(workers):
        part = nodes[k::workers]
        if not part:
            continue
        path = root / f"{phase}-w{k}.json"
        path.write_text(
            json.dumps(
                {"kubeconfig": kubeconfig, "nodes": part, "start_jitter": jitter, "watch_timeout": timeout}
            )
        )
        out.append(path)
    return out


def run_fleet(args: argparse.Namespace, cp: Any, trees: dict[str, Path], n: int) -> dict[str, Any]:
    """All phases for one fleet size."""
    admin = cp.admin
    kubeconfig = str(cp.root / "admin.kubeconfig")
    shapes = list(trees)
    nodes = [(f"fleet{n}-{i:04d}", str(trees[shapes[i % len(shapes)]])) for i in range(n)]
    for name, _ in nodes:
        admin.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    port = int(cp.server.rsplit(":", 1)[1])
    log_dir = cp.root
    result: dict[str, Any] = {"nodes": n, "workers": args.workers, "shapes": shapes}

    def spawn(phase: str, jitter: float) -> tuple[_Workers, float]:
        specs = _specs(
            cp.root, f"n{n}-{phase}", nodes, args.workers, kubeconfig=kubeconfig, jitter=jitter,
            timeout=args.watch_timeout,
        )  # fmt: skip
        workers = _Workers(specs, log_dir)
        workers.wait_ready(600)  # imports, discovery and clients are built before the clock starts
        return workers, time.time()

    # -- start
    m0 = _scrape(admin)
    workers, t0 = spawn("start", args.start_jitter)
    workers.wait_published(n, 900)
    time.sleep(2.0)  # the last watches open
    calls, _ = workers.counts()
    m1 = _scrape(admin)
    result["start"] = {
        **_sync_stats(workers.published, t0),
        "calls_per_node": _per_node(calls, n),
        "writes_per_node": round(sum(calls.get(v, 0) for v in WRITES) / n, 3),
        "apiserver_requests": _delta(m1, m0, "requests:"),
        **_load(m1, m0),
        "open_watches": m1.get("open:WATCH:resourceslices", 0.0),
        "tls_connections_per_node": round(_tls_connections([p.pid for p in workers.procs], port) / n, 2),
    }
    # -- idle
    calls_before, _ = calls, None
    time.sleep(args.idle)
    calls, timeouts = workers.counts()
    m2 = _scrape(admin)
    idle_calls = calls - calls_before
    node_hours = n * args.idle / 3600.0
    result["idle"] = {
        "seconds": args.idle,
        "calls": dict(idle_calls),
        "writes_per_node_hour": round(sum(idle_calls.get(v, 0) for v in WRITES) / node_hours, 3),
        "lists_per_node_hour": round(idle_calls.get("list", 0) / node_hours, 3),
        "apiserver_requests": _delta(m2, m1, "requests:"),
        **_load(m2, m1),
        "watch_timeout_s": {
            "min": min(timeouts, default=0),
            "max": max(timeouts, default=0),
            "mean": round(statistics.fmean(timeouts), 1) if timeouts else 0,
            "distinct": len(set(timeouts)),
        },
        "watch_renewals_per_node_hour_expected": round(3600 / (1.5 * args.watch_timeout), 2),
    }
    # -- restarts
    restarts = [("restart", args.start_jitter), ("restart_no_jitter", 0.0)]
    for phase, jitter in reversed(restarts) if args.reverse_restarts else restarts:
        workers.stop()
        m_before = _scrape(admin)
        workers, t0 = spawn(phase, jitter)
        workers.wait_published(n, 900)
        time.sleep(2.0)
        calls, _ = workers.counts()
        m_after = _scrape(admin)
        result[phase] = {
            "start_jitter_s": jitter,
            **_sync_stats(workers.published, t0),
            "calls_per_node": _per_node(calls, n),
            "writes_per_node": round(sum(calls.get(v, 0) for v in WRITES) / n, 3),
            "apiserver_requests": _delta(m_after, m_before, "requests:"),
            **_load(m_after, m_before),
        }
    workers.stop()
    # -- bytes
    stored = admin.items("/apis/resource.k8s.io/v1/resourceslices")
    by_shape: dict[str, list[int]] = {}
    shape_of = {name: Path(tree).name for name, tree in nodes}
    per_node: Counter[str] = Counter()
    for obj in stored:
        node = obj["spec"].get("nodeName", "")
        if node in shape_of:
            per_node[node] += len(json.dumps(obj, separators=(",", ":")))
    for node, size in per_node.items():
        by_shape.setdefault(shape_of[node], []).append(size)
    result["slice_bytes_per_node"] = {s: round(statistics.fmean(v)) for s, v in sorted(by_shape.items())}
    result["slice_bytes_per_node_mean"] = round(statistics.fmean(per_node.values())) if per_node else 0
    result["slices_per_node"] = round(
        sum(1 for o in stored if o["spec"].get("nodeName", "") in shape_of) / n, 2
    )
    m_end = _scrape(admin)
    result["etcd_db_bytes"] = m_end.get("etcd_db_bytes", 0.0)
    result["stored_resourceslices"] = m_end.get("stored:resourceslices", 0.0)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="50,200,500", help="fleet sizes, comma-separated")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--idle", type=float, default=60.0, help="idle window in seconds (default 60)")
    parser.add_argument("--start-jitter", type=float, default=2.0, help="as numadra run (default 2 s)")
    parser.add_argument("--watch-timeout", type=int, default=300, help="minimum watch timeout (default 300)")
    parser.add_argument("--shapes", default="dgx,huge,workstation,cloud_vm", help="host tree shapes")
    parser.add_argument(
        "--reverse-restarts", action="store_true", help="restart without jitter first (order check)"
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args.worker)

    from harness.controlplane import ControlPlane, binary_dir, missing_binaries
    from harness.hosttree import write_host_tree
    from harness.topologies import TOPOLOGIES

    bins = binary_dir()
    missing = missing_binaries(bins)
    if missing:
        print(json.dumps({"bench": "fleet", "skipped": f"missing {', '.join(missing)} in {bins}"}))
        return 3
    root = Path(tempfile.mkdtemp(prefix="numadra-fleet-"))
    trees = {s: write_host_tree(root / "trees" / s, TOPOLOGIES[s]) for s in args.shapes.split(",")}
    cp = ControlPlane(bins, root / "cp", "fleet-0")
    (root / "cp").mkdir()
    out: dict[str, Any] = {"bench": "fleet", "machine": {"cpus": os.cpu_count()}, "fleets": []}
    try:
        cp.start()
        for proc in cp.processes:  # nothing here needs it; its CPU is better spent on the apiserver
            if proc.name == "kube-controller-manager":
                proc.stop()
        for n in (int(v) for v in args.nodes.split(",")):
            try:
                out["fleets"].append(run_fleet(args, cp, trees, n))
            except RuntimeError as err:
                out["fleets"].append({"nodes": n, "error": str(err)})
                break
            print(json.dumps(out["fleets"][-1]), file=sys.stderr, flush=True)
    finally:
        cp.stop()
        if os.environ.get("NUMADRA_KEEP_FLEET") != "1":
            cp.remove()
            subprocess.run(["rm", "-rf", str(root)], check=False)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
