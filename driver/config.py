"""What ``numadra run`` is told: :class:`RunConfig`, made by ``driver.cli.run`` from flags and environment.

Every default comes from :mod:`driver.defaults`, as the flags' do, so the CLI's ``--help`` and a
config built in a test (``RunConfig(node_name=...)``) agree without a test that keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from driver import defaults
from driver.pinning.backend import PinningKind

if TYPE_CHECKING:
    from driver.health.taints import TaintEffect
    from driver.inventory.model import IsolatedCpus
    from driver.log import LogFormat

__all__ = ["HotplugSource", "RunConfig"]

HotplugSource = Literal["udev", "kernel", "off"]

_DEFAULT_PINNING = PinningKind(defaults.PINNING)


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything ``numadra run`` is told by flags and environment (validated by the CLI)."""

    node_name: str
    driver_name: str = defaults.DRIVER_NAME
    host_root: Path = defaults.HOST_ROOT
    kubeconfig: str | None = None  # None: in-cluster service account
    registrar_dir: Path = defaults.REGISTRAR_DIR
    plugin_dir: Path | None = None  # None: default_plugin_dir(driver_name)
    cdi_dir: Path = defaults.CDI_DIR
    pod_uid: str | None = None
    pinning: PinningKind = _DEFAULT_PINNING
    metrics_address: str = defaults.METRICS_ADDRESS  # "": no HTTP endpoint
    log_format: LogFormat = defaults.LOG_FORMAT
    log_level: str = defaults.LOG_LEVEL  # debug | info | warning | error
    reserved_cpus: frozenset[int] = frozenset()
    isolated_cpus: IsolatedCpus = defaults.ISOLATED_CPUS  # see driver.inventory.model.kept_out_cpus
    node_allocatable: bool = defaults.NODE_ALLOCATABLE
    numa_node_list: bool = defaults.NUMA_NODE_LIST  # resource.kubernetes.io/numaNode as the KEP-6072 list
    taint_unhealthy: TaintEffect = defaults.TAINT_UNHEALTHY
    nri_socket: Path = defaults.NRI_SOCKET
    nri_shared_pool: bool = defaults.NRI_SHARED_POOL
    health_interval: float = defaults.HEALTH_INTERVAL
    rescan_interval: float = defaults.RESCAN_INTERVAL  # 0: no periodic rescan
    hotplug: HotplugSource = defaults.HOTPLUG
    hook_path: str = defaults.HOOK_PATH
    claim_status: bool = defaults.CLAIM_STATUS
    claim_read_timeout: float = defaults.CLAIM_READ_TIMEOUT  # one claim GET or LIST, in all
    nvidia_driver_root: str = defaults.NVIDIA_DRIVER_ROOT  # docs/gpu-userspace.md
    device_groups: bool = defaults.DEVICE_GROUPS  # CDI additionalGids for group-only device nodes
    publish_backoff_cap: float = defaults.PUBLISH_BACKOFF_CAP
    #: how long the background start waits for the kubelet's registration; 0: not at all
    registration_wait: float = defaults.REGISTRATION_WAIT

    @property
    def effective_plugin_dir(self) -> Path:
        """``--plugin-dir``, or ``/var/lib/kubelet/plugins/<driver>``."""
        return self.plugin_dir if self.plugin_dir is not None else defaults.PLUGINS_DIR / self.driver_name
