"""NRI's two framing layers on one unix stream: the connection multiplexer and ttrpc.

Layout of every message on the socket (all integers big-endian)::

    mux header   u32 conn_id   u32 length            (length = bytes that follow for this conn)
    ttrpc header u32 length    u32 stream_id  u8 type  u8 flags
    payload      a ttrpc Request (type 1) or Response (type 2) protobuf

Connection 1 carries the *Plugin* service (the runtime calls, the plugin serves); connection 2
the *Runtime* service (the plugin calls ``RegisterPlugin``). Both run over the same socket, so a
peer is client and server at once. Client-initiated ttrpc streams have odd ids. A mux frame is
not guaranteed to hold exactly one ttrpc message, so each connection's bytes are reassembled as
a stream before ttrpc frames are cut from them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from driver.errors import PinningError

__all__ = [
    "MAX_MESSAGE",
    "MSG_DATA",
    "MSG_REQUEST",
    "MSG_RESPONSE",
    "PLUGIN_SERVICE_CONN",
    "RUNTIME_SERVICE_CONN",
    "Demuxer",
    "Frame",
    "encode_frame",
]

PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2
MSG_REQUEST = 1
MSG_RESPONSE = 2
MSG_DATA = 3
#: largest ttrpc payload a peer accepts
MAX_MESSAGE = 4 << 20

_MUX = struct.Struct(">II")
_TTRPC = struct.Struct(">IIBB")


@dataclass(frozen=True, slots=True)
class Frame:
    """One ttrpc message received on one multiplexed connection."""

    conn_id: int
    stream_id: int
    msg_type: int
    flags: int
    payload: bytes


def encode_frame(conn_id: int, stream_id: int, msg_type: int, payload: bytes, flags: int = 0) -> bytes:
    """One ttrpc message wrapped in one mux frame, ready for a single ``sendall``."""
    if len(payload) > MAX_MESSAGE:
        raise PinningError(f"ttrpc message of {len(payload)} bytes exceeds the {MAX_MESSAGE} byte limit")
    body = _TTRPC.pack(len(payload), stream_id, msg_type, flags) + payload
    return _MUX.pack(conn_id, len(body)) + body


class Demuxer:
    """Incremental parser: feed socket bytes, get complete ttrpc frames per connection."""

    def __init__(self) -> None:
        self._trunk = bytearray()
        self._conns: dict[int, bytearray] = {}

    def feed(self, data: bytes) -> Iterator[Frame]:
        """Add bytes read from the socket; yield every frame that is now complete."""
        self._trunk += data
        while len(self._trunk) >= _MUX.size:
            conn_id, length = _MUX.unpack_from(self._trunk)
            if length > MAX_MESSAGE + _TTRPC.size:
                raise PinningError(
                    f"NRI mux frame of {length} bytes on connection {conn_id} exceeds the limit"
                )
            end = _MUX.size + length
            if len(self._trunk) < end:
                return
            self._conns.setdefault(conn_id, bytearray()).extend(self._trunk[_MUX.size : end])
            del self._trunk[:end]
            yield from self._frames(conn_id)

    def _frames(self, conn_id: int) -> Iterator[Frame]:
        buf = self._conns[conn_id]
        while len(buf) >= _TTRPC.size:
            length, stream_id, msg_type, flags = _TTRPC.unpack_from(buf)
            if length > MAX_MESSAGE:
                raise PinningError(
                    f"ttrpc message of {length} bytes on connection {conn_id} exceeds the limit"
                )
            end = _TTRPC.size + length
            if len(buf) < end:
                return
            payload = bytes(buf[_TTRPC.size : end])
            del buf[:end]
            yield Frame(conn_id, stream_id, msg_type, flags, payload)
