"""MetricsServer over a real loopback socket: /metrics, /healthz, /readyz."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from driver.errors import ConfigError
from driver.observability import Metrics, MetricsServer


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


@pytest.fixture
def checks() -> dict[str, threading.Event]:
    return {"registered": threading.Event(), "slices-published": threading.Event()}


@pytest.fixture
def server(checks: dict[str, threading.Event]) -> Iterator[MetricsServer]:
    srv = MetricsServer("127.0.0.1:0", checks, Metrics(driver_name="numadra.dev", node_name="node-a"))
    srv.start()
    yield srv
    srv.stop()


def test_metrics_endpoint_exposes_recorded_values(server: MetricsServer) -> None:
    """What the facade records shows up in the Prometheus text format on /metrics."""
    server.metrics.observe_prepare("success", 0.003)
    server.metrics.observe_prepare("error", 0.2)
    server.metrics.observe_unprepare("success", 0.001)
    server.metrics.set_prepared_claims(3)
    server.metrics.set_device_counts({("gpu", "Healthy"): 2, ("nic", "Unhealthy"): 1})
    server.metrics.count_publish("create")
    server.metrics.count_publish("update", error=True)
    server.metrics.count_journal_recovery("recreated")
    status, ctype, body = _get(server.url + "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    expected = [
        'numadra_prepare_total{result="success"} 1.0',
        'numadra_prepare_total{result="error"} 1.0',
        'numadra_prepare_duration_seconds_bucket{le="0.005",result="success"} 1.0',
        'numadra_prepare_duration_seconds_bucket{le="0.1",result="error"} 0.0',
        'numadra_unprepare_total{result="success"} 1.0',
        "numadra_prepared_claims 3.0",
        'numadra_devices{health="Healthy",type="gpu"} 2.0',
        'numadra_devices{health="Unhealthy",type="nic"} 1.0',
        'numadra_devices{health="Healthy",type="cpu"} 0.0',
        'numadra_publish_operations_total{operation="update"} 1.0',
        'numadra_publish_errors_total{operation="update"} 1.0',
        'numadra_publish_errors_total{operation="create"} 0.0',
        'numadra_journal_recoveries_total{action="recreated"} 1.0',
        'numadra_build_info{driver="numadra.dev",node="node-a",version="0.1.0"} 1.0',
    ]
    lines = set(body.splitlines())
    assert [line for line in expected if line not in lines] == []


def test_healthz_is_ok_while_not_ready(server: MetricsServer) -> None:
    """Liveness does not depend on readiness: /healthz is 200 before registration."""
    assert _get(server.url + "/healthz")[0] == 200
    assert _get(server.url + "/readyz")[0] == 503


def test_readyz_waits_for_every_check(server: MetricsServer, checks: dict[str, threading.Event]) -> None:
    """/readyz is 503 naming what is missing until every event is set, then 200; clearing one undoes it."""
    status, _, body = _get(server.url + "/readyz")
    assert (status, body) == (503, "not ready: registered\nnot ready: slices-published\n")
    checks["registered"].set()
    assert _get(server.url + "/readyz")[:3:2] == (503, "not ready: slices-published\n")
    checks["slices-published"].set()
    assert _get(server.url + "/readyz")[0] == 200
    checks["registered"].clear()
    assert _get(server.url + "/readyz")[0] == 503


def test_unknown_path_is_404(server: MetricsServer) -> None:
    """Other paths are 404 and say which exist."""
    status, _, body = _get(server.url + "/nope")
    assert status == 404
    assert "/readyz" in body


def test_stop_closes_the_port() -> None:
    """After stop() nothing listens on the port any more, and a second stop() is harmless."""
    srv = MetricsServer("127.0.0.1:0")
    srv.start()
    url = srv.url
    assert _get(url + "/healthz")[0] == 200
    srv.stop()
    srv.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/healthz", timeout=2)


def test_busy_port_is_a_config_error() -> None:
    """Binding a port already in use fails with a ConfigError naming the address."""
    with MetricsServer("127.0.0.1:0") as first:
        port = first.address[1]
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
            MetricsServer(f"127.0.0.1:{port}").start()


def test_no_checks_means_ready() -> None:
    """A server without readiness checks reports ready (e.g. a one-shot tool)."""
    with MetricsServer("127.0.0.1:0") as srv:
        assert _get(srv.url + "/readyz")[0] == 200
