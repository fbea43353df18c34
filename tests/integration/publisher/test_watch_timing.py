"""The watch, not a periodic LIST, keeps the publisher's view true; a LIST comes back only while the
watch cannot be opened. Against the fake apiserver over real HTTP."""

from __future__ import annotations

import random
from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from driver.errors import KubeError
from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient, SliceWatch
from driver.slices.builder import build_slices
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer
from harness.poll import wait_for

from .conftest import DRIVER, NODE
from .inventories import gpu_inventory


def _slice_gets(api: FakeApiServer) -> tuple[list[dict[str, list[str]]], int]:
    """(query of every watch of slices, number of LISTs of slices) the fake has seen."""
    watches, lists = [], 0
    for r in api.requests:
        if r.method == "GET" and r.path.endswith("/resourceslices"):
            query = parse_qs(r.query)
            if query.get("watch") == ["true"]:
                watches.append(query)
            else:
                lists += 1
    return watches, lists


def _publisher(client: KubeClient, **kw: object) -> SlicePublisher:
    pub = SlicePublisher(
        client,
        node_name=NODE,
        driver_name=DRIVER,
        retry=RetryPolicy(floor=0.05, cap=0.2),
        rng=random.Random(11),
        **kw,  # type: ignore[arg-type]
    )
    pub.publish(build_slices(gpu_inventory(2), node_name=NODE, driver_name=DRIVER))
    return pub


@pytest.fixture
def open_watch(client: KubeClient) -> Iterator[SlicePublisher]:
    pub = _publisher(client, resync_interval=0.05, watch_timeout=1)
    pub.start()
    yield pub
    pub.stop()


def test_no_periodic_list_while_the_watch_is_open(api: FakeApiServer, open_watch: SlicePublisher) -> None:
    """resync_interval 0.05 s would have re-LISTed ~40 times over the two watch renewals awaited."""
    assert open_watch.wait_synced(10)
    wait_for(lambda: len(_slice_gets(api)[0]) >= 3 or None, 15, "three watches (two renewals)")
    watches, lists = _slice_gets(api)
    assert lists == 1
    assert all(w["timeoutSeconds"] == ["1"] for w in watches)
    assert all(w.get("resourceVersion", [""])[0] not in ("", "0") for w in watches)  # each resumes


def test_foreign_change_still_reaches_us_without_a_list(
    api: FakeApiServer, open_watch: SlicePublisher
) -> None:
    """A wipe after the watch is open is seen on the watch and the slices come back."""
    assert open_watch.wait_synced(10)
    wait_for(lambda: _slice_gets(api)[0] or None, 10, "the watch to open")
    assert api.wipe_slices(NODE) == 1
    wait_for(lambda: api.objects("ResourceSlice") or None, 10, "slices re-created")
    assert open_watch.stats.foreign_deletions == 1


class _NoWatchClient(KubeClient):
    """The real client with its watch refused, as an RBAC rule missing ``watch`` would."""

    def watch_resource_slices(
        self, *, field_selector: str = "", resource_version: str = "", timeout_seconds: int = 300
    ) -> SliceWatch:
        raise KubeError("forbidden", verb="watch", resource="resourceslices", status=403)


def test_lists_resume_while_the_watch_cannot_be_opened(api: FakeApiServer) -> None:
    client = _NoWatchClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    pub = _publisher(client, resync_interval=0.05)
    pub.start()
    try:
        assert pub.wait_synced(10)
        wait_for(lambda: _slice_gets(api)[1] >= 3 or None, 10, "fallback re-LISTs")
        assert sum(n for kind, n in pub.stats.errors.items() if kind.startswith("watch_")) >= 1
        assert len(api.writes("resourceslices")) == 1  # the re-LISTs found nothing to rewrite
    finally:
        pub.stop()
        client.close()
