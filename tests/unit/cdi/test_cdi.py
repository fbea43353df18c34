"""Unit tests of the cdi library: names, validation, version selection, atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cdi
from cdi import (
    CdiNameError,
    CdiSpecError,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    Mount,
    Spec,
    min_cdi_version,
)


def _spec(*devices: Device, edits: ContainerEdits | None = None) -> Spec:
    return Spec("numadra.dev/device", devices, edits or ContainerEdits())


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        pytest.param(_spec(Device("a", ContainerEdits(env=("A=1",)))), "0.3.0", id="env-only"),
        pytest.param(
            _spec(Device("a", ContainerEdits(device_nodes=(DeviceNode("/dev/nvidia0"),)))),
            "0.3.0",
            id="node-without-hostpath",
        ),
        pytest.param(
            _spec(Device("a", ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="/dev/x"),)))),
            "0.3.0",
            id="hostpath-equal-to-path",
        ),
        pytest.param(
            _spec(Device("a", ContainerEdits(hooks=(Hook("createRuntime", "/bin/true"),)))),
            "0.3.0",
            id="hooks",
        ),
        pytest.param(
            _spec(Device("a", ContainerEdits(mounts=(Mount("/h", "/c", ("ro", "bind")),)))),
            "0.3.0",
            id="mount-without-type",
        ),
        pytest.param(
            _spec(Device("a", ContainerEdits(mounts=(Mount("/h", "/c", type="bind"),)))),
            "0.4.0",
            id="mount-type",
        ),
        pytest.param(
            _spec(Device("a", ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="/dev/y"),)))),
            "0.5.0",
            id="node-hostpath",
        ),
        pytest.param(_spec(Device("1abc")), "0.5.0", id="device-name-starts-with-digit"),
        pytest.param(
            _spec(Device("a"), edits=ContainerEdits(mounts=(Mount("/h", "/c", type="bind"),))),
            "0.4.0",
            id="spec-level-edit",
        ),
        pytest.param(
            _spec(Device("a", ContainerEdits(additional_gids=(44,)))), "0.7.0", id="additional-gids"
        ),
        pytest.param(
            _spec(Device("1abc"), Device("a", ContainerEdits(additional_gids=(44,)))),
            "0.7.0",
            id="digit-name-then-gids",
        ),
        pytest.param(
            _spec(Device("a"), edits=ContainerEdits(additional_gids=(993,))),
            "0.7.0",
            id="spec-level-gids",
        ),
    ],
)
def test_min_cdi_version(spec: Spec, version: str) -> None:
    """The declared version is the lowest one whose features the spec uses."""
    assert min_cdi_version(spec) == version
    assert spec.to_json()["cdiVersion"] == version


@pytest.mark.parametrize(
    ("kind", "ok"),
    [
        pytest.param("numadra.dev/device", True, id="dotted-vendor"),
        pytest.param("numadra.dev/metadata", True, id="metadata"),
        pytest.param("vendor/cl-ass_2", True, id="class-dash-underscore"),
        pytest.param("numadra.dev", False, id="no-class"),
        pytest.param("a/b/c", False, id="two-slashes"),
        pytest.param("v/cl.ass", False, id="dot-in-class-needs-060"),
        pytest.param("1v/c", False, id="vendor-starts-with-digit"),
        pytest.param("v-/c", False, id="vendor-ends-with-dash"),
        pytest.param("/c", False, id="empty-vendor"),
    ],
)
def test_kind_rules(kind: str, ok: bool) -> None:
    """Kinds follow the CDI vendor/class rules."""
    if ok:
        cdi.validate_kind(kind)
    else:
        with pytest.raises(CdiNameError, match="invalid CDI"):
            cdi.validate_kind(kind)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        pytest.param("abc-gpu-0000-3b-00-0", True, id="plain"),
        pytest.param("0f1e-cpu-numa0", True, id="digit-first"),
        pytest.param("a_b.c:d", True, id="punctuation"),
        pytest.param("-a", False, id="leading-dash"),
        pytest.param("a-", False, id="trailing-dash"),
        pytest.param("a/b", False, id="slash"),
        pytest.param("", False, id="empty"),
        pytest.param("a b", False, id="space"),
    ],
)
def test_device_name_rules(name: str, ok: bool) -> None:
    """Device names follow the CDI parser's rules."""
    if ok:
        cdi.validate_device_name(name)
    else:
        with pytest.raises(CdiNameError):
            cdi.validate_device_name(name)


def test_qualified_name_round_trip() -> None:
    """A qualified name splits back into its kind and device."""
    qn = cdi.qualified_name("numadra.dev/device", "uid-gpu-0")
    assert qn == "numadra.dev/device=uid-gpu-0"
    assert cdi.parse_qualified_name(qn) == ("numadra.dev/device", "uid-gpu-0")
    with pytest.raises(CdiNameError, match="missing '='"):
        cdi.parse_qualified_name("numadra.dev/device")


def test_transient_spec_file_name() -> None:
    """Transient spec files are named <vendor>_<class>_<ids>.json and refuse path-like ids."""
    assert cdi.transient_spec_file_name("numadra.dev/device", "u1") == "numadra.dev_device_u1.json"
    assert (
        cdi.transient_spec_file_name("numadra.dev/metadata", "u1", "gpu")
        == "numadra.dev_metadata_u1_gpu.json"
    )
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(CdiNameError):
            cdi.transient_spec_file_name("numadra.dev/device", bad)


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        pytest.param(ContainerEdits(env=("NOEQUALS",)), "NAME=value", id="env-without-equals"),
        pytest.param(ContainerEdits(env=("=x",)), "NAME=value", id="env-empty-name"),
        pytest.param(ContainerEdits(env=("1A=x",)), "NAME=value", id="env-name-digit"),
        pytest.param(ContainerEdits(device_nodes=(DeviceNode("dev/x"),)), "absolute", id="relative-node"),
        pytest.param(ContainerEdits(device_nodes=(DeviceNode("/dev/x", type="z"),)), "type", id="node-type"),
        pytest.param(
            ContainerEdits(device_nodes=(DeviceNode("/dev/x", permissions="rx"),)),
            "permissions",
            id="node-permissions",
        ),
        pytest.param(ContainerEdits(mounts=(Mount("/h", "c"),)), "containerPath", id="relative-mount"),
        pytest.param(ContainerEdits(hooks=(Hook("boot", "/x"),)), "hook name", id="hook-name"),
        pytest.param(ContainerEdits(hooks=(Hook("prestart", "x"),)), "hook path", id="hook-path"),
        pytest.param(ContainerEdits(additional_gids=(0,)), "additional GID", id="gid-zero"),
        pytest.param(ContainerEdits(additional_gids=(-5,)), "additional GID", id="gid-negative"),
        pytest.param(ContainerEdits(additional_gids=(2**32,)), "additional GID", id="gid-too-big"),
    ],
)
def test_validate_rejects_bad_edits(edits: ContainerEdits, message: str) -> None:
    """Validation names what a CDI loader would refuse."""
    with pytest.raises(CdiSpecError, match=message):
        cdi.validate_spec(_spec(Device("a", edits)))


def test_validate_rejects_duplicate_and_missing_devices() -> None:
    """A spec needs devices with unique names."""
    with pytest.raises(CdiSpecError, match="duplicate"):
        cdi.validate_spec(_spec(Device("a"), Device("a")))
    with pytest.raises(CdiSpecError, match="no devices"):
        cdi.validate_spec(_spec())


def test_to_json_shape_and_round_trip() -> None:
    """The JSON uses CDI's camelCase keys, omits empty fields, and parses back to the same spec."""
    spec = _spec(
        Device(
            "a",
            ContainerEdits(
                env=("A=1",),
                device_nodes=(DeviceNode("/dev/x", host_path="/host/dev/x", type="c", permissions="rw"),),
                mounts=(Mount("/h", "/c", ("ro", "bind")),),
                hooks=(Hook("createContainer", "/bin/hook", ("hook", "x"), timeout=5),),
                additional_gids=(44, 993),
            ),
        ),
        Device("b"),
    )
    obj = spec.to_json()
    assert obj["devices"][0]["containerEdits"]["additionalGids"] == [44, 993]
    assert obj["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/x", "hostPath": "/host/dev/x", "type": "c", "permissions": "rw"}
    ]
    assert obj["devices"][1] == {"name": "b", "containerEdits": {}}
    assert "containerEdits" not in obj
    assert cdi.spec_from_json(json.loads(json.dumps(obj))) == spec


def test_write_spec_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    """write_spec replaces the file in one rename and leaves no temp file behind."""
    spec = _spec(Device("a", ContainerEdits(env=("A=1",))))
    path = cdi.write_spec(tmp_path, "v_c_u.json", spec)
    first_inode = path.stat().st_ino
    path2 = cdi.write_spec(tmp_path, "v_c_u.json", _spec(Device("a", ContainerEdits(env=("A=2",)))))
    assert path2 == path
    assert path.stat().st_ino != first_inode  # a new file renamed over the old one
    assert json.loads(path.read_text())["devices"][0]["containerEdits"]["env"] == ["A=2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v_c_u.json"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_write_spec_refuses_invalid_spec_and_keeps_old(tmp_path: Path) -> None:
    """An invalid spec is never written; the old file stays as it was."""
    good = cdi.write_spec(tmp_path, "v_c_u.json", _spec(Device("a")))
    before = good.read_bytes()
    with pytest.raises(CdiSpecError):
        cdi.write_spec(tmp_path, "v_c_u.json", _spec(Device("a", ContainerEdits(env=("BAD",)))))
    assert good.read_bytes() == before


def test_write_spec_refuses_path_like_file_name(tmp_path: Path) -> None:
    """The file name cannot escape the spec directory."""
    with pytest.raises(ValueError, match="file name"):
        cdi.write_spec(tmp_path, "../x.json", _spec(Device("a")))


def test_atomic_write_into_unwritable_dir_fails_cleanly(tmp_path: Path) -> None:
    """A target directory that cannot hold files raises OSError (also as root) and writes nothing."""
    not_a_dir = tmp_path / "cdi"
    not_a_dir.write_text("")
    with pytest.raises(OSError):
        cdi.atomic_write_bytes(not_a_dir / "f.json", b"{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdi"]


def test_remove_file_missing_is_noop(tmp_path: Path) -> None:
    """Removing a missing spec is not an error."""
    path = tmp_path / "gone.json"
    assert cdi.remove_file(path) is False
    path.write_text("{}")
    assert cdi.remove_file(path, sync=True) is True
    assert not path.exists()


def test_all_is_sorted() -> None:
    """The package's __all__ is sorted (constants, classes, functions) and every name exists."""

    def key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert list(cdi.__all__) == sorted(cdi.__all__, key=key)
    for name in cdi.__all__:
        assert hasattr(cdi, name)


_text = st.text(max_size=12)
_opt_int = st.none() | st.integers(-(2**40), 2**40)
_nodes = st.builds(
    DeviceNode,
    path=_text,
    host_path=st.none() | _text,
    type=st.sampled_from(["", "c", "b"]),
    major=_opt_int,
    minor=_opt_int,
    permissions=st.sampled_from(["", "rw", "rwm"]),
    file_mode=_opt_int,
    uid=_opt_int,
    gid=_opt_int,
)
_mounts = st.builds(
    Mount, _text, _text, st.lists(_text, max_size=3).map(tuple), st.sampled_from(["", "bind"])
)
_hooks = st.builds(
    Hook,
    _text,
    _text,
    st.lists(_text, max_size=3).map(tuple),
    st.lists(_text, max_size=2).map(tuple),
    _opt_int,
)
_edits = st.builds(
    ContainerEdits,
    env=st.lists(_text, max_size=4).map(tuple),
    device_nodes=st.lists(_nodes, max_size=3).map(tuple),
    mounts=st.lists(_mounts, max_size=2).map(tuple),
    hooks=st.lists(_hooks, max_size=2).map(tuple),
)
_specs = st.builds(
    Spec,
    kind=_text,
    devices=st.lists(st.builds(Device, _text, _edits), max_size=3).map(tuple),
    edits=_edits,
)


@settings(max_examples=100, deadline=None)
@given(spec=_specs, version=st.none() | st.sampled_from(cdi.KNOWN_VERSIONS))
def test_json_text_is_json_dumps_of_to_json(spec: Spec, version: str | None) -> None:
    """The direct encoder writes exactly json.dumps(to_json()) (any text, numbers, empty parts)."""
    assert spec.json_text(version) == json.dumps(spec.to_json(version), separators=(",", ":"))


def test_spec_bytes_are_the_dict_encoding() -> None:
    """spec_bytes of a valid spec equals spec_json_bytes of its dict form (one written format)."""
    spec = _spec(
        Device(
            "gpu-0",
            ContainerEdits(
                env=('Q="x"\\y\u00e9',),
                device_nodes=(DeviceNode("/dev/x", host_path="/h/x", major=195, minor=0, file_mode=0o666),),
                hooks=(Hook("createContainer", "/bin/h", ("h",), ("A=1",), timeout=3),),
            ),
        )
    )
    assert cdi.spec_bytes(spec) == cdi.spec_json_bytes(spec.to_json())


def test_remove_file_takes_plain_strings(tmp_path: Path) -> None:
    """remove_file accepts the str paths the journal stores."""
    path = tmp_path / "f.json"
    path.write_text("{}")
    assert cdi.remove_file(str(path)) is True
    assert cdi.remove_file(str(path)) is False


def test_write_all_finishes_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.write`` may write less than asked; write_all (atomic writes, the journal) goes on."""
    real_write = os.write
    calls: list[int] = []

    def short_write(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(os, "write", short_write)
    cdi.atomic_write_bytes(tmp_path / "f.json", b'{"a":12345}', sync=False)
    assert (tmp_path / "f.json").read_bytes() == b'{"a":12345}'
    assert calls == [11, 8, 5, 2]
