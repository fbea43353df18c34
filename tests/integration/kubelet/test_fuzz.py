"""Fuzzed gRPC over the real sockets: whatever bytes reach a method, the server answers and lives on.

The kubelet is the only intended caller, but the sockets are files on the node: anything that can
write to them can send any bytes. Each case sends raw payloads (random bytes, truncated and
bit-flipped valid requests, hostile field values) to every unary method of the DRA services (v1 and
v1beta1) and of the registration service, and opens the health stream with junk. The server must
answer each call (a status, never a hang), and a valid prepare must still work afterwards.
"""

from __future__ import annotations

import random

import grpc
import pytest

from driver._proto import dra_v1_pb2, dra_v1beta1_pb2, health_v1_pb2, pluginregistration_v1_pb2
from driver.kubelet.server import KubeletPluginServer
from driver.plugin import ClaimRef
from harness.kubeletclient import KubeletClient

pytestmark = pytest.mark.fault

SEED = 20261201
CASES_PER_METHOD = 60
#: what a broken request may get back; anything else (UNKNOWN from a crash, a hang) fails
ACCEPTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.INTERNAL,  # grpcio's own answer to bytes it cannot parse as the request type
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNIMPLEMENTED,
}


def _unary_methods() -> list[tuple[str, bytes]]:
    """(full method path, a valid serialized request) for every unary method we serve."""
    valid_v1 = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace="default", name="c", uid="uid-fuzz")]
    ).SerializeToString()
    valid_beta = dra_v1beta1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1beta1_pb2.Claim(namespace="default", name="c", uid="uid-fuzz")]
    ).SerializeToString()
    out: list[tuple[str, bytes]] = []
    for module, valid in ((dra_v1_pb2, valid_v1), (dra_v1beta1_pb2, valid_beta)):
        service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
        out += [(f"/{service.full_name}/{m.name}", valid) for m in service.methods]
    registration = pluginregistration_v1_pb2.DESCRIPTOR.services_by_name["Registration"]
    out += [(f"/{registration.full_name}/{m.name}", b"") for m in registration.methods]
    return out


def _payloads(rng: random.Random, valid: bytes) -> list[bytes]:
    """Random bytes, and the valid request truncated, bit-flipped and with hostile strings."""
    hostile = [
        "",
        "\x00",
        "../../etc/passwd",
        "a" * 70_000,
        "uid\n",
        "\ud7ff\ue000",
        "名前",
    ]
    payloads = [rng.randbytes(rng.randrange(0, 256)) for _ in range(CASES_PER_METHOD // 2)]
    for _ in range(CASES_PER_METHOD // 4):
        cut = valid[: rng.randrange(0, len(valid) + 1)] if valid else b""
        flipped = bytearray(valid or b"\x00")
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        payloads += [cut, bytes(flipped)]
    for text in hostile:
        claim = dra_v1_pb2.Claim(namespace=text, name=text, uid=text)
        payloads.append(dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim] * 3).SerializeToString())
    return payloads


def test_every_unary_method_answers_junk_and_the_server_lives_on(
    server: KubeletPluginServer, client: KubeletClient
) -> None:
    rng = random.Random(SEED)
    seen: dict[grpc.StatusCode, int] = {}
    with (
        grpc.insecure_channel(f"unix://{server.dra_socket}") as dra,
        grpc.insecure_channel(f"unix://{server.registration_socket}") as reg,
    ):
        for method, valid in _unary_methods():
            channel = reg if "Registration" in method else dra
            call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            for payload in _payloads(rng, valid):
                try:
                    call(payload, timeout=10)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as err:
                    code = err.code()  # type: ignore[attr-defined]
                assert code in ACCEPTED, f"{method}: {code} for {payload[:40]!r}"
                seen[code] = seen.get(code, 0) + 1
    assert seen.get(grpc.StatusCode.OK, 0) > 0  # the valid shapes went through
    # and it still serves a well-formed call
    ok = client.prepare(server.dra_socket, [ClaimRef(namespace="default", name="a", uid="uid-a")], "v1")
    assert ok.claims["uid-a"].error == ""


def test_the_health_stream_answers_junk(server: KubeletPluginServer) -> None:
    """Junk as the stream's request: an error status or a stream that yields; never a hang."""
    rng = random.Random(SEED + 1)
    service = health_v1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    method = f"/{service.full_name}/NodeWatchResources"
    with grpc.insecure_channel(f"unix://{server.dra_socket}") as channel:
        stream = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
        for _ in range(20):
            call = stream(rng.randbytes(rng.randrange(0, 64)), timeout=5)
            try:
                first = next(iter(call))
                assert isinstance(first, bytes)
            except grpc.RpcError as err:
                assert err.code() in ACCEPTED  # type: ignore[attr-defined]
            finally:
                call.cancel()  # type: ignore[attr-defined]
