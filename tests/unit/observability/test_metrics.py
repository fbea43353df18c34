"""The Metrics facade and the address parser (no sockets)."""

from __future__ import annotations

import pytest

from driver.errors import ConfigError
from driver.observability import Metrics, parse_address


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        pytest.param(":8080", ("0.0.0.0", 8080), id="all-interfaces"),
        pytest.param("127.0.0.1:9", ("127.0.0.1", 9), id="ipv4"),
        pytest.param("[::1]:8080", ("::1", 8080), id="ipv6"),
        pytest.param("localhost:0", ("localhost", 0), id="name-and-port-0"),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    """host:port forms accepted by --metrics-address."""
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    "address",
    [
        pytest.param("8080", id="no-colon"),
        pytest.param("host:", id="no-port"),
        pytest.param("host:http", id="named-port"),
        pytest.param("::1:8080", id="ipv6-without-brackets"),
        pytest.param("h:70000", id="port-too-big"),
    ],
)
def test_parse_address_rejects(address: str) -> None:
    """Malformed addresses are a ConfigError (exit code 2), naming the address."""
    with pytest.raises(ConfigError, match="metrics address"):
        parse_address(address)


def test_each_metrics_has_its_own_registry() -> None:
    """Two Metrics objects never share counters."""
    a, b = Metrics(), Metrics()
    a.observe_prepare("success", 0.01)
    assert a.sample("numadra_prepare_total", {"result": "success"}) == 1
    assert b.sample("numadra_prepare_total", {"result": "success"}) == 0


def test_device_counts_replace_previous_values() -> None:
    """set_device_counts is a full replacement: a type that disappeared drops back to 0."""
    m = Metrics()
    m.set_device_counts({("gpu", "Healthy"): 4})
    m.set_device_counts({("gpu", "Unhealthy"): 1, ("gpu", "Healthy"): 3})
    assert m.sample("numadra_devices", {"type": "gpu", "health": "Healthy"}) == 3
    m.set_device_counts({})
    assert m.sample("numadra_devices", {"type": "gpu", "health": "Unhealthy"}) == 0


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda m: m.observe_prepare("ok", 1.0), id="result"),
        pytest.param(lambda m: m.count_publish("apply"), id="publish-op"),
        pytest.param(lambda m: m.set_device_counts({("fpga", "Healthy"): 1}), id="device-type"),
        pytest.param(lambda m: m.count_journal_recovery("fixed"), id="journal-action"),
    ],
)
def test_unknown_label_values_are_rejected(call: object) -> None:
    """Label values come from fixed sets, so a typo cannot create new series."""
    with pytest.raises(ValueError, match="unknown"):
        call(Metrics())  # type: ignore[operator]


def test_histogram_counts_match_counter() -> None:
    """Every observation lands in both the counter and the histogram of its result."""
    m = Metrics()
    for seconds in (0.001, 0.02, 3.0):
        m.observe_unprepare("error", seconds)
    assert m.sample("numadra_unprepare_total", {"result": "error"}) == 3
    assert m.sample("numadra_unprepare_duration_seconds_count", {"result": "error"}) == 3
    assert m.sample("numadra_unprepare_duration_seconds_bucket", {"result": "error", "le": "0.025"}) == 2


def test_a_call_of_many_claims_is_one_observation_per_claim() -> None:
    """Batched per call (one label lookup), still counted per claim in counter and histogram."""
    m = Metrics()
    m.observe_prepare("success", 0.02, claims=32)
    m.observe_prepare("success", 3.0)
    assert m.sample("numadra_prepare_total", {"result": "success"}) == 33
    assert m.sample("numadra_prepare_duration_seconds_count", {"result": "success"}) == 33
    assert m.sample("numadra_prepare_duration_seconds_bucket", {"result": "success", "le": "0.025"}) == 32
    assert m.sample("numadra_prepare_duration_seconds_sum", {"result": "success"}) == pytest.approx(3.64)


def test_taint_transitions_follow_running_totals() -> None:
    """Cumulative totals from the health side become counter increments, never counted twice."""
    m = Metrics()
    assert m.sample("numadra_taint_transitions_total", {"action": "added"}) == 0
    m.set_taint_transitions({"added": 2, "removed": 0})
    m.set_taint_transitions({"added": 2, "removed": 1})
    m.set_taint_transitions({"added": 3, "removed": 1})
    assert m.sample("numadra_taint_transitions_total", {"action": "added"}) == 3
    assert m.sample("numadra_taint_transitions_total", {"action": "removed"}) == 1
    with pytest.raises(ValueError, match="unknown"):
        m.set_taint_transitions({"flipped": 1})


def test_publish_writes_follow_running_totals_beside_counted_failures() -> None:
    """The publisher's cumulative writes become increments once; a failed write counts in both series."""
    m = Metrics()
    m.set_publish_writes({"create": 2})
    m.count_publish("update", error=True)
    m.set_publish_writes({"create": 2, "update": 1})
    m.set_publish_writes({"create": 3, "update": 1})
    assert m.sample("numadra_publish_operations_total", {"operation": "create"}) == 3
    assert m.sample("numadra_publish_operations_total", {"operation": "update"}) == 2
    assert m.sample("numadra_publish_errors_total", {"operation": "update"}) == 1
    assert m.sample("numadra_publish_errors_total", {"operation": "create"}) == 0
    with pytest.raises(ValueError, match="unknown publish operation"):
        m.set_publish_writes({"apply": 1})


def test_journal_recoveries_count_several_entries_at_once() -> None:
    """Start-up hands over how many entries each action took; the counter adds them all."""
    m = Metrics()
    m.count_journal_recovery("recreated", 3)
    m.count_journal_recovery("ok")
    assert m.sample("numadra_journal_recoveries_total", {"action": "recreated"}) == 3
    assert m.sample("numadra_journal_recoveries_total", {"action": "ok"}) == 1


def test_state_recoveries_follow_running_totals_by_reason() -> None:
    """numadra_state_recoveries_total{reason}: every reason starts at 0, totals turn into
    increments once, and an unknown reason is refused (bounded series)."""
    m = Metrics()
    from driver.observability.metrics import STATE_RECOVERY_REASONS

    for reason in STATE_RECOVERY_REASONS:
        assert m.sample("numadra_state_recoveries_total", {"reason": reason}) == 0
    m.set_state_recoveries({"journal_deleted": 2})
    m.set_state_recoveries({"journal_deleted": 2, "entry_missing": 1})
    assert m.sample("numadra_state_recoveries_total", {"reason": "journal_deleted"}) == 2
    assert m.sample("numadra_state_recoveries_total", {"reason": "entry_missing"}) == 1
    with pytest.raises(ValueError, match="state recovery reason"):
        m.set_state_recoveries({"bogus": 1})


def test_cpus_free_per_numa_node_and_registered() -> None:
    """One free-CPU series per NUMA node, replaced on each update; registered flips 0 -> 1 -> 0."""
    from driver.observability.metrics import Metrics

    m = Metrics("numadra.dev", "n1")
    assert m.sample("numadra_registered") == 0.0
    m.set_cpus_free({0: 54, 1: 56})
    m.set_cpus_free({0: 50, 1: 56})
    assert m.sample("numadra_cpus_free", {"numa_node": "0"}) == 50.0
    assert m.sample("numadra_cpus_free", {"numa_node": "1"}) == 56.0
    m.set_registered(True)
    assert m.sample("numadra_registered") == 1.0
    m.set_registered(False)
    assert m.sample("numadra_registered") == 0.0


def test_fields_dropped_by_feature_gate_start_at_zero_and_are_replaced() -> None:
    """Every gate of the table (and unknown) is a series from the start; an absent gate reads 0."""
    m = Metrics()
    name = "numadra_api_fields_dropped"
    assert m.sample(name, {"feature": "DRAConsumableCapacity"}) == 0
    assert m.sample(name, {"feature": "unknown"}) == 0
    m.set_fields_dropped({"DRAConsumableCapacity": 2, "DRADeviceTaints": 1})
    assert m.sample(name, {"feature": "DRAConsumableCapacity"}) == 2
    m.set_fields_dropped({"DRADeviceTaints": 1})
    assert m.sample(name, {"feature": "DRAConsumableCapacity"}) == 0
    assert m.sample(name, {"feature": "DRADeviceTaints"}) == 1
    with pytest.raises(ValueError, match="unknown feature label 'MadeUpGate'"):
        m.set_fields_dropped({"MadeUpGate": 1})


def test_devices_withheld_series_are_bounded_and_gone_owners_read_zero() -> None:
    """Owner names come from other parties: past MAX_WITHHELD_OWNERS they sum under "other"; an
    owner that let go reads 0 instead of keeping its last value."""
    from driver.observability.metrics import MAX_WITHHELD_OWNERS

    m = Metrics("numadra.dev", "node-a")
    owners = {("dra-driver", f"d{i:02d}.example.com"): 1 for i in range(MAX_WITHHELD_OWNERS + 5)}
    m.set_withheld(owners)
    series = [s for f in m.registry.collect() if f.name == "numadra_devices_withheld" for s in f.samples]
    assert len(series) == MAX_WITHHELD_OWNERS + 1
    assert (
        m.registry.get_sample_value("numadra_devices_withheld", {"reason": "dra-driver", "owner": "other"})
        == 5
    )
    m.set_withheld({})
    assert (
        m.registry.get_sample_value(
            "numadra_devices_withheld", {"reason": "dra-driver", "owner": "d00.example.com"}
        )
        == 0
    )
