"""The floor of start-to-registered for a DRA kubelet plugin written in Python (bench/startup.py).

``python -m bench._floorplugin REGISTRATION_SOCKET DRA_SOCKET`` imports grpc and the v1 DRA and
registration stubs, listens on the DRA socket (the v1 ``DRAPlugin`` service, every method
unimplemented), then answers ``GetInfo`` and ``NotifyRegistrationStatus`` on the registration
socket, until SIGTERM. Nothing else: no logging library, no inventory, no journal,
no health. The time from its spawn until a kubelet registered it is what any Python plugin on the
same interpreter, grpc and protobuf pays before its own work starts.
"""

from __future__ import annotations

import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc

from driver._proto import dra_v1_pb2_grpc, pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc


class _Registration(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    """The precomputed answer, and OK to every verdict."""

    def __init__(self, endpoint: str) -> None:
        self._info = pluginregistration_v1_pb2.PluginInfo(
            type="DRAPlugin", name="floor.numadra.dev", endpoint=endpoint, supported_versions=["v1.DRAPlugin"]
        )

    def GetInfo(  # noqa: N802 (gRPC method name)
        self, request: pluginregistration_v1_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> pluginregistration_v1_pb2.PluginInfo:
        return self._info

    def NotifyRegistrationStatus(  # noqa: N802 (gRPC method name)
        self, request: pluginregistration_v1_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> pluginregistration_v1_pb2.RegistrationStatusResponse:
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


def _serve(servicer: object, add: object, path: str) -> grpc.Server:
    server = grpc.server(ThreadPoolExecutor(max_workers=2), options=[("grpc.so_reuseport", 0)])
    add(servicer, server)  # type: ignore[operator]
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server


def main() -> None:
    registration, dra = sys.argv[1], sys.argv[2]
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    servers = [
        _serve(dra_v1_pb2_grpc.DRAPluginServicer(), dra_v1_pb2_grpc.add_DRAPluginServicer_to_server, dra),
        _serve(
            _Registration(dra),
            pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server,
            registration,
        ),
    ]
    done.wait()
    for server in reversed(servers):
        server.stop(0).wait()


if __name__ == "__main__":
    main()
