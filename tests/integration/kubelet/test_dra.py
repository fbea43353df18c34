"""NodePrepareResources / NodeUnprepareResources in v1 and v1beta1 over a real unix socket."""

from __future__ import annotations

import threading
from collections.abc import Callable

import grpc
import pytest

from driver.kubelet import translate
from driver.kubelet.server import KubeletPluginServer
from driver.plugin import ClaimRef
from harness.kubeletclient import KubeletClient
from tests.support.fakeplugin import FakePlugin, StubClaims

from .conftest import Dirs, assert_no_overlap

VERSIONS = [pytest.param("v1", id="v1"), pytest.param("v1beta1", id="v1beta1")]


def claim(name: str, uid: str, namespace: str = "default") -> ClaimRef:
    return ClaimRef(namespace=namespace, name=name, uid=uid)


@pytest.mark.parametrize("version", VERSIONS)
def test_prepare_and_unprepare_every_claim(
    server: KubeletPluginServer, client: KubeletClient, fake: FakePlugin, version: str
) -> None:
    """Every claim gets an entry keyed by UID with its device and CDI ID; unprepare answers all too."""
    claims = [claim("a", "uid-a"), claim("b", "uid-b"), claim("c", "uid-c")]
    response = client.prepare(server.dra_socket, claims, version)
    assert sorted(response.claims) == ["uid-a", "uid-b", "uid-c"]
    for c in claims:
        entry = response.claims[c.uid]
        assert entry.error == ""
        (device,) = entry.devices
        assert device.pool_name == "fake-pool"
        assert list(device.request_names) == ["gpu"]
        assert list(device.cdi_device_ids) == [f"fake.numadra.dev/claim={c.uid}-{device.device_name}"]
    assert fake.calls == [("prepare", ("uid-a", "uid-b", "uid-c"))]

    response = client.unprepare(server.dra_socket, [*claims, claim("gone", "uid-never-prepared")], version)
    assert sorted(response.claims) == ["uid-a", "uid-b", "uid-c", "uid-never-prepared"]
    assert {uid: e.error for uid, e in response.claims.items()} == dict.fromkeys(response.claims, "")
    assert fake.prepared == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_prepare_is_idempotent(server: KubeletPluginServer, client: KubeletClient, version: str) -> None:
    """A repeated prepare returns the same devices and CDI IDs."""
    first = client.prepare(server.dra_socket, [claim("a", "uid-a")], version)
    second = client.prepare(server.dra_socket, [claim("a", "uid-a")], version)
    assert first == second


def test_share_id_only_on_v1(server: KubeletPluginServer, client: KubeletClient) -> None:
    """The device's share ID is sent on v1 and has no field in v1beta1."""
    (v1_device,) = (
        client.prepare(server.dra_socket, [claim("share-x", "uid-s")], "v1").claims["uid-s"].devices
    )
    assert v1_device.HasField("share_id") and v1_device.share_id == "share-uid-s"
    (beta,) = (
        client.prepare(server.dra_socket, [claim("share-x", "uid-s")], "v1beta1").claims["uid-s"].devices
    )
    assert "share_id" not in {f.name for f in beta.DESCRIPTOR.fields}
    (plain,) = client.prepare(server.dra_socket, [claim("plain", "uid-p")], "v1").claims["uid-p"].devices
    assert not plain.HasField("share_id")


@pytest.mark.parametrize("version", VERSIONS)
def test_sub_requests_are_reduced_to_base_names(
    server: KubeletPluginServer, client: KubeletClient, version: str
) -> None:
    """request_names carries base names only, each once, in order."""
    (device,) = client.prepare(server.dra_socket, [claim("sub-x", "uid-x")], version).claims["uid-x"].devices
    assert list(device.request_names) == ["gpu", "nic"]


@pytest.mark.parametrize("version", VERSIONS)
def test_failed_and_forgotten_claims_do_not_fail_the_others(
    server: KubeletPluginServer, client: KubeletClient, version: str
) -> None:
    """A driver error and a claim the driver forgot both become per-claim errors next to a good one."""
    claims = [claim("fail-x", "uid-f"), claim("forget-x", "uid-g"), claim("ok", "uid-o")]
    response = client.prepare(server.dra_socket, claims, version)
    assert response.claims["uid-f"].error == "fake failure for claim uid-f"
    assert response.claims["uid-g"].error == "driver returned no result for this claim"
    assert response.claims["uid-o"].error == "" and len(response.claims["uid-o"].devices) == 1
    response = client.unprepare(server.dra_socket, claims, version)
    assert response.claims["uid-f"].error == "fake failure for claim uid-f"
    assert response.claims["uid-g"].error == "driver returned no result for this claim"
    assert response.claims["uid-o"].error == ""


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "call", [pytest.param("prepare", id="prepare"), pytest.param("unprepare", id="unprepare")]
)
def test_driver_exception_is_grpc_internal(
    server: KubeletPluginServer, client: KubeletClient, version: str, call: str
) -> None:
    """A raising driver fails the whole call with INTERNAL and a message naming method and cause."""
    with pytest.raises(grpc.RpcError) as err:
        getattr(client, call)(server.dra_socket, [claim("raise-x", "uid-r"), claim("ok", "uid-o")], version)
    method = "NodePrepareResources" if call == "prepare" else "NodeUnprepareResources"
    assert err.value.code() == grpc.StatusCode.INTERNAL  # type: ignore[attr-defined]
    assert err.value.details() == f"{method}: driver failed: RuntimeError: fake driver exploded"  # type: ignore[attr-defined]
    # the server keeps serving afterwards
    assert client.prepare(server.dra_socket, [claim("ok", "uid-o")], version).claims["uid-o"].error == ""


BAD_CLAIMS = [
    pytest.param(claim("x", ""), "uid is empty", id="empty-uid"),
    pytest.param(claim("", "uid-1"), "name is empty", id="empty-name"),
    pytest.param(claim("x", "uid-2", namespace=""), "namespace is empty", id="empty-namespace"),
    pytest.param(claim("x" * 300, "uid-3"), "name is 300 characters long", id="long-name"),
    pytest.param(claim("x", "u" * 5000), "uid is 5000 characters long", id="long-uid"),
    pytest.param(claim("x", "uid-4", namespace="n" * 64), "namespace is 64 characters", id="long-namespace"),
    pytest.param(claim("../../etc", "uid-5"), "is not a valid Kubernetes name", id="path-name"),
    pytest.param(claim("x", "../../uid"), "is not a valid Kubernetes uid", id="path-uid"),
    pytest.param(
        claim("x", "uid-6", namespace="a/b"), "is not a valid Kubernetes namespace", id="path-namespace"
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("bad", "fragment"), BAD_CLAIMS)
def test_bad_claim_references_get_per_claim_errors(
    server: KubeletPluginServer,
    client: KubeletClient,
    fake: FakePlugin,
    version: str,
    bad: ClaimRef,
    fragment: str,
) -> None:
    """A malformed claim reference is answered with its own error; the good claim is prepared."""
    response = client.prepare(server.dra_socket, [bad, claim("good", "uid-good")], version)
    assert sorted(response.claims) == sorted([bad.uid, "uid-good"])
    assert fragment in response.claims[bad.uid].error
    assert response.claims["uid-good"].error == ""
    assert fake.calls == [("prepare", ("uid-good",))]
    response = client.unprepare(server.dra_socket, [bad], version)
    assert fragment in response.claims[bad.uid].error


@pytest.mark.parametrize("version", VERSIONS)
def test_duplicate_uids_and_oversized_batches(
    server: KubeletPluginServer, client: KubeletClient, fake: FakePlugin, version: str
) -> None:
    """Duplicate UIDs are rejected per claim; a batch over the limit is rejected claim by claim."""
    response = client.prepare(
        server.dra_socket, [claim("a", "dup"), claim("b", "dup"), claim("c", "uid-c")], version
    )
    assert response.claims["dup"].error == "claim UID appears 2 times in one request"
    assert response.claims["uid-c"].error == ""
    many = [claim(f"c{i}", f"uid-{i}") for i in range(translate.MAX_CLAIMS_PER_REQUEST + 1)]
    response = client.prepare(server.dra_socket, many, version)
    assert len(response.claims) == len(many)
    assert all("more than the limit" in e.error for e in response.claims.values())
    assert fake.calls == [("prepare", ("uid-c",))]


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_request_gets_empty_answer(
    server: KubeletPluginServer, client: KubeletClient, fake: FakePlugin, version: str
) -> None:
    """No claims: an empty map, and the driver is not bothered."""
    assert len(client.prepare(server.dra_socket, [], version).claims) == 0
    assert len(client.unprepare(server.dra_socket, [], version).claims) == 0
    assert fake.calls == []


def test_concurrent_calls_are_serialized_in_process(
    make_server: Callable[..., KubeletPluginServer], stub_claims: StubClaims, dirs: Dirs
) -> None:
    """Parallel RPCs on one server never run the driver concurrently."""
    record = dirs.root / "calls.jsonl"
    fake = FakePlugin(delay=0.02, record=record)
    srv = make_server(fake)
    srv.start()

    def work(i: int) -> None:
        with KubeletClient(stub_claims) as own:
            own.prepare(srv.dra_socket, [claim(f"c{i}", f"uid-{i}")])
            own.unprepare(srv.dra_socket, [claim(f"c{i}", f"uid-{i}")], "v1beta1")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert_no_overlap(record, expected_calls=12)
