"""A second DRA driver for GPUs, small and real: what numadra meets when NVIDIA's driver runs beside it.

The node and e2e tiers need another vendor's DRA driver next to numadra, and none can run here
(NVIDIA's needs its kernel module). This one does what such a driver does, and nothing more:

* **kubelet plugin**: the registration socket and the DRA v1 gRPC service (through the same
  kubelet layer numadra uses, :class:`driver.kubelet.server.KubeletPluginServer`), registered with
  the kubelet's plugin watcher under its own driver name;
* **ResourceSlice**: one slice for its node, one pool named after the node, one device per GPU it
  is given, with the standard attributes a GPU driver publishes: ``resource.kubernetes.io/pciBusID``
  and ``resource.kubernetes.io/numaNode``. The NUMA node is read from the host tree's sysfs
  (``<host-root>/sys/bus/pci/devices/<bus id>/numa_node``), the same file numadra reads, unless
  the GPU is given as ``<bus id>=<node>`` (a GPU this host does not have);
* **prepare through CDI**: per claim one spec file ``<vendor>_<class>_<claim uid>.json`` in the
  runtime's CDI dir, with one device per allocated GPU whose edits set ``STANDIN_GPU=<bus id>``
  in the container (proof that the runtime applied this driver's spec); unprepare removes it.
  A claim of which no result is this driver's prepares to no devices.

Its slice is published when it starts and deleted when it stops (SIGTERM), as an uninstall of a
vendor driver removes it; numadra withholds the GPUs it names while the slice exists.

:func:`device_class` is its DeviceClass, with an ``extendedResourceName`` so that a pod asking for
``resources.limits: {example.com/gpu: 1}`` gets one of its GPUs through a claim the scheduler makes.

Run ``python -m harness.standin_gpu_driver --help``; it logs one JSON line ``{"event": "standin
ready"}`` once the kubelet registered it and its slice is stored.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from cdi import ContainerEdits, Device, Spec, remove_file, transient_spec_file_name, write_spec
from driver.errors import KubeError
from driver.kube.client import KubeClient
from driver.plugin import Claim, ClaimRef, PreparedDevice, PrepareResult, describe_claim

__all__ = [
    "READY_EVENT",
    "STANDIN_DRIVER",
    "STANDIN_ENV",
    "STANDIN_EXTENDED_RESOURCE",
    "StandinGpu",
    "StandinPlugin",
    "command",
    "device_class",
    "device_name",
    "logged_ready",
    "main",
    "resource_slice",
    "slice_name",
]

#: the driver name, its DeviceClass's name and the vendor of its CDI kind
STANDIN_DRIVER = "gpu.example.com"
#: what a pod asks for in ``resources.limits`` to get one of its GPUs (DRA extended resource)
STANDIN_EXTENDED_RESOURCE = "example.com/gpu"
#: the env its CDI edits set in a container, to the GPU's bus ID
STANDIN_ENV = "STANDIN_GPU"
#: the JSON log line's ``event`` once it is registered and its slice is stored
READY_EVENT = "standin ready"
_CDI_KIND = "example.com/gpu"
_NUMA = "resource.kubernetes.io/numaNode"
_BUS_ID = "resource.kubernetes.io/pciBusID"


@dataclass(frozen=True, slots=True)
class StandinGpu:
    """One GPU it publishes: its PCI address and NUMA node."""

    bus_id: str
    numa_node: int

    @classmethod
    def parse(cls, text: str, host_root: Path) -> StandinGpu:
        """``<bus id>=<node>``, or ``<bus id>`` with the node read from the host tree's sysfs."""
        bus_id, sep, node = text.partition("=")
        if not sep:
            node = (host_root / "sys/bus/pci/devices" / bus_id / "numa_node").read_text().strip()
        return cls(bus_id, int(node))


def device_name(bus_id: str) -> str:
    """The device's name in the slice (a DNS label): ``gpu-0000-18-00-0``."""
    return "gpu-" + bus_id.replace(":", "-").replace(".", "-").lower()


def slice_name(node_name: str, driver_name: str = STANDIN_DRIVER) -> str:
    """The name of its one slice on ``node_name``."""
    return f"{node_name}-{driver_name.replace('.', '-')}"


def resource_slice(
    node_name: str, gpus: Sequence[StandinGpu], driver_name: str = STANDIN_DRIVER
) -> dict[str, Any]:
    """Its ResourceSlice for ``node_name``: the standard attributes a vendor's GPU driver publishes."""
    devices = [
        {
            "name": device_name(gpu.bus_id),
            "attributes": {
                _NUMA: {"int": gpu.numa_node},
                _BUS_ID: {"string": gpu.bus_id},
                "productName": {"string": "Stand-in GPU"},
            },
        }
        for gpu in gpus
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node_name, driver_name)},
        "spec": {
            "driver": driver_name,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(
    driver_name: str = STANDIN_DRIVER, extended_resource: str | None = STANDIN_EXTENDED_RESOURCE
) -> dict[str, Any]:
    """Its DeviceClass (named as the driver), mapping ``extended_resource`` when given."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver_name}"'}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver_name},
        "spec": spec,
    }


class StandinPlugin:
    """Prepare and unprepare by CDI spec files (a :class:`driver.plugin.DriverPlugin`)."""

    def __init__(self, driver_name: str, cdi_dir: Path, gpus: Sequence[StandinGpu]) -> None:
        self.driver_name = driver_name
        self.cdi_dir = cdi_dir
        self._bus_ids = {device_name(g.bus_id): g.bus_id for g in gpus}
        self.errors: list[str] = []

    def _spec_file(self, uid: str) -> str:
        return transient_spec_file_name(_CDI_KIND, uid)

    def _prepare(self, claim: Claim) -> PrepareResult:
        results = claim.obj.get("status", {}).get("allocation", {}).get("devices", {}).get("results") or []
        ours = [r for r in results if isinstance(r, Mapping) and r.get("driver") == self.driver_name]
        devices: list[PreparedDevice] = []
        cdi_devices: list[Device] = []
        for result in ours:
            name = str(result.get("device", ""))
            bus_id = self._bus_ids.get(name)
            if bus_id is None:
                return PrepareResult(
                    error=f"{describe_claim(claim.ref)}: device {name!r} is not one of {self.driver_name}'s"
                )
            cdi_name = f"{claim.ref.uid}-{name}"
            cdi_devices.append(Device(cdi_name, ContainerEdits(env=(f"{STANDIN_ENV}={bus_id}",))))
            devices.append(
                PreparedDevice(
                    request_names=(str(result.get("request", "")).split("/", 1)[0],),
                    pool_name=str(result.get("pool", "")),
                    device_name=name,
                    cdi_device_ids=(f"{_CDI_KIND}={cdi_name}",),
                )
            )
        if cdi_devices:
            write_spec(self.cdi_dir, self._spec_file(claim.ref.uid), Spec(_CDI_KIND, tuple(cdi_devices)))
        return PrepareResult(devices=tuple(devices))

    def prepare_claims(self, claims: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        """One spec file per claim with its GPUs of this driver."""
        return {claim.ref.uid: self._prepare(claim) for claim in claims}

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Remove each claim's spec file (a claim never prepared succeeds)."""
        for ref in claims:
            remove_file(self.cdi_dir / self._spec_file(ref.uid))
        return {ref.uid: "" for ref in claims}

    def handle_error(self, err: BaseException, msg: str) -> None:
        """Kept for the log; a stand-in has nothing to recover."""
        self.errors.append(f"{msg}: {err!r}")


def command(
    *,
    node_name: str,
    kubeconfig: Path,
    registrar_dir: Path,
    plugin_dir: Path,
    cdi_dir: Path,
    gpus: Sequence[str],
    host_root: Path | None = None,
) -> list[str]:
    """The argv that runs it (``gpus``: ``<bus id>[=<numa node>]`` each)."""
    argv = [
        sys.executable, "-m", "harness.standin_gpu_driver",
        "--node-name", node_name,
        "--kubeconfig", str(kubeconfig),
        "--registrar-dir", str(registrar_dir),
        "--plugin-dir", str(plugin_dir),
        "--cdi-dir", str(cdi_dir),
    ]  # fmt: skip
    if host_root is not None:
        argv += ["--host-root", str(host_root)]
    return argv + [f"--gpu={gpu}" for gpu in gpus]


def logged_ready(log: Path) -> bool:
    """Whether its JSON log at ``log`` says it is registered and its slice is stored."""
    if not log.exists():
        return False
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("event") == READY_EVENT:
                return True
    return False


def publish(kube: KubeClient, obj: Mapping[str, Any]) -> None:
    """Create the slice, or replace a stored one of the same name (left by an earlier run)."""
    try:
        kube.create_resource_slice(obj)
    except KubeError as exc:
        if exc.status != 409:
            raise
        name = obj["metadata"]["name"]
        (stored,), _ = kube.list_resource_slices(field_selector=f"metadata.name={name}")
        version = stored["metadata"]["resourceVersion"]
        kube.update_resource_slice({**obj, "metadata": {**obj["metadata"], "resourceVersion": version}})


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT, then delete its slice and stop; exit 0 after a clean stop."""
    from driver.kubelet.server import KubeletPluginServer
    from driver.log import configure_logging

    parser = argparse.ArgumentParser(prog="python -m harness.standin_gpu_driver", description=__doc__)
    parser.add_argument("--driver-name", default=STANDIN_DRIVER)
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--kubeconfig", required=True, help="reads claims, writes its slice")
    parser.add_argument("--registrar-dir", type=Path, required=True)
    parser.add_argument("--plugin-dir", type=Path, required=True)
    parser.add_argument("--cdi-dir", type=Path, required=True)
    parser.add_argument("--host-root", type=Path, default=Path("/"))
    parser.add_argument("--gpu", action="append", default=[], help="<bus id>[=<numa node>], repeated")
    parser.add_argument("--pod-uid", default=os.environ.get("POD_UID"))
    args = parser.parse_args(argv)
    configure_logging("json")
    log = structlog.get_logger("standin").bind(driver=args.driver_name, node=args.node_name)

    gpus = [StandinGpu.parse(text, args.host_root) for text in args.gpu]
    kube = KubeClient(args.kubeconfig)
    plugin = StandinPlugin(args.driver_name, args.cdi_dir, gpus)
    args.cdi_dir.mkdir(parents=True, exist_ok=True)
    args.plugin_dir.mkdir(parents=True, exist_ok=True)
    server = KubeletPluginServer(
        driver_name=args.driver_name,
        node_name=args.node_name,
        registrar_dir=args.registrar_dir,
        plugin_dir=args.plugin_dir,
        plugin=plugin,
        claim_source=kube,
        pod_uid=args.pod_uid,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    server.start()
    name = slice_name(args.node_name, args.driver_name)
    try:
        if not server.wait_registered(60):
            log.error("standin not registered", registrar_dir=str(args.registrar_dir))
            return 1
        publish(kube, resource_slice(args.node_name, gpus, args.driver_name))
        log.info(READY_EVENT, slice=name, gpus=[g.bus_id for g in gpus])
        while not done.wait(3600):
            pass
    finally:
        with contextlib.suppress(KubeError):
            kube.delete_resource_slice(name)
        server.stop()
        log.info("standin stopped", slice=name, errors=plugin.errors)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
