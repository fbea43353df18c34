"""Claim device status (``status.devices``, GA in 1.37): what we prepared, visible on the claim.

After a prepare, every allocated result of our driver that we prepared gets an entry with a
``Ready`` condition (all five required fields), a small ``data`` object (NUMA node, PCI address)
and, for NICs, ``networkData``: the interface name and MAC as the host sees them now (names can
change; the PCI function cannot) and the addresses in CIDR form. Written by server-side apply with
our own field manager and ``force``, so entries of other drivers are untouched; an apply with an
empty list (unprepare) removes exactly what we applied. The apiserver's validation limits of
device status are enforced here (conditions, IPs, the lengths of interface name and hardware
address, the size of ``data``: the ``MAX_*`` constants below). Needs the RBAC of deploy/
(``resourceclaims/status`` and the synthetic ``resourceclaims/driver`` with
``associated-node:patch``).

Health: once the health monitor reported (:meth:`ClaimStatusWriter.set_health`, a monitor
listener), every entry also carries a ``Healthy`` condition with the monitor's state and reason,
and a change of a prepared device's health re-applies the entries of the claims holding it. So the
kubelet's health stream, the slice taint and ``status.devices`` tell the same story (a sticky
``PciAerFatal`` shows on the claim as ``Healthy=False``, reason ``PciAerFatal``). The claims to
update are the ones this process reported; claims prepared before a restart get the condition at
their next prepare (the kubelet's reconcile after a restart re-prepares them).

Retries: every apply waits until the backoff of the last transient failure (unreachable, 429,
5xx) is over, under the driver's :class:`~driver.kube.backoff.RetryPolicy`, whoever calls it
(the status worker's retries, the health loop over claims). While the apiserver fails, the writer
thus sends one apply per backoff step, not one per queued write.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from driver.errors import KubeError
from driver.health.netinfo import IpSource, host_ip_source, netdev_dir
from driver.inventory.model import Gpu, Inventory, Nic, NumaNode
from driver.inventory.sysfs import read_text
from driver.kube.backoff import RetryPolicy
from driver.kube.status import is_not_found
from driver.kube.types import JsonObject, allocation_results
from driver.log import get_logger
from driver.plugin import DeviceHealth, HealthState, PreparedDevice

__all__ = ["MAX_CONDITIONS", "MAX_DATA_BYTES", "MAX_IPS", "ClaimStatusWriter", "StatusApi"]

MAX_CONDITIONS = 8
MAX_IPS = 16
MAX_DATA_BYTES = 10240
MAX_INTERFACE_NAME_BYTES = 256
MAX_HARDWARE_ADDRESS_BYTES = 128
#: metav1.Condition reason syntax
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_CONDITION_STATUS = {
    HealthState.HEALTHY: "True",
    HealthState.UNHEALTHY: "False",
    HealthState.UNKNOWN: "Unknown",
}
_log = get_logger("health.status")

# ruff: noqa: PTH118, PTH119 - os.path like the sysfs readers


class StatusApi(Protocol):
    """The one call the writer needs (:class:`driver.kube.client.KubeClient` has it)."""

    def apply_claim_status(
        self, namespace: str, name: str, devices: Sequence[Mapping[str, Any]], field_manager: str
    ) -> object: ...


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _clip(text: str, max_bytes: int) -> str:
    return text.encode()[:max_bytes].decode("utf-8", errors="ignore")


class ClaimStatusWriter:
    """Writes and clears our entries of ``status.devices`` for prepared claims.

    ``retry`` paces the applies after transient failures (see the module docstring); :meth:`stop`
    ends a wait for it at once, and every apply after it fails without being sent.
    """

    def __init__(
        self,
        api: StatusApi,
        *,
        driver_name: str,
        inventory: Inventory,
        host_root: str = "/",
        ip_source: IpSource | None = None,
        field_manager: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._api = api
        self._backoff = (retry or RetryPolicy()).backoff()
        self.driver_name = driver_name
        self.field_manager = field_manager or driver_name
        self._inventory = inventory
        self._host_root = host_root
        self._ips = ip_source or host_ip_source(host_root)
        #: device -> (state, reason, lastTransitionTime) as last reported by the health monitor
        self._health: dict[str, tuple[HealthState, str, str]] = {}
        #: claim UID -> (namespace, name, entries applied): the claims to update on health changes
        self._reported: dict[str, tuple[str, str, list[dict[str, Any]]]] = {}
        self._lock = threading.Lock()

    def set_inventory(self, inventory: Inventory) -> None:
        """Follow a changed inventory."""
        self._inventory = inventory

    def report_prepared(self, claim: JsonObject, prepared: Sequence[PreparedDevice]) -> list[dict[str, Any]]:
        """Apply a Ready entry per prepared allocated device; returns the entries sent.

        Raises :class:`KubeError` (callers log it and keep the prepare: status is informational).
        A claim deleted meanwhile (the apiserver's NotFound Status for it) is not an error.
        """
        meta = claim.get("metadata") or {}
        entries = self.entries(claim, prepared)
        namespace, name, uid = (
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
        )
        with self._lock:
            for entry in entries:
                self._add_health(entry)
            if uid:
                self._reported[uid] = (namespace, name, entries)
        self._apply(namespace, name, entries, uid)
        return entries

    def clear(self, namespace: str, name: str, uid: str = "") -> None:
        """Remove every entry this field manager applied (unprepare); a deleted claim is fine."""
        with self._lock:
            if uid:
                self._reported.pop(uid, None)
            else:  # no UID to look up: find the claim by its name
                for key, (ns, n, _) in list(self._reported.items()):
                    if (ns, n) == (namespace, name):
                        del self._reported[key]
        self._apply(namespace, name, [], uid)

    def set_health(self, snapshot: Sequence[DeviceHealth]) -> None:
        """Follow the health monitor: re-apply the entries of reported claims whose devices changed.

        A failed write is logged and skipped (the next change or prepare writes again).
        """
        now = _now()
        with self._lock:
            changed = set()
            for health in snapshot:
                state = (health.state, health.reason)
                known = self._health.get(health.device_name)
                if known is None or known[:2] != state:
                    self._health[health.device_name] = (health.state, health.reason, now)
                    changed.add(health.device_name)
            todo = []
            for uid, (namespace, name, entries) in self._reported.items():
                if any(e["device"] in changed for e in entries):
                    for entry in entries:
                        self._add_health(entry)
                    todo.append((namespace, name, [dict(e) for e in entries], uid))
        for namespace, name, entries, uid in todo:
            try:
                self._apply(namespace, name, entries, uid)
            except KubeError as err:
                _log.warning("claim health status not written", claim_uid=uid, error=str(err))

    def _add_health(self, entry: dict[str, Any]) -> None:
        """Set (or replace) the entry's ``Healthy`` condition from the last health report."""
        known = self._health.get(str(entry["device"]))
        if known is None:
            return
        state, reason, since = known
        condition = {
            "type": "Healthy",
            "status": _CONDITION_STATUS[state],
            "reason": reason if _REASON.match(reason or "") else state.value,
            "message": _clip(f"device health {state.value}" + (f": {reason}" if reason else ""), 1024),
            "lastTransitionTime": since,
        }
        others = [c for c in entry.get("conditions", []) if c.get("type") != "Healthy"]
        entry["conditions"] = [*others, condition][:MAX_CONDITIONS]

    def stop(self) -> None:
        """Stop waiting for the apiserver: a pending and every later apply fails unsent."""
        self._backoff.stop()

    def _apply(self, namespace: str, name: str, entries: list[dict[str, Any]], uid: str) -> None:
        """One apply, once the backoff of the last transient failure is over."""
        if not self._backoff.wait_turn():
            raise KubeError(
                f"apply resourceclaims/status/{namespace}/{name}: not sent, the status writer stopped",
                verb="apply",
                resource="resourceclaims/status",
                name=f"{namespace}/{name}",
            )
        try:
            self._api.apply_claim_status(namespace, name, entries, self.field_manager)
        except KubeError as err:
            if is_not_found(err, "resourceclaims", name):  # the apiserver's word, not any 404
                self._backoff.succeeded()
                _log.info("claim gone, no status to write", claim=f"{namespace}/{name}", claim_uid=uid)
                return
            if err.transient:
                self._backoff.failed(err)
            raise
        self._backoff.succeeded()

    def entries(self, claim: JsonObject, prepared: Sequence[PreparedDevice]) -> list[dict[str, Any]]:
        """The status entries for a claim (pure apart from reading the host's network state)."""
        results = allocation_results(claim)
        wanted = {(p.pool_name, p.device_name): p for p in prepared}
        generation = (claim.get("metadata") or {}).get("generation")
        out: list[dict[str, Any]] = []
        seen: set[tuple[str, str, str]] = set()
        for result in results:
            pool, device = str(result.get("pool", "")), str(result.get("device", ""))
            share_id = str(result.get("shareID") or "")
            if result.get("driver") != self.driver_name or (pool, device) not in wanted:
                continue
            if (pool, device, share_id) in seen:
                continue
            seen.add((pool, device, share_id))
            entry: dict[str, Any] = {"driver": self.driver_name, "pool": pool, "device": device}
            if share_id:
                entry["shareID"] = share_id
            entry["conditions"] = [self._ready(wanted[(pool, device)], generation)][:MAX_CONDITIONS]
            self._describe(entry, device)
            out.append(entry)
        return out

    def _ready(self, prepared: PreparedDevice, generation: Any) -> dict[str, Any]:
        ids = ", ".join(prepared.cdi_device_ids)
        condition: dict[str, Any] = {
            "type": "Ready",
            "status": "True",
            "reason": "Prepared",
            "message": _clip(
                f"prepared by {self.driver_name}" + (f"; CDI devices: {ids}" if ids else ""), 1024
            ),
            "lastTransitionTime": _now(),
        }
        if isinstance(generation, int):
            condition["observedGeneration"] = generation
        return condition

    def _describe(self, entry: dict[str, Any], device_name: str) -> None:
        device = self._inventory.find(device_name)
        data: dict[str, Any] = {}
        if isinstance(device, Gpu | Nic):
            data["pciBusID"] = device.pci.bus_id
            if device.pci.numa_node is not None:
                data["numaNode"] = device.pci.numa_node
        elif isinstance(device, NumaNode):
            data["numaNode"] = device.id
        if data and len(json.dumps(data)) <= MAX_DATA_BYTES:
            entry["data"] = data
        if isinstance(device, Nic):
            entry["networkData"] = self._network_data(device)

    def _network_data(self, nic: Nic) -> dict[str, Any]:
        interface, mac = nic.interface_name, nic.mac_address
        netdev = netdev_dir(os.path.join(self._host_root, "sys/bus/pci/devices", nic.pci.bus_id), interface)
        if netdev is not None:  # else not visible here (moved into a pod): as discovered
            interface = os.path.basename(netdev)
            mac = read_text(os.path.join(netdev, "address")) or mac
        ips = list(dict.fromkeys(self._ips(interface)))
        if len(ips) > MAX_IPS:
            _log.warning("interface has more addresses than the API allows", device=nic.name, ips=len(ips))
        data: dict[str, Any] = {"interfaceName": _clip(interface, MAX_INTERFACE_NAME_BYTES)}
        if ips:
            data["ips"] = ips[:MAX_IPS]
        if mac:
            data["hardwareAddress"] = _clip(mac, MAX_HARDWARE_ADDRESS_BYTES)
        return data
