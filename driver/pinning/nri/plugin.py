"""``--pinning nri``: a pure-Python NRI plugin speaking ttrpc over the runtime's unix socket.

One socket, two directions (see ``wire.py``): the plugin calls ``Runtime.RegisterPlugin`` on
multiplexed connection 2, and serves the ``Plugin`` service (Configure, Synchronize,
CreateContainer, ...) that the runtime calls on connection 1. A reader thread demultiplexes
frames; requests run on small pools so that a slow request never stalls the socket.

**Fast calls never wait behind slow ones.** Most containers are answered from the driver's own
records: a container without a claim, or one whose pod is among its claim's recorded consumers.
A pod the records do not list costs a read of the claim on the apiserver, and any pod can ask for
one (its spec names a claim of its namespace that it does not hold). So the work is split by
whether it can wait on the apiserver, and the two kinds never share a pool: every request is
first answered on the answering pool by a handler that never reads (``*_read_free``, which raises
:class:`~driver.pinning.nri.handlers.NeedsRead` instead); only a request that needs a read goes
on, to the read pool, admitted by :class:`~driver.pinning.nri.readslots.ReadSlots` (a few reads
per namespace, a bound for the node; beyond it the container is refused at once, reason
``reads_busy``), and a thread of its own waits for that read within the time box. Synchronize,
sent by the runtime once per connection, goes to the read pool directly. Four pools, each with
one job: ``nri-dispatch`` decodes and answers, waiting only on ``nri-answer`` (handlers that
never read); ``nri-read-wait`` waits for ``nri-read`` (handlers that may read).

Container creation waits for this plugin, so every request is **time-boxed** (``handler_budget_s``,
or less when the runtime's ttrpc timeout is shorter): a handler that has not answered by then is
abandoned and the runtime gets an empty response (no adjustment), with a warning in the log, as
stalling every pod on the node would be worse. A container that carries a pinning marker is
refused instead (reported like every refusal): it must not start on CPUs it was not given, and
the kubelet retries it.

**One pinner at a time.** During a rolling update two numadra processes are connected to the same
runtime, and containerd refuses a container when two plugins both set its cpuset ("plugins
"00-numadra" and "00-numadra" both tried to set CPUSetCPUs"): every claim pod created during the
overlap would fail. So the instances share ``<plugin-dir>/nri-pinner.lock`` (``leader_lock``): the
holder answers with adjustments; the other stays connected and keeps its bookkeeping (it sees every
container, as the pinner does) but answers CreateContainer, UpdateContainer and Synchronize with
no adjustment. A follower asked about a container tries to take the lock first (waiting up to
``takeover_wait_s`` for a pinner that is exiting), so when the old process is gone the next
container is pinned by the new one, with no window in which nobody pins. A leaving pinner lets go
of the lock *before* it disconnects: in the instant both might pin, containerd refuses the
container and the kubelet retries it, which is better than a container that runs unpinned.
Refusals (a forged marker) pass through from either process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from google.protobuf.message import DecodeError, Message

from driver import defaults
from driver._proto.nri import api_pb2 as nri
from driver._proto.nri import ttrpc_pb2 as ttrpc
from driver.errors import PinningError
from driver.log import get_logger
from driver.pinning.align import DeviceAligner
from driver.pinning.backend import PinningKind, PinTarget
from driver.pinning.consumers import ConsumerCheck
from driver.pinning.failures import (
    ACTION_REFUSED,
    REASON_NOT_PINNER,
    REASON_READS_BUSY,
    REASON_TIMEOUT,
    PinFailureSink,
)
from driver.pinning.nri.handlers import (
    ClaimLookup,
    NeedsRead,
    PinningHandlers,
    SharedPool,
    marker_from_env,
)
from driver.pinning.nri.readslots import ReadSlots
from driver.pinning.nri.wire import (
    MSG_REQUEST,
    MSG_RESPONSE,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    Demuxer,
    Frame,
    encode_frame,
)
from driver.pinning.otherdevices import OtherDevices
from driver.pinning.types import CpuAssignment
from driver.supervise import supervised
from driver.untrusted.files import open_lock_file

__all__ = [
    "DEFAULT_NRI_SOCKET",
    "ENV_PLUGIN_SOCKET",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "NriPlugin",
]

DEFAULT_NRI_SOCKET = defaults.NRI_SOCKET
#: env var with the fd of a pre-connected socket, set when the runtime starts the plugin itself
ENV_PLUGIN_SOCKET = "NRI_PLUGIN_SOCKET"
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
#: NRI module version this plugin implements the wire protocol of
NRI_VERSION = "v0.11.0"

# gRPC status codes used in ttrpc responses
_INVALID_ARGUMENT = 3
_FAILED_PRECONDITION = 9
_UNIMPLEMENTED = 12
_INTERNAL = 13

_log = get_logger("pinning.nri")

_Handler = Callable[[Any], Message]
#: the methods whose answers adjust containers: only the pinner (the lock holder) sends those
_ADJUSTING = frozenset({"CreateContainer", "UpdateContainer", "Synchronize"})
#: the lock file in the plugin dir that the instances of a rolling update share
PINNER_LOCK_NAME = "nri-pinner.lock"


@dataclass(frozen=True, slots=True)
class _Method:
    """How one Plugin method is served: its request type, the handler that never reads (run on
    the answering pool) and the one that may read the apiserver (run on the read pool)."""

    request_type: type[Message]
    answer: _Handler | None
    read: _Handler | None = None


@dataclass(frozen=True, slots=True)
class _Call:
    """One decoded request: the method, its request, its time box and when it arrived."""

    name: str
    method: _Method
    request: Message
    budget: float
    received: float

    def time_left(self) -> float:
        """What is left of the time box (the runtime's clock started at arrival)."""
        return max(0.0, self.budget - (time.monotonic() - self.received))


class NriPlugin:
    """The NRI plugin: connection, registration, dispatch with a time box, reconnects."""

    def __init__(
        self,
        handlers: PinningHandlers | None = None,
        *,
        claim_lookup: ClaimLookup | None = None,
        node_shared_pool: SharedPool | None = None,
        socket_path: Path = DEFAULT_NRI_SOCKET,
        name: str = "numadra",
        index: str = "00",
        handler_budget_s: float = 1.0,
        register_timeout_s: float = 5.0,
        socket_fd: int | None = None,
        leader_lock: Path | None = None,
        takeover_wait_s: float = 0.3,
        consumers: ConsumerCheck | None = None,
        on_failure: PinFailureSink | None = None,
        read_slots: ReadSlots | None = None,
        aligner: DeviceAligner | None = None,
        other_devices: OtherDevices | None = None,
    ) -> None:
        if len(index) != 2 or index.strip("0123456789"):  # two ASCII digits, nothing else
            raise PinningError(f"NRI plugin index must be two digits, got {index!r}")
        self.handlers = handlers or PinningHandlers(
            claim_lookup,
            node_shared_pool,
            consumers=consumers,
            on_failure=on_failure,
            aligner=aligner,
            other_devices=other_devices,
        )
        self._socket_path = socket_path
        self._socket_fd = socket_fd
        self._name = name
        self._index = index
        self._budget = handler_budget_s
        self._register_timeout = register_timeout_s
        h = self.handlers
        self._methods: dict[str, _Method] = {
            "Configure": _Method(nri.ConfigureRequest, self._configure),
            "Synchronize": _Method(nri.SynchronizeRequest, None, h.synchronize),
            "Shutdown": _Method(nri.Empty, self._shutdown),
            "CreateContainer": _Method(
                nri.CreateContainerRequest, h.create_container_read_free, h.create_container
            ),
            "UpdateContainer": _Method(
                nri.UpdateContainerRequest, h.update_container_read_free, h.update_container
            ),
            "StopContainer": _Method(nri.StopContainerRequest, h.stop_container),
            "RemoveContainer": _Method(nri.RemoveContainerRequest, h.remove_container),
        }
        #: reads in flight, per namespace and in all (see the module docstring)
        self.read_slots = read_slots or ReadSlots()
        reads = self.read_slots.total + 1  # one more for Synchronize, which takes no slot
        # never wait on the apiserver: decode, answer, wait only on the answering handlers
        self._dispatch = ThreadPoolExecutor(max_workers=8, thread_name_prefix="nri-dispatch")
        self._answer = ThreadPoolExecutor(max_workers=8, thread_name_prefix="nri-answer")
        # may wait on the apiserver: as many threads as reads may be in flight, so none queues
        self._read_waits = ThreadPoolExecutor(max_workers=reads, thread_name_prefix="nri-read-wait")
        self._reads = ThreadPoolExecutor(max_workers=reads, thread_name_prefix="nri-read")
        self._state_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._pending: dict[int, Future[ttrpc.Response]] = {}
        self._next_stream = 1
        self._disconnected = threading.Event()
        self._disconnected.set()
        self._reader_thread: threading.Thread | None = None
        self._runtime_timeout_s = 0.0  # ConfigureRequest.request_timeout, 0 = unknown
        self._leader_lock = leader_lock
        self._takeover_wait_s = takeover_wait_s
        self._leader_fd: int | None = None
        self._leader_mutex = threading.Lock()
        #: why the pinner lock could not be opened ("" when it could): then nobody may be pinning

    # -- PinningBackend -------------------------------------------------------------------------

    @property
    def kind(self) -> PinningKind:
        """Always :attr:`PinningKind.NRI`."""
        return PinningKind.NRI

    def apply(self, target: PinTarget, assignment: CpuAssignment) -> None:
        """Pin the container ``target.container_id`` at its next Create/Update/Synchronize."""
        if target.container_id is None:
            raise PinningError("NRI pinning needs the runtime container id")
        self.handlers.expect(target.container_id, assignment)

    def release(self, target: PinTarget) -> None:
        """Forget the container's explicit assignment."""
        if target.container_id is not None:
            self.handlers.forget(target.container_id)

    # -- connection lifecycle -------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a runtime connection is up."""
        return not self._disconnected.is_set()

    def connect(self) -> None:
        """Connect to the runtime and register; afterwards the runtime drives the plugin.

        A plugin the runtime started itself gets a connected socket as an inherited fd
        (``socket_fd``, from ``NRI_PLUGIN_SOCKET``); it is used once, instead of dialing.
        """
        if self._socket_fd is not None:
            fd, self._socket_fd = self._socket_fd, None
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
            except OSError as exc:
                raise PinningError(
                    f"NRI_PLUGIN_SOCKET fd {fd} is not a usable socket: {exc.strerror}"
                ) from exc
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self._socket_path))
            except OSError as exc:
                sock.close()
                raise PinningError(f"connect to NRI socket {self._socket_path}: {exc.strerror}") from exc
        with self._state_lock:
            self._sock = sock
            self._next_stream = 1
            self._disconnected.clear()
        reader = supervised("nri-reader", self._reader, sock, restart=False)  # its finally disconnects
        self._reader_thread = reader
        reader.start()
        try:
            self._call(
                "RegisterPlugin",
                nri.RegisterPluginRequest(
                    plugin_name=self._name, plugin_idx=self._index, NRI_version=NRI_VERSION
                ),
                nri.Empty,
                self._register_timeout,
            )
        except PinningError:
            self.disconnect()
            raise
        _log.info(
            "registered with runtime", socket=str(self._socket_path), plugin=self._name, index=self._index
        )

    def wait_disconnected(self, timeout: float | None = None) -> bool:
        """Block until the runtime connection is gone; False on timeout."""
        return self._disconnected.wait(timeout)

    def disconnect(self) -> None:
        """Close the runtime connection (the reader thread then fails pending calls)."""
        with self._state_lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        reader = self._reader_thread
        if reader is not None and reader is not threading.current_thread():
            reader.join(2.0)  # let it fail pending calls and log before we return

    def serve_forever(self, stop: threading.Event, max_backoff_s: float = 30.0) -> None:
        """Stay connected until ``stop``: reconnect with backoff when the runtime restarts."""
        backoff = 0.5
        while not stop.is_set():
            try:
                self.connect()
                backoff = 0.5
            except PinningError as exc:
                _log.warning("NRI runtime not reachable, retrying", error=str(exc), retry_in_s=backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, max_backoff_s)
                continue
            while not stop.is_set() and not self._disconnected.wait(0.5):
                pass
        self.close()

    def close(self) -> None:
        """Let go of pinning, disconnect and stop the worker pools (in that order: see the module
        docstring, a follower must be able to take over before this connection goes)."""
        self._resign()
        self.disconnect()
        for pool in (self._dispatch, self._answer, self._read_waits, self._reads):
            pool.shutdown(wait=False, cancel_futures=True)

    # -- one pinner ------------------------------------------------------------------------------

    @property
    def is_pinner(self) -> bool:
        """True when this process answers with adjustments (it holds the lock, or there is none)."""
        return self._leader_lock is None or self._leader_fd is not None

    def _take_pinning(self, wait_s: float) -> bool:
        """Hold the pinner lock, trying for up to ``wait_s``; True when held.

        Raises PinningError when the lock file is unusable (a link, FIFO or directory planted at
        its path): then nobody can tell whether another process pins, and the caller refuses
        rather than let a claim container run unpinned. Every call tries the file again.
        """
        if self.is_pinner:
            return True
        assert self._leader_lock is not None
        with self._leader_mutex:
            if self._leader_fd is not None:
                return True
            try:
                fd = open_lock_file(self._leader_lock)
            except OSError as exc:
                _log.error("cannot open the NRI pinner lock", path=str(self._leader_lock), error=exc.strerror)
                raise PinningError(f"NRI pinner lock {self._leader_lock}: {exc.strerror}") from exc
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        os.close(fd)
                        return False
                    time.sleep(0.02)
                    continue
                self._leader_fd = fd
                _log.info(
                    "pinning containers: this process holds the NRI pinner lock", path=str(self._leader_lock)
                )
                return True

    def _resign(self) -> None:
        """Give the pinner lock back (closing the file releases the flock)."""
        with self._leader_mutex:
            fd, self._leader_fd = self._leader_fd, None
        if fd is not None:
            os.close(fd)

    # -- transport ------------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        sock = self._sock
        if sock is None:
            raise PinningError("NRI connection is closed")
        with self._write_lock:
            try:
                sock.sendall(data)
            except OSError as exc:
                raise PinningError(f"write to NRI socket {self._socket_path}: {exc.strerror}") from exc

    def _reader(self, sock: socket.socket) -> None:
        demux = Demuxer()
        try:
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    break
                for frame in demux.feed(data):
                    self._on_frame(frame)
        except (OSError, PinningError) as exc:
            _log.warning("NRI connection failed", error=str(exc))
        finally:
            with self._state_lock:
                pending, self._pending = self._pending, {}
                if self._sock is sock:
                    self._sock = None
                self._disconnected.set()
            for fut in pending.values():
                fut.set_exception(PinningError("NRI connection closed before the runtime answered"))
            with contextlib.suppress(OSError):
                sock.close()
            _log.info("disconnected from runtime", socket=str(self._socket_path))

    def _on_frame(self, frame: Frame) -> None:
        if frame.conn_id == PLUGIN_SERVICE_CONN and frame.msg_type == MSG_REQUEST:
            self._dispatch.submit(self._serve, frame.stream_id, frame.payload, time.monotonic())
        elif frame.conn_id == RUNTIME_SERVICE_CONN and frame.msg_type == MSG_RESPONSE:
            with self._state_lock:
                fut = self._pending.pop(frame.stream_id, None)
            if fut is None:
                return
            resp = ttrpc.Response()
            try:
                resp.ParseFromString(frame.payload)
            except DecodeError as exc:
                fut.set_exception(PinningError(f"undecodable ttrpc response: {exc}"))
                return
            fut.set_result(resp)

    def _call(self, method: str, request: Message, response_type: type[Message], timeout: float) -> Message:
        """A unary call on the Runtime service (connection 2)."""
        fut: Future[ttrpc.Response] = Future()
        with self._state_lock:
            stream_id = self._next_stream
            self._next_stream += 2
            self._pending[stream_id] = fut
        envelope = ttrpc.Request(
            service=RUNTIME_SERVICE,
            method=method,
            payload=request.SerializeToString(),
            timeout_nano=int(timeout * 1e9),
        )
        self._send(encode_frame(RUNTIME_SERVICE_CONN, stream_id, MSG_REQUEST, envelope.SerializeToString()))
        try:
            resp = fut.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            with self._state_lock:
                self._pending.pop(stream_id, None)
            raise PinningError(f"NRI runtime did not answer {method} within {timeout:g} s") from exc
        if resp.status.code != 0:
            raise PinningError(
                f"NRI runtime refused {method}: {resp.status.message} (code {resp.status.code})"
            )
        out = response_type()
        out.ParseFromString(resp.payload)
        return out

    def _serve(self, stream_id: int, payload: bytes, received: float) -> None:
        """Answer one request from the runtime (on ``nri-dispatch``): at once when its handler
        needs no read; else hand it to the read pool, or refuse it when its reads are full."""
        call = self._decode(payload, received)
        if isinstance(call, ttrpc.Response):
            self._reply(stream_id, call)
            return
        if call.method.answer is not None:
            try:
                job = self._answer.submit(call.method.answer, call.request)
            except RuntimeError:  # closing: the pools are shut down
                return
            answered = self._outcome(call, job)
            if not isinstance(answered, NeedsRead):
                self._reply(stream_id, answered)
                return
            need = answered
        else:
            need = None
        namespace = _read_namespace(call.request)
        if namespace is not None and not self.read_slots.take(namespace):
            why = self.read_slots.why_not(namespace)
            if need is not None and need.fallback is not None:
                self._reply(stream_id, self._fallback(call, need, why))
            else:
                self._reply(stream_id, self._reads_busy(call, why))
            return
        try:
            self._read_waits.submit(self._serve_read, stream_id, call, namespace, need)
        except RuntimeError:
            if namespace is not None:
                self.read_slots.give_back(namespace)

    def _fallback(self, call: _Call, need: NeedsRead, why: str) -> ttrpc.Response:
        """The answer a handler gave for when its read cannot run (see :class:`NeedsRead`)."""
        assert need.fallback is not None
        try:
            result = need.fallback(why)
        except Exception as exc:  # a handler bug must not kill the connection
            return _failed(call, exc, "NRI fallback failed")
        return self._on_wire(call, result)

    def _serve_read(
        self, stream_id: int, call: _Call, namespace: str | None, need: NeedsRead | None = None
    ) -> None:
        """Answer a request whose handler may read (on ``nri-read-wait``), within its time box;
        the read's slot goes back when the handler returns, also after the box ran out. When the
        box runs out, the read-free handler's ``need`` gives the answer if it has one."""
        assert call.method.read is not None
        try:
            job = self._reads.submit(call.method.read, call.request)
        except RuntimeError:
            if namespace is not None:
                self.read_slots.give_back(namespace)
            return
        if namespace is not None:
            job.add_done_callback(lambda _job: self.read_slots.give_back(namespace))
        answered = self._outcome(call, job, need)
        if isinstance(answered, NeedsRead):  # a reading handler reads instead; a bug if not
            _log.error("NRI handler asked for a read on the read path", method=call.name)
            answered = _status(_INTERNAL, f"{call.name} failed: {answered}")
        self._reply(stream_id, answered)

    def _reply(self, stream_id: int, response: ttrpc.Response) -> None:
        try:
            self._send(
                encode_frame(PLUGIN_SERVICE_CONN, stream_id, MSG_RESPONSE, response.SerializeToString())
            )
        except PinningError as exc:
            _log.warning("could not send NRI response", error=str(exc))

    def _outcome(
        self, call: _Call, job: Future[Message], need: NeedsRead | None = None
    ) -> ttrpc.Response | NeedsRead:
        """The answer of a handler's ``job``, waited for within what is left of the time box
        (when it runs out: ``need``'s fallback if it has one, else :meth:`_timed_out`)."""
        started = time.monotonic()
        try:
            result = job.result(timeout=call.time_left())
        except concurrent.futures.TimeoutError:
            return self._timed_out(call, need)
        except NeedsRead as asked:
            return asked
        except Exception as exc:  # a handler bug must not kill the connection
            return _failed(call, exc, "NRI handler failed")
        _log.debug("NRI request served", method=call.name, took_ms=(time.monotonic() - started) * 1e3)
        return self._on_wire(call, result)

    def _on_wire(self, call: _Call, result: Message) -> ttrpc.Response:
        """A handler's (or its fallback's) result on the wire: an adjusting call's through the
        pinner, any other as it is."""
        if call.name in _ADJUSTING:
            return self._as_pinner(call.name, call.request, result)
        return ttrpc.Response(payload=result.SerializeToString())

    def _reads_busy(self, call: _Call, why: str) -> ttrpc.Response:
        """The answer when a read is needed and its namespace (or the node) has all it may have:
        like a time box run out, a claim container is refused (reported; the kubelet retries it)
        and anything else gets no adjustment."""
        if self._is_claim_container(call.request):
            message = (
                f"{_describe_request(call.request)}: its pod is not among its claim's recorded "
                f"consumers and {why}: refusing it (the kubelet retries the container)"
            )
            self.handlers.report(
                call.request.pod, call.request.container, REASON_READS_BUSY, ACTION_REFUSED, message
            )
            return _status(_FAILED_PRECONDITION, message)
        _log.warning("NRI read refused, answering with no adjustment", method=call.name, why=why)
        return ttrpc.Response(payload=b"")

    def _as_pinner(self, method: str, request: Message, result: Message) -> ttrpc.Response:
        """An adjusting answer: the adjustment when this process pins, none when another one does
        (ours is bookkeeping only, see the module docstring), and a refusal when the lock file is
        unusable, so that a claim container never runs unpinned because of it (reported on the
        pod and counted, as every refusal is)."""
        try:
            pinner = self._take_pinning(self._takeover_wait_s)
        except PinningError as exc:
            if method == "Synchronize" or not result.ByteSize():  # creates and adjusts nothing
                return ttrpc.Response(payload=b"")
            message = f"{exc}: refusing to leave the container unpinned"
            if isinstance(request, nri.CreateContainerRequest):
                self.handlers.report(
                    request.pod,
                    request.container,
                    REASON_NOT_PINNER,
                    ACTION_REFUSED,
                    f"{_describe_request(request)}: {message}",
                )
            return _status(_FAILED_PRECONDITION, message)
        return ttrpc.Response(payload=result.SerializeToString() if pinner else b"")

    def _timed_out(self, call: _Call, need: NeedsRead | None = None) -> ttrpc.Response:
        """The answer when a handler exceeded its time box: ``need``'s fallback when the read-free
        handler gave one; else no adjustment, or, for a container that carries a pinning marker,
        a refusal (it is never created on CPUs it was not given; the kubelet retries it)."""
        method, request, budget = call.name, call.request, call.budget
        if need is not None and need.fallback is not None:
            return self._fallback(call, need, f"not decided within the NRI time box of {budget:g} s")
        if self._is_claim_container(request):
            message = (
                f"{_describe_request(request)}: its pinning was not decided within the NRI time "
                f"box of {budget:g} s: refusing it (the kubelet retries the container)"
            )
            self.handlers.report(request.pod, request.container, REASON_TIMEOUT, ACTION_REFUSED, message)
            return _status(_FAILED_PRECONDITION, message)
        _log.warning(
            "NRI handler exceeded its time box; answering with no adjustment", method=method, budget_s=budget
        )
        return ttrpc.Response(payload=b"")  # an empty message of any response type

    @staticmethod
    def _is_claim_container(request: Message) -> TypeGuard[nri.CreateContainerRequest]:
        """A CreateContainer of a container that carries a pinning marker (a malformed one too)."""
        if not isinstance(request, nri.CreateContainerRequest):
            return False
        try:
            return marker_from_env(request.container.env) is not None
        except PinningError:
            return True

    def _decode(self, payload: bytes, received: float) -> ttrpc.Response | _Call:
        """The method, request and time box of a ttrpc request, or an error response."""
        envelope = ttrpc.Request()
        try:
            envelope.ParseFromString(payload)
        except DecodeError as exc:
            return _status(_INVALID_ARGUMENT, f"undecodable ttrpc request: {exc}")
        entry = self._methods.get(envelope.method) if envelope.service == PLUGIN_SERVICE else None
        if entry is None:
            return _status(_UNIMPLEMENTED, f"{envelope.service}/{envelope.method} is not implemented")
        request = entry.request_type()
        try:
            request.ParseFromString(envelope.payload)
        except DecodeError as exc:
            return _status(_INVALID_ARGUMENT, f"undecodable {envelope.method} request: {exc}")
        budget = self._budget
        if self._runtime_timeout_s > 0:
            budget = min(budget, 0.8 * self._runtime_timeout_s)  # answer well before the runtime gives up
        if envelope.timeout_nano > 0:
            budget = min(budget, envelope.timeout_nano / 1e9)
        return _Call(envelope.method, entry, request, budget, received)

    def _configure(self, request: nri.ConfigureRequest) -> nri.ConfigureResponse:
        """Remember the runtime's request timeout (it bounds the time box), then subscribe."""
        self._runtime_timeout_s = request.request_timeout / 1000 if request.request_timeout > 0 else 0.0
        return self.handlers.configure(request)

    def _shutdown(self, _request: nri.Empty) -> nri.Empty:
        _log.info("runtime is shutting down")
        return nri.Empty()


def _read_namespace(request: Message) -> str | None:
    """Whose reads a request counts against: its pod's namespace; None for Synchronize (sent by
    the runtime once per connection, not by a pod), which takes no slot."""
    if isinstance(request, nri.CreateContainerRequest | nri.UpdateContainerRequest):
        return request.pod.namespace
    return None


def _describe_request(request: nri.CreateContainerRequest) -> str:
    pod, ctr = request.pod, request.container
    where = f"{pod.namespace or '?'}/{pod.name or '?'} (uid {pod.uid or 'unknown'})"
    return f"container {ctr.name or ctr.id} of pod {where}"


def _status(code: int, message: str) -> ttrpc.Response:
    return ttrpc.Response(status=ttrpc.Status(code=code, message=message))


def _failed(call: _Call, exc: Exception, event: str) -> ttrpc.Response:
    """The answer to a handler (or fallback) that raised, called from its ``except``: a
    PinningError is a refusal (FailedPrecondition); anything else is a bug, logged with its
    traceback under ``event`` and answered Internal, so the connection lives on."""
    if isinstance(exc, PinningError):
        _log.error("NRI request refused", method=call.name, error=str(exc))
        return _status(_FAILED_PRECONDITION, str(exc))
    _log.exception(event, method=call.name)
    return _status(_INTERNAL, f"{call.name} failed: {exc}")
