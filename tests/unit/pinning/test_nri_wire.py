"""NRI framing bytes, reassembly, and the protobuf field numbers that reach the runtime."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver._proto.nri import api_pb2 as nri
from driver._proto.nri import ttrpc_pb2 as ttrpc
from driver.errors import PinningError
from driver.pinning.nri.handlers import EVENTS, marker_from_env
from driver.pinning.nri.wire import MAX_MESSAGE, Demuxer, Frame, encode_frame
from driver.pinning.types import CpuMode


def test_frame_layout_is_big_endian_mux_then_ttrpc() -> None:
    """A frame is: conn id, length (mux); length, stream id, type, flags (ttrpc); payload."""
    data = encode_frame(conn_id=2, stream_id=3, msg_type=1, payload=b"abc")
    assert data == (
        b"\x00\x00\x00\x02"
        b"\x00\x00\x00\x0d"  # mux: conn 2, 13 bytes follow
        b"\x00\x00\x00\x03"
        b"\x00\x00\x00\x03"
        b"\x01"
        b"\x00"  # ttrpc: len 3, stream 3, request
        b"abc"
    )


def test_demuxer_reassembles_split_and_coalesced_input() -> None:
    """Frames split at any byte, or several in one read, come out whole and in order."""
    stream = encode_frame(1, 1, 1, b"first") + encode_frame(2, 1, 2, b"") + encode_frame(1, 3, 1, b"x" * 300)
    for chunk in (1, 7, 13, len(stream)):
        demux = Demuxer()
        frames: list[Frame] = []
        for i in range(0, len(stream), chunk):
            frames.extend(demux.feed(stream[i : i + chunk]))
        assert [(f.conn_id, f.stream_id, f.msg_type, f.payload[:5]) for f in frames] == [
            (1, 1, 1, b"first"),
            (2, 1, 2, b""),
            (1, 3, 1, b"xxxxx"),
        ]


def test_ttrpc_message_split_across_mux_frames() -> None:
    """A ttrpc message spread over two mux frames of the same connection is rebuilt."""
    whole = encode_frame(1, 5, 2, b"payload")[8:]  # the ttrpc bytes only
    part1, part2 = whole[:4], whole[4:]
    data = (len(part1)).to_bytes(4, "big")
    raw = b"\x00\x00\x00\x01" + data + part1 + b"\x00\x00\x00\x01" + len(part2).to_bytes(4, "big") + part2
    (frame,) = Demuxer().feed(raw)
    assert (frame.stream_id, frame.payload) == (5, b"payload")


def test_oversized_rejected() -> None:
    """Messages over the 4 MiB ttrpc limit are refused on both sides."""
    with pytest.raises(PinningError, match="exceeds"):
        encode_frame(1, 1, 1, b"x" * (MAX_MESSAGE + 1))
    with pytest.raises(PinningError, match="exceeds"):
        list(Demuxer().feed(b"\x00\x00\x00\x01\x7f\xff\xff\xff"))


def test_adjustment_field_numbers_on_the_wire() -> None:
    """CreateContainerResponse.adjust(1).linux(6).resources(2).cpu(2).cpus(6) encodes as upstream."""
    cpu = nri.LinuxCPU(cpus="2-3")
    resp = nri.CreateContainerResponse(
        adjust=nri.ContainerAdjustment(
            linux=nri.LinuxContainerAdjustment(resources=nri.LinuxResources(cpu=cpu))
        )
    )
    assert resp.SerializeToString() == b"\x0a\x0b\x32\x09\x12\x07\x12\x05\x32\x03" + b"2-3"


def test_ttrpc_envelope_field_numbers() -> None:
    """ttrpc Request: service 1, method 2, payload 3; Response: status 1 (code 1), payload 2."""
    req = ttrpc.Request(service="s", method="m", payload=b"p")
    assert req.SerializeToString() == b"\x0a\x01s\x12\x01m\x1a\x01p"
    resp = ttrpc.Response(status=ttrpc.Status(code=12), payload=b"")
    assert resp.SerializeToString() == b"\x0a\x02\x08\x0c"


def test_event_mask() -> None:
    """Subscribed events: CreateContainer(4), UpdateContainer(8), Stop(10), Remove(11)."""
    assert EVENTS == 0x688


@pytest.mark.parametrize(
    ("env", "cpus", "mems", "mode"),
    [
        pytest.param(
            ["NUMADRA_CPUS=0-3,8", "NUMADRA_MEMS=0"], {0, 1, 2, 3, 8}, {0}, CpuMode.EXCLUSIVE, id="both"
        ),
        pytest.param(["NUMADRA_CPUS=1", "NUMADRA_CPU_MODE=shared"], {1}, set(), CpuMode.SHARED, id="shared"),
        pytest.param(["NUMADRA_MEMS=1"], set(), {1}, CpuMode.EXCLUSIVE, id="mems-only"),
    ],
)
def test_marker_from_env(env: list[str], cpus: set[int], mems: set[int], mode: CpuMode) -> None:
    """The marker is parsed from 'KEY=value' env strings."""
    marker = marker_from_env(["PATH=/bin", *env])
    assert marker is not None
    assert (marker.cpus, marker.mems, marker.mode) == (cpus, mems, mode)


def test_no_marker() -> None:
    """A container without NUMADRA_CPUS/MEMS has no marker."""
    assert marker_from_env(["PATH=/bin", "NUMADRA_REQUEST=x"]) is None


def test_bad_mode_rejected() -> None:
    """An unknown mode value is a malformed marker."""
    with pytest.raises(PinningError, match="NUMADRA_CPU_MODE"):
        marker_from_env(["NUMADRA_CPUS=1", "NUMADRA_CPU_MODE=turbo"])


frames_strategy = st.lists(
    st.tuples(st.integers(1, 2), st.integers(0, 2**32 - 1), st.integers(1, 3), st.binary(max_size=200)),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(frames=frames_strategy, cuts=st.lists(st.integers(1, 64), min_size=1, max_size=20))
def test_demuxer_roundtrip_any_chunking(frames: list[tuple[int, int, int, bytes]], cuts: list[int]) -> None:
    """Whatever the read sizes, the demuxer returns exactly the encoded frames, in order."""
    data = b"".join(encode_frame(c, s, t, p) for c, s, t, p in frames)
    demux = Demuxer()
    out: list[tuple[int, int, int, bytes]] = []
    pos, i = 0, 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        out.extend(
            (f.conn_id, f.stream_id, f.msg_type, f.payload) for f in demux.feed(data[pos : pos + step])
        )
        pos += step
        i += 1
    assert out == frames
