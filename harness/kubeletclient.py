"""A test double of the kubelet's side of the plugin protocols, built from the same protos.

It stands in for the kubelet's plugin watcher and DRA manager in tests and benches; the e2e tier
runs the kubelet's own DRA manager (``drakubelet``) and the node tier a real kubelet as well.

It registers a plugin the way the kubelet does (GetInfo, pick the services, NotifyRegistrationStatus),
calls NodePrepareResources / NodeUnprepareResources in v1 or v1beta1, and opens health streams.
Service selection follows the kubelet 1.37 rules: the first DRA service in the *plugin's* list that
the kubelet knows; for health v1 over v1alpha1, none if none is advertised.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import grpc

from driver._proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from driver.plugin import ClaimRef

__all__ = [
    "KUBELET_DRA_SERVICES",
    "ClaimSink",
    "DraVersion",
    "HealthStream",
    "HealthVersion",
    "KubeletClient",
    "Registration",
    "pick_dra_service",
    "pick_health_service",
]

DraVersion = Literal["v1", "v1beta1"]
HealthVersion = Literal["v1", "v1alpha1"]

#: what a 1.37 kubelet speaks, in its own order of preference
KUBELET_DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


class ClaimSink(Protocol):
    """A stand-in apiserver that can be made to hold a claim (``tests.support.fakeplugin.StubClaims``)."""

    def add(self, ref: ClaimRef) -> None:
        """Make ``ref`` exist."""
        ...


class HealthStream(Protocol):
    """A server-stream call: iterate for reports, ``cancel()`` to hang up."""

    def __iter__(self) -> Iterator[Any]: ...
    def __next__(self) -> Any: ...
    def cancel(self) -> bool: ...


def pick_dra_service(versions: Sequence[str]) -> str:
    """The kubelet's choice: the first plugin-listed DRA service it supports."""
    if not versions:
        raise ValueError("empty list of supported gRPC services (aka supported versions)")
    for version in versions:
        if version in KUBELET_DRA_SERVICES:
            return version
    raise ValueError(f"none of the advertised services {list(versions)} is supported by the kubelet")


def pick_health_service(versions: Sequence[str]) -> str | None:
    """v1 health if advertised, else v1alpha1 if advertised, else None (no stream)."""
    for candidate in ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"):
        if candidate in versions:
            return candidate
    return None


@dataclass(frozen=True, slots=True)
class Registration:
    """What the kubelet learned and decided during registration."""

    info: pluginregistration_v1_pb2.PluginInfo
    dra_service: str
    health_service: str | None


def _target(path: Path | str) -> str:
    return f"unix://{Path(path).absolute()}"


#: the message and stub modules of each DRA version (the messages are the same field for field)
_DRA_MODULES: dict[str, tuple[Any, Any]] = {
    "v1": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}
_HEALTH_MODULES: dict[str, tuple[Any, Any]] = {
    "v1": (health_v1_pb2, health_v1_pb2_grpc),
    "v1alpha1": (health_v1alpha1_pb2, health_v1alpha1_pb2_grpc),
}


def _claims(claims: Iterable[ClaimRef], module: Any) -> list[Any]:
    return [module.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


class KubeletClient:
    """One client per test; channels are cached per socket and closed by :meth:`close`.

    ``claims``: the stand-in apiserver of the plugin under test; each claim this client asks to
    prepare is made to exist there first, as a real kubelet names only claims that exist.
    """

    def __init__(self, claims: ClaimSink | None = None) -> None:
        self._channels: dict[str, grpc.Channel] = {}
        self._claims = claims

    def channel(self, path: Path | str) -> grpc.Channel:
        """A (cached) insecure channel to a unix socket."""
        target = _target(path)
        if target not in self._channels:
            self._channels[target] = grpc.insecure_channel(target)
        return self._channels[target]

    def close(self) -> None:
        """Close every channel."""
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> KubeletClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # registration -------------------------------------------------------------------------------

    def get_info(
        self, registration_socket: Path | str, timeout: float = 1.0
    ) -> pluginregistration_v1_pb2.PluginInfo:
        """``GetInfo`` with the kubelet's 1 s deadline."""
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(self.channel(registration_socket))
        info: pluginregistration_v1_pb2.PluginInfo = stub.GetInfo(
            pluginregistration_v1_pb2.InfoRequest(), timeout=timeout, wait_for_ready=True
        )
        return info

    def notify(
        self, registration_socket: Path | str, registered: bool, error: str = "", timeout: float = 5.0
    ) -> None:
        """``NotifyRegistrationStatus`` with the kubelet's 5 s deadline."""
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(self.channel(registration_socket))
        stub.NotifyRegistrationStatus(
            pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=registered, error=error),
            timeout=timeout,
        )

    def register(self, registration_socket: Path | str) -> Registration:
        """Do what the kubelet does: GetInfo, validate, connect to the endpoint, notify."""
        info = self.get_info(registration_socket)
        try:
            if info.type != "DRAPlugin":
                raise ValueError(f"unknown plugin type {info.type!r}")
            dra_service = pick_dra_service(list(info.supported_versions))
        except ValueError as exc:
            self.notify(
                registration_socket,
                False,
                f"RegisterPlugin error -- plugin validation failed with err: {exc}",
            )
            raise
        grpc.channel_ready_future(self.channel(info.endpoint)).result(timeout=1.0)
        self.notify(registration_socket, True)
        return Registration(info, dra_service, pick_health_service(list(info.supported_versions)))

    # DRA ---------------------------------------------------------------------------------------

    def prepare(
        self,
        endpoint: Path | str,
        claims: Iterable[ClaimRef],
        version: DraVersion = "v1",
        timeout: float = 45.0,
    ) -> Any:
        """``NodePrepareResources``; returns the version's response message."""
        messages, stubs = _DRA_MODULES[version]
        claims = list(claims)
        if self._claims is not None:
            for ref in claims:
                self._claims.add(ref)
        request = messages.NodePrepareResourcesRequest(claims=_claims(claims, messages))
        return stubs.DRAPluginStub(self.channel(endpoint)).NodePrepareResources(request, timeout=timeout)

    def unprepare(
        self,
        endpoint: Path | str,
        claims: Iterable[ClaimRef],
        version: DraVersion = "v1",
        timeout: float = 45.0,
    ) -> Any:
        """``NodeUnprepareResources``; returns the version's response message."""
        messages, stubs = _DRA_MODULES[version]
        request = messages.NodeUnprepareResourcesRequest(claims=_claims(claims, messages))
        return stubs.DRAPluginStub(self.channel(endpoint)).NodeUnprepareResources(request, timeout=timeout)

    # health ------------------------------------------------------------------------------------

    def watch_health(self, endpoint: Path | str, version: HealthVersion = "v1") -> HealthStream:
        """Open ``NodeWatchResources``; iterate the result for reports, cancel it to hang up."""
        messages, stubs = _HEALTH_MODULES[version]
        stub = stubs.DRAResourceHealthStub(self.channel(endpoint))
        stream: HealthStream = stub.NodeWatchResources(messages.NodeWatchResourcesRequest())
        return stream
