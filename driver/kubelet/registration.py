"""The ``pluginregistration.Registration`` service: how the kubelet learns who we are.

The kubelet finds our registration socket, calls ``GetInfo`` (with a short deadline, so the answer
is precomputed) and then ``NotifyRegistrationStatus``. The answer names the DRA socket and the
services we serve, in order of preference: the kubelet takes the first DRA service it knows, so
``v1.DRAPlugin`` comes first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from driver._proto import pluginregistration_v1_pb2 as regapi
from driver._proto import pluginregistration_v1_pb2_grpc
from driver.log import get_logger

__all__ = [
    "DRA_SERVICES",
    "HEALTH_SERVICES",
    "PLUGIN_TYPE",
    "RegistrationResult",
    "RegistrationServicer",
    "supported_versions",
]

PLUGIN_TYPE = "DRAPlugin"
#: advertised names (not the gRPC full names) of the DRA services, most preferred first
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
#: advertised (and full gRPC) names of the health services, most preferred first
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")

_log = get_logger("kubelet.registration")


def supported_versions(with_health: bool) -> tuple[str, ...]:
    """What we advertise: health only when we serve it (an advertised service must never be
    ``UNIMPLEMENTED``, and the kubelet opens a health stream only when advertised)."""
    return DRA_SERVICES + (HEALTH_SERVICES if with_health else ())


@dataclass(frozen=True, slots=True)
class RegistrationResult:
    """The kubelet's last verdict."""

    registered: bool
    error: str


class RegistrationServicer(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    """Answers GetInfo and records NotifyRegistrationStatus; ``registered`` is set on success."""

    def __init__(self, driver_name: str, endpoint: str, versions: tuple[str, ...]) -> None:
        self._info = regapi.PluginInfo(
            type=PLUGIN_TYPE, name=driver_name, endpoint=endpoint, supported_versions=list(versions)
        )
        self.registered = threading.Event()
        self.result: RegistrationResult | None = None
        self._wakes: list[Callable[[], None]] = []
        self._log = _log.bind(driver=driver_name, endpoint=endpoint)

    def on_registered(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` after each successful registration (on the gRPC thread that records it)."""
        self._wakes.append(wake)

    def GetInfo(  # noqa: N802 (gRPC method name)
        self, request: regapi.InfoRequest, context: grpc.ServicerContext
    ) -> regapi.PluginInfo:
        """Who we are and where the DRA socket is."""
        self._log.debug("kubelet asked for plugin info")
        return self._info

    def NotifyRegistrationStatus(  # noqa: N802 (gRPC method name)
        self, request: regapi.RegistrationStatus, context: grpc.ServicerContext
    ) -> regapi.RegistrationStatusResponse:
        """Record the verdict. Always answers OK: the kubelet retries a failed registration anyway."""
        self.result = RegistrationResult(registered=request.plugin_registered, error=request.error)
        if request.plugin_registered:
            self._log.info("registered with the kubelet")
            self.registered.set()
            for wake in tuple(self._wakes):
                wake()
        else:
            self.registered.clear()
            self._log.error("kubelet rejected the registration", error=request.error)
        return regapi.RegistrationStatusResponse()
