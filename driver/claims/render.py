"""The per-claim CDI spec: device nodes, environment and the CPU/memory markers of each device.

Deterministic: the same claim view and pinning give byte-identical specs, so a repeated prepare or
a reconcile after a reboot re-creates exactly what the runtime saw before. Device nodes come from
the inventory as host paths, checked at prepare (:class:`~driver.claims.hostedits.DeviceExtras`
``nodes``; a claim built without the host's extras gets none), and are mounted at the same path (no
``hostPath`` unless the check resolved a link, so cdiVersion stays low); major/minor numbers are
left for the runtime to read at injection time, because numbers captured at prepare can be stale
after a reboot.

Environment per device (values cover the device's whole request, so the order in which a runtime
applies several devices of one request does not matter):

* gpu: ``NUMADRA_GPU_INDICES`` (each GPU's vendor-local number, the ``index`` attribute: NVIDIA
  device minor, AMD/Intel render node number; empty for a GPU without one) and
  ``NUMADRA_GPU_PCI_BUS_IDS``, in the same order; when NVIDIA GPUs are among them also
  ``NVIDIA_VISIBLE_DEVICES`` naming those: each GPU's UUID when known (NVML, or the driver's
  information file), else its device minor: the same GPU as the ``/dev/nvidiaN`` node of the
  spec, never a position in numadra's list.
* nic: ``NUMADRA_NIC_INTERFACES``, ``NUMADRA_NIC_PCI_BUS_IDS``, ``NUMADRA_RDMA_DEVICES`` (if any).
* cpu: the pinning markers (driver/pinning/types.py): ``NUMADRA_CPUS`` (when pinned), ``NUMADRA_MEMS``,
  ``NUMADRA_CPU_MODE``, ``NUMADRA_CLAIM_UID``, ``NUMADRA_REQUEST``.
* gpu/nic of a claim without cpu devices: ``NUMADRA_MEMS`` (NUMA nodes of the claim's devices) and
  ``NUMADRA_CLAIM_UID``, so memory can follow the devices; when the request got auxiliary CPUs
  (``--aux-cpus``, :func:`driver.claims.selection.with_aux_cpus`) the pinning markers instead, as
  a cpu device's, and the CDI hook with ``--pinning hook``.
* then the ``env`` of the effective opaque config (user values win).

What the host adds at prepare (:class:`~driver.claims.hostedits.DeviceExtras`, read by
:mod:`driver.claims.hostedits`) goes to the device it belongs to: the driver root's files as
read-only mounts and the supplementary groups that open the device's nodes (``additionalGids``,
cdiVersion 0.7.0, only when a node needs one), and, when the NVIDIA Container Toolkit's spec serves
the GPU, the toolkit's CDI device ID returned *before* numadra's own: the runtime applies the
toolkit's common edits (which set ``NVIDIA_VISIBLE_DEVICES=void``) first, so numadra's environment
wins whatever the order of the claim's devices.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping

from cdi import (
    CheckedHostPath,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    Mount,
    Spec,
    transient_spec_file_name,
    validate_device_name,
    validate_kind,
)
from cdi.reuse import ReusedWhileSame
from driver.claims.hostedits import DeviceExtras
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.model import DeviceKind, Gpu, Nic
from driver.layout import CLAIM_CDI_CLASS
from driver.pinning.planner import device_numa_node
from driver.pinning.types import (
    ENV_CLAIM_UID,
    ENV_CPU_MODE,
    ENV_MEMS,
    ENV_REQUEST,
    ClaimPinning,
    CpuAssignment,
    format_cpulist,
    holds_env_name,
    marker_env,
)
from driver.plugin import PreparedDevice

__all__ = [
    "CLAIM_CDI_CLASS",
    "CpuHook",
    "cdi_device_name",
    "claim_cdi_kind",
    "claim_spec",
    "claim_spec_file_name",
]

#: makes the CDI hook that enforces one request's pinning (``driver.pinning.hook.cdi_hook``)
CpuHook = Callable[[CpuAssignment], Hook]


def claim_cdi_kind(driver_name: str) -> str:
    """The CDI kind of per-claim specs."""
    return f"{driver_name}/{CLAIM_CDI_CLASS}"


def claim_spec_file_name(driver_name: str, claim_uid: str) -> str:
    """``<driver>_claim_<claimUID>.json``: one transient spec per claim."""
    return transient_spec_file_name(claim_cdi_kind(driver_name), claim_uid)


def cdi_device_name(claim_uid: str, dev: AllocatedDevice) -> str:
    """``<claimUID>-<device>[-<shareID>]``: unique per claim and share, never reused."""
    name = f"{claim_uid}-{dev.device_name}"
    return f"{name}-{dev.share_id}" if dev.share_id else name


def _joined(values: Iterable[str]) -> str:
    return ",".join(values)


def _request_env(devs: list[AllocatedDevice]) -> dict[str, str]:
    """Environment shared by all devices of one request and one type."""
    kind = devs[0].kind
    env: dict[str, str] = {}
    if kind is DeviceKind.GPU:
        gpus = [d.device for d in devs if isinstance(d.device, Gpu)]
        env["NUMADRA_GPU_INDICES"] = _joined("" if g.index is None else str(g.index) for g in gpus)
        env["NUMADRA_GPU_PCI_BUS_IDS"] = _joined(g.pci.bus_id for g in gpus)
        nvidia = [g for g in gpus if g.vendor == "nvidia"]
        if nvidia:  # a generic request may mix vendors: the NVIDIA runtime gets exactly its own
            env["NVIDIA_VISIBLE_DEVICES"] = _joined(_nvidia_name(g) for g in nvidia)
    elif kind is DeviceKind.NIC:
        nics = [d.device for d in devs if isinstance(d.device, Nic)]
        env["NUMADRA_NIC_INTERFACES"] = _joined(n.interface_name for n in nics)
        env["NUMADRA_NIC_PCI_BUS_IDS"] = _joined(n.pci.bus_id for n in nics)
        rdma = [r for n in nics for r in n.rdma_devices]
        if rdma:
            env["NUMADRA_RDMA_DEVICES"] = _joined(rdma)
    return env


def _nvidia_name(gpu: Gpu) -> str:
    """How the NVIDIA runtime is told about one GPU: its UUID, else its device minor.

    The runtime reads an index as NVML's, which follows PCI order and may differ from the minor on
    some hosts; a UUID cannot be misread. Discovery publishes an NVIDIA GPU only with a minor.
    """
    if gpu.uuid:
        return gpu.uuid
    return str(gpu.minor if gpu.minor is not None else gpu.index)


def _assignment(pinning: ClaimPinning | None, base: str) -> CpuAssignment | None:
    for assignment in pinning.assignments if pinning is not None else ():
        if assignment.request == base:
            return assignment
    return None


def _cpu_env(
    view: ClaimView, base: str, devs: list[AllocatedDevice], pinning: ClaimPinning | None
) -> dict[str, str]:
    assignment = _assignment(pinning, base)
    if assignment is not None:
        return marker_env(assignment, view.uid)
    nodes = {n for n in (device_numa_node(d.device) for d in devs) if n is not None}
    return {
        ENV_MEMS: format_cpulist(nodes),
        ENV_CPU_MODE: devs[0].config.mode.value,
        ENV_CLAIM_UID: view.uid,
        ENV_REQUEST: base,
    }


def claim_spec(
    view: ClaimView,
    *,
    driver_name: str,
    pinning: ClaimPinning | None,
    cpu_hook: CpuHook | None = None,
    mounts: Mapping[str, Mount] | None = None,
    extras: DeviceExtras | None = None,
) -> tuple[Spec, list[PreparedDevice]]:
    """The claim's CDI spec and the devices to return to the kubelet (same order as the results).

    ``cpu_hook`` (``--pinning hook``) makes the OCI hook that enforces a pinned request; it is added
    to the CDI device of each cpu result that got an assignment. ``mounts`` maps base request
    names to the bind mount of their device metadata file (``driver.claims.metadata``), added to
    the first CDI device of that request: every container given the request gets that device.
    ``extras``: what the host adds per device (see the module docstring).
    """
    kind = claim_cdi_kind(driver_name)
    if view.devices:
        validate_kind(kind)  # once: each device's ID is this kind and its name, checked below
    bases = [dev.base_request for dev in view.devices]
    groups: dict[tuple[str, DeviceKind], list[AllocatedDevice]] = {}
    for base, dev in zip(bases, view.devices, strict=True):
        groups.setdefault((base, dev.kind), []).append(dev)
    has_cpu = any(d.kind is DeviceKind.CPU for d in view.devices)
    pending = dict(mounts) if mounts else None  # popped per request: the first device takes it
    #: what every device of a (request, type) group shares, worked out once per group
    shared: dict[tuple[str, DeviceKind], _Shared] = {}

    cdi_devices: list[Device] = []
    prepared: list[PreparedDevice] = []
    for base, dev in zip(bases, view.devices, strict=True):
        key = (base, dev.kind)
        group = shared.get(key)
        if group is None:
            group = shared[key] = _shared(view, base, groups[key], pinning, cpu_hook, has_cpu=has_cpu)
        shared_env, env, hooks, host_hooks = group
        if dev.config.env:
            env = _env_entries({**shared_env, **dev.config.env})
        nodes: tuple[DeviceNode, ...] = ()
        files: tuple[Mount, ...] = ()
        gids: tuple[int, ...] = ()
        foreign: tuple[str, ...] = ()
        host_edited = isinstance(dev.device, (Gpu, Nic))
        if extras is not None and host_edited:
            nodes = _device_nodes(extras.nodes.get(dev.device_name, ()))
            files = extras.mounts.get(dev.device_name, ())
            gids = extras.gids.get(dev.device_name, ())
            foreign = extras.cdi_ids.get(dev.device_name, ())
        name = cdi_device_name(view.uid, dev)
        validate_device_name(name)
        mount = pending.pop(base, None) if pending else None
        cdi_devices.append(
            Device(
                name,
                ContainerEdits(
                    env=env,
                    device_nodes=nodes,
                    mounts=(mount, *files) if mount is not None else files,
                    hooks=host_hooks if host_edited else hooks,
                    additional_gids=gids,
                ),
            )
        )
        prepared.append(
            PreparedDevice(
                request_names=(base,),
                pool_name=dev.pool,
                device_name=dev.device_name,
                cdi_device_ids=(*foreign, f"{kind}={name}"),
                share_id=dev.share_id,
            )
        )
    return Spec(kind=kind, devices=tuple(cdi_devices)), prepared


#: what every device of one (request, type) group of a claim gets: the environment, as a dict and
#: as sorted ``NAME=value`` entries, the hooks of a device other than a GPU or NIC (the request's
#: pinning hook) and those of a GPU or NIC (its auxiliary CPUs' hook, in a claim without cpu
#: devices); a plain tuple, made once per group
_Shared = tuple[dict[str, str], tuple[str, ...], tuple[Hook, ...], tuple[Hook, ...]]


def _env_entries(env: Mapping[str, str]) -> tuple[str, ...]:
    return tuple([f"{k}={v}" for k, v in sorted(env.items())])


def _shared(
    view: ClaimView,
    base: str,
    group: list[AllocatedDevice],
    pinning: ClaimPinning | None,
    cpu_hook: CpuHook | None,
    *,
    has_cpu: bool,
) -> _Shared:
    """The environment and hooks of one group (see the module docstring)."""
    assignment = _assignment(pinning, base) if cpu_hook is not None else None
    hooks = (cpu_hook(assignment),) if assignment is not None and cpu_hook is not None else ()
    host_hooks = () if has_cpu else hooks
    if group[0].kind is DeviceKind.CPU:
        env = _cpu_env(view, base, group, pinning)
        return env, _env_entries(env), hooks, host_hooks
    if len(group) == 1:
        device_env, entries = _device_env(group[0])
        if has_cpu:  # nothing of the claim's own: the device's environment as it is
            return device_env, entries, hooks, host_hooks
        env = dict(device_env)
    else:
        env = _request_env(group)
    aux = None if has_cpu else _assignment(pinning, base)
    if aux is not None:  # auxiliary CPUs: pinned as a cpu request is
        env.update(marker_env(aux, view.uid))
    elif not has_cpu:
        nodes = {n for n in (device_numa_node(d.device) for d in view.devices) if n is not None}
        if nodes:
            env[ENV_MEMS] = format_cpulist(nodes)
            env[ENV_CLAIM_UID] = view.uid
            env[holds_env_name(base)] = "1"  # which devices: see pinning/align.py
    return env, _env_entries(env), hooks, host_hooks


#: the environment of a request of one device alone (:func:`_request_env`), as a dict and as its
#: sorted entries, by device name: it depends on the device object and its type only, so it is
#: reused while the inventory hands out that very object
_DEVICE_ENVS: ReusedWhileSame[tuple[dict[str, str], tuple[str, ...]]] = ReusedWhileSame(4096)


def _device_env(dev: AllocatedDevice) -> tuple[dict[str, str], tuple[str, ...]]:
    def make() -> tuple[dict[str, str], tuple[str, ...]]:
        env = _request_env([dev])
        return env, _env_entries(env)

    return _DEVICE_ENVS.get(dev.device_name, (dev.device, dev.kind), make)


@functools.lru_cache(maxsize=1024)
def _device_nodes(nodes: tuple[tuple[str, CheckedHostPath], ...]) -> tuple[DeviceNode, ...]:
    """The CDI device nodes of a device: (path in the container, checked host path), made once."""
    return tuple(DeviceNode(path=path, host_path=host_path) for path, host_path in nodes)
