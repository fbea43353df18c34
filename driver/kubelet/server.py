"""The kubelet-facing plugin server: both unix sockets, the gRPC services, claim reads and the lock.

Start order matters to the kubelet: it connects to the DRA socket as soon as it has read the
registration answer, so the DRA server listens (and is checked to accept) before the registration
socket exists. Each socket is bound under a dot-prefixed temporary name, which the kubelet's watcher
ignores, and renamed into place once its server runs; the kubelet therefore never sees a socket
that does not answer.

The driver behind the DRA socket may be attached after both sockets serve
(:meth:`KubeletPluginServer.attach`): ``numadra run`` registers before it imports and builds its
claims logic, so that the kubelet's registration does not wait for work it does not need. Until
then every call on the DRA socket (prepare, unprepare, a health stream) waits at a door in front
of the servicers (gRPC server interceptors, :mod:`driver.kubelet.door`): none reaches a driver
whose journal is not reconciled yet, and none fails for arriving early. A server stopped before
the attach shuts the door: the waiting calls end with ``UNAVAILABLE``.

Stop order is the reverse: the registration socket goes first (the kubelet deregisters the plugin
when the file disappears), then health streams end, then the DRA server drains and its socket is
removed. Only the socket files this process created are removed, checked by inode, so a successor
that already replaced them keeps its own; with ``pod_uid`` the names are unique to this pod and two
pods run side by side during a rolling update.
"""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc

from driver._proto import (
    health_v1_pb2_grpc,
    health_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2_grpc,
)
from driver.errors import ConfigError, DriverError
from driver.kube.types import ClaimGetter
from driver.kubelet.admission import CallKind, CallSlots
from driver.kubelet.claims import ClaimFetcher, Refused
from driver.kubelet.door import Collected, Door, Servicers
from driver.kubelet.dra import ClaimCalls, DraServicer
from driver.kubelet.health import (
    DEFAULT_RESEND_INTERVAL,
    HealthFanout,
    HealthV1alpha1Servicer,
    HealthV1Servicer,
)
from driver.kubelet.paths import MAX_SOCKET_PATH_BYTES, SOCKET_MODE, SocketPaths, socket_paths
from driver.kubelet.registration import RegistrationResult, RegistrationServicer, supported_versions
from driver.kubelet.serialize import SerializeLock
from driver.kubelet.translate import DRA_V1, DRA_V1BETA1
from driver.log import get_logger
from driver.plugin import DriverPlugin, HealthSource

__all__ = ["KubeletPluginServer"]

_log = get_logger("kubelet.server")

#: the generated modules of the health services' versions
_HEALTH_SERVICES = (health_v1_pb2_grpc, health_v1alpha1_pb2_grpc)


def _remove_stale_socket(path: Path) -> None:
    """Delete a socket left by an earlier run of this pod; refuse to delete anything else."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"{path} exists and is not a unix socket; refusing to replace it")
    path.unlink(missing_ok=True)
    _log.info("removed stale socket", path=str(path))


def _check_accepts(path: Path) -> None:
    """Connect once to prove the server is listening on ``path`` (the kubelet connects at once)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError as exc:
            raise DriverError(f"DRA socket {path} does not accept connections: {exc}") from exc


class KubeletPluginServer:
    """Serves registration, DRA v1/v1beta1 and (with a health source) health v1/v1alpha1.

    ``start()`` returns once both sockets serve; ``wait_registered()`` then waits for the kubelet's
    ``NotifyRegistrationStatus(true)``. ``stop()`` is idempotent and also runs on ``with`` exit.
    Without ``plugin`` and ``claim_source`` the calls on the DRA socket wait until
    :meth:`attach` hands them in (module docstring); ``serve_health`` then says whether the health
    services are advertised and served (default: whether ``health`` is given).

    Prepares, unprepares and health streams each have their own slots on the DRA socket
    (:mod:`driver.kubelet.admission`): ``max_workers`` prepares, ``unprepare_slots`` unprepares and
    ``health_streams`` open streams at a time; a call beyond its kind's slots is refused at once.
    So an unprepare never waits behind prepares stuck on the apiserver, nor prepare behind streams.

    The server reads the claims of a prepare from ``claim_source`` (the kube client) and checks
    them (:mod:`driver.kubelet.claims`), then calls the plugin under ``flock`` on
    ``<plugin dir>/serialize.lock``, the Go helper's rule; the reads happen before the lock is
    taken, as the Go helper's GETs do, so they overlap with other calls. ``lock``: that lock,
    opened by the caller (who also holds it around the driver's start-up reconcile); without one
    the server opens its own at ``<plugin dir>/serialize.lock``. ``claim_read_workers``: threads
    for parallel GETs.
    """

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        registrar_dir: Path,
        plugin_dir: Path,
        plugin: DriverPlugin | None = None,
        claim_source: ClaimGetter | None = None,
        health: HealthSource | None = None,
        serve_health: bool | None = None,
        pod_uid: str | None = None,
        health_resend_interval: float = DEFAULT_RESEND_INTERVAL,
        max_workers: int = 16,
        unprepare_slots: int = 8,
        health_streams: int = 8,
        lock: SerializeLock | None = None,
        claim_read_workers: int = 16,
        on_claims_refused: Refused | None = None,
    ) -> None:
        if not driver_name:
            raise ConfigError("driver name must not be empty")
        if (plugin is None) != (claim_source is None):
            raise ConfigError("plugin and claim_source are given together, now or to attach()")
        self.driver_name = driver_name
        self.node_name = node_name
        self.registrar_dir = Path(registrar_dir).absolute()
        self.plugin_dir = Path(plugin_dir).absolute()
        self.pod_uid = pod_uid or None
        self.paths: SocketPaths = socket_paths(self.registrar_dir, self.plugin_dir, driver_name, self.pod_uid)
        self._serves_health = health is not None if serve_health is None else serve_health
        if health is not None and not self._serves_health:
            raise ConfigError("a health source is given but serve_health is False")
        #: what start() attaches when given to the constructor
        self._given = (plugin, claim_source, health, on_claims_refused)
        self._resend_interval = health_resend_interval
        self.slots = CallSlots(
            {
                CallKind.PREPARE: max_workers,
                CallKind.UNPREPARE: unprepare_slots,
                CallKind.HEALTH: health_streams,
            }
        )
        #: the flock held around each driver call; opened and closed here unless it was given
        self._own_lock = lock is None
        self._lock = lock if lock is not None else SerializeLock(self.paths.lock)
        self._claim_read_workers = claim_read_workers
        self._fetcher: ClaimFetcher | None = None
        self._door = Door()
        self._servicers = Servicers()
        self._registration = RegistrationServicer(
            driver_name, str(self.paths.dra), supported_versions(with_health=self._serves_health)
        )
        self._fanout: HealthFanout | None = None
        self._dra_server: grpc.Server | None = None
        self._reg_server: grpc.Server | None = None
        self._executors: list[ThreadPoolExecutor] = []
        #: socket files we created, with their (st_dev, st_ino): stop() removes only these
        self._owned: dict[Path, tuple[int, int]] = {}
        self._state_lock = threading.Lock()
        self._started = False
        self._attached = False
        self._stopped = False
        self._log = _log.bind(driver=driver_name, node=node_name, pod_uid=self.pod_uid)

    @property
    def registration_socket(self) -> Path:
        """Absolute path of the registration socket in the registrar directory."""
        return self.paths.registration

    @property
    def dra_socket(self) -> Path:
        """Absolute path of the DRA socket; the registration answer names it as endpoint."""
        return self.paths.dra

    @property
    def registration_result(self) -> RegistrationResult | None:
        """The kubelet's last ``NotifyRegistrationStatus``, or None before the first one."""
        return self._registration.result

    @property
    def registered(self) -> threading.Event:
        """Set while the kubelet's last verdict was a successful registration."""
        return self._registration.registered

    def wait_registered(self, timeout: float | None = None) -> bool:
        """True once the kubelet reported a successful registration; False after ``timeout`` s."""
        return self._registration.registered.wait(timeout)

    def on_registered(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (on a gRPC thread) each time the kubelet reports a successful registration.

        For a waiter that must also wake for other reasons, as ``numadra run``'s main thread,
        which sleeps on its shutdown pipe until a signal or the registration wakes it.
        """
        self._registration.on_registered(wake)

    def start(self) -> None:
        """Bring up the DRA server, then the registration socket. Raises on any failure."""
        with self._state_lock:
            if self._started:
                raise DriverError("kubelet plugin server already started")
            self._started = True
        t0 = time.monotonic()
        try:
            if not self.registrar_dir.is_dir():
                raise ConfigError(
                    f"registrar directory {self.registrar_dir} does not exist (kubelet's plugins_registry)"
                )
            try:
                self.plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(
                    f"cannot create plugin directory {self.plugin_dir}: {exc.strerror}"
                ) from exc
            _remove_stale_socket(self.paths.registration)
            _remove_stale_socket(self.paths.dra)
            if self._own_lock:
                self._lock.open()
            plugin, claim_source, health, on_refused = self._given
            if plugin is not None and claim_source is not None:
                self.attach(plugin, claim_source, health, on_refused)
            self._start_dra()
            self._start_registration()
        except BaseException:
            self.stop(grace=0)
            raise
        self._log.info(
            "kubelet plugin server started",
            registration_socket=str(self.paths.registration),
            dra_socket=str(self.paths.dra),
            start_ms=round((time.monotonic() - t0) * 1000, 1),
        )

    def _executor(self, workers: int, name: str) -> ThreadPoolExecutor:
        """A worker pool we shut down ourselves: grpc.Server.stop() leaves the pool running."""
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._executors.append(executor)
        return executor

    def attach(
        self,
        plugin: DriverPlugin,
        claim_source: ClaimGetter,
        health: HealthSource | None = None,
        on_claims_refused: Refused | None = None,
    ) -> None:
        """Serve the DRA socket's calls with ``plugin``, reading claims from ``claim_source``.

        Calls that arrived before wait for this (module docstring); once only, not after stop().
        """
        if (health is not None) != self._serves_health:
            raise ConfigError("a health source is attached exactly when serve_health was set")
        with self._state_lock:
            if self._attached or self._stopped:
                raise DriverError("kubelet plugin server already attached or stopped")
            self._attached = True
        self._fetcher = ClaimFetcher(claim_source, max_workers=self._claim_read_workers)
        calls = ClaimCalls(plugin, self._fetcher, self._lock, on_claims_refused)
        dra = [DraServicer(calls, api) for api in (DRA_V1, DRA_V1BETA1)]
        fanout = None
        if health is not None:
            fanout = HealthFanout(health, plugin.handle_error, self.driver_name, self._resend_interval)

        def add_all(server: Collected) -> None:
            for servicer in dra:
                servicer.api.services.add_DRAPluginServicer_to_server(servicer, server)
            if fanout is not None:
                health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(HealthV1Servicer(fanout), server)
                health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
                    HealthV1alpha1Servicer(fanout), server
                )

        self._servicers.attach(add_all)
        if fanout is not None:
            self._fanout = fanout
            fanout.start()
        self._door.let_in()

    def _start_dra(self) -> None:
        server = grpc.server(
            self._executor(self.slots.threads, "dra-grpc"),
            # outermost first: the door holds a call, a slot admits it, the attached servicer answers
            interceptors=[self._door, self.slots, self._servicers],
            options=[("grpc.so_reuseport", 0)],
            # calls waiting for a thread beyond this are refused by grpc itself: a flood of
            # connections cannot queue without bound
            maximum_concurrent_rpcs=4 * self.slots.threads,
        )
        # placeholders (UNIMPLEMENTED) until attach(): they make grpc know the methods; the door
        # keeps every call from reaching them (driver.kubelet.door)
        for api in (DRA_V1, DRA_V1BETA1):
            api.services.add_DRAPluginServicer_to_server(api.services.DRAPluginServicer(), server)
        if self._serves_health:
            for services in _HEALTH_SERVICES:
                services.add_DRAResourceHealthServicer_to_server(services.DRAResourceHealthServicer(), server)
        self._dra_server = server
        self._serve_at(server, self.paths.dra)
        _check_accepts(self.paths.dra)

    def _serve_at(self, server: grpc.Server, final: Path) -> None:
        """Start ``server`` on a temporary dot-name, then rename the socket to ``final``.

        The rename makes the socket appear already serving (the kubelet's watcher ignores dot-names),
        and grpc, which unlinks the path it bound when it shuts down, then never removes a file at
        ``final`` that a successor process may have created in the meantime.
        """
        # a unique name, not a secret: os.urandom spares the registration path the secrets module
        temp = final.with_name(f".{os.urandom(3).hex()}.tmp")
        if len(str(temp).encode()) > MAX_SOCKET_PATH_BYTES:
            temp = final  # a 1-2 character name in a maximal directory: bind in place
        try:
            server.add_insecure_port(f"unix://{temp}")
            server.start()
            temp.chmod(SOCKET_MODE)  # grpc binds under the umask (0777 under umask 000)
            if temp != final:
                temp.replace(final)
            self._own(final)
        finally:
            if temp != final:
                temp.unlink(missing_ok=True)

    def _own(self, path: Path) -> None:
        st = path.lstat()
        self._owned[path] = (st.st_dev, st.st_ino)

    def _remove_owned(self, path: Path) -> None:
        """Unlink ``path`` only if it is still the socket we bound (not a successor's)."""
        identity = self._owned.pop(path, None)
        try:
            st = path.lstat()
        except FileNotFoundError:
            return
        if identity == (st.st_dev, st.st_ino):
            path.unlink(missing_ok=True)
        elif identity is not None:
            self._log.warning("socket was replaced by another process; leaving it", path=str(path))

    def _start_registration(self) -> None:
        server = grpc.server(self._executor(2, "reg-grpc"), options=[("grpc.so_reuseport", 0)])
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(self._registration, server)
        self._reg_server = server
        self._serve_at(server, self.paths.registration)

    def stop(self, grace: float = 1.0) -> None:
        """Remove the registration socket, end health streams, drain and remove the DRA socket."""
        with self._state_lock:
            if self._stopped or not self._started:
                self._stopped = True
                return
            self._stopped = True
        self._door.shut("the plugin is stopping")
        self._remove_owned(self.paths.registration)
        if self._reg_server is not None:
            self._reg_server.stop(0).wait()
        if self._fanout is not None:
            self._fanout.stop()
        if self._dra_server is not None:
            self._dra_server.stop(grace).wait()
        self._remove_owned(self.paths.dra)
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)
        if self._fetcher is not None:
            self._fetcher.close()
        if self._own_lock:
            self._lock.close()
        self._log.info("kubelet plugin server stopped")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
