"""The composition root of ``numadra run``: builds every component, owns them, starts and stops them.

Start order, and why:

1. discover the inventory from the host root (everything else describes it);
2. load the journal: a corrupt one stops the start with one line naming the recovery (exit 1);
3. build the :class:`~driver.claims.ClaimsDriver` and reconcile (a reboot emptied ``/var/run/cdi``);
4. take the first health reading (every device, before the registration socket exists: a kubelet
   that opens its health stream right after registering gets a complete first message), then
   start the kubelet plugin server. Only what this step needs is imported before it (grpc, the
   protos, the claims logic): the kubernetes client and prometheus come later, so the plugin
   registers also while the apiserver is unreachable. Then wait for the kubelet's registration,
   at most :attr:`RunConfig.registration_wait` (1 s, the period of the kubelet's plugin watcher):
   the steps below take about 0.3 s of CPU under the GIL (with a kubeconfig, the kubernetes
   client's import alone is 0.2 s; a pod never imports it: driver.kube.client), and a kubelet
   calling GetInfo and NotifyRegistrationStatus meanwhile waited for the GIL at each step of
   each call: from "kubelet plugin serving" to registered took a median of 36 ms
   (up to 145) in 15 starts on the 2-core CI machine, 15 ms (up to 36) with the wait. Nothing
   below is needed to register or to serve a prepare;
5. start the health monitor's polling thread, whose taints feed the publisher before its first
   sync;
6. publish the slices from a background thread that retries with backoff (prepares meanwhile fail
   per claim, saying the apiserver is unreachable);
7. start the housekeeping thread (:mod:`driver.claims.housekeeping`: prepared-claims index,
   periodic rescan, metrics) and watch udev for hot-plug: a changed inventory is republished and
   seen by claims, planner, health and status writer;
8. start the pinning backend (``nri``: the plugin connects in the background and reconnects);
9. serve ``/metrics``, ``/healthz`` and ``/readyz`` (ready = registered AND slices published).

:meth:`App.stop` runs the started steps in reverse order, so the kubelet sockets disappear before
the claims logic is closed; it is idempotent and also undoes a half-finished :meth:`App.start`.
:meth:`App.run` adds the signal handling of the DaemonSet entrypoint: SIGTERM/SIGINT stop and exit
0, SIGHUP rescans the host.
"""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from driver import DEFAULT_DRIVER_NAME
from driver.errors import ConfigError, DriverError, KubeError, RecoverableError, SliceError
from driver.heap import freeze_startup_heap
from driver.inventory.model import Inventory, IsolatedCpus, kept_out_cpus
from driver.kubelet.paths import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRAR_DIR, default_plugin_dir
from driver.log import LogFormat, get_logger
from driver.pinning.backend import PinningKind

if TYPE_CHECKING:
    from driver.claims import ClaimsDriver
    from driver.claims.adopted import AdoptedClaims
    from driver.claims.events import ClaimEvents
    from driver.claims.hostedits import HostEdits
    from driver.claims.housekeeping import Housekeeping
    from driver.claims.status import ClaimStatusWriter
    from driver.claims.statusqueue import AsyncStatusWriter
    from driver.health.monitor import HealthMonitor
    from driver.health.taints import HealthTaints, TaintEffect
    from driver.kube.client import KubeClient
    from driver.kubelet.serialize import SerializeLock
    from driver.kubelet.server import KubeletPluginServer
    from driver.observability import Metrics, MetricsServer, MetricsUpdater
    from driver.observability.metered import MeteredPlugin
    from driver.observability.pinreports import PinningReports
    from driver.pinning.consumers import ConsumerCheck
    from driver.pinning.nri import NriPlugin
    from driver.pinning.planner import CpuPlanner
    from driver.slices.publisher import SlicePublisher
    from driver.state.index import PreparedIndex

__all__ = [
    "DEFAULT_CDI_DIR",
    "DEFAULT_HOOK_PATH",
    "DEFAULT_NRI_SOCKET",
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRAR_DIR",
    "App",
    "HotplugSource",
    "RunConfig",
]

DEFAULT_CDI_DIR = Path("/var/run/cdi")
#: same value as ``driver.pinning.nri.DEFAULT_NRI_SOCKET`` (not imported: it pulls in the NRI stubs)
DEFAULT_NRI_SOCKET = Path("/var/run/nri/nri.sock")
#: same value as ``driver.pinning.hook.DEFAULT_HOOK_PATH``: where the DaemonSet installs numadra
DEFAULT_HOOK_PATH = "/opt/numadra/bin/numadra"

HotplugSource = Literal["udev", "kernel", "off"]

_log = get_logger("app")
#: how soon the main loops act on a signal the handler noted (seconds)
_SIGNAL_POLL = 0.1


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything ``numadra run`` is told by flags and environment (validated by the CLI)."""

    node_name: str
    driver_name: str = DEFAULT_DRIVER_NAME
    host_root: Path = Path("/")
    kubeconfig: str | None = None  # None: in-cluster service account
    registrar_dir: Path = DEFAULT_REGISTRAR_DIR
    plugin_dir: Path | None = None  # None: default_plugin_dir(driver_name)
    cdi_dir: Path = DEFAULT_CDI_DIR
    pod_uid: str | None = None
    pinning: PinningKind = PinningKind.OFF
    metrics_address: str = ""  # "" disables the HTTP endpoint
    log_format: LogFormat = "console"
    log_level: str = "info"  # debug | info | warning | error
    reserved_cpus: frozenset[int] = frozenset()
    isolated_cpus: IsolatedCpus = "include"  # see driver.inventory.model.kept_out_cpus
    node_allocatable: bool = False
    numa_node_list: bool = False  # resource.kubernetes.io/numaNode as the KEP-6072 list
    taint_unhealthy: TaintEffect = "NoSchedule"
    nri_socket: Path = DEFAULT_NRI_SOCKET
    nri_shared_pool: bool = False
    health_interval: float = 2.0
    rescan_interval: float = 300.0  # 0 disables the periodic rescan
    hotplug: HotplugSource = "udev"
    hook_path: str = DEFAULT_HOOK_PATH
    claim_status: bool = True
    claim_read_timeout: float = 10.0  # overall deadline of one claim GET or LIST
    nvidia_driver_root: str = "/"  # host path of the NVIDIA driver's files (docs/gpu-userspace.md)
    device_groups: bool = True  # CDI additionalGids for device nodes only their group may open
    publish_backoff_cap: float = 30.0
    #: how long the background start (step 5 on) waits for the kubelet's registration; 0: not at all
    registration_wait: float = 1.0

    @property
    def effective_plugin_dir(self) -> Path:
        """``--plugin-dir``, or ``/var/lib/kubelet/plugins/<driver>``."""
        return self.plugin_dir if self.plugin_dir is not None else default_plugin_dir(self.driver_name)


class App:
    """Owns the components of one ``numadra run`` process (see the module docstring)."""

    def __init__(self, config: RunConfig) -> None:
        from driver.claims.housekeeping import Housekeeping  # with the claims driver, not at import

        self.config = config
        self.plugin_dir = config.effective_plugin_dir
        self._inventory: Inventory | None = None
        self._inventory_lock = threading.Lock()
        self._stops: list[tuple[str, Callable[[], None]]] = []
        self._shutdown = threading.Event()
        self._fatal = ""
        self._signals: list[int] = []  # noted by the handler, acted on by _handle_signals
        self._recovery: Counter[str] = Counter()
        self.claims: ClaimsDriver | None = None
        self.plugin: MeteredPlugin | None = None
        self.index: PreparedIndex | None = None
        self.kubelet: KubeletPluginServer | None = None
        self.monitor: HealthMonitor | None = None
        self.publisher: SlicePublisher | None = None
        self.taints: HealthTaints | None = None
        self.status: AsyncStatusWriter | None = None
        self.planner: CpuPlanner | None = None
        self.nri: NriPlugin | None = None
        self.metrics: Metrics | None = None
        self.metrics_server: MetricsServer | None = None
        self._kube: KubeClient | None = None
        self._state_lock: SerializeLock | None = None
        self._consumers: ConsumerCheck | None = None
        self._pin_reports: PinningReports | None = None
        self._adopted: AdoptedClaims | None = None
        self._log = _log.bind(node=config.node_name, driver=config.driver_name)
        self._metrics_updater: MetricsUpdater | None = None
        # built now, so a rescan asked for before the thread starts (SIGHUP) is not lost
        self._housekeeping: Housekeeping = Housekeeping(
            shutdown=self._shutdown, rescan_interval=config.rescan_interval, log=self._log
        )

    # -- public ---------------------------------------------------------------------------------

    @property
    def inventory(self) -> Inventory:
        """The current inventory (replaced when a rescan finds a change)."""
        inventory = self._inventory
        if inventory is None:
            raise DriverError("inventory not discovered yet")
        return inventory

    @property
    def fatal_error(self) -> str:
        """Why the app asked to stop itself ("" when it did not)."""
        return self._fatal

    def start(self) -> None:
        """Bring every component up in order; on failure, stop what started and re-raise.

        A stop asked for while waiting for the registration (SIGTERM) skips the background start;
        :meth:`stop` then stops what started. The cyclic garbage collector is off meanwhile (why:
        :mod:`driver.cli`) and on when this returns, the start-up heap frozen first.
        """
        t0 = time.monotonic()
        gc.disable()
        try:
            self._start_core()
            self._log.info("kubelet plugin serving", ms=round((time.monotonic() - t0) * 1000, 1))
            if self._await_registration():
                self._start_background()
                frozen = freeze_startup_heap()  # the start-up objects never become garbage
                self._log.info(
                    "numadra started", ms=round((time.monotonic() - t0) * 1000, 1), gc_frozen=frozen
                )
        except BaseException:
            self.stop()
            raise
        finally:
            gc.enable()

    def stop(self) -> None:
        """Stop every started component in reverse order; idempotent."""
        self._shutdown.set()
        self._housekeeping.wake()
        while self._stops:
            name, stop = self._stops.pop()
            try:
                stop()
            except Exception as exc:  # one stuck component must not keep the sockets around
                self._log.error("stop failed", component=name, error=str(exc))

    def request_stop(self, fatal: str = "") -> None:
        """Ask :meth:`run` to stop: a signal (exit 0), or a fatal background error (exit 1)."""
        if fatal and not self._fatal:
            self._fatal = fatal
        self._shutdown.set()
        self._housekeeping.wake()

    def request_rescan(self) -> None:
        """Ask the housekeeping thread to rediscover the host now (SIGHUP, udev)."""
        self._housekeeping.request_rescan()

    def run(self) -> int:
        """The DaemonSet entrypoint: start, serve until SIGTERM/SIGINT, stop; the exit code."""
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            self.start()
            while not self._shutdown.is_set():
                self._handle_signals()
                self._shutdown.wait(_SIGNAL_POLL)
            self._log.info("stopping", reason=self._fatal or "signal")
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self._fatal:
            raise DriverError(self._fatal)
        self._log.info("numadra stopped")
        return 0

    def rescan(self) -> bool:
        """Rediscover the host; when the inventory changed, hand it to every component. True then."""
        from driver.inventory.discovery import discover

        with self._inventory_lock:
            fresh = discover(self.config.host_root)  # NVML only when the root is this host's
            if fresh == self._inventory:
                return False
            self._inventory = fresh
        self._log.info(
            "inventory changed", gpus=len(fresh.gpus), nics=len(fresh.nics), numa_nodes=len(fresh.numa_nodes)
        )
        if self.monitor is not None:
            self.monitor.set_inventory(fresh)
        if self.status is not None:
            self.status.set_inventory(fresh)
        if self.publisher is not None:
            try:
                self.publisher.republish(fresh)
            except SliceError as exc:
                self._log.error("cannot build slices for the new inventory", error=str(exc))
        return True

    # -- start steps ----------------------------------------------------------------------------

    def _on_stop(self, name: str, stop: Callable[[], None]) -> None:
        self._stops.append((name, stop))

    def _start_core(self) -> None:
        """Steps 1-4: inventory, journal, claims driver, kubelet server (the registration path)."""
        from driver.claims import ClaimsDriver
        from driver.claims.statusqueue import AsyncStatusWriter
        from driver.inventory.discovery import discover
        from driver.kube.client import shared_client
        from driver.kubelet.paths import SERIALIZE_LOCK_NAME, refuse_live_sockets, socket_paths
        from driver.kubelet.serialize import SerializeLock
        from driver.kubelet.server import KubeletPluginServer
        from driver.observability.metered import MeteredPlugin
        from driver.pinning.planner import CpuPlanner
        from driver.state.index import PreparedIndex

        cfg = self.config
        # first, before touching any state: a live instance on our socket paths is not replaced
        refuse_live_sockets(socket_paths(cfg.registrar_dir, self.plugin_dir, cfg.driver_name, cfg.pod_uid))
        self._inventory = discover(cfg.host_root)  # NVML only when the root is this host's
        inventory = self._inventory
        self._log.info(
            "inventory discovered",
            host_root=str(cfg.host_root),
            gpus=len(inventory.gpus),
            nics=len(inventory.nics),
            numa_nodes=len(inventory.numa_nodes),
            cpus=len(inventory.cpus),
        )

        cpu_hook = None
        if cfg.pinning is PinningKind.HOOK:
            from driver.pinning.hook import cdi_hook

            cpu_hook = partial(cdi_hook, path=cfg.hook_path)
        self._kube = shared_client(cfg.kubeconfig)
        self._kube.read_deadline = cfg.claim_read_timeout
        self._on_stop("kube client", self._kube.close)
        # isolcpus= is a boot parameter: the set found now holds for the whole run
        self.planner = CpuPlanner(
            lambda: self.inventory,
            kept_out_cpus(inventory, cfg.reserved_cpus, cfg.isolated_cpus),
            shared_pool=cfg.nri_shared_pool and cfg.pinning is PinningKind.NRI,
        )
        if cfg.claim_status:
            self.status = AsyncStatusWriter(self._status_writer)
            self._on_stop("claim status writer", self.status.close)
        # the flock shared with the other process of a rolling update: held here around the
        # start-up reconcile, then by the kubelet server around each driver call (after its
        # apiserver reads, which no lock holds up)
        try:
            self.plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create plugin directory {self.plugin_dir}: {exc.strerror}") from exc
        self._state_lock = state_lock = SerializeLock(self.plugin_dir / SERIALIZE_LOCK_NAME)
        state_lock.open()
        self._on_stop("serialize lock", state_lock.close)
        self.claims = ClaimsDriver(
            driver_name=cfg.driver_name,
            node_name=cfg.node_name,
            inventory=lambda: self.inventory,
            cdi_dir=cfg.cdi_dir,
            plugin_dir=self.plugin_dir,
            planner=self.planner,
            status=self.status,
            on_fatal=lambda err, msg: self.request_stop(f"{msg}: {err}"),
            cpu_hook=cpu_hook,
            numa_node_list=cfg.numa_node_list,
            host_edits=self._host_edits(),
            warnings=self._claim_events(),
        )
        self._on_stop("claims driver", self.claims.close)
        with state_lock.hold():  # the other process of a rolling update may be preparing
            recreated = self.claims.reconcile()  # JournalError: one line with the recovery, exit 1
        self._recovery = self.claims.recovery
        if recreated:
            self._log.info("re-created files from the journal", files=recreated)
        index = PreparedIndex(self.claims.prepared_claims)
        index.refresh()
        self.index = index
        self.plugin = MeteredPlugin(self.claims, self._journal_changed)
        self.monitor = self._health_monitor(inventory, index)
        self.monitor.poll_once()  # the first reading, before the kubelet can ask for it
        self.kubelet = KubeletPluginServer(
            driver_name=cfg.driver_name,
            node_name=cfg.node_name,
            registrar_dir=cfg.registrar_dir,
            plugin_dir=self.plugin_dir,
            plugin=self.plugin,
            claim_source=self._kube,
            health=self.monitor,
            pod_uid=cfg.pod_uid,
            lock=state_lock,
            on_claims_refused=self.plugin.observe_refused,
        )
        self.kubelet.start()
        self._on_stop("kubelet plugin server", self.kubelet.stop)

    def _host_edits(self) -> HostEdits:
        """What claims read from the host at prepare: the NVIDIA user space, node groups."""
        from driver.claims.hostedits import HostEdits
        from driver.claims.render import claim_cdi_kind

        cfg = self.config
        return HostEdits(
            host_root=str(cfg.host_root),
            driver_root=cfg.nvidia_driver_root,
            cdi_dir=str(cfg.cdi_dir),
            claim_kind=claim_cdi_kind(cfg.driver_name),
            device_groups=cfg.device_groups,
        )

    def _claim_events(self) -> ClaimEvents:
        """Where a claim's NVIDIA user-space warnings go: Warning Events, posted off the call path."""
        from driver.claims.events import ClaimEvents

        assert self._kube is not None
        events = ClaimEvents(
            self._kube.create_event, component=self.config.driver_name, node=self.config.node_name
        )
        self._on_stop("claim events", events.close)
        return events

    def _await_registration(self) -> bool:
        """Leave the CPU to the kubelet's registration calls (module docstring, step 4).

        True once the kubelet registered us or after ``registration_wait`` seconds without it (no
        kubelet yet: everything else starts that much later, slices included); False on a stop
        request.
        """
        assert self.kubelet is not None
        registered = self.kubelet.registered
        deadline = time.monotonic() + self.config.registration_wait
        while True:
            self._handle_signals()
            if self._shutdown.is_set():
                return False
            left = deadline - time.monotonic()
            if left <= 0 or registered.wait(min(left, _SIGNAL_POLL)):
                return True

    def _health_monitor(self, inventory: Inventory, index: PreparedIndex) -> HealthMonitor:
        """The health model; its fatal faults are kept in the plugin dir across restarts."""
        from driver.health.clear import clear_dir
        from driver.health.monitor import HealthMonitor
        from driver.health.signals import HEALTH_FAULTS_FILE

        cfg = self.config
        return HealthMonitor(
            inventory,
            pool_name=cfg.node_name,
            host_root=str(cfg.host_root),
            interval=cfg.health_interval,
            prepared_cdi_ids=index.cdi_ids,
            clear_dir=clear_dir(self.plugin_dir),
            faults_path=str(self.plugin_dir / HEALTH_FAULTS_FILE),
        )

    def _status_writer(self) -> ClaimStatusWriter:
        """The claim status writer (built on first use, on the status worker thread)."""
        from driver.claims.status import ClaimStatusWriter

        assert self._kube is not None
        cfg = self.config
        return ClaimStatusWriter(
            self._kube, driver_name=cfg.driver_name, inventory=self.inventory, host_root=str(cfg.host_root)
        )

    def _start_background(self) -> None:
        """Steps 5-9: health, publishing, hot-plug, pinning, metrics."""
        from driver.health.taints import HealthTaints
        from driver.kube.backoff import RetryPolicy
        from driver.slices.publisher import SlicePublisher

        cfg = self.config
        assert self.claims is not None and self.monitor is not None and self._kube is not None
        self._kube.configure()  # after registration: the official client's import is slow
        self.publisher = SlicePublisher(
            self._kube,
            node_name=cfg.node_name,
            driver_name=cfg.driver_name,
            build=self._build_slices,
            on_error=self._on_publish_error,
            retry=RetryPolicy(cap=cfg.publish_backoff_cap),
            start_jitter=2.0,  # a restarted fleet LISTs over 2 s, not in one burst (docs/scale.md)
        )
        self.taints = HealthTaints(self.publisher, cfg.taint_unhealthy)
        self.monitor.add_listener(self.taints)
        if self.status is not None:  # status.devices follow the same model as the taints
            self.monitor.add_listener(self.status.set_health)
        self.monitor.start()
        self._on_stop("health monitor", self.monitor.stop)
        self.publisher.republish(self.inventory)
        self.publisher.start()
        self._on_stop("slice publisher", self.publisher.stop)

        assert self.index is not None
        self._housekeeping.start(index=self.index, rescan=self.rescan, after=self._update_metrics)
        self._on_stop("housekeeping", lambda: self._housekeeping.join(5.0))
        self._start_hotplug()
        self._start_consumers()
        self._start_pinning()
        self._start_metrics()

    def _build_slices(
        self, inventory: Inventory, taints: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> list[dict[str, Any]]:
        from driver.slices.builder import build_slices

        return build_slices(
            inventory,
            node_name=self.config.node_name,
            driver_name=self.config.driver_name,
            reserved_cpus=kept_out_cpus(inventory, self.config.reserved_cpus, self.config.isolated_cpus),
            taints=taints,
            node_allocatable=self.config.node_allocatable,
            numa_node_list=self.config.numa_node_list,
        )

    def _start_hotplug(self) -> None:
        if self.config.hotplug == "off":
            self._log.info(
                "hot-plug detection off; periodic rescan only", rescan_interval_s=self.config.rescan_interval
            )
            return
        from driver.inventory.watch import start_watcher

        watcher = start_watcher(self.request_rescan, source=self.config.hotplug)
        self._on_stop("udev watcher", watcher.stop)

    def _start_consumers(self) -> None:
        """Claims' consumers: the adopted-claims check, and for NRI the consumer reads (on a
        client whose deadline fits the runtime's time box) and the pinning failure reports."""
        from driver.claims.adopted import AdoptedClaims
        from driver.claims.consumers import ApiConsumerReader, ConsumerRecords
        from driver.kube.client import KubeClient
        from driver.observability.pinreports import PinningReports
        from driver.pinning.consumers import READ_DEADLINE_S, ConsumerCheck

        cfg = self.config
        assert self.claims is not None and self._kube is not None and self._state_lock is not None
        hold = self._state_lock.hold
        self._adopted = AdoptedClaims(
            self.claims, ApiConsumerReader(self._kube), hold=hold, on_change=self._journal_changed
        )
        self._adopted.start()
        self._on_stop("adopted claims check", self._adopted.stop)
        if cfg.pinning is not PinningKind.NRI:
            return
        fast = KubeClient(cfg.kubeconfig, read_deadline=READ_DEADLINE_S)
        fast.configure()
        self._on_stop("consumer reads client", fast.close)
        records = ConsumerRecords(self.claims, hold=hold, on_change=self._journal_changed)
        self._on_stop("consumer records", records.close)
        self._consumers = ConsumerCheck(ApiConsumerReader(fast), records.record)
        self._pin_reports = PinningReports(self._kube.create_event, node_name=cfg.node_name)
        self._on_stop("pinning reports", self._pin_reports.close)

    def _start_pinning(self) -> None:
        cfg = self.config
        if cfg.pinning is not PinningKind.NRI:
            # hook: the CDI specs carry a createRuntime hook (`numadra hook create-runtime`) that
            # the runtime runs; cgroupfs and off: the marker env of the specs, no daemon-side work
            extra = {"hook_path": cfg.hook_path} if cfg.pinning is PinningKind.HOOK else {}
            self._log.info("cpu pinning", backend=cfg.pinning.value, **extra)
            return
        from driver.pinning.binding import binding_lookup
        from driver.pinning.factory import build_backend
        from driver.pinning.nri import NriPlugin
        from driver.pinning.nri.plugin import PINNER_LOCK_NAME

        assert self.index is not None and self.planner is not None
        index, planner = self.index, self.planner
        shared = (lambda: planner.node_shared_pool(index.claimed_cpus())) if cfg.nri_shared_pool else None
        backend = build_backend(
            PinningKind.NRI,
            nri_socket=cfg.nri_socket,
            claim_lookup=binding_lookup(index.view, lambda: self.inventory),
            node_shared_pool=shared,
            nri_pinner_lock=self.plugin_dir / PINNER_LOCK_NAME,  # one pinner in a rolling update
            consumers=self._consumers,
            on_failure=self._pin_reports,
        )
        assert isinstance(backend, NriPlugin)
        planner.watch_pool(backend.handlers.pool_users)
        self.nri = backend
        stop = threading.Event()
        thread = threading.Thread(target=backend.serve_forever, args=(stop,), name="nri-plugin", daemon=True)
        thread.start()
        self._log.info(
            "cpu pinning", backend="nri", socket=str(cfg.nri_socket), shared_pool=cfg.nri_shared_pool
        )

        def _stop() -> None:
            stop.set()
            thread.join(5.0)
            backend.close()

        self._on_stop("nri plugin", _stop)

    def _start_metrics(self) -> None:
        from driver.observability import Metrics, MetricsServer, MetricsUpdater

        cfg = self.config
        assert self.plugin is not None and self.kubelet is not None and self.publisher is not None
        assert self.index is not None and self.planner is not None and self.claims is not None
        assert self.monitor is not None and self.taints is not None
        self.metrics = Metrics(cfg.driver_name, cfg.node_name)
        for action, entries in self._recovery.items():
            self.metrics.count_journal_recovery(action, entries)
        self.plugin.attach_metrics(self.metrics)
        if self._pin_reports is not None:
            self._pin_reports.attach_metrics(self.metrics)
        adopted = self._adopted
        claims = self.claims
        self._metrics_updater = MetricsUpdater(
            self.metrics,
            inventory=lambda: self.inventory,
            index=self.index,
            planner=self.planner,
            registered=self.kubelet.registered,
            state_recoveries=lambda: claims.state_recoveries,
            adopted_releases=lambda: adopted.releases if adopted is not None else {},
            monitor=self.monitor,
            taints=self.taints,
            publisher=self.publisher,
            userspace_warnings=lambda: claims.userspace_warnings,
        )
        self._update_metrics()
        if not cfg.metrics_address:
            self._log.info("metrics endpoint off (no --metrics-address)")
            return
        server = MetricsServer(
            cfg.metrics_address,
            ready_checks={
                "registered": self.kubelet.registered,
                "slices-published": self.publisher.published,
            },
            metrics=self.metrics,
        )
        server.start()
        self.metrics_server = server
        self._on_stop("metrics server", server.stop)

    # -- background -----------------------------------------------------------------------------

    def _journal_changed(self) -> None:
        if self.index is not None:
            self.index.invalidate()
        self._housekeeping.wake()

    def _on_publish_error(self, err: BaseException) -> None:
        """Publisher failures: failed writes are counted; the publisher already logged API errors."""
        cause = err.__cause__ if isinstance(err, RecoverableError) and err.__cause__ is not None else err
        if isinstance(cause, KubeError):
            if self.metrics is not None and cause.verb in ("create", "update", "delete"):
                self.metrics.count_publish(cause.verb, error=True)
            return
        if self.plugin is not None:
            self.plugin.handle_error(err, "slice publishing")

    def _update_metrics(self) -> None:
        """The housekeeping round's last step (a no-op until the metrics exist)."""
        if self._metrics_updater is not None:
            self._metrics_updater.update()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Only note the signal: the handler runs in the main thread between any two bytecodes,
        maybe while that thread holds the log's lock or an Event's, which a log line or
        ``Event.set()`` here would take again and wait for forever (seen: SIGTERM while the main
        thread was logging). :meth:`_handle_signals` acts on it, from the main loops."""
        self._signals.append(signum)  # one bytecode-level operation, no lock

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if signum == signal.SIGHUP:
                self.request_rescan()
                continue
            self._log.info("signal received", signal=signal.Signals(signum).name)
            self.request_stop()
