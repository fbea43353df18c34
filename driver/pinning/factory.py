"""The pinning backend that runs inside ``numadra run``: the NRI plugin, on a thread of its own.

Only ``--pinning nri`` has a part in the driver's process. ``hook`` pins from a CDI createRuntime
hook that the runtime runs (``numadra hook create-runtime`` builds its backend there), and
``cgroupfs`` and ``off`` only put the marker env into the claims' CDI specs. The NRI plugin
connects in the background and reconnects, since the runtime may start after the driver, so it
needs a thread; :class:`NriService` owns that thread and gives the plugin the ``start``/``stop``
of every other long-lived part of ``numadra run``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from driver.errors import ConfigError, UntrustedValueError
from driver.pinning.align import DeviceAligner
from driver.pinning.consumers import ConsumerCheck
from driver.pinning.failures import PinFailureSink
from driver.pinning.nri import ClaimLookup, NriPlugin, SharedPool
from driver.pinning.nri.plugin import ENV_PLUGIN_SOCKET
from driver.pinning.otherdevices import OtherDevices
from driver.supervise import supervised
from driver.untrusted.values import ascii_int

__all__ = ["NriService", "nri_service"]

#: how long :meth:`NriService.stop` waits for the plugin's thread (seconds)
STOP_TIMEOUT = 5.0


class NriService:
    """Runs ``plugin.serve_forever`` on the ``nri-plugin`` thread between :meth:`start` and :meth:`stop`."""

    def __init__(self, plugin: NriPlugin) -> None:
        self.plugin = plugin
        self._stopping = threading.Event()
        self._thread = supervised("nri-plugin", plugin.serve_forever, self._stopping)

    def start(self) -> None:
        """Start connecting to the runtime; returns at once."""
        self._thread.start()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Let go of the runtime connection and end the thread; idempotent."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.plugin.close()


def nri_service(
    *,
    socket: Path,
    claim_lookup: ClaimLookup,
    node_shared_pool: SharedPool | None,
    pinner_lock: Path,
    consumers: ConsumerCheck | None = None,
    on_failure: PinFailureSink | None = None,
    aligner: DeviceAligner | None = None,
    other_devices: OtherDevices | None = None,
    plugin_name: str = "numadra",
    environ: Mapping[str, str] = os.environ,
) -> NriService:
    """The NRI plugin of ``numadra run``, not started; a bad ``NRI_PLUGIN_SOCKET`` is a ConfigError.

    ``pinner_lock``: the lock file the processes of a rolling update share so that only one of
    them adjusts containers (see :mod:`driver.pinning.nri.plugin`). When the runtime started
    numadra as an NRI plugin, ``NRI_PLUGIN_SOCKET`` names the inherited socket fd and the plugin
    uses it instead of dialing ``socket``. ``consumers`` and ``on_failure``: the handlers'
    reads of a shared claim's consumers and where refused or unpinned containers are reported;
    ``aligner``: where containers of claims without CPUs run (None: ``--no-align-device-pods``);
    ``other_devices``: which other DRA drivers' devices a pod holds, so its containers run on
    their nodes too (:class:`~driver.pinning.nri.handlers.PinningHandlers`).
    """
    raw_fd = environ.get(ENV_PLUGIN_SOCKET)
    try:  # below 2**31: socket(fileno=) would raise OverflowError
        fd = ascii_int(raw_fd, what=ENV_PLUGIN_SOCKET, lo=0, hi=(1 << 31) - 1) if raw_fd else None
    except UntrustedValueError as exc:
        raise ConfigError(f"{ENV_PLUGIN_SOCKET} must be a file descriptor number, got {raw_fd!r}") from exc
    plugin = NriPlugin(
        claim_lookup=claim_lookup,
        node_shared_pool=node_shared_pool,
        socket_path=socket,
        name=plugin_name,
        socket_fd=fd,
        leader_lock=pinner_lock,
        consumers=consumers,
        on_failure=on_failure,
        aligner=aligner,
        other_devices=other_devices,
    )
    return NriService(plugin)
