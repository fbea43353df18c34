"""The driver's HTTP transport beside urllib3 alone: CPU per claim GET and per status apply, RSS.

Why: the driver carries its own small connection pool (driver/kube/transport.py) on the standard
library instead of urllib3, which the ``kubernetes`` package already installs. This bench is the
measurement behind that choice, against the same apiserver in the same run:

* ``pool``: ``driver.kube.transport.Transport`` as the tree has it now;
* ``urllib3``: ``urllib3.HTTPSConnectionPool`` alone (no official client, no serializer), kept
  alive, no retries, the same TLS context settings;
* ``previous`` (with ``--previous FILE``): another version of driver/kube/transport.py, e.g.
  ``git show 991f725:driver/kube/transport.py > /tmp/prev.py``, loaded from that file.

Each peer makes the same requests: a claim GET, and a server-side apply of the claim's
``status.devices`` (PATCH, ``application/apply-patch+yaml``, answered with the claim). The rounds
are interleaved (each round runs every peer in turn, the order rotating), so the load of a shared
machine hits all peers alike; a figure is the median over the rounds of the calling thread's CPU
time per request (``time.thread_time``: the server's threads do not count) and the ratio to
``pool`` in the same run. ``rss_mib``: VmRSS of a fresh process that loaded the peer (for the
pool, its module file alone, not the driver package) and made 20 GETs over TLS (``floor``: the
same GETs with ``http.client`` alone, no pool).

The apiserver is the real kube-apiserver of the e2e tier over TLS (``--apiserver real``, the
binaries of tests/e2e/build-bins.sh) or the TLS fake of the kube tests (``--apiserver fake``).
``auto`` takes the real one when its binaries are there. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAMESPACE = "bench"
CLAIM = "transport-bench"
FIELD_MANAGER = "numadra.dev"
CLAIM_PATH = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{CLAIM}"
APPLY_TARGET = f"{CLAIM_PATH}/status?fieldManager={FIELD_MANAGER}&force=true"
APPLY_BODY = json.dumps(
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": CLAIM, "namespace": NAMESPACE},
        "status": {"devices": []},
    },
    separators=(",", ":"),
).encode()


@dataclass(frozen=True)
class Server:
    """Where the peers connect: host, port, CA file, bearer token."""

    host: str
    port: int
    ca_file: str
    token: str

    def headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "Authorization": f"Bearer {self.token}"}


# -- peers ------------------------------------------------------------------------------------------


class Peer:
    """One transport: ``get()`` a claim and ``apply()`` its status, each returning the raw body."""

    def get(self) -> bytes:
        raise NotImplementedError

    def apply(self) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        """Release its connections."""


class PoolPeer(Peer):
    """driver.kube.transport (or another version of that module, loaded from a file)."""

    def __init__(self, server: Server, module: Any) -> None:
        settings = module.TransportSettings(
            scheme="https", host=server.host, port=server.port, ca_file=server.ca_file
        )
        self._transport = module.Transport(settings, connect_timeout=3.0, timeout=10.0)
        self._headers = server.headers()
        self._apply_headers = {**self._headers, "Content-Type": "application/apply-patch+yaml"}

    def get(self) -> bytes:
        response = self._transport.request("GET", CLAIM_PATH, self._headers, idempotent=True)
        assert response.status == 200, response.status
        return bytes(response.body)

    def apply(self) -> bytes:
        response = self._transport.request(
            "PATCH", APPLY_TARGET, self._apply_headers, APPLY_BODY, idempotent=True
        )
        assert response.status == 200, (response.status, response.body[:300])
        return bytes(response.body)

    def close(self) -> None:
        self._transport.close()


class Urllib3Peer(Peer):
    """urllib3 alone: one kept-alive HTTPS pool, no retries, the driver's TLS settings."""

    def __init__(self, server: Server) -> None:
        import urllib3

        context = ssl.create_default_context(cafile=server.ca_file)
        self._pool = urllib3.HTTPSConnectionPool(
            server.host,
            server.port,
            maxsize=4,
            ssl_context=context,
            retries=False,
            timeout=urllib3.Timeout(connect=3.0, read=10.0),
        )
        self._headers = server.headers()
        self._apply_headers = {**self._headers, "Content-Type": "application/apply-patch+yaml"}

    def get(self) -> bytes:
        response = self._pool.urlopen("GET", CLAIM_PATH, headers=self._headers, retries=False)
        assert response.status == 200, response.status
        return bytes(response.data)

    def apply(self) -> bytes:
        response = self._pool.urlopen(
            "PATCH", APPLY_TARGET, body=APPLY_BODY, headers=self._apply_headers, retries=False
        )
        assert response.status == 200, (response.status, response.data[:300])
        return bytes(response.data)

    def close(self) -> None:
        self._pool.close()


def _load_module(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("previous_transport", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _peers(server: Server, previous: str) -> dict[str, Peer]:
    from driver.kube import transport

    peers: dict[str, Peer] = {"pool": PoolPeer(server, transport), "urllib3": Urllib3Peer(server)}
    if previous:
        peers["previous"] = PoolPeer(server, _load_module(previous))
    return peers


# -- servers ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _apiserver(kind: str, workdir: Path) -> Iterator[Server]:
    if kind == "fake":
        from harness.fake_tls_api import FakeTlsApiServer, make_pki

        fake = FakeTlsApiServer(make_pki(workdir))
        fake.token = "bench-token"
        try:
            url = urlsplit(fake.url)
            yield Server(str(url.hostname), int(url.port or 443), str(fake.pki.ca), fake.token)
        finally:
            fake.close()
        return

    from harness.controlplane import ControlPlane, binary_dir, missing_binaries

    bins = binary_dir()
    if missing_binaries(bins):
        raise SystemExit(f"--apiserver real needs {bins} (run tests/e2e/build-bins.sh)")
    plane = ControlPlane(bin_dir=bins, root=workdir / "cp", node_name="bench-node")
    plane.root.mkdir()
    try:
        plane.start()
        admin = plane.admin
        assert admin is not None
        admin.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": CLAIM, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
        }
        admin.create(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", claim)
        url = urlsplit(plane.server)
        yield Server(str(url.hostname), int(url.port or 443), str(plane.ca_file), admin.token)
    finally:
        plane.stop()


def _binaries_ready() -> bool:
    from harness.controlplane import binary_dir, missing_binaries

    return not missing_binaries(binary_dir())


# -- measurement ------------------------------------------------------------------------------------


def _cpu_per_call(call: Callable[[], bytes], count: int) -> float:
    """Microseconds of this thread's CPU per call, over ``count`` calls."""
    started = time.thread_time()
    for _ in range(count):
        call()
    return (time.thread_time() - started) / count * 1e6


def _interleaved(peers: dict[str, Peer], rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    names = list(peers)
    samples: dict[str, dict[str, list[float]]] = {n: {"get": [], "apply": []} for n in names}
    for peer in peers.values():  # connect and warm up before anything counts
        for _ in range(20):
            peer.get()
            peer.apply()
    for index in range(rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            samples[name]["get"].append(_cpu_per_call(peers[name].get, per_round))
            samples[name]["apply"].append(_cpu_per_call(peers[name].apply, per_round))
    return {
        name: {
            "get_cpu_us": round(statistics.median(s["get"]), 1),
            "apply_cpu_us": round(statistics.median(s["apply"]), 1),
        }
        for name, s in samples.items()
    }


RSS_CHILD = """
import json, ssl, sys
server = json.loads(sys.argv[1]); peer = sys.argv[2]
sys.path.insert(0, server["repo"])
path = "/apis/resource.k8s.io/v1/namespaces/bench/resourceclaims/transport-bench"
headers = {"Accept": "application/json", "Authorization": "Bearer " + server["token"]}
if peer == "floor":
    import http.client
    context = ssl.create_default_context(cafile=server["ca_file"])
    for _ in range(20):
        conn = http.client.HTTPSConnection(server["host"], server["port"], context=context)
        conn.request("GET", path, headers=headers); conn.getresponse().read(); conn.close()
elif peer == "urllib3":
    import urllib3
    pool = urllib3.HTTPSConnectionPool(
        server["host"], server["port"], ca_certs=server["ca_file"], retries=False
    )
    for _ in range(20):
        pool.urlopen("GET", path, headers=headers, retries=False).data
else:  # the module file alone, not the driver package around it (structlog, the client...)
    import importlib.util
    spec = importlib.util.spec_from_file_location("transport_under_test", peer)
    module = importlib.util.module_from_spec(spec); sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    settings = module.TransportSettings(
        scheme="https", host=server["host"], port=server["port"], ca_file=server["ca_file"]
    )
    transport = module.Transport(settings, connect_timeout=3.0, timeout=10.0)
    for _ in range(20):
        transport.request("GET", path, headers, idempotent=True)
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        print(int(line.split()[1]) / 1024)
"""


def _rss(server: Server, peer: str) -> float:
    """VmRSS (MiB) of a fresh process that made 20 GETs with ``peer`` ("floor", "urllib3" or the
    path of a transport module)."""
    info = json.dumps({**server.__dict__, "repo": str(REPO)})
    done = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, info, peer], capture_output=True, text=True, check=True, timeout=60
    )
    return round(float(done.stdout.strip().splitlines()[-1]), 1)


def _profile_get(server: Server, count: int) -> None:
    """Where the CPU of one claim GET goes: the pool's GETs under cProfile with a thread-CPU
    clock (waits for the apiserver cost nothing), the heaviest functions by cumulative CPU;
    the profiler's own overhead makes every figure larger than without it, the shares hold."""
    import cProfile
    import pstats

    from driver.kube import transport

    peer = PoolPeer(server, transport)
    try:
        for _ in range(50):  # connected, and the first answers' code paths warm
            json.loads(peer.get())
        profile = cProfile.Profile(time.thread_time)
        started = time.thread_time()
        profile.enable()
        for _ in range(count):
            json.loads(peer.get())  # the driver decodes every claim it reads
        profile.disable()
        cpu = time.thread_time() - started
    finally:
        peer.close()
    print(f"{count} GETs, {cpu / count * 1e6:.0f} us of CPU each under the profiler")
    pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--apiserver", choices=("auto", "real", "fake"), default="auto")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=50, help="requests per peer, kind and round")
    parser.add_argument("--rss-runs", type=int, default=3, help="fresh processes per RSS figure (median)")
    parser.add_argument("--previous", default="", help="another transport.py to measure as 'previous'")
    parser.add_argument(
        "--profile-get",
        type=int,
        default=0,
        metavar="N",
        help="instead: N claim GETs of the pool under cProfile, timed by this thread's CPU",
    )
    args = parser.parse_args()
    kind = args.apiserver
    if kind == "auto":
        kind = "real" if _binaries_ready() else "fake"
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as tmp, _apiserver(kind, Path(tmp)) as server:
        if args.profile_get:
            _profile_get(server, args.profile_get)
            return
        peers = _peers(server, args.previous)
        try:
            figures = _interleaved(peers, args.rounds, args.per_round)
        finally:
            for peer in peers.values():
                peer.close()
        rss_peers = {"floor": "floor", "pool": str(REPO / "driver/kube/transport.py"), "urllib3": "urllib3"}
        if args.previous:
            rss_peers["previous"] = args.previous
        rss = {
            name: statistics.median(_rss(server, peer) for _ in range(args.rss_runs))
            for name, peer in rss_peers.items()
        }
    base = figures["pool"]
    out: dict[str, Any] = {
        "apiserver": kind,
        "rounds": args.rounds,
        "per_round": args.per_round,
        "load_average": os.getloadavg()[0],
        "peers": figures,
        "ratios_vs_pool": {
            name: {key: round(value / base[key], 2) for key, value in fig.items()}
            for name, fig in figures.items()
            if name != "pool"
        },
        "rss_mib": rss,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
