"""``numadra run``: the DaemonSet entrypoint (its contract: docs/design.md, "Command line").

Every flag has an environment variable, so a DaemonSet can set values through ``env`` as well
as ``args``; a flag on the command line wins. The documented ones keep their names (``NODE_NAME``,
``POD_UID``, from the downward API); the others are ``NUMADRA_<FLAG>``. ``--kubeconfig`` also
reads ``KUBECONFIG``; without either the in-cluster service account is used.

Values from the environment get the same checks as flags: a bad one exits 2 with one line that
names both the flag and the variable.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from driver import DEFAULT_DRIVER_NAME
from driver.errors import ConfigError, DriverError
from driver.kubelet.paths import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRAR_DIR

if TYPE_CHECKING:
    from driver.app import HotplugSource, RunConfig
    from driver.health.taints import TaintEffect
    from driver.inventory.model import IsolatedCpus
    from driver.log import LogFormat

__all__ = ["FLAGS", "MIN_OPEN_FILES", "Flag", "check_open_files", "config_from_args", "register"]

#: the service account credential the in-cluster config reads
_IN_POD_CREDENTIAL = "/var/run/secrets/kubernetes.io/serviceaccount/token"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


@dataclass(frozen=True, slots=True)
class Flag:
    """One ``run`` option: its flag, environment variable, default and help."""

    flag: str
    env: str
    default: str
    help: str
    choices: tuple[str, ...] = ()
    boolean: bool = False

    @property
    def dest(self) -> str:
        """The argparse attribute name."""
        return self.flag.removeprefix("--").replace("-", "_")


def _env(flag: str) -> str:
    return "NUMADRA_" + flag.removeprefix("--").replace("-", "_").upper()


def _flag(flag: str, default: str, help: str, *, env: str = "", choices: tuple[str, ...] = ()) -> Flag:
    return Flag(flag, env or _env(flag), default, help, choices)


#: every option of ``numadra run``, in ``--help`` order
FLAGS: tuple[Flag, ...] = (
    _flag("--node-name", "", "node and pool name (default: the host name)", env="NODE_NAME"),
    _flag("--driver-name", DEFAULT_DRIVER_NAME, "DRA driver name"),
    _flag("--host-root", "/", "where the host's /sys, /proc and /dev are mounted"),
    _flag("--kubeconfig", "", "kubeconfig file (also $KUBECONFIG); default: in-cluster service account"),
    _flag("--registrar-dir", str(DEFAULT_REGISTRAR_DIR), "kubelet plugin registration directory"),
    _flag("--plugin-dir", "", f"sockets, journal and metadata (default {DEFAULT_PLUGINS_DIR}/<driver>)"),
    _flag("--cdi-dir", "/var/run/cdi", "where the per-claim CDI specs are written"),
    _flag("--pod-uid", "", "this pod's UID: unique socket names for rolling updates", env="POD_UID"),
    _flag("--pinning", "off", "CPU/memory pinning backend", choices=("nri", "hook", "cgroupfs", "off")),
    _flag("--metrics-address", "", "host:port for /metrics, /healthz, /readyz (default: off)"),
    _flag("--log-format", "console", "log format", choices=("json", "console")),
    _flag("--log-level", "info", "log level", choices=("debug", "info", "warning", "error")),
    _flag("--reserved-cpus", "", 'CPUs never handed out, kernel list format ("0-1,64")'),
    _flag(
        "--isolated-cpus",
        "include",
        "whether the kernel's isolcpus= CPUs count in the cpus capacity and are handed out",
        choices=("include", "exclude"),
    ),
    Flag(
        "--node-allocatable",
        _env("--node-allocatable"),
        "false",
        "publish nodeAllocatableResources on cpu devices (KEP-5517, alpha)",
        boolean=True,
    ),
    Flag(
        "--numa-node-list",
        _env("--numa-node-list"),
        "false",
        "publish resource.kubernetes.io/numaNode as the KEP-6072 list (needs DRAListTypeAttributes)",
        boolean=True,
    ),
    _flag(
        "--taint-unhealthy",
        "NoSchedule",
        "taint effect for unhealthy devices",
        choices=("NoSchedule", "NoExecute", "none"),
    ),
    _flag("--nri-socket", "/var/run/nri/nri.sock", "the runtime's NRI socket (--pinning nri)"),
    Flag(
        "--nri-shared-pool",
        _env("--nri-shared-pool"),
        "false",
        "confine containers without a claim to the CPUs no claim holds (--pinning nri)",
        boolean=True,
    ),
    _flag("--health-interval", "2", "seconds between device health polls"),
    _flag("--rescan-interval", "300", "seconds between host rescans (0: only on hot-plug and SIGHUP)"),
    _flag("--hotplug", "udev", "hot-plug events to watch", choices=("udev", "kernel", "off")),
    _flag(
        "--hook-path", "/opt/numadra/bin/numadra", "host path of numadra that CDI hooks run (--pinning hook)"
    ),
    _flag(
        "--claim-read-timeout",
        "10",
        "seconds a claim GET or LIST may take in all, slow answers included (at most 20: a prepare "
        "makes up to two reads in a row within the kubelet's 45 s)",
    ),
    Flag(
        "--claim-status",
        _env("--claim-status"),
        "true",
        "write status.devices of prepared claims (needs the resourceclaims/status RBAC)",
        boolean=True,
    ),
    _flag(
        "--nvidia-driver-root",
        "/",
        "host path of the NVIDIA driver's files, mounted into CUDA containers without the toolkit's spec",
    ),
    Flag(
        "--device-groups",
        _env("--device-groups"),
        "true",
        "give containers the group of a device node only its group may open (CDI additionalGids, "
        "cdiVersion 0.7.0; false for runtimes whose CDI library is older)",
        boolean=True,
    ),
)


def register(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run the kubelet plugin (the DaemonSet entrypoint)",
        description="Serve the kubelet (registration, DRA, health), publish ResourceSlices, pin CPUs.",
        epilog="Every flag can also be set by the environment variable shown with it; the flag wins.",
    )
    for f in FLAGS:
        shown = f"{f.help} [env {f.env}]"
        if f.boolean:
            p.add_argument(
                f.flag, dest=f.dest, action=argparse.BooleanOptionalAction, default=None, help=shown
            )
        else:
            p.add_argument(
                f.flag,
                dest=f.dest,
                default=None,
                metavar=f"{{{','.join(f.choices)}}}" if f.choices else f.dest.upper(),
                help=f"{shown} (default {f.default})" if f.default else shown,
            )
    p.set_defaults(handler=_run)


def _raw(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, str]:
    """Each option as text: the flag if given, else its environment variable, else the default."""
    out: dict[str, str] = {}
    for f in FLAGS:
        given = getattr(args, f.dest, None)
        if given is not None:
            out[f.dest] = ("true" if given else "false") if f.boolean else str(given)
            continue
        value = env.get(f.env)
        if value is None and f.flag == "--kubeconfig":
            value = env.get("KUBECONFIG")
        out[f.dest] = value if value is not None else f.default
    return out


_BY_DEST: dict[str, Flag] = {f.dest: f for f in FLAGS}


def _where(dest: str) -> str:
    """How an error names an option: its flag and its environment variable."""
    f = _BY_DEST[dest]
    return f"{f.flag} (env {f.env})"


def _check(raw: Mapping[str, str]) -> None:
    for f in FLAGS:
        value = raw[f.dest]
        if f.choices and value not in f.choices:
            raise ConfigError(f"{_where(f.dest)} must be one of {'|'.join(f.choices)}, got {value!r}")
        if f.boolean and value.lower() not in _TRUE | _FALSE:
            raise ConfigError(f"{_where(f.dest)} must be true or false, got {value!r}")


def _seconds(raw: Mapping[str, str], dest: str, *, zero_ok: bool) -> float:
    try:
        value = float(raw[dest])
    except ValueError:
        raise ConfigError(f"{_where(dest)} must be a number of seconds, got {raw[dest]!r}") from None
    if not value >= 0 or value == float("inf") or (value == 0 and not zero_ok):
        raise ConfigError(f"{_where(dest)} must be {'>= 0' if zero_ok else '> 0'} seconds, got {raw[dest]!r}")
    return value


#: two claim reads in a row (a LIST, then GETs for what it lacked) plus a second stay inside the
#: kubelet's 45 s NodePrepareResources timeout
_MAX_READ_TIMEOUT = 20.0


def _read_timeout(raw: Mapping[str, str]) -> float:
    value = _seconds(raw, "claim_read_timeout", zero_ok=False)
    if value > _MAX_READ_TIMEOUT:
        raise ConfigError(
            f"{_where('claim_read_timeout')} must be at most {_MAX_READ_TIMEOUT:g} seconds (two reads "
            f"must fit in the kubelet's 45 s call timeout), got {raw['claim_read_timeout']!r}"
        )
    return value


def _check_cluster_access(kubeconfig: str | None, env: Mapping[str, str]) -> None:
    """Fail at start, not in a background thread: the kubeconfig exists, or we run in a pod."""
    if kubeconfig is not None:
        if not Path(kubeconfig).is_file():
            raise ConfigError(f"--kubeconfig (env NUMADRA_KUBECONFIG, KUBECONFIG) {kubeconfig} is not a file")
        return
    if not env.get("KUBERNETES_SERVICE_HOST") or not Path(_IN_POD_CREDENTIAL).is_file():
        raise ConfigError(
            "no --kubeconfig and not in a pod (no KUBERNETES_SERVICE_HOST or service account token "
            f"{_IN_POD_CREDENTIAL}); pass --kubeconfig outside a cluster"
        )


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> RunConfig:
    """Flags + environment -> a checked :class:`~driver.app.RunConfig`; ConfigError names the bad one."""
    from driver.app import RunConfig
    from driver.cli.discover import check_driver_name, check_node_name, default_node_name
    from driver.observability.address import parse_address
    from driver.pinning.backend import PinningKind
    from driver.pinning.types import parse_cpulist

    env = os.environ if env is None else env
    raw = _raw(args, env)
    _check(raw)
    node = check_node_name(raw["node_name"] or default_node_name(), _where("node_name"))
    driver = check_driver_name(raw["driver_name"], _where("driver_name"))
    try:
        reserved = parse_cpulist(raw["reserved_cpus"])
    except ValueError as exc:
        raise ConfigError(f"{_where('reserved_cpus')} {raw['reserved_cpus']!r}: {exc}") from exc
    if raw["metrics_address"]:
        parse_address(raw["metrics_address"])  # ConfigError names the address
    for dest in ("hook_path", "nvidia_driver_root"):
        if not raw[dest].startswith("/"):
            raise ConfigError(f"{_where(dest)} must be an absolute path, got {raw[dest]!r}")
    kubeconfig = raw["kubeconfig"] or None
    _check_cluster_access(kubeconfig, env)
    host_root = Path(raw["host_root"])
    if not host_root.is_dir():
        raise ConfigError(f"{_where('host_root')} {host_root} is not a directory")
    return RunConfig(
        node_name=node,
        driver_name=driver,
        host_root=host_root,
        kubeconfig=kubeconfig,
        registrar_dir=Path(raw["registrar_dir"]),
        plugin_dir=Path(raw["plugin_dir"]) if raw["plugin_dir"] else None,
        cdi_dir=Path(raw["cdi_dir"]),
        pod_uid=raw["pod_uid"] or None,
        pinning=PinningKind(raw["pinning"]),
        metrics_address=raw["metrics_address"],
        log_format=cast("LogFormat", raw["log_format"]),
        log_level=raw["log_level"],
        reserved_cpus=reserved,
        isolated_cpus=cast("IsolatedCpus", raw["isolated_cpus"]),
        node_allocatable=raw["node_allocatable"].lower() in _TRUE,
        numa_node_list=raw["numa_node_list"].lower() in _TRUE,
        taint_unhealthy=cast("TaintEffect", raw["taint_unhealthy"]),
        nri_socket=Path(raw["nri_socket"]),
        nri_shared_pool=raw["nri_shared_pool"].lower() in _TRUE,
        health_interval=_seconds(raw, "health_interval", zero_ok=False),
        rescan_interval=_seconds(raw, "rescan_interval", zero_ok=True),
        hotplug=cast("HotplugSource", raw["hotplug"]),
        hook_path=raw["hook_path"],
        claim_status=raw["claim_status"].lower() in _TRUE,
        claim_read_timeout=_read_timeout(raw),
        nvidia_driver_root=raw["nvidia_driver_root"],
        device_groups=raw["device_groups"].lower() in _TRUE,
    )


#: descriptors ``numadra run`` needs at the least: gRPC (epoll, wakeups, two listening sockets and
#: one per kubelet connection), the journal (two), the lock, the apiserver connections, the NRI
#: socket, metrics connections and udev; an idle driver holds about 40, and bursts of claim reads
#: add one per connection
MIN_OPEN_FILES = 256


def check_open_files(minimum: int = MIN_OPEN_FILES) -> None:
    """Raise the soft ``RLIMIT_NOFILE`` to ``minimum`` if the hard limit allows; else ConfigError.

    A limit too low to run failed deep inside gRPC with a traceback; this is one line instead.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= minimum:
        return
    if hard == resource.RLIM_INFINITY or hard >= minimum:
        resource.setrlimit(resource.RLIMIT_NOFILE, (minimum, hard))
        return
    raise ConfigError(
        f"open file limit (RLIMIT_NOFILE) is {soft} (hard {hard}); numadra run needs at least "
        f"{minimum}: raise it (ulimit -n, or the container runtime's LimitNOFILE)"
    )


def _run(args: argparse.Namespace) -> int:
    from driver.app import App
    from driver.log import configure_logging

    config = config_from_args(args)
    check_open_files()
    configure_logging(config.log_format, getattr(logging, config.log_level.upper()))
    try:
        return App(config).run()
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):  # the limit reached later, under load
            raise DriverError(f"out of file descriptors: {exc}; raise the open file limit") from exc
        raise
