"""The default of every ``numadra`` option, in one place.

The CLI's flags, their ``--help`` and :class:`driver.config.RunConfig` all take their defaults from
here, and so do the components that have a default of their own (the kubelet's directories, the
NRI socket, the hook path), so that a default changed here is changed everywhere. This module
sits in the lowest layer and imports nothing of the driver: any module may read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = [
    "ALIGN_DEVICE_PODS",
    "AUX_CPUS",
    "CDI_DIR",
    "CLAIM_READ_TIMEOUT",
    "CLAIM_STATUS",
    "DEVICE_GROUPS",
    "DRIVER_NAME",
    "HEALTH_INTERVAL",
    "HOOK_PATH",
    "HOST_ROOT",
    "HOTPLUG",
    "ISOLATED_CPUS",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "METRICS_ADDRESS",
    "NODE_ALLOCATABLE",
    "NRI_SHARED_POOL",
    "NRI_SOCKET",
    "NUMA_NODE_LIST",
    "NVIDIA_DRIVER_ROOT",
    "PINNING",
    "PLUGINS_DIR",
    "PUBLISH_BACKOFF_CAP",
    "REGISTRAR_DIR",
    "REGISTRATION_WAIT",
    "RESCAN_INTERVAL",
    "TAINT_UNHEALTHY",
]

#: the DRA driver name; the DeviceClasses in deploy/ select on it
DRIVER_NAME: Final = "numadra.dev"
#: where the host's /sys, /proc and /dev are (a container mounts them elsewhere)
HOST_ROOT: Final = Path("/")
#: the kubelet's plugin registration directory (its plugin watcher looks here)
REGISTRAR_DIR: Final = Path("/var/lib/kubelet/plugins_registry")
#: the kubelet's plugins directory; a driver's plugin dir is ``PLUGINS_DIR/<driver name>``
PLUGINS_DIR: Final = Path("/var/lib/kubelet/plugins")
#: where container runtimes read CDI specs from
CDI_DIR: Final = Path("/var/run/cdi")
#: the container runtime's NRI socket
NRI_SOCKET: Final = Path("/var/run/nri/nri.sock")
#: the host path of numadra that CDI createRuntime hooks run (where the DaemonSet installs it)
HOOK_PATH: Final = "/opt/numadra/bin/numadra"
#: CPU/memory pinning backend (``driver.pinning.backend.PinningKind``)
PINNING: Final = "off"
#: "" keeps the /metrics, /healthz and /readyz endpoint off
METRICS_ADDRESS: Final = ""
LOG_FORMAT: Final = "console"
LOG_LEVEL: Final = "info"
#: whether the kernel's isolcpus= CPUs count in the cpus capacity (``driver.inventory.model``)
ISOLATED_CPUS: Final = "include"
#: publish nodeAllocatableResources on cpu devices (an alpha API field)
NODE_ALLOCATABLE: Final = False
#: exclusive CPUs per allocated GPU / NIC (``gpu=N,nic=M``), with --node-allocatable; "": none
AUX_CPUS: Final = ""
#: publish resource.kubernetes.io/numaNode as the KEP-6072 list (needs the DRAListTypeAttributes gate)
NUMA_NODE_LIST: Final = False
#: the host path of the NVIDIA driver's files that CUDA containers get without the toolkit's spec
NVIDIA_DRIVER_ROOT: Final = "/"
#: give containers the host group of a device node only that group may open (CDI additionalGids)
DEVICE_GROUPS: Final = True
#: taint effect for unhealthy devices ("none": no taints)
TAINT_UNHEALTHY: Final = "NoSchedule"
#: confine containers without a claim to the CPUs no claim holds (``--pinning nri`` only)
NRI_SHARED_POOL: Final = False
#: run containers of claims without CPUs on their devices' NUMA nodes (``--pinning nri`` only)
ALIGN_DEVICE_PODS: Final = True
#: seconds between device health polls
HEALTH_INTERVAL: Final = 2.0
#: seconds between host rescans; 0: only on hot-plug events and SIGHUP
RESCAN_INTERVAL: Final = 300.0
#: the netlink source of hot-plug events: "udev", "kernel" or "off"
HOTPLUG: Final = "udev"
#: write status.devices of prepared claims
CLAIM_STATUS: Final = True
#: seconds one claim GET or LIST may take in all
CLAIM_READ_TIMEOUT: Final = 10.0
#: the longest wait between two attempts to publish the slices (seconds)
PUBLISH_BACKOFF_CAP: Final = 30.0
#: the longest wait for the kubelet's registration before the background start (seconds; the
#: period of the kubelet's plugin watcher)
REGISTRATION_WAIT: Final = 1.0
