"""The compiled protos carry exactly the wire names and field numbers the kubelet uses."""

from __future__ import annotations

from types import ModuleType

import pytest
from google.protobuf.descriptor import FieldDescriptor

from driver._proto import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    health_v1_pb2,
    health_v1alpha1_pb2,
    pluginregistration_v1_pb2,
)

DRA = [
    pytest.param(dra_v1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1", id="v1"),
    pytest.param(dra_v1beta1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1beta1", id="v1beta1"),
]
HEALTH = [
    pytest.param(health_v1_pb2, "v1", id="v1"),
    pytest.param(health_v1alpha1_pb2, "v1alpha1", id="v1alpha1"),
]


def _fields(module: ModuleType, message: str) -> dict[str, int]:
    return {f.name: f.number for f in module.DESCRIPTOR.message_types_by_name[message].fields}


@pytest.mark.parametrize(("module", "package"), DRA)
def test_dra_service_and_methods(module: ModuleType, package: str) -> None:
    """DRAPlugin lives in the long kubelet package with its two unary methods."""
    service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert module.DESCRIPTOR.package == package
    assert service.full_name == f"{package}.DRAPlugin"
    assert sorted(m.name for m in service.methods) == ["NodePrepareResources", "NodeUnprepareResources"]
    assert not any(m.server_streaming or m.client_streaming for m in service.methods)


@pytest.mark.parametrize(("module", "package"), DRA)
def test_dra_field_numbers(module: ModuleType, package: str) -> None:
    """Claim, responses and requests use the published field numbers."""
    assert _fields(module, "Claim") == {"namespace": 1, "uid": 2, "name": 3}
    assert _fields(module, "NodePrepareResourcesRequest") == {"claims": 1}
    assert _fields(module, "NodeUnprepareResourcesRequest") == {"claims": 1}
    assert _fields(module, "NodePrepareResourcesResponse") == {"claims": 1}
    assert _fields(module, "NodeUnprepareResourcesResponse") == {"claims": 1}
    assert _fields(module, "NodePrepareResourceResponse") == {"devices": 1, "error": 2}
    assert _fields(module, "NodeUnprepareResourceResponse") == {"error": 1}
    entry = module.DESCRIPTOR.message_types_by_name["NodePrepareResourcesResponse"].fields_by_name["claims"]
    assert entry.message_type.GetOptions().map_entry
    assert entry.message_type.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING


def test_share_id_is_an_optional_field_5_in_v1_only() -> None:
    """v1 Device has proto3-optional share_id = 5; v1beta1 Device has no share_id."""
    v1 = dra_v1_pb2.DESCRIPTOR.message_types_by_name["Device"]
    assert _fields(dra_v1_pb2, "Device") == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert v1.fields_by_name["share_id"].has_presence
    assert _fields(dra_v1beta1_pb2, "Device") == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
    }


def test_registration_service() -> None:
    """pluginregistration.Registration with GetInfo and NotifyRegistrationStatus, exact fields."""
    d = pluginregistration_v1_pb2.DESCRIPTOR
    assert d.package == "pluginregistration"
    service = d.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    assert sorted(m.name for m in service.methods) == ["GetInfo", "NotifyRegistrationStatus"]
    assert _fields(pluginregistration_v1_pb2, "PluginInfo") == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
    assert _fields(pluginregistration_v1_pb2, "RegistrationStatus") == {"plugin_registered": 1, "error": 2}
    assert _fields(pluginregistration_v1_pb2, "InfoRequest") == {}
    assert _fields(pluginregistration_v1_pb2, "RegistrationStatusResponse") == {}


@pytest.mark.parametrize(("module", "package"), HEALTH)
def test_health_service_messages_and_enum(module: ModuleType, package: str) -> None:
    """DRAResourceHealth streams from the server; its full name equals the advertised string."""
    service = module.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert service.full_name == f"{package}.DRAResourceHealth"
    (method,) = service.methods
    assert method.name == "NodeWatchResources"
    assert method.server_streaming and not method.client_streaming
    assert _fields(module, "DeviceIdentifier") == {"pool_name": 1, "device_name": 2}
    assert _fields(module, "DeviceHealth") == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
    assert _fields(module, "NodeWatchResourcesResponse") == {"devices": 1}
    assert _fields(module, "NodeWatchResourcesRequest") == {}
    enum = module.DESCRIPTOR.enum_types_by_name["HealthStatus"]
    assert {v.name: v.number for v in enum.values} == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}
