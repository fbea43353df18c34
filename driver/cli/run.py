"""``numadra run``: the DaemonSet entrypoint. Flags, signals, the main loop and the exit code.

What it does, top down (:func:`serve`): :func:`driver.app.build_front` builds the kubelet plugin
server and :class:`~driver.lifecycle.Lifecycle` starts it (the registration socket appears, the
DRA socket's calls wait); :func:`driver.app.build` builds the parts that serve the kubelet's calls
and starts them, the last step letting the calls through; then it waits for the kubelet's
registration, at most ``registration_wait``, builds the background
parts (:func:`driver.app.build_background`: slices, health thread, metrics, pinning) and starts
them; then it serves until SIGTERM or SIGINT (exit 0) or a fatal background error (exit 1), and
stops every started part in reverse. SIGHUP rediscovers the host. :mod:`driver.app` says why the
start is split at the registration; the cyclic garbage collector stays off until the start is
over, and the start-up heap is frozen then (:mod:`driver.heap`).

Every flag has an environment variable, so a DaemonSet can set values through ``env`` as well
as ``args``; a flag on the command line wins. The documented ones keep their names (``NODE_NAME``,
``POD_UID``, from the downward API); the others are ``NUMADRA_<FLAG>``. ``--kubeconfig`` also
reads ``KUBECONFIG``; without either the in-cluster service account is used. Values from the
environment get the same checks as flags: a bad one exits 2 with one line that names both the
flag and the variable.
"""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import os
import resource
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from driver import defaults
from driver.cli.options import SHARED, Option, parent
from driver.errors import ConfigError, DriverError
from driver.lifecycle import Lifecycle
from driver.log import get_logger

if TYPE_CHECKING:
    from driver.config import HotplugSource, RunConfig
    from driver.health.taints import TaintEffect
    from driver.inventory.model import IsolatedCpus
    from driver.log import LogFormat

__all__ = [
    "MIN_OPEN_FILES",
    "OPTIONS",
    "Shutdown",
    "Signals",
    "check_open_files",
    "config_from_args",
    "register",
    "serve",
]

#: the service account credential the in-cluster config reads
_IN_POD_CREDENTIAL = "/var/run/secrets/kubernetes.io/serviceaccount/token"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

_log = get_logger("run")


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


#: the options of ``numadra run`` besides the shared ones, in ``--help`` order
_OWN: tuple[Option, ...] = (
    Option("--registrar-dir", "kubelet plugin registration directory", str(defaults.REGISTRAR_DIR)),
    Option("--pod-uid", "this pod's UID: unique socket names for rolling updates", env=("POD_UID",)),
    Option(
        "--pinning",
        "CPU/memory pinning backend",
        defaults.PINNING,
        choices=("nri", "hook", "cgroupfs", "off"),
    ),
    Option("--metrics-address", "host:port for /metrics, /healthz, /readyz (default: off)"),
    Option("--log-format", "log format", defaults.LOG_FORMAT, choices=("json", "console")),
    Option("--log-level", "log level", defaults.LOG_LEVEL, choices=("debug", "info", "warning", "error")),
    Option(
        "--taint-unhealthy",
        "taint effect for unhealthy devices",
        defaults.TAINT_UNHEALTHY,
        choices=("NoSchedule", "NoExecute", "none"),
    ),
    Option("--nri-socket", "the runtime's NRI socket (--pinning nri)", str(defaults.NRI_SOCKET)),
    Option(
        "--nri-shared-pool",
        "confine containers without a claim to the CPUs no claim holds (--pinning nri)",
        _text(defaults.NRI_SHARED_POOL),
        boolean=True,
    ),
    Option("--health-interval", "seconds between device health polls", f"{defaults.HEALTH_INTERVAL:g}"),
    Option(
        "--rescan-interval",
        "seconds between host rescans (0: only on hot-plug and SIGHUP)",
        f"{defaults.RESCAN_INTERVAL:g}",
    ),
    Option("--hotplug", "hot-plug events to watch", defaults.HOTPLUG, choices=("udev", "kernel", "off")),
    Option("--hook-path", "host path of numadra that CDI hooks run (--pinning hook)", defaults.HOOK_PATH),
    Option(
        "--claim-read-timeout",
        "seconds a claim GET or LIST may take in all, slow answers included (at most 20: a prepare "
        "makes up to two reads in a row within the kubelet's 45 s)",
        f"{defaults.CLAIM_READ_TIMEOUT:g}",
    ),
    Option(
        "--claim-status",
        "write status.devices of prepared claims (needs the resourceclaims/status RBAC)",
        _text(defaults.CLAIM_STATUS),
        boolean=True,
    ),
    Option(
        "--device-groups",
        "give containers the group of a device node only its group may open (CDI additionalGids, "
        "cdiVersion 0.7.0; false for runtimes whose CDI library is older)",
        _text(defaults.DEVICE_GROUPS),
        boolean=True,
    ),
)

#: every option of ``numadra run``: the shared ones, then its own
OPTIONS: tuple[Option, ...] = (*SHARED.values(), *_OWN)
_BY_DEST: dict[str, Option] = {o.dest: o for o in OPTIONS}


def register(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "run",
        parents=[parent(*SHARED, with_env=True)],
        help="run the kubelet plugin (the DaemonSet entrypoint)",
        description="Serve the kubelet (registration, DRA, health), publish ResourceSlices, pin CPUs.",
        epilog="Every flag can also be set by the environment variable shown with it; the flag wins.",
    )
    for option in _OWN:
        option.add_to(p, with_env=True)
    p.set_defaults(handler=_run)


# -- flags and environment -> RunConfig ----------------------------------------------------------


def _raw(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, str]:
    """Each option as text: the flag if given, else its first environment variable set, else the default."""
    out: dict[str, str] = {}
    for option in OPTIONS:
        given = getattr(args, option.dest, None)
        if given is not None:
            out[option.dest] = _text(given)
            continue
        value = next((env[v] for v in option.variables if v in env), None)
        out[option.dest] = value if value is not None else option.default
    return out


def _where(dest: str) -> str:
    return _BY_DEST[dest].where


def _check(raw: Mapping[str, str]) -> None:
    for option in OPTIONS:
        value = raw[option.dest]
        if option.choices and value not in option.choices:
            raise ConfigError(f"{option.where} must be one of {'|'.join(option.choices)}, got {value!r}")
        if option.boolean and value.lower() not in _TRUE | _FALSE:
            raise ConfigError(f"{option.where} must be true or false, got {value!r}")


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
            raise ConfigError(f"{_where('kubeconfig')} {kubeconfig} is not a file")
        return
    if not env.get("KUBERNETES_SERVICE_HOST") or not Path(_IN_POD_CREDENTIAL).is_file():
        raise ConfigError(
            "no --kubeconfig and not in a pod (no KUBERNETES_SERVICE_HOST or service account token "
            f"{_IN_POD_CREDENTIAL}); pass --kubeconfig outside a cluster"
        )


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> RunConfig:
    """Flags + environment -> a checked :class:`~driver.config.RunConfig`; ConfigError names the bad one."""
    from driver.cli.discover import check_driver_name, check_node_name, default_node_name
    from driver.config import RunConfig
    from driver.inventory.cpulist import parse_cpulist
    from driver.observability.address import parse_address
    from driver.pinning.backend import PinningKind

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
#: socket, metrics connections and udev, with room for bursts of claim reads (one per connection)
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


# -- signals and the main loop --------------------------------------------------------------------


class Signals:
    """SIGTERM, SIGINT and SIGHUP, noted by the handler and acted on by the main loop.

    The handler runs in the main thread between any two bytecodes, maybe while that thread holds
    the log's lock or an Event's. A log line or ``Event.set()`` in the handler would take that
    lock again and wait for it forever (a SIGTERM that landed while the main thread logged hung
    the process so). So :meth:`note`, the handler, only appends to a list and calls the wake
    :func:`serve` hands in (:meth:`Shutdown.wake`: one byte into a pipe), neither of which takes
    a lock; the main loop, woken, acts on what :meth:`take` returns.
    """

    HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self._noted: list[int] = []
        self._wake: Callable[[], None] = _no_wake

    def wake_with(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` after noting each signal; it runs in the handler, so it takes no lock."""
        self._wake = wake

    def note(self, signum: int, _frame: FrameType | None = None) -> None:
        """The signal handler: remember ``signum`` and wake the main loop, nothing else."""
        self._noted.append(signum)
        self._wake()

    def take(self) -> list[int]:
        """The signals noted since the last call, oldest first."""
        taken: list[int] = []
        while self._noted:
            taken.append(self._noted.pop(0))
        return taken

    @contextmanager
    def installed(self) -> Iterator[Signals]:
        """Handle :attr:`HANDLED` with :meth:`note` inside the block (the main thread only)."""
        previous = {sig: signal.signal(sig, self.note) for sig in self.HANDLED}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _no_wake() -> None:
    """The wake of :class:`Signals` before :func:`serve` hands in its own."""


class Shutdown:
    """Whether ``numadra run`` is to stop, and why: a signal (exit 0) or a fatal error (exit 1).

    The main thread sleeps in :meth:`wait` until something asks it to look: a stop request (any
    thread) or a noted signal (the handler calls :meth:`wake`). A wake is one byte into a
    non-blocking pipe, which takes no lock; one that lands between the main loop's check and its
    wait stays in the pipe, so that wait returns at once. The main thread does not wake on a
    timer: it sleeps until there is something to act on, and acts on a signal at once.
    """

    def __init__(self) -> None:
        self._requested = threading.Event()
        self._fatal = ""
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        weakref.finalize(self, _close_all, self._wake_read, self._wake_write)

    @property
    def requested(self) -> bool:
        """True once a stop was asked for."""
        return self._requested.is_set()

    @property
    def fatal(self) -> str:
        """The first fatal error that asked for the stop ("" for a signal)."""
        return self._fatal

    def request(self, fatal: str = "") -> None:
        """Stop; ``fatal`` says which background error made the driver unable to go on."""
        if fatal and not self._fatal:
            self._fatal = fatal
        self._requested.set()
        self.wake()

    def wake(self) -> None:
        """End the current (or the next) :meth:`wait`; takes no lock, so a signal handler may call it."""
        with suppress(BlockingIOError):  # the pipe is full: a wake is pending anyway
            os.write(self._wake_write, b"\0")

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until a wake, a stop or ``timeout`` seconds; True once a stop was asked for."""
        if not self._requested.is_set():
            waiting = select.poll()  # not select(): no limit on the descriptor's number
            waiting.register(self._wake_read, select.POLLIN)
            waiting.poll(None if timeout is None else timeout * 1000)
            with suppress(BlockingIOError):  # nothing came: the timeout ended the wait
                while os.read(self._wake_read, 512):
                    pass
        return self._requested.is_set()


def _close_all(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


def _acted_on(signals: Signals, shutdown: Shutdown, rescan: Callable[[], None]) -> bool:
    """Act on the noted signals (SIGHUP: rescan; the others: stop); True once a stop is asked for."""
    for signum in signals.take():
        if signum == signal.SIGHUP:
            rescan()
            continue
        _log.info("signal received", signal=signal.Signals(signum).name)
        shutdown.request()
    return shutdown.requested


def serve(config: RunConfig, signals: Signals, shutdown: Shutdown | None = None) -> int:
    """Build, start, serve until SIGTERM/SIGINT, stop: 0; a fatal background error: DriverError.

    Whatever started is stopped on the way out, also after a failed start (the exception goes on).
    """
    from driver.app import build, build_background, build_front
    from driver.heap import freeze_startup_heap

    shutdown = shutdown if shutdown is not None else Shutdown()
    signals.wake_with(shutdown.wake)
    lifecycle = Lifecycle()
    t0 = time.monotonic()
    gc.disable()  # until the start is over (driver.cli says why)
    try:
        front = build_front(config)
        lifecycle.start(front.steps)
        _log.info("registration socket serving", ms=round((time.monotonic() - t0) * 1000, 1))
        core = build(front, on_fatal=shutdown.request)
        lifecycle.start(core.steps)
        _log.info("kubelet plugin serving", ms=round((time.monotonic() - t0) * 1000, 1))

        def stop_asked() -> bool:
            return _acted_on(signals, shutdown, core.housekeeping.request_rescan)

        core.kubelet.on_registered(shutdown.wake)  # the registration wakes the wait, as a signal does
        deadline = time.monotonic() + config.registration_wait
        while not (stop_asked() or core.kubelet.registered.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            shutdown.wait(left)
        if not stop_asked():
            lifecycle.start(build_background(core).steps)
            frozen = freeze_startup_heap()  # the start-up objects never become garbage
            _log.info("numadra started", ms=round((time.monotonic() - t0) * 1000, 1), gc_frozen=frozen)
        gc.enable()
        while not stop_asked():
            shutdown.wait()
        _log.info("stopping", reason=shutdown.fatal or "signal")
    finally:
        gc.enable()
        lifecycle.stop()
    if shutdown.fatal:
        raise DriverError(shutdown.fatal)
    _log.info("numadra stopped")
    return 0


def _run(args: argparse.Namespace) -> int:
    from driver.log import configure_logging

    config = config_from_args(args)
    check_open_files()
    configure_logging(config.log_format, getattr(logging, config.log_level.upper()), cache=True)
    signals = Signals()
    try:
        with signals.installed():
            return serve(config, signals)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):  # the limit reached later, under load
            raise DriverError(f"out of file descriptors: {exc}; raise the open file limit") from exc
        raise
