"""One node's pinning pieces wired as ``numadra run`` wires them, over real files and sockets.

The claims driver writes real CDI specs, metadata and journal (``tests.integration.claims._world``);
the prepared-claims index feeds the NRI plugin's claim lookup; claims live on the fake apiserver
(real HTTP), read by the real client through :class:`~driver.claims.consumers.ApiConsumerReader`
(a pod's PodGroup through :class:`~driver.claims.consumers.ApiPodGroupReader`);
learned consumers are written back by :class:`~driver.claims.consumers.ConsumerRecords` under a
real ``flock`` (the serialize lock); the NRI plugin talks to the fake runtime over a unix socket.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.claims.consumers import ApiConsumerReader, ApiPodGroupReader, ConsumerRecords
from driver.kube.client import KubeClient
from driver.kubelet.serialize import SerializeLock
from driver.pinning.binding import binding_lookup
from driver.pinning.consumers import ConsumerCheck
from driver.pinning.failures import PinFailure
from driver.pinning.nri import NriPlugin
from driver.plugin import ClaimRef
from driver.state.entry import JournalEntry
from driver.state.index import PreparedIndex
from driver.state.journal import Journal, journal_path
from harness.fake_nri_runtime import FakeNriRuntime, FakePluginConnection, connect_plugin
from harness.fakeapiserver import FakeApiServer
from tests.integration.claims._world import ServedDriver, World


def reserved(*uids: str) -> list[dict[str, str]]:
    """``status.reservedFor`` entries for pods of these UIDs."""
    return [{"apiGroup": "", "resource": "pods", "name": f"pod-{u}", "uid": u} for u in uids]


def claim_env(world: World, uid: str, marker: str = "NUMADRA_CLAIM_UID") -> list[str]:
    """The env the claim's CDI spec gives the device carrying ``marker`` (what a container sees,
    and what an attacker copies into its own spec)."""
    spec = json.loads((world.cdi_dir / f"numadra.dev_claim_{uid}.json").read_text())
    for device in spec["devices"]:
        env = list(device["containerEdits"].get("env", ()))
        if any(e.startswith(f"{marker}=") for e in env):
            return ["PATH=/bin", *env]
    raise AssertionError(f"no device of claim {uid} carries {marker}")


def journal_entry(world: World, uid: str) -> JournalEntry | None:
    """The claim's entry as a fresh reader of the journal file sees it."""
    journal = Journal(journal_path(world.plugin_dir), read_only=True)
    journal.load()
    return journal.get(uid)


@dataclass
class PinningNode:
    """The world, its apiserver and runtime, and the driver and plugins started on them."""

    world: World
    api: FakeApiServer
    runtime: FakeNriRuntime
    failures: list[PinFailure] = field(default_factory=list)
    plugins: list[NriPlugin] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)
    driver: ServedDriver | None = None
    index: PreparedIndex | None = None
    records: ConsumerRecords | None = None
    check: ConsumerCheck | None = None

    def put_claim(self, obj: Mapping[str, Any]) -> ClaimRef:
        """The claim exists: on the apiserver, and for the kubelet layer's reads."""
        self.api.put_object(dict(obj))
        return self.world.getter.add(obj)

    def kube(self, read_deadline: float = 1.0) -> KubeClient:
        client = KubeClient(
            self.api.kubeconfig_path, timeout=2.0, connect_timeout=0.5, read_deadline=read_deadline
        )
        client.configure()  # as numadra run does at start: the kubeconfig loads off the runtime's path
        self.closers.append(client.close)
        return client

    def start_driver(self) -> ServedDriver:
        """A (re)started claims driver with its start-up reconcile, and a fresh index over it."""
        drv = self.world.driver()
        drv.reconcile()
        self.closers.append(drv.close)
        self.driver = drv
        self.index = PreparedIndex(drv.prepared_claims, drv.journal_changes)
        self.index.refresh()
        self.world.plugin_dir.mkdir(parents=True, exist_ok=True)
        lock = SerializeLock(self.world.plugin_dir / "serialize.lock")
        lock.open()
        self.closers.append(lock.close)
        index = self.index
        self.records = ConsumerRecords(drv.inner, hold=lock.hold, on_change=index.invalidate)
        self.closers.append(self.records.close)
        return drv

    def start_plugin(
        self, *, consumers: bool = True, **kwargs: Any
    ) -> tuple[NriPlugin, FakePluginConnection]:
        """An NRI plugin over the driver's index (with the consumer check unless told not to)."""
        assert self.index is not None and self.records is not None
        self.check = None
        if consumers:
            kube = self.kube()
            self.check = ConsumerCheck(
                ApiConsumerReader(kube), self.records.record, pod_groups=ApiPodGroupReader(kube)
            )
        inventory = self.world.inventory
        kwargs.setdefault("on_failure", self.failures.append)
        plugin = NriPlugin(
            socket_path=self.runtime.socket_path,
            claim_lookup=binding_lookup(self.index.view, lambda: inventory),
            consumers=self.check,
            **kwargs,
        )
        self.plugins.append(plugin)
        conn = connect_plugin(self.runtime, plugin.connect)
        conn.configure()
        return plugin, conn

    def close(self) -> None:
        for plugin in self.plugins:
            plugin.close()
        for close in reversed(self.closers):
            close()


def cpuset(resp: Any) -> tuple[str, str]:
    """(cpus, mems) of a CreateContainer adjustment."""
    cpu = resp.adjust.linux.resources.cpu
    return cpu.cpus, cpu.mems


def make_node(root: Path, runtime_dir: Path) -> PinningNode:
    """A node over ``root`` with a started fake apiserver and a runtime socket in ``runtime_dir``."""
    api = FakeApiServer()
    api.start()
    return PinningNode(World(root), api, FakeNriRuntime(runtime_dir / "nri.sock"))
