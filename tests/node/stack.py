"""The real node stack of the node tier: containerd 2.4 (CRI + NRI) and a kubelet 1.37, as processes.

Everything a run writes lives in one temp directory (short path: unix socket paths are limited to
107 bytes): containerd's root and state, its gRPC and NRI sockets, runc's state, the kubelet's
root dir, pod logs and the CDI dir the driver writes and containerd reads. What the two write
outside it regardless (tests/node/host.py) is recorded before and undone after.

Configuration facts (which keys, which workarounds) are from the shared node-stack reference:
containerd needs ``restrict_oom_score_adj`` here (root lacks CAP_SYS_RESOURCE, so runc cannot set
the sandboxes' -998), the CRI plugin is NetworkReady only with a CNI config (never executed for the
hostNetwork pods the tier runs), the kubelet needs ``failCgroupV1: false`` on cgroup v1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.controlplane import Process, free_port, wait_for

__all__ = [
    "BRIDGE",
    "NODE_COMPONENTS",
    "Containerd",
    "Kubelet",
    "PodNetwork",
    "ServiceProxy",
    "missing_node_binaries",
    "node_binary_dir",
    "preflight",
]

#: tests/node/build-bins.sh builds these
NODE_COMPONENTS = ("containerd", "containerd-shim-runc-v2", "ctr", "crictl")


def node_binary_dir() -> Path:
    """Where tests/node/build-bins.sh puts containerd and crictl (same default and variable)."""
    env = os.environ.get("NUMADRA_NODE_BIN")
    return Path(env) if env else Path.home() / ".cache" / "numadra-node" / "bin"


def missing_node_binaries(bin_dir: Path) -> list[str]:
    return [name for name in NODE_COMPONENTS if not os.access(bin_dir / name, os.X_OK)]


def _overlayfs_works(scratch: Path) -> str | None:
    """None when an overlay mount works in ``scratch`` (containerd's snapshotter needs it), else why."""
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlay filesystem (/proc/filesystems)"
    dirs = {name: scratch / name for name in ("lower", "upper", "work", "merged")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    res = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", opts, str(dirs["merged"])],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        return f"overlayfs mount failed in {scratch}: {res.stderr.strip()}"
    subprocess.run(["umount", str(dirs["merged"])], check=False)
    return None


def preflight(scratch: Path) -> str | None:
    """Why the node tier cannot run on this host (None when it can)."""
    if os.geteuid() != 0:
        return "not root: containerd, runc and the kubelet need root"
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        return f"only {cpus} CPU(s): the scenarios need 2 (disjoint claims, a shared pool)"
    if shutil.which("runc") is None:
        return "runc not found (apt-get install runc)"
    if not Path("/sys/fs/cgroup/cpuset").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "no cpuset cgroup controller mounted"
    return _overlayfs_works(scratch)


def _toml(value: Any) -> str:
    """A TOML scalar or inline array (strings, bools, ints): all the config below needs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _toml_doc(top: dict[str, Any], tables: dict[str, dict[str, Any]]) -> str:
    lines = [f"{k} = {_toml(v)}" for k, v in top.items()]
    for name, body in tables.items():
        lines.append(f"\n[{name}]")
        lines.extend(f"  {k} = {_toml(v)}" for k, v in body.items())
    return "\n".join(lines) + "\n"


@dataclass
class Containerd:
    """containerd with the CRI plugin (overlayfs, runc, CDI from ``cdi_dir``) and NRI on ``nri_socket``."""

    bin_dir: Path
    root: Path
    cdi_dir: Path
    sandbox_image: str
    process: Process | None = None
    runs: int = 0

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def nri_socket(self) -> Path:
        """In a directory of its own: the DaemonSet mounts that directory as /var/run/nri."""
        return self.root / "nri-socket" / "nri.sock"

    @property
    def config_path(self) -> Path:
        return self.root / "containerd.toml"

    def write_config(self) -> None:
        r = self.root
        self.nri_socket.parent.mkdir(parents=True, exist_ok=True)
        runc = shutil.which("runc") or "/usr/sbin/runc"
        cni_bin = [d for d in ("/usr/lib/cni", "/opt/cni/bin") if Path(d).is_dir()]
        cri = "plugins.'io.containerd.cri.v1.runtime'"
        tables: dict[str, dict[str, Any]] = {
            "grpc": {"address": str(self.socket)},
            "ttrpc": {"address": str(r / "containerd.ttrpc.sock")},
            "metrics": {"address": ""},
            # the opt plugin would create /opt/containerd, the image verifier reads a host dir
            "plugins.'io.containerd.internal.v1.opt'": {"path": str(r / "opt")},
            "plugins.'io.containerd.image-verifier.v1.bindir'": {"bin_dir": str(r / "image-verifier")},
            "plugins.'io.containerd.nri.v1.nri'": {
                "disable": False,
                "disable_connections": False,
                "socket_path": str(self.nri_socket),
                "plugin_path": str(r / "nri" / "plugins"),
                "plugin_config_path": str(r / "nri" / "conf.d"),
                "plugin_registration_timeout": "5s",
                "plugin_request_timeout": "2s",
            },
            "plugins.'io.containerd.cri.v1.images'": {"snapshotter": "overlayfs"},
            "plugins.'io.containerd.cri.v1.images'.pinned_images": {"sandbox": self.sandbox_image},
            cri: {
                "cdi_spec_dirs": [str(self.cdi_dir)],
                # this machine's root lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj
                "restrict_oom_score_adj": True,
                "disable_apparmor": True,
                "tolerate_missing_hugetlb_controller": True,
                "disable_hugetlb_controller": True,
                "netns_mounts_under_state_dir": True,
            },
            f"{cri}.containerd": {"default_runtime_name": "runc"},
            f"{cri}.containerd.runtimes.runc": {"runtime_type": "io.containerd.runc.v2"},
            f"{cri}.containerd.runtimes.runc.options": {"BinaryName": runc, "Root": str(r / "runc")},
            f"{cri}.cni": {"bin_dirs": cni_bin, "conf_dir": str(r / "cni" / "net.d")},
            "plugins.'io.containerd.grpc.v1.cri'": {
                "stream_server_address": "127.0.0.1",
                "stream_server_port": "0",
            },
        }
        top = {"version": 3, "root": str(r / "root"), "state": str(r / "state")}
        self.config_path.write_text(_toml_doc(top, tables))
        # NetworkReady needs a CNI config; hostNetwork pods never execute it
        conf_dir = r / "cni" / "net.d"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "10-numadra-node.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "numadra-node",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": False,
                            "ipam": {
                                "type": "host-local",
                                "dataDir": str(r / "cni" / "ipam"),
                                "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        }
                    ],
                },
                indent=1,
            )
        )
        (r / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.socket}\nimage-endpoint: unix://{self.socket}\ntimeout: 20\n"
        )

    def start(self) -> Process:
        """Start (or restart) containerd; wait until its socket answers."""
        if not self.config_path.exists():
            self.write_config()
        self.runs += 1
        proc = Process(
            "containerd",
            [str(self.bin_dir / "containerd"), "--config", str(self.config_path), "--log-level", "info"],
            self.root / "containerd.out",
            self.root / "containerd.log",
        )
        path = f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        proc.start(env={"PATH": path})
        self.process = proc

        def up() -> bool:
            proc.check_running()
            res = self.ctr("version", check=False)
            return res.returncode == 0

        wait_for(up, 30, "containerd to answer on its socket", interval=0.1)
        return proc

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "ctr"), "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def crictl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [str(self.bin_dir / "crictl"), "--config", str(self.root / "crictl.yaml"), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"crictl {' '.join(args)}: exit {res.returncode}: {res.stderr.strip()}")
        return res

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive), timeout=120)

    def version(self) -> str:
        res = subprocess.run(
            [str(self.bin_dir / "containerd"), "--version"], capture_output=True, text=True, check=False
        )
        return res.stdout.strip()

    def remove_all_pods(self) -> None:
        """Stop and remove every pod sandbox (and so its containers): the first teardown step."""
        res = self.crictl("pods", "-q", check=False)
        for sandbox in res.stdout.split():
            self.crictl("stopp", sandbox, check=False)
            self.crictl("rmp", "-f", sandbox, check=False)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


@dataclass
class Kubelet:
    """A real kubelet registered as Node ``node_name`` on ``containerd``, rooted in ``root``."""

    bin_dir: Path
    root: Path
    node_name: str
    kubeconfig: Path
    containerd: Containerd
    cgroup_root: str
    #: the root dir (--root-dir); default ``<root>/kubelet``
    kubelet_root: Path | None = None
    process: Process | None = None
    runs: int = 0
    port: int = field(default_factory=free_port)
    healthz_port: int = field(default_factory=free_port)

    @property
    def root_dir(self) -> Path:
        return self.kubelet_root or self.root / "kubelet"

    @property
    def registry_dir(self) -> Path:
        return self.root_dir / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        return self.root_dir / "plugins"

    @property
    def pod_logs_dir(self) -> Path:
        return self.root / "pod-logs"

    @property
    def config_path(self) -> Path:
        return self.root / "kubelet-config.json"

    def write_config(self) -> None:
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup_root}",
            "failSwapOn": False,
            "cpuManagerPolicy": "none",
            "memoryManagerPolicy": "None",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "address": "127.0.0.1",
            "port": self.port,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "readOnlyPort": 0,
            "resolvConf": "",
            "containerRuntimeEndpoint": f"unix://{self.containerd.socket}",
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
                "imagefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "nodeStatusReportFrequency": "5s",
            "volumePluginDir": str(self.root / "volume-plugins"),
            "podLogsDir": str(self.pod_logs_dir),
            "protectKernelDefaults": False,
            "serializeImagePulls": False,
            "registerNode": True,
        }
        self.config_path.write_text(json.dumps(config, indent=1))

    def make_cgroup_root(self) -> None:
        """The kubelet refuses a cgroupRoot that is missing in any hierarchy: make it in each (a v1
        cpuset starts empty and accepts no task, so it gets its parent's CPUs and memory nodes)."""
        from tests.node.host import cgroup_hierarchies

        for hierarchy in cgroup_hierarchies():
            cg = hierarchy / self.cgroup_root
            cg.mkdir(exist_ok=True)
            for name in ("cpuset.mems", "cpuset.cpus"):  # mems first: cpus alone is refused
                if (cg / name).exists() and not (cg / name).read_text().strip():
                    (cg / name).write_text((hierarchy / name).read_text())

    def start(self) -> Process:
        if not self.config_path.exists():
            self.write_config()
            self.make_cgroup_root()
        self.runs += 1
        proc = Process(
            f"kubelet-{self.runs}",
            [
                str(self.bin_dir / "kubelet"),
                f"--config={self.config_path}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.root_dir}",
                f"--cert-dir={self.root / 'kubelet-pki'}",
                f"--hostname-override={self.node_name}",
                "--node-ip=127.0.0.1",
                "--v=2",
            ],
            self.root / f"kubelet-{self.runs}.out",
            self.root / f"kubelet-{self.runs}.log",
        )
        proc.start()
        self.process = proc
        return proc

    def healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.healthz_port}/healthz", timeout=2) as r:
                return bool(r.read() == b"ok")
        except OSError:
            return False

    def wait_healthy(self, timeout: float = 60) -> None:
        def ok() -> bool:
            assert self.process is not None
            self.process.check_running()
            return self.healthy()

        wait_for(ok, timeout, "the kubelet's /healthz", interval=0.2)

    def version(self) -> str:
        res = subprocess.run(
            [str(self.bin_dir / "kubelet"), "--version"], capture_output=True, text=True, check=False
        )
        return res.stdout.strip()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


def elapsed(t0: float) -> float:
    return round(time.monotonic() - t0, 2)


#: the bridge the CNI config names (created by the tier, deleted after)
BRIDGE = "nnode0"
POD_SUBNET = "10.244.77.0/24"
POD_GATEWAY = "10.244.77.1"


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)}: {res.stderr.strip()}")


class ServiceProxy:
    """A TCP relay from ``listen`` (the ``kubernetes`` Service IP, port 443) to the apiserver.

    There is no kube-proxy on this node: a pod that reaches the apiserver the in-cluster way
    (``KUBERNETES_SERVICE_HOST:PORT``, which the kubelet sets from the Service) needs the Service
    IP to lead somewhere. The IP is an address of the pod bridge, so pods reach it through their
    default route; the relay only copies bytes (TLS stays end to end: the serving certificate
    carries the Service IP).
    """

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        import socket
        import threading

        self._target = target
        self._server = socket.create_server(listen, reuse_port=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="service-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        import socket
        import threading

        self._server.settimeout(0.5)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: Any, dst: Any) -> None:
        import contextlib
        import socket

        with contextlib.suppress(OSError):
            src.settimeout(None)
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        self._thread.join(5)


@dataclass
class PodNetwork:
    """What a non-hostNetwork pod needs here: the CNI bridge (pre-made, so it can also carry the
    Service IP) and the relay to the apiserver. Only the DaemonSet scenario uses it."""

    service_ip: str
    apiserver_port: int
    proxy: ServiceProxy | None = None

    def up(self) -> None:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{POD_GATEWAY}/24", "dev", BRIDGE)
        _ip("addr", "add", f"{self.service_ip}/32", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        self.proxy = ServiceProxy((self.service_ip, 443), ("127.0.0.1", self.apiserver_port))

    def down(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            _ip("link", "del", BRIDGE)
