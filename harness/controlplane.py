"""Real Kubernetes processes for the e2e tier: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and drakubelet (tests/e2e/build-bins.sh builds them), plus ``numadra run``.

Everything listens on 127.0.0.1 with free ports and lives in one temp directory. Each process runs
in its own process group (so a stop also reaps its children) and logs to a file in that directory;
the files are what to read when something fails. TLS and keys are made with the ``openssl`` CLI so
the test needs no extra Python dependency.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.poll import free_port, wait_for

__all__ = [
    "COMPONENTS",
    "ApiClient",
    "ApiError",
    "ControlPlane",
    "Process",
    "binary_dir",
    "feature_gates_flag",
    "first",
    "free_port",
    "jsonl",
    "missing_binaries",
    "wait_for",
    "write_kubeconfig",
]

COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "drakubelet")
#: the components that take ``--feature-gates`` from :attr:`ControlPlane.feature_gates`
GATED_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")

T = TypeVar("T")


def binary_dir() -> Path:
    """Where tests/e2e/build-bins.sh puts the binaries (same default and variable)."""
    env = os.environ.get("NUMADRA_E2E_BIN")
    return Path(env) if env else Path.home() / ".cache" / "numadra-e2e" / "bin"


def missing_binaries(bin_dir: Path) -> list[str]:
    """The components not (executably) present in ``bin_dir``."""
    return [name for name in COMPONENTS if not os.access(bin_dir / name, os.X_OK)]


class ApiError(Exception):
    """A non-2xx answer of the API server: ``status`` and the decoded Status object."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        message = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status
        self.body = body


class ApiClient:
    """A minimal JSON client for one identity (bearer token) on the API server.

    Plain urllib on purpose: the tests want to see exactly what goes over the wire (query
    parameters such as ``fieldValidation=Strict``, status codes), with no client-side defaults.
    """

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self.server = server
        self.token = token
        self._ssl = ssl.create_default_context(cafile=str(ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 15.0,
    ) -> Any:
        """The decoded answer; :class:`ApiError` on a non-2xx status."""
        url = self.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ssl) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                decoded: Any = json.loads(raw)
            except ValueError:
                decoded = raw.decode(errors="replace")
            raise ApiError(method, path, err.code, decoded) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")  # /readyz, /version text

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def create(self, path: str, obj: dict[str, Any], **query: str) -> Any:
        return self.request("POST", path, obj, query=query or None)

    def put(self, path: str, obj: dict[str, Any], **query: str) -> Any:
        return self.request("PUT", path, obj, query=query or None)

    def patch(self, path: str, patch: dict[str, Any]) -> Any:
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """Delete; a missing object is fine (returns None)."""
        try:
            return self.request("DELETE", path, body)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        """The items of a list call."""
        return list(self.get(path, **query)["items"])

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str) -> Path:
    """A token kubeconfig (JSON is valid YAML) for the Go components and the Python driver."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(config, indent=1))
    path.chmod(0o600)
    return path


@dataclass
class Process:
    """One child process in its own process group; stdout and stderr go to files under the root."""

    name: str
    argv: list[str]
    stdout_path: Path
    stderr_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str] | None = None, cwd: Path | None = None) -> Process:
        with self.stdout_path.open("ab") as out, self.stderr_path.open("ab") as err:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_running(self) -> None:
        """Fail with the tail of the log when the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return text[-chars:]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Signal the whole process group, escalate to SIGKILL, and reap; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        # children left behind in the group (none expected) go too
        _signal_group(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode


def _kubernetes_module_version() -> str:
    """The k8s.io/kubernetes version drakubelet is built from (tests/e2e/k8s/go.mod); it has no --version."""
    go_mod = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "k8s" / "go.mod"
    for line in go_mod.read_text().splitlines() if go_mod.exists() else ():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes":
            return f"k8s.io/kubernetes {parts[1]}"
    return "k8s.io/kubernetes (unknown)"


def feature_gates_flag(gates: Mapping[str, bool]) -> list[str]:
    """``--feature-gates=A=true,B=false`` (sorted, so a log shows the same line every run), or []."""
    if not gates:
        return []
    return ["--feature-gates=" + ",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))]


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path, extra_ips: tuple[str, ...] = ()) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost (and ``extra_ips``), and the
    service-account key pair (EC P-256)."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=numadra-e2e-ca", cwd=directory)  # fmt: skip
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kube-apiserver",
             cwd=directory)  # fmt: skip
    sans = ",".join(f"IP:{ip}" for ip in ("127.0.0.1", *extra_ips))
    (directory / "san.ext").write_text(f"subjectAltName={sans},DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "san.ext", cwd=directory)  # fmt: skip
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key",
             cwd=directory)  # fmt: skip
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager on 127.0.0.1.

    Identities come from a static token file: ``admin`` (system:masters) for the test, the
    scheduler and the controller-manager, and ``system:node:<node>`` (system:nodes) for
    drakubelet, so the Node authorizer checks the kubelet side as it would a real kubelet.

    The e2e tier runs no pods, so ServiceAccount admission is off and only the resourceclaim
    controller runs. The node tier (tests/node) runs real pods, among them numadra's DaemonSet pod,
    which needs what a cluster gives a pod: ``service_account_admission`` (the projected token),
    more ``controllers`` (serviceaccount, root-ca-cert-publisher, daemonset) and the
    ``kubernetes`` Service's IP in the serving certificate (``extra_ips``).

    ``feature_gates`` go to the apiserver, the scheduler and the controller-manager alike (a gate
    the apiserver and the scheduler disagree on tests nothing real), e.g.
    ``{"DRAListTypeAttributes": True}``; ``extra_args`` adds flags per component name, after the
    standard ones (a repeated flag wins there). The session cluster runs with neither: a scenario
    that needs them starts a control plane of its own (``tests/e2e/conftest.py``
    ``start_cluster``).
    """

    bin_dir: Path
    root: Path
    node_name: str
    service_account_admission: bool = False
    controllers: tuple[str, ...] = ("resourceclaim-controller",)
    extra_ips: tuple[str, ...] = ()
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    server: str = ""
    admin: ApiClient | None = None

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    def process(self, name: str, argv: list[str]) -> Process:
        if name in GATED_COMPONENTS:
            argv = [*argv, *feature_gates_flag(self.feature_gates)]
        argv = [*argv, *self.extra_args.get(name, ())]
        proc = Process(name, argv, self.root / f"{name}.out", self.root / f"{name}.log")
        self.processes.append(proc)
        return proc

    def versions(self) -> dict[str, str]:
        """``--version`` of every component (first line), for the test log."""
        out: dict[str, str] = {}
        for name in COMPONENTS:
            if name == "drakubelet":
                out[name] = f"kubelet DRA manager of {_kubernetes_module_version()}"
                continue
            res = subprocess.run(
                [str(self.bin_dir / name), "--version"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            out[name] = (res.stdout or res.stderr).strip().splitlines()[0]
        return out

    def start(self) -> None:
        """Start everything; wait for the apiserver's /readyz (the scheduler and controller-manager
        serve no port here: a process exit fails the next check, their work shows in the scenarios)."""
        unknown = sorted(set(self.extra_args) - set(COMPONENTS))
        if unknown:
            raise ValueError(
                f"extra_args for unknown components {unknown}; components: {', '.join(COMPONENTS)}"
            )
        t0 = time.monotonic()
        make_pki(self.pki, self.extra_ips)
        admin_token = os.urandom(16).hex()
        node_token = os.urandom(16).hex()
        (self.root / "tokens.csv").write_text(
            f'{admin_token},admin,admin-uid,"system:masters"\n'
            f'{node_token},system:node:{self.node_name},node-uid-{self.node_name},"system:nodes"\n'
        )
        self.timings["pki_s"] = time.monotonic() - t0

        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--data-dir", str(self.root / "etcd"),
                "--listen-client-urls", etcd_url,
                "--advertise-client-urls", etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
                "--listen-metrics-urls", "",
                "--unsafe-no-fsync",
                "--quota-backend-bytes", str(2 << 30),
            ],
        ).start()  # fmt: skip

        self.server = f"https://127.0.0.1:{api_port}"
        self.process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={self.pki / 'server.crt'}",
                f"--tls-private-key-file={self.pki / 'server.key'}",
                f"--client-ca-file={self.ca_file}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.pki / 'sa.pub'}",
                f"--service-account-signing-key-file={self.pki / 'sa.key'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                # without the serviceaccount controller nothing could mint the default SA
                *(() if self.service_account_admission else ("--disable-admission-plugins=ServiceAccount",)),
                "--endpoint-reconciler-type=none",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
            ],
        ).start()
        self.admin = ApiClient(self.server, admin_token, self.ca_file)
        admin = self.admin

        def ready() -> bool:
            for proc in self.processes:
                proc.check_running()
            try:
                return bool(admin.request("GET", "/readyz", timeout=3) == "ok")
            except (ApiError, OSError):
                return False

        wait_for(ready, 120, "kube-apiserver /readyz", interval=0.25)
        self.timings["apiserver_ready_s"] = time.monotonic() - t0

        admin_kubeconfig = write_kubeconfig(
            self.root / "admin.kubeconfig", self.server, self.ca_file, admin_token, "admin"
        )
        write_kubeconfig(
            self.root / "node.kubeconfig",
            self.server,
            self.ca_file,
            node_token,
            f"system:node:{self.node_name}",
        )
        self.process(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={admin_kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        ).start()
        self.process(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={admin_kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=false",
                # what root-ca-cert-publisher puts into each namespace's kube-root-ca.crt
                f"--root-ca-file={self.ca_file}",
                # ResourceClaimTemplate -> ResourceClaim, reservedFor cleanup, claim deletion.
                # Never the node-lifecycle controller: no kubelet heartbeats here.
                f"--controllers={','.join(self.controllers)}",
            ],
        ).start()
        self.timings["control_plane_s"] = time.monotonic() - t0

    def check_running(self) -> None:
        for proc in self.processes:
            proc.check_running()

    def stop(self) -> None:
        """Stop in reverse start order (dependents first)."""
        for proc in reversed(self.processes):
            proc.stop()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file written so far (partial/non-JSON lines skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def first(items: Iterable[T], predicate: Callable[[T], bool]) -> T | None:
    return next((item for item in items if predicate(item)), None)
