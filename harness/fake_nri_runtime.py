"""A fake container runtime speaking NRI's wire protocol, to drive the plugin over a real socket.

"Fake" because a real containerd/CRI-O with NRI cannot run here; everything it sends is real NRI
wire format (mux + ttrpc framing, protobuf messages from api/proto/nri). The framing is written
again here with ``struct`` on purpose, independent of ``driver.pinning.nri.wire``, so a framing
bug in the plugin cannot hide behind the same bug in its peer.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

from google.protobuf.message import Message

from driver._proto.nri import api_pb2 as nri
from driver._proto.nri import ttrpc_pb2 as ttrpc

PLUGIN_CONN = 1  # the runtime calls the plugin here
RUNTIME_CONN = 2  # the plugin calls the runtime here
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"

M = TypeVar("M", bound=Message)


#: Seconds a call waits for the plugin's answer by default: a hang guard, never the time box
#: under test (the plugin's own box answers within 1 s). Generous, because a loaded 2-core machine
#: once took over 5 s to log a handler's traceback before answering.
ANSWER_WAIT_S = 30.0


class FakePluginConnection:
    """One accepted plugin connection: answers RegisterPlugin, calls Plugin methods."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._write = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, Future[ttrpc.Response]] = {}
        self._next = 1
        self.registered: Future[nri.RegisterPluginRequest] = Future()
        self.runtime_requests: list[str] = []
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _send(self, conn: int, stream: int, kind: int, payload: bytes) -> None:
        body = struct.pack(">IIBB", len(payload), stream, kind, 0) + payload
        with self._write:
            self._sock.sendall(struct.pack(">II", conn, len(body)) + body)

    def _read(self) -> None:
        trunk = b""
        streams: dict[int, bytes] = {}
        try:
            while True:
                data = self._sock.recv(65536)
                if not data:
                    return
                trunk += data
                while len(trunk) >= 8:
                    conn, length = struct.unpack(">II", trunk[:8])
                    if len(trunk) < 8 + length:
                        break
                    streams[conn] = streams.get(conn, b"") + trunk[8 : 8 + length]
                    trunk = trunk[8 + length :]
                    buf = streams[conn]
                    while len(buf) >= 10:
                        size, stream, kind, _flags = struct.unpack(">IIBB", buf[:10])
                        if len(buf) < 10 + size:
                            break
                        self._frame(conn, stream, kind, buf[10 : 10 + size])
                        buf = buf[10 + size :]
                    streams[conn] = buf
        except OSError:
            return
        finally:
            self.closed.set()
            with self._lock:
                for fut in self._pending.values():
                    if not fut.done():
                        fut.set_exception(ConnectionError("plugin connection closed"))

    def _frame(self, conn: int, stream: int, kind: int, payload: bytes) -> None:
        if conn == RUNTIME_CONN and kind == 1:  # the plugin calls the Runtime service
            req = ttrpc.Request.FromString(payload)
            self.runtime_requests.append(f"{req.service}/{req.method}")
            if req.service == RUNTIME_SERVICE and req.method == "RegisterPlugin":
                if not self.registered.done():
                    self.registered.set_result(nri.RegisterPluginRequest.FromString(req.payload))
                resp = ttrpc.Response(payload=nri.Empty().SerializeToString())
            else:
                resp = ttrpc.Response(status=ttrpc.Status(code=12, message="unimplemented"))
            self._send(RUNTIME_CONN, stream, 2, resp.SerializeToString())
        elif conn == PLUGIN_CONN and kind == 2:  # the plugin answers our call
            with self._lock:
                fut = self._pending.pop(stream, None)
            if fut is not None:
                fut.set_result(ttrpc.Response.FromString(payload))

    def call_raw(
        self, method: str, request: Message, timeout: float = ANSWER_WAIT_S, service: str = PLUGIN_SERVICE
    ) -> ttrpc.Response:
        """Call a Plugin method; return the ttrpc envelope (status and payload)."""
        fut: Future[ttrpc.Response] = Future()
        with self._lock:
            stream = self._next
            self._next += 2
            self._pending[stream] = fut
        envelope = ttrpc.Request(service=service, method=method, payload=request.SerializeToString())
        self._send(PLUGIN_CONN, stream, 1, envelope.SerializeToString())
        return fut.result(timeout)

    def call(
        self, method: str, request: Message, response_type: type[M], timeout: float = ANSWER_WAIT_S
    ) -> M:
        """Call a Plugin method and decode its response; a non-OK status raises RuntimeError."""
        resp = self.call_raw(method, request, timeout)
        if resp.status.code:
            raise RuntimeError(f"{method}: code {resp.status.code}: {resp.status.message}")
        return response_type.FromString(resp.payload)

    def configure(
        self, request_timeout_ms: int = 2000, timeout: float = ANSWER_WAIT_S
    ) -> nri.ConfigureResponse:
        """The handshake's Configure call, as containerd sends it (``timeout``: how long to wait)."""
        req = nri.ConfigureRequest(
            runtime_name="fake-containerd",
            runtime_version="2.1.0",
            NRI_version="v0.11.0",
            request_timeout=request_timeout_ms,
        )
        return self.call("Configure", req, nri.ConfigureResponse, timeout)

    def synchronize(
        self,
        containers: list[nri.Container],
        more: bool = False,
        pods: list[nri.PodSandbox] | None = None,
        timeout: float = ANSWER_WAIT_S,
    ) -> nri.SynchronizeResponse:
        """Report existing pods (default: the one pod of :func:`container`'s default) and containers."""
        req = nri.SynchronizeRequest(pods=[POD] if pods is None else pods, containers=containers, more=more)
        return self.call("Synchronize", req, nri.SynchronizeResponse, timeout)

    def create_container(
        self, container: nri.Container, timeout: float = ANSWER_WAIT_S, pod: nri.PodSandbox | None = None
    ) -> nri.CreateContainerResponse:
        """Ask for the adjustment of a container being created (in ``pod``, default :data:`POD`)."""
        req = nri.CreateContainerRequest(pod=pod or POD, container=container)
        return self.call("CreateContainer", req, nri.CreateContainerResponse, timeout)

    def create_container_raw(
        self, container: nri.Container, pod: nri.PodSandbox | None = None
    ) -> ttrpc.Response:
        """CreateContainer, returning the ttrpc envelope (a refusal is a non-OK status)."""
        return self.call_raw(
            "CreateContainer", nri.CreateContainerRequest(pod=pod or POD, container=container)
        )

    def update_container(
        self, container: nri.Container, resources: nri.LinuxResources, pod: nri.PodSandbox | None = None
    ) -> nri.UpdateContainerResponse:
        """The kubelet's UpdateContainerResources (e.g. an in-place resize), as containerd relays it."""
        req = nri.UpdateContainerRequest(pod=pod or POD, container=container, linux_resources=resources)
        return self.call("UpdateContainer", req, nri.UpdateContainerResponse)

    def remove_container(self, container: nri.Container, pod: nri.PodSandbox | None = None) -> None:
        """The container is gone."""
        req = nri.RemoveContainerRequest(pod=pod or POD, container=container)
        self.call("RemoveContainer", req, nri.RemoveContainerResponse)

    def close(self) -> None:
        """Drop the connection (as a runtime restart would)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


class FakeNriRuntime:
    """Listens where containerd's NRI socket would be and accepts plugin connections."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(socket_path))
        self._listener.listen(4)

    def accept(self, timeout: float = ANSWER_WAIT_S) -> FakePluginConnection:
        """Wait for a plugin to connect and register."""
        self._listener.settimeout(timeout)
        sock, _ = self._listener.accept()
        sock.settimeout(None)
        conn = FakePluginConnection(sock)
        conn.registered.result(timeout)
        return conn

    def close(self) -> None:
        """Stop listening and remove the socket file."""
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()


def pod(sandbox_id: str, uid: str, name: str = "demo", namespace: str = "default") -> nri.PodSandbox:
    """A pod sandbox as containerd reports it: ``uid`` and ``namespace`` are the Kubernetes pod's."""
    return nri.PodSandbox(id=sandbox_id, name=name, uid=uid, namespace=namespace)


#: the pod every container is in unless a test says otherwise
POD = pod("pod-1", "pod-uid-1")


def container(
    cid: str,
    name: str,
    env: list[str] | None = None,
    cpus: str = "",
    mems: str = "",
    state: nri.ContainerState = nri.CONTAINER_RUNNING,
    sandbox: str = "pod-1",
) -> nri.Container:
    """An NRI Container message with the given env and current cpuset."""
    linux = nri.LinuxContainer(resources=nri.LinuxResources(cpu=nri.LinuxCPU(cpus=cpus, mems=mems)))
    return nri.Container(id=cid, pod_sandbox_id=sandbox, name=name, state=state, env=env or [], linux=linux)


def connect_plugin(runtime: FakeNriRuntime, connect: Callable[[], None]) -> FakePluginConnection:
    """Run a plugin's ``connect`` (it blocks until registered) while the runtime accepts it."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            connect()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    conn = runtime.accept()
    t.join(5)
    assert not errors, errors
    return conn
