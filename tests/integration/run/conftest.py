"""A node for ``numadra run`` process tests: host tree, kubelet dirs, the fake apiserver, processes.

Everything is real except the apiserver (the fake one over loopback HTTP; the real control plane is
the e2e tier's) and the kubelet (the test client built from our protos plays it). Directories live
in a short ``/tmp`` path because AF_UNIX socket paths are limited to 107 bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.fakeapiserver import FakeApiServer
from harness.hosttree import TOPOLOGIES, write_host_tree
from harness.kubeletclient import KubeletClient, Registration
from harness.poll import wait_for

DRIVER = "numadra.dev"
NODE = "node-run"
#: the workstation topology: one NUMA node, 16 CPUs, two GPUs, one NIC
GPU = "gpu-0000-03-00-0"
OTHER_GPU = "gpu-0000-00-02-0"
NIC = "nic-0000-05-00-0"
CPU_DEVICE = "cpu-numa0"
REPO = Path(__file__).resolve().parents[3]


def load_slack() -> float:
    """How much slower than an idle machine this one is now (>= 1): timing limits scale with it."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def gpu_cpu_claim(
    uid: str, name: str, cpus: int = 2, gpu: str = GPU, namespace: str = "default"
) -> dict[str, Any]:
    """A ResourceClaim allocated to a GPU and a ``cpus`` share of the cpu device of NUMA node 0."""
    share = str(uuid.uuid5(uuid.NAMESPACE_OID, uid))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.numadra.dev"}},
                    {"name": "cpus", "exactly": {"deviceClassName": "cpu.numadra.dev"}},
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": gpu},
                        {
                            "request": "cpus",
                            "driver": DRIVER,
                            "pool": NODE,
                            "device": CPU_DEVICE,
                            "shareID": share,
                            "consumedCapacity": {"cpus": str(cpus), "memory": "1Gi"},
                        },
                    ],
                    "config": [],
                }
            }
        },
    }


@dataclass
class DriverProcess:
    """One ``numadra run`` child process; its stderr (the log) goes to a file."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    spawned: float  # time.monotonic() just before the spawn

    def log_text(self) -> str:
        """Everything the process wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (non-JSON lines skipped)."""
        events = []
        for line in self.log_text().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                events.append(obj)
        return events

    def metrics_url(self, timeout: float = 10.0) -> str:
        """The URL the metrics server logged (it binds port 0 in tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.log_events():
                if event.get("event") == "metrics server listening":
                    return str(event["url"])
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no metrics server in the log:\n{self.log_text()[-3000:]}")

    def wait(self, timeout: float = 15.0) -> int:
        """The exit code once the process ended."""
        return self.proc.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send ``sig`` and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """Status and body of a GET (error statuses too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@dataclass
class RunNode:
    """One node's directories and apiserver; :meth:`spawn` starts ``numadra run`` on it."""

    root: Path
    api: FakeApiServer
    kubelet: KubeletClient
    processes: list[DriverProcess] = field(default_factory=list)

    @property
    def host(self) -> Path:
        return self.root / "host"

    @property
    def registrar_dir(self) -> Path:
        return self.root / "reg"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugin"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def registration_socket(self) -> Path:
        return self.registrar_dir / f"{DRIVER}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    def argv(self, *extra: str) -> list[str]:
        """The command line of ``numadra run`` for this node (node name comes from NODE_NAME)."""
        return [
            sys.executable,
            "-m",
            "driver.cli",
            "run",
            "--host-root",
            str(self.host),
            "--kubeconfig",
            self.api.kubeconfig_path,
            "--registrar-dir",
            str(self.registrar_dir),
            "--plugin-dir",
            str(self.plugin_dir),
            "--cdi-dir",
            str(self.cdi_dir),
            "--metrics-address",
            "127.0.0.1:0",
            "--hotplug",
            "off",
            "--rescan-interval",
            "0",
            "--health-interval",
            "0.5",
            *extra,
        ]

    def spawn(self, *extra: str, env: dict[str, str] | None = None) -> DriverProcess:
        """Start ``numadra run`` with JSON logs (``env`` adds to NODE_NAME and the inherited env)."""
        log_path = self.root / f"run-{len(self.processes)}.log"
        full_env = {**os.environ, "NODE_NAME": NODE, "NUMADRA_LOG_FORMAT": "json", **(env or {})}
        spawned = time.monotonic()
        proc = subprocess.Popen(
            self.argv(*extra),
            cwd=REPO,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_path.open("wb"),
        )
        process = DriverProcess(proc, log_path, spawned)
        self.processes.append(process)
        return process

    def socket_identity(self) -> tuple[int, int] | None:
        """(inode, mtime) of the registration socket: inodes alone are reused after a delete."""
        try:
            st = self.registration_socket.lstat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def register(
        self, process: DriverProcess, timeout: float = 10.0, stale: tuple[int, int] | None = None
    ) -> tuple[Registration, float]:
        """Play the kubelet: wait for the registration socket, register; seconds since the spawn.

        ``stale``: the identity of the socket a killed predecessor left behind, which does not count.
        """
        wait_for(
            lambda: self.socket_identity() not in (None, stale) or process.proc.poll() is not None,
            timeout,
            "the registration socket",
            interval=0.002,
        )
        assert process.proc.poll() is None, f"numadra run exited:\n{process.log_text()[-3000:]}"
        registration = self.kubelet.register(self.registration_socket)
        return registration, time.monotonic() - process.spawned

    def slices(self) -> list[dict[str, Any]]:
        """Our node's ResourceSlices in the fake apiserver."""
        return [s for s in self.api.objects("ResourceSlice") if s["spec"].get("nodeName") == NODE]

    def device_names(self) -> set[str]:
        """Every device published in our slices."""
        return {d["name"] for s in self.slices() for d in s["spec"].get("devices", [])}

    def kill_all(self) -> None:
        for process in self.processes:
            if process.proc.poll() is None:
                process.proc.kill()
                process.proc.wait(10)


@pytest.fixture
def node() -> Iterator[RunNode]:
    """A workstation host tree, empty kubelet dirs, a running fake apiserver with our Node."""
    root = Path(tempfile.mkdtemp(prefix="nr", dir="/tmp"))
    api = FakeApiServer()
    kubelet = KubeletClient()
    run_node = RunNode(root, api, kubelet)
    try:
        write_host_tree(run_node.host, TOPOLOGIES["workstation"])
        for directory in (run_node.registrar_dir, run_node.cdi_dir):
            directory.mkdir()
        api.start()
        api.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-1"}})
        yield run_node
    finally:
        run_node.kill_all()
        kubelet.close()
        api.close()
        shutil.rmtree(root, ignore_errors=True)
