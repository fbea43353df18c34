"""What ``numadra run`` is told: :class:`RunConfig`, whose fields are also the table of its flags.

A field that is set by a flag carries a :class:`Flag` in its metadata (made by :func:`flag`):
the help, the environment variables, and the check that turns the flag's text into the value
when the field's type alone does not say it. Everything else is read from the field itself: the
flag's name (``--<field-name>``), its default (the field's, which comes from
:mod:`driver.defaults`), its choices (the values of the field's ``Literal`` or enum type) and
whether it is a ``--x/--no-x`` switch (``bool``). ``driver.cli.options`` builds the options of
``numadra run`` (and the shared options of the other subcommands) from :func:`dataclasses.fields`
of :class:`RunConfig`, and ``driver.cli.runflags`` reads a config back; a new flag is one field.

The checks (:func:`absolute_path`, :func:`seconds`, ...) take the text and how an error names the
option (``--x (env NUMADRA_X)``) and raise :class:`~driver.errors.ConfigError` naming it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from driver import defaults
from driver.errors import ConfigError
from driver.health.taints import TaintEffect
from driver.inventory.cpulist import parse_cpulist
from driver.inventory.model import DeviceKind, IsolatedCpus
from driver.log import LogFormat
from driver.names import is_dns_subdomain
from driver.observability.address import parse_address
from driver.pinning.aux import AuxCpus
from driver.pinning.backend import PinningKind
from driver.slices.limits import MAX_DRIVER_NAME

__all__ = [
    "FLAG",
    "MAX_READ_TIMEOUT",
    "Flag",
    "HotplugSource",
    "LogLevel",
    "Parse",
    "RunConfig",
    "absolute_path",
    "check_driver_name",
    "check_node_name",
    "default_node_name",
    "device_kinds",
    "directory",
    "flag",
    "seconds",
]

HotplugSource = Literal["udev", "kernel", "off"]
LogLevel = Literal["debug", "info", "warning", "error"]

#: the metadata key of a field's :class:`Flag`
FLAG = "numadra.flag"

#: turns a flag's text into the field's value; ``where`` names the option in the error
Parse = Callable[[str, str], Any]


@dataclass(frozen=True, slots=True)
class Flag:
    """How one :class:`RunConfig` field is set by a flag and the environment (module docstring)."""

    help: str
    #: the environment variables read, first set wins; () -> ``NUMADRA_<FLAG>``
    env: tuple[str, ...] = ()
    #: the check beyond the field's type (None: the type says it all)
    parse: Parse | None = None
    #: other subcommands take this flag too (with the same help)
    shared: bool = False
    metavar: str = ""
    #: argparse hands the other subcommands a ``Path``
    path: bool = False


def flag(
    help: str,
    default: Any = None,
    *,
    required: bool = False,
    env: tuple[str, ...] = (),
    parse: Parse | None = None,
    shared: bool = False,
    metavar: str = "",
    path: bool = False,
) -> Any:
    """A :class:`RunConfig` field set by ``--<field-name>`` (``required``: no default)."""
    metadata = {FLAG: Flag(help, env, parse, shared, metavar, path)}
    if required:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


# -- the checks beyond a field's type ---------------------------------------------------------------


def default_node_name() -> str:
    """``NODE_NAME`` from the environment, else the host name lower-cased (as the kubelet does)."""
    return os.environ.get("NODE_NAME") or socket.gethostname().lower()


def check_node_name(name: str, where: str = "--node-name") -> str:
    """``name`` (or, if empty, :func:`default_node_name`) if the apiserver takes it as a node (and
    pool) name; else ConfigError naming ``where``."""
    name = name or default_node_name()
    if not is_dns_subdomain(name):
        raise ConfigError(f"{where} {name!r} is not a valid node name (DNS subdomain)")
    return name


def check_driver_name(name: str, where: str = "--driver-name") -> str:
    """``name`` if it is a valid DRA driver name; else ConfigError naming ``where``."""
    if not is_dns_subdomain(name, MAX_DRIVER_NAME):
        raise ConfigError(f"{where} {name!r} is not a DNS subdomain of at most {MAX_DRIVER_NAME} characters")
    return name


def _cpus(text: str, where: str) -> frozenset[int]:
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise ConfigError(f"{where} {text!r}: {exc}") from exc


def device_kinds(text: str, where: str) -> frozenset[DeviceKind]:
    """The kinds of ``--devices``: a comma list of gpu, nic, cpu, memory (or ``all``), at least one."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return frozenset(DeviceKind)
    known = {k.value: k for k in DeviceKind}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        choices = ",".join(k.value for k in DeviceKind)
        raise ConfigError(f"{where} must be a comma list of {choices} (or all), got {text!r}")
    return frozenset(known[n] for n in names)


def _address(text: str, where: str) -> str:
    if text:
        parse_address(text)  # ConfigError names the address
    return text


def absolute_path(text: str, where: str) -> str:
    """``text`` if it is an absolute path."""
    if not text.startswith("/"):
        raise ConfigError(f"{where} must be an absolute path, got {text!r}")
    return text


def directory(text: str, where: str) -> Path:
    """``text`` as a Path, if it is a directory here."""
    path = Path(text)
    if not path.is_dir():
        raise ConfigError(f"{where} {path} is not a directory")
    return path


def seconds(*, zero_ok: bool, at_most: float = float("inf"), why: str = "") -> Parse:
    """A check of a number of seconds: finite, > 0 (or >= 0), at most ``at_most`` (``why`` says why)."""

    def parse(text: str, where: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{where} must be a number of seconds, got {text!r}") from None
        if not value >= 0 or value == float("inf") or (value == 0 and not zero_ok):
            raise ConfigError(f"{where} must be {'>= 0' if zero_ok else '> 0'} seconds, got {text!r}")
        if value > at_most:
            raise ConfigError(f"{where} must be at most {at_most:g} seconds ({why}), got {text!r}")
        return value

    return parse


#: two claim reads in a row (a LIST, then GETs for what it lacked) plus a second stay inside the
#: kubelet's 45 s NodePrepareResources timeout
MAX_READ_TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything ``numadra run`` is told by flags and environment (checked by the CLI).

    The fields with a :func:`flag` are the flags of ``numadra run``, in ``--help`` order.
    """

    node_name: str = flag(
        "node and pool name (default: $NODE_NAME, else the host name)",
        required=True,
        env=("NODE_NAME",),
        parse=check_node_name,
        shared=True,
    )
    driver_name: str = flag("DRA driver name", defaults.DRIVER_NAME, parse=check_driver_name, shared=True)
    host_root: Path = flag(
        "where the host's /sys, /proc and /dev are mounted", defaults.HOST_ROOT, parse=directory, shared=True
    )
    #: None: ``default_plugin_dir(driver_name)``
    plugin_dir: Path | None = flag(
        f"the driver's sockets, journal and metadata (default {defaults.PLUGINS_DIR}/<driver>)",
        shared=True,
        path=True,
    )
    cdi_dir: Path = flag(
        "where the driver writes the claims' CDI specs", defaults.CDI_DIR, shared=True, path=True
    )
    #: None: the in-cluster service account
    kubeconfig: str | None = flag(
        "kubeconfig file (default: the in-cluster service account)",
        env=("NUMADRA_KUBECONFIG", "KUBECONFIG"),
        shared=True,
    )
    reserved_cpus: frozenset[int] = flag(
        'CPUs never handed out and kept out of the "cpus" capacity, kernel list format ("0-1,64")',
        frozenset(),
        parse=_cpus,
        shared=True,
        metavar="LIST",
    )
    #: see driver.inventory.model.kept_out_cpus
    isolated_cpus: IsolatedCpus = flag(
        "whether the kernel's isolcpus= CPUs count in the cpus capacity and are handed out",
        defaults.ISOLATED_CPUS,
        shared=True,
    )
    #: the kinds published; discovery still sees every device (docs/deploy.md, beside other drivers)
    devices: frozenset[DeviceKind] = flag(
        "device kinds this driver publishes, a comma list of gpu,nic,cpu,memory (default all): "
        "leave the others to their own drivers",
        frozenset(DeviceKind),
        parse=device_kinds,
        shared=True,
        metavar="KINDS",
    )
    node_allocatable: bool = flag(
        "publish nodeAllocatableResources on cpu devices, and with --aux-cpus on GPUs and NICs "
        "(KEP-5517, alpha)",
        defaults.NODE_ALLOCATABLE,
        shared=True,
    )
    #: KEP-5517 overhead of GPUs and NICs, given out as exclusive CPUs (docs/pinning.md)
    aux_cpus: AuxCpus = flag(
        "exclusive CPUs per allocated GPU / NIC, e.g. gpu=2,nic=1 (only with --node-allocatable: "
        "published as the device's cpu overhead, which the scheduler counts, and pinned on the "
        "device's NUMA node)",
        AuxCpus.parse(defaults.AUX_CPUS),
        parse=AuxCpus.parse,
        shared=True,
        metavar="KIND=N,...",
    )
    #: resource.kubernetes.io/numaNode as the KEP-6072 list
    numa_node_list: bool = flag(
        "publish resource.kubernetes.io/numaNode as the KEP-6072 list: the node, then the "
        "same-socket nodes at the minimum SLIT distance (needs the DRAListTypeAttributes gate)",
        defaults.NUMA_NODE_LIST,
        shared=True,
    )
    #: docs/gpu-userspace.md
    nvidia_driver_root: str = flag(
        "host path of the NVIDIA driver's files, mounted into CUDA containers without the toolkit's CDI spec",
        defaults.NVIDIA_DRIVER_ROOT,
        parse=absolute_path,
        shared=True,
    )
    registrar_dir: Path = flag("kubelet plugin registration directory", defaults.REGISTRAR_DIR)
    pod_uid: str | None = flag("this pod's UID: unique socket names for rolling updates", env=("POD_UID",))
    pinning: PinningKind = flag("CPU/memory pinning backend", PinningKind(defaults.PINNING))
    #: "": no HTTP endpoint
    metrics_address: str = flag(
        "host:port for /metrics, /healthz, /readyz (default: off)", defaults.METRICS_ADDRESS, parse=_address
    )
    log_format: LogFormat = flag("log format", defaults.LOG_FORMAT)
    log_level: LogLevel = flag("log level", defaults.LOG_LEVEL)
    taint_unhealthy: TaintEffect = flag("taint effect for unhealthy devices", defaults.TAINT_UNHEALTHY)
    nri_socket: Path = flag("the runtime's NRI socket (--pinning nri)", defaults.NRI_SOCKET)
    nri_shared_pool: bool = flag(
        "confine containers without a claim to the CPUs no claim holds (--pinning nri)",
        defaults.NRI_SHARED_POOL,
    )
    align_device_pods: bool = flag(
        "run containers of claims without CPUs (extended resources included) on the shared CPUs "
        "and memory of their devices' NUMA nodes (--pinning nri)",
        defaults.ALIGN_DEVICE_PODS,
    )
    health_interval: float = flag(
        "seconds between device health polls", defaults.HEALTH_INTERVAL, parse=seconds(zero_ok=False)
    )
    #: 0: no periodic rescan
    rescan_interval: float = flag(
        "seconds between host rescans (0: only on hot-plug and SIGHUP)",
        defaults.RESCAN_INTERVAL,
        parse=seconds(zero_ok=True),
    )
    hotplug: HotplugSource = flag("hot-plug events to watch", defaults.HOTPLUG)
    hook_path: str = flag(
        "host path of numadra that CDI hooks run (--pinning hook)", defaults.HOOK_PATH, parse=absolute_path
    )
    #: one claim GET or LIST, in all
    claim_read_timeout: float = flag(
        "seconds a claim GET or LIST may take in all, slow answers included (at most 20: a prepare "
        "makes up to two reads in a row within the kubelet's 45 s)",
        defaults.CLAIM_READ_TIMEOUT,
        parse=seconds(
            zero_ok=False,
            at_most=MAX_READ_TIMEOUT,
            why="two reads must fit in the kubelet's 45 s call timeout",
        ),
    )
    claim_status: bool = flag(
        "write status.devices of prepared claims (needs the resourceclaims/status RBAC)",
        defaults.CLAIM_STATUS,
    )
    #: CDI additionalGids for group-only device nodes
    device_groups: bool = flag(
        "give containers the group of a device node only its group may open (CDI additionalGids, "
        "cdiVersion 0.7.0; false for runtimes whose CDI library is older)",
        defaults.DEVICE_GROUPS,
    )
    publish_backoff_cap: float = defaults.PUBLISH_BACKOFF_CAP
    #: how long the background start waits for the kubelet's registration; 0: not at all
    registration_wait: float = defaults.REGISTRATION_WAIT

    @property
    def effective_plugin_dir(self) -> Path:
        """``--plugin-dir``, or ``/var/lib/kubelet/plugins/<driver>``."""
        return self.plugin_dir if self.plugin_dir is not None else defaults.PLUGINS_DIR / self.driver_name
