"""Start-to-registered time and steady RSS of the real ``numadra run`` process.

``bench/prepare.py`` measures the prepare path in a child that wires only that path; this one
starts the whole DaemonSet entrypoint (``python -m driver.cli run``: inventory, journal, claims,
kubelet server, health monitor, publisher, metrics server) on a generated DGX-class host tree,
against the fake apiserver on loopback, and plays the kubelet with the test client:

* ``start_to_registered_s``: from spawn until the kubelet client's registration (GetInfo polled
  as the kubelet does when the socket appears, then NotifyRegistrationStatus) succeeded; median
  and max over ``--starts`` cold starts;
* ``start_to_published_s``: from spawn until the slices are in the apiserver (first start);
* ``steady_rss_mib``: VmRSS of the process after ``--prepares`` prepare/unprepare pairs (each a
  NIC VF and a 2-CPU share), once the process has settled.

Targets (issue 3): registered <= 1 s, RSS <= 80 MiB. Prints one JSON object; ``measure()`` is
what ``bench/prepare.py`` imports to report the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import nic_cpu_claim, rss_mib  # noqa: E402 (needs REPO on sys.path)

DRIVER = "numadra.dev"
NODE = "bench-run"


def _argv(root: Path, kubeconfig: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "driver.cli",
        "run",
        "--node-name",
        NODE,
        "--host-root",
        str(root / "host"),
        "--kubeconfig",
        kubeconfig,
        "--registrar-dir",
        str(root / "reg"),
        "--plugin-dir",
        str(root / "plugin"),
        "--cdi-dir",
        str(root / "cdi"),
        "--metrics-address",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--hotplug",
        "off",
    ]


def _start(root: Path, kubeconfig: str, kubelet: Any) -> tuple[subprocess.Popen[bytes], float, str]:
    """Spawn the process; return it, seconds until registered, and the DRA endpoint."""
    from tests.support.kubeletclient import KubeletClient

    assert isinstance(kubelet, KubeletClient)
    reg_sock = root / "reg" / f"{DRIVER}-reg.sock"
    started = time.monotonic()
    child = subprocess.Popen(  # the DaemonSet command line, logs discarded
        _argv(root, kubeconfig),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while True:
        if reg_sock.exists():
            try:
                reg = kubelet.register(reg_sock)
                break
            except Exception:  # not answering yet (a stale socket of a killed run): poll again
                pass
        if child.poll() is not None:
            raise SystemExit(f"numadra run exited with {child.returncode}")
        time.sleep(0.002)
    return child, time.monotonic() - started, reg.info.endpoint


def _stop(child: subprocess.Popen[bytes]) -> None:
    child.terminate()
    try:
        child.wait(timeout=15)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def measure(base: str = "/tmp", starts: int = 5, prepares: int = 100) -> dict[str, Any]:
    """Run the measurement; the figures as a dict (keys documented in the module docstring)."""
    from driver.inventory.discovery import discover
    from driver.inventory.model import DeviceKind
    from driver.plugin import ClaimRef
    from tests.support.fakeapiserver import FakeApiServer
    from tests.support.hosttree import write_host_tree
    from tests.support.kubeletclient import KubeletClient
    from tests.support.topologies import TOPOLOGIES

    root = Path(tempfile.mkdtemp(prefix="bs", dir=base))
    try:
        for sub in ("reg", "cdi", "plugin"):
            (root / sub).mkdir()
        write_host_tree(root / "host", TOPOLOGIES["dgx"])
        inventory = discover(root / "host", use_nvml=False)
        vfs = [
            (dev.name, dev.pci.numa_node or 0)
            for kind, dev in inventory.devices()
            if kind is DeviceKind.NIC and dev.pci.numa_node is not None
        ][:32]
        with FakeApiServer() as api:
            api.put_object(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "bench-uid"}}
            )
            refs = []
            for i, (vf, numa) in enumerate(vfs):
                uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"startup-{i}"))
                api.put_object(nic_cpu_claim(uid, f"claim-{i}", vf, numa, driver=DRIVER, node=NODE))
                refs.append(ClaimRef("bench", f"claim-{i}", uid))

            registered: list[float] = []
            published_s = float("nan")
            rss_registered = rss_steady = float("nan")
            for attempt in range(starts):
                with KubeletClient() as kubelet:
                    child, seconds, endpoint = _start(root, api.kubeconfig_path, kubelet)
                    registered.append(seconds)
                    try:
                        if attempt == 0:
                            rss_registered = rss_mib(child.pid)
                            t0 = time.monotonic() - seconds
                            while not api.objects("ResourceSlice"):
                                time.sleep(0.01)
                            published_s = time.monotonic() - t0
                        if attempt == starts - 1:
                            for i in range(prepares):
                                ref = refs[i % len(refs)]
                                out = kubelet.prepare(endpoint, [ref])
                                if out.claims[ref.uid].error:
                                    raise SystemExit(f"prepare failed: {out.claims[ref.uid].error}")
                                kubelet.unprepare(endpoint, [ref])
                            time.sleep(1.0)  # let background threads (status writes, metrics) settle
                            rss_steady = rss_mib(child.pid)
                    finally:
                        _stop(child)
        return {
            "starts": starts,
            "start_to_registered_s_median": round(statistics.median(registered), 3),
            "start_to_registered_s_max": round(max(registered), 3),
            "start_to_published_s": round(published_s, 3),
            "rss_at_registration_mib": round(rss_registered, 1),
            "prepares_before_rss": prepares,
            "steady_rss_mib": round(rss_steady, 1),
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=5, help="cold starts to time")
    parser.add_argument("--prepares", type=int, default=100, help="prepare/unprepare pairs before the RSS")
    parser.add_argument("--base", default="/tmp", help="where the host tree and kubelet dirs live")
    args = parser.parse_args()
    print(json.dumps(measure(args.base, args.starts, args.prepares), indent=2))


if __name__ == "__main__":
    main()
