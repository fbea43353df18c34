"""The composition root of ``numadra run``: builds its parts, wired, in the order they start.

It starts nothing and runs no loop: :func:`driver.cli.run.serve` starts the steps this returns
(:class:`~driver.lifecycle.Lifecycle`) and owns the signals and the exit code; every part that
runs owns its thread and has ``start()`` and ``stop()``. docs/architecture.md walks the order.

The build has three stages. :func:`build_front` makes the :class:`Front`: the kubelet plugin
server, whose registration socket is the first thing the kubelet needs, with the calls of its DRA
socket held at a door (:mod:`driver.kubelet.server`); only grpc, the protos and the kubelet layer
are imported before it serves. :func:`build` then makes the :class:`Core` behind the door (the
claims logic, discovery, the journal, health) while the kubelet registers us, and its last step
lets the calls through: a prepare or unprepare sent right after the registration waits for the
reconciled journal, it never runs before it. The core is built beside the registration, not
after it: a kubelet registers a new socket on its plugin watcher's next round (about a second
apart), so the core is mostly ready before the first call comes, and the registration's answers
share the GIL with the build only when that round falls within it. :func:`build_background`
brings the kubernetes client, prometheus, yaml and udev, once the kubelet registered us or after
``registration_wait``: the plugin registers also while the apiserver is unreachable, and the
kubelet's GetInfo and NotifyRegistrationStatus do not wait for the GIL behind those imports.

:attr:`Front.steps`: (while building: refuse a live instance's sockets before touching any state)
the kubelet plugin server, its DRA calls held. :attr:`Core.steps`: (while building: discover the
inventory) the apiserver client, the claim status writer and the Event poster (every Warning
Event of the driver goes through its one bounded queue), stopped after everything that uses them;
the plugin directory and the flock shared with the other process of a rolling update; the
journal, reconciled under it (a corrupt one ends the start with one line naming the recovery,
exit 1, and removes the sockets); the first health reading of every device, so that a kubelet
opening its health stream right after registering gets a complete first message; the kubelet's
calls let through to all of that (its stop stops the kubelet plugin server, so the sockets go
before the claims logic behind them closes).
:attr:`Background.steps`: the health monitor's thread (its taints reach the publisher before its
first sync), the watch of other drivers' slices of this node and the Node (the devices they own:
the publisher waits for its first answer before its first write), the slice publisher, the
housekeeping thread, the check of claims rebuilt from files against the apiserver, the udev
watcher, the NRI plugin (with the reads of a shared claim's consumers and the reports of containers
it refuses), the metrics server. They stop the other way round: the kubelet's sockets go first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

# the front's modules: the kubelet layer; the core's are imported by build, once the sockets serve
from driver.errors import ConfigError
from driver.kubelet.paths import SERIALIZE_LOCK_NAME, refuse_live_sockets, socket_paths
from driver.kubelet.serialize import SerializeLock
from driver.kubelet.server import KubeletPluginServer
from driver.lifecycle import Step
from driver.log import get_logger
from driver.pinning.backend import PinningKind  # the config's, imported with it
from driver.supervise import LOOPS

if TYPE_CHECKING:
    from driver.claims import ClaimsDriver, NoClaimStatus
    from driver.claims.adopted import AdoptedClaims
    from driver.claims.hostedits import HostEdits
    from driver.claims.housekeeping import Housekeeping
    from driver.claims.render import CpuHook
    from driver.claims.status import ClaimStatusWriter
    from driver.claims.statusqueue import AsyncStatusWriter
    from driver.config import RunConfig
    from driver.health.monitor import HealthMonitor
    from driver.health.taints import HealthTaints
    from driver.inventory.holder import InventoryHolder
    from driver.inventory.model import Inventory
    from driver.kube.client import KubeClient
    from driver.kube.events import EventPoster
    from driver.observability import Metrics, MetricsUpdater
    from driver.observability.metered import MeteredPlugin
    from driver.pinning.planner import CpuPlanner
    from driver.slices.foreign import ForeignOwners
    from driver.slices.publisher import SlicePublisher
    from driver.slices.withheld import WithheldReport
    from driver.state.index import PreparedIndex

__all__ = ["Background", "Core", "Front", "build", "build_background", "build_front"]

_log = get_logger("app")


@dataclass(frozen=True, slots=True)
class Front:
    """The kubelet plugin server, its DRA calls held until :func:`build`'s core is attached."""

    config: RunConfig
    kubelet: KubeletPluginServer
    lock: SerializeLock
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Core:
    """The parts that serve the kubelet, built and wired; :attr:`steps` starts them in order."""

    config: RunConfig
    inventory: InventoryHolder
    kube: KubeClient
    events: EventPoster
    owners: ForeignOwners
    planner: CpuPlanner
    status: AsyncStatusWriter | NoClaimStatus
    claims: ClaimsDriver
    index: PreparedIndex
    plugin: MeteredPlugin
    monitor: HealthMonitor
    housekeeping: Housekeeping
    kubelet: KubeletPluginServer
    lock: SerializeLock
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Background:
    """The parts that run beside the kubelet's calls; :attr:`steps` starts them in order."""

    metrics: Metrics
    publisher: SlicePublisher
    withheld: WithheldReport
    taints: HealthTaints
    adopted: AdoptedClaims
    updater: MetricsUpdater
    steps: tuple[Step, ...]


def build_front(config: RunConfig) -> Front:
    """The front of ``numadra run`` (module docstring): what the kubelet's registration needs."""
    cfg, plugin_dir = config, config.effective_plugin_dir
    refuse_live_sockets(socket_paths(cfg.registrar_dir, plugin_dir, cfg.driver_name, cfg.pod_uid))
    # held around the start-up reconcile (the core's steps open it), then by the kubelet server
    # around each driver call (after its apiserver reads, which no lock holds up)
    lock = SerializeLock(plugin_dir / SERIALIZE_LOCK_NAME)
    kubelet = KubeletPluginServer(
        driver_name=cfg.driver_name,
        node_name=cfg.node_name,
        registrar_dir=cfg.registrar_dir,
        plugin_dir=plugin_dir,
        serve_health=True,
        pod_uid=cfg.pod_uid,
        lock=lock,
    )
    return Front(config=cfg, kubelet=kubelet, lock=lock, steps=(Step.of("kubelet plugin server", kubelet),))


def build(front: Front, *, on_fatal: Callable[[str], None]) -> Core:
    """The core of ``numadra run`` behind ``front`` (module docstring); ``on_fatal(reason)`` is
    called when a background error leaves the driver unable to go on (the process then exits 1)."""
    from driver.backoff import RetryPolicy
    from driver.claims import ClaimsDriver, NoClaimStatus, claims_journal
    from driver.claims.events import ClaimEvents
    from driver.claims.housekeeping import Housekeeping
    from driver.claims.statusqueue import AsyncStatusWriter
    from driver.inventory.discovery import discover
    from driver.inventory.holder import InventoryHolder
    from driver.inventory.model import kept_out_cpus
    from driver.kube.client import KubeClient
    from driver.kube.events import EventPoster
    from driver.observability.metered import MeteredPlugin
    from driver.pinning.planner import CpuPlanner
    from driver.slices.foreign import ForeignOwners
    from driver.state.index import PreparedIndex

    cfg, kubelet, lock = front.config, front.kubelet, front.lock
    plugin_dir = cfg.effective_plugin_dir
    inventory = InventoryHolder(partial(discover, cfg.host_root))  # NVML only for this host's root
    _log_inventory(cfg, inventory.current())
    kube = KubeClient(cfg.kubeconfig, read_deadline=cfg.claim_read_timeout)  # the one client
    planner = CpuPlanner(
        inventory.current,
        # isolcpus= is a boot parameter: the set found now holds for the whole run
        kept_out_cpus(inventory.current(), cfg.reserved_cpus, cfg.isolated_cpus),
        shared_pool=cfg.nri_shared_pool and cfg.pinning is PinningKind.NRI,
    )
    status: AsyncStatusWriter | NoClaimStatus = NoClaimStatus()
    if cfg.claim_status:
        status = AsyncStatusWriter(partial(_status_writer, cfg, kube, inventory))
    # every Warning Event of the driver (claims, pinning, missing gates) is posted by this one
    # worker, off the caller's path; a claim's NVIDIA user-space warnings are the core's
    events = EventPoster(kube.create_event)
    claim_events = ClaimEvents(events, component=cfg.driver_name, node=cfg.node_name)
    # other drivers' slices of this node and its device plugins: what our slices leave out and
    # no new claim gets (started in the background, once the client is configured)
    owners = ForeignOwners(
        kube,
        inventory=inventory.current,
        node_name=cfg.node_name,
        driver_name=cfg.driver_name,
        retry=RetryPolicy(cap=cfg.publish_backoff_cap),
        start_jitter=2.0,  # as the publisher's: a restarted fleet spreads its first LISTs
    )
    inventory.subscribe("foreign owners", owners.refresh)
    claims = ClaimsDriver(
        driver_name=cfg.driver_name,
        node_name=cfg.node_name,
        inventory=inventory.current,
        cdi_dir=cfg.cdi_dir,
        plugin_dir=plugin_dir,
        journal=claims_journal(
            cdi_dir=cfg.cdi_dir, plugin_dir=plugin_dir, driver_name=cfg.driver_name, pool=cfg.node_name
        ),
        planner=planner,
        status=status,
        on_fatal=lambda err, msg: on_fatal(f"{msg}: {err}"),
        cpu_hook=_cpu_hook(cfg),
        numa_node_list=cfg.numa_node_list,
        host_edits=_host_edits(cfg),
        warnings=claim_events,
        withheld=owners.withheld,
    )
    index = PreparedIndex(claims.prepared_claims, claims.journal_changes)
    housekeeping = Housekeeping(index=index, rescan=inventory.rescan, rescan_interval=cfg.rescan_interval)
    plugin = MeteredPlugin(claims, partial(_journal_changed, index, housekeeping))
    monitor = _health_monitor(cfg, inventory.current(), index)
    inventory.subscribe("health monitor", monitor.set_inventory)
    inventory.subscribe("claim status", status.set_inventory)
    steps = (
        Step("kube client", _nothing, kube.close),
        Step("claim status writer", _nothing, status.close),
        Step("event poster", _nothing, events.close),
        Step("serialize lock", partial(_open_lock, plugin_dir, lock), lock.close),
        Step("journal", partial(_reconcile, claims, lock, index), claims.close),
        Step("first health reading", monitor.poll_once, _nothing),
        # the held calls go through from here; stopping this stops the server before the above
        Step(
            "kubelet calls",
            partial(kubelet.attach, plugin, kube, monitor, plugin.observe_refused),
            kubelet.stop,
        ),
    )
    return Core(
        config=cfg,
        inventory=inventory,
        kube=kube,
        events=events,
        owners=owners,
        planner=planner,
        status=status,
        claims=claims,
        index=index,
        plugin=plugin,
        monitor=monitor,
        housekeeping=housekeeping,
        kubelet=kubelet,
        lock=lock,
        steps=steps,
    )


def build_background(core: Core) -> Background:
    """The background of ``numadra run`` (module docstring), wired to ``core``."""
    from driver.claims.adopted import AdoptedClaims
    from driver.claims.consumers import ApiConsumerReader
    from driver.health.taints import HealthTaints
    from driver.inventory.watch import HotplugWatcher
    from driver.kube.backoff import RetryPolicy
    from driver.observability import Metrics, MetricsServer, MetricsUpdater
    from driver.observability.updater import publish_error_handler
    from driver.slices.missingfeatures import MISSING_FEATURES_FILE, MissingFeatures
    from driver.slices.publisher import SlicePublisher
    from driver.slices.withheld import WITHHELD_FILE, WithheldReport

    cfg = core.config
    core.kube.configure()  # the official client's import is slow: not before the registration
    metrics = Metrics(cfg.driver_name, cfg.node_name)
    for action, entries in core.claims.recovery.items():
        metrics.count_journal_recovery(action, entries)
    core.plugin.attach_metrics(metrics)
    publisher = SlicePublisher(
        core.kube,
        node_name=cfg.node_name,
        driver_name=cfg.driver_name,
        build=partial(_slices, cfg),
        on_error=publish_error_handler(metrics, core.plugin.handle_error),
        retry=RetryPolicy(cap=cfg.publish_backoff_cap),
        start_jitter=2.0,  # a restarted fleet spreads its first LISTs, not one burst (docs/scale.md)
        # gates off on the apiserver: said once each (log, Node Event, metric, numadra state)
        features=MissingFeatures(
            node_name=cfg.node_name,
            driver_name=cfg.driver_name,
            events=core.events,
            record_path=cfg.effective_plugin_dir / MISSING_FEATURES_FILE,
        ),
        await_owners=True,  # never publish a device another driver already holds
    )
    # devices others own: left out of the slices, said once per owner (log, Node Event, metric,
    # numadra state)
    withheld = WithheldReport(
        node_name=cfg.node_name,
        component=cfg.driver_name,
        events=core.events,
        record_path=cfg.effective_plugin_dir / WITHHELD_FILE,
    )
    core.owners.add_listener(lambda found: publisher.set_withheld(found.withheld.keys()))
    core.owners.add_listener(withheld.update)
    taints = HealthTaints(publisher, cfg.taint_unhealthy)
    core.monitor.add_listener(taints)  # the current taints now, before the first sync
    core.monitor.add_listener(core.status.set_health)  # status.devices follow the same model
    publisher.republish(core.inventory.current())
    core.inventory.subscribe("slice publisher", publisher.republish)
    # entries rebuilt from files, or without pods: their consumers read from the apiserver, and
    # released once it confirms the claim gone
    adopted = AdoptedClaims(
        core.claims,
        ApiConsumerReader(core.kube),
        hold=core.lock.hold,
        on_change=partial(_journal_changed, core.index, core.housekeeping),
    )
    updater = MetricsUpdater(
        metrics,
        inventory=core.inventory.current,
        index=core.index,
        planner=core.planner,
        registered=core.kubelet.registered,
        state_recoveries=lambda: core.claims.state_recoveries,
        monitor=core.monitor,
        taints=taints,
        publisher=publisher,
        adopted_releases=lambda: adopted.releases,
        userspace_warnings=lambda: core.claims.userspace_warnings,
        events=lambda: {"posted": core.events.posted, "dropped": core.events.dropped},
        loop_restarts=LOOPS.restarts,
        withheld=withheld.metric_counts,
    )
    core.housekeeping.after_each_round(updater.update)
    updater.update()  # the first scrape sees every family
    steps = [
        Step.of("health monitor", core.monitor),
        Step.of("foreign slices and node", core.owners),
        Step.of("slice publisher", publisher),
        Step.of("housekeeping", core.housekeeping),
        Step.of("adopted claims check", adopted),
    ]
    if cfg.hotplug != "off":
        steps.append(
            Step.of("udev watcher", HotplugWatcher(core.housekeeping.request_rescan, source=cfg.hotplug))
        )
    else:
        _log.info("hot-plug detection off; periodic rescan only", rescan_interval_s=cfg.rescan_interval)
    if cfg.pinning is PinningKind.NRI:
        steps.extend(_nri_steps(core, metrics))
    _log_pinning(cfg)
    if cfg.metrics_address:
        ready = {"registered": core.kubelet.registered, "slices-published": publisher.published}
        server = MetricsServer(cfg.metrics_address, ready, metrics, failing_loops=LOOPS.failing)
        steps.append(Step.of("metrics server", server))
    else:
        _log.info("metrics endpoint off (no --metrics-address)")
    return Background(
        metrics=metrics,
        publisher=publisher,
        withheld=withheld,
        taints=taints,
        adopted=adopted,
        updater=updater,
        steps=tuple(steps),
    )


# -- what the steps and callbacks call ----------------------------------------------------------


def _nothing() -> None:
    """The start of a part that runs from its construction, or the stop of one that holds nothing."""


def _log_inventory(cfg: RunConfig, inventory: Inventory) -> None:
    _log.info(
        "inventory discovered",
        host_root=str(cfg.host_root),
        gpus=len(inventory.gpus),
        nics=len(inventory.nics),
        numa_nodes=len(inventory.numa_nodes),
        cpus=len(inventory.cpus),
    )


def _log_pinning(cfg: RunConfig) -> None:
    """``nri`` runs a plugin here; ``hook``: the CDI specs carry a createRuntime hook (``numadra
    hook create-runtime``) the runtime runs; ``cgroupfs`` and ``off``: the specs' marker env only."""
    keys: dict[str, object] = {"backend": cfg.pinning.value}
    if cfg.pinning is PinningKind.HOOK:
        keys["hook_path"] = cfg.hook_path
    if cfg.pinning is PinningKind.NRI:
        keys.update(socket=str(cfg.nri_socket), shared_pool=cfg.nri_shared_pool)
    _log.info("cpu pinning", **keys)


def _cpu_hook(cfg: RunConfig) -> CpuHook | None:
    if cfg.pinning is not PinningKind.HOOK:
        return None
    from driver.pinning.hook import cdi_hook

    return partial(cdi_hook, path=cfg.hook_path)


def _host_edits(cfg: RunConfig) -> HostEdits:
    """What a prepare reads from the host for a claim's devices: the NVIDIA user space, node groups."""
    from driver.claims.hostedits import HostEdits
    from driver.claims.render import claim_cdi_kind

    return HostEdits(
        host_root=str(cfg.host_root),
        driver_root=cfg.nvidia_driver_root,
        cdi_dir=str(cfg.cdi_dir),
        claim_kind=claim_cdi_kind(cfg.driver_name),
        device_groups=cfg.device_groups,
    )


def _status_writer(cfg: RunConfig, kube: KubeClient, inventory: InventoryHolder) -> ClaimStatusWriter:
    """The claim status writer (built on first use, on the status worker thread)."""
    from driver.claims.status import ClaimStatusWriter

    return ClaimStatusWriter(
        kube, driver_name=cfg.driver_name, inventory=inventory.current(), host_root=str(cfg.host_root)
    )


def _health_monitor(cfg: RunConfig, inventory: Inventory, index: PreparedIndex) -> HealthMonitor:
    """The health model; its fatal faults are kept in the plugin dir across restarts."""
    from driver.health.clear import clear_dir
    from driver.health.monitor import HealthMonitor
    from driver.health.signals import HEALTH_FAULTS_FILE

    plugin_dir = cfg.effective_plugin_dir
    return HealthMonitor(
        inventory,
        pool_name=cfg.node_name,
        host_root=str(cfg.host_root),
        interval=cfg.health_interval,
        prepared_cdi_ids=index.cdi_ids,
        clear_dir=clear_dir(plugin_dir),
        faults_path=str(plugin_dir / HEALTH_FAULTS_FILE),
    )


def _open_lock(plugin_dir: Path, lock: SerializeLock) -> None:
    try:
        plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create plugin directory {plugin_dir}: {exc.strerror}") from exc
    lock.open()


def _reconcile(claims: ClaimsDriver, lock: SerializeLock, index: PreparedIndex) -> None:
    with lock.hold():  # the other process of a rolling update may be preparing
        recreated = claims.reconcile()  # JournalError: one line naming the recovery, exit 1
    if recreated:
        _log.info("re-created files from the journal", files=recreated)
    index.refresh()


def _journal_changed(index: PreparedIndex, housekeeping: Housekeeping) -> None:
    """After every prepare and unprepare: the index is stale, the housekeeping thread refreshes it."""
    index.invalidate()
    housekeeping.wake()


def _slices(
    cfg: RunConfig, inventory: Inventory, taints: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    from driver.inventory.model import kept_out_cpus
    from driver.slices.builder import build_slices

    return build_slices(
        inventory,
        node_name=cfg.node_name,
        driver_name=cfg.driver_name,
        reserved_cpus=kept_out_cpus(inventory, cfg.reserved_cpus, cfg.isolated_cpus),
        taints=taints,
        node_allocatable=cfg.node_allocatable,
        numa_node_list=cfg.numa_node_list,
        kinds=cfg.devices,
    )


def _nri_steps(core: Core, metrics: Metrics) -> list[Step]:
    """The NRI plugin and what it needs besides the core: the reads of a shared claim's consumers
    (and of a pod's PodGroup, for a claim reserved for PodGroups), on the core's client with a
    deadline that fits the runtime's time box, the records of the pods they find, and the reports
    of claim containers refused or left unpinned (a pod Event and a metric)."""
    from driver.claims.consumers import ApiConsumerReader, ApiPodGroupReader, ConsumerRecords
    from driver.observability.pinreports import PinningReports
    from driver.pinning.align import DeviceAligner
    from driver.pinning.binding import binding_lookup
    from driver.pinning.consumers import READ_DEADLINE_S, ConsumerCheck
    from driver.pinning.factory import nri_service
    from driver.pinning.nri.plugin import PINNER_LOCK_NAME
    from driver.pinning.otherdevices import OtherDevices, SysfsPciNodes

    cfg, index, planner = core.config, core.index, core.planner
    changed = partial(_journal_changed, index, core.housekeeping)
    records = ConsumerRecords(core.claims, hold=core.lock.hold, on_change=changed)
    reports = PinningReports(core.events, node_name=cfg.node_name, component=cfg.driver_name)
    reports.attach_metrics(metrics)

    def node_shared() -> frozenset[int]:
        return planner.node_shared_pool(index.claimed_cpus())

    shared = node_shared if cfg.nri_shared_pool else None
    aligner = DeviceAligner(core.inventory.current, node_shared) if cfg.align_device_pods else None
    # containers holding another DRA driver's devices: the pod and its claims read once per pod
    # (get on pods: the opt-in rbac.readPods), the devices' nodes from the slices the foreign
    # watcher keeps, a pciBusID through this host's sysfs
    other_devices = OtherDevices(
        core.kube,
        core.kube,
        places=core.owners.device_places,
        pci_nodes=SysfsPciNodes(cfg.host_root),
        own_driver=cfg.driver_name,
    )
    service = nri_service(
        socket=cfg.nri_socket,
        claim_lookup=binding_lookup(index.view, core.inventory.current),
        node_shared_pool=shared,
        pinner_lock=cfg.effective_plugin_dir / PINNER_LOCK_NAME,  # one pinner in a rolling update
        # the one client, each read cut at a deadline inside the runtime's time box
        consumers=ConsumerCheck(
            ApiConsumerReader(core.kube, deadline=READ_DEADLINE_S),
            records.record,
            pod_groups=ApiPodGroupReader(core.kube, deadline=READ_DEADLINE_S),
        ),
        on_failure=reports,
        aligner=aligner,
        other_devices=other_devices,
    )
    planner.watch_pool(service.plugin.handlers.pool_users)
    return [
        Step("consumer records", _nothing, records.close),
        Step("pinning reports", _nothing, reports.close),
        Step.of("nri plugin", service),
    ]
