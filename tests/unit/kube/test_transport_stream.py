"""A watch on the transport: lines as they come, a close from another thread, an end told from a cut,
and limits.

A loopback server plays the apiserver's watch answer byte for byte: a chunked head, events in
chunks that split lines anywhere, silences, and an end or a connection it keeps open.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from driver.kube.transport import ConnectionClosedError, ProtocolError, Transport, TransportSettings

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Watcher:
    """Answers one request with ``parts`` (each sent after ``pause`` s), then ends the body or,
    with ``hold``, keeps the connection open until the client goes, or with ``cut`` closes it
    without the last chunk."""

    def __init__(
        self, parts: list[bytes], *, pause: float = 0.0, hold: bool = False, cut: bool = False
    ) -> None:
        self.parts, self.pause, self.hold, self.cut = parts, pause, hold, cut
        self.request = b""
        self.client_gone = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.settimeout(10)
            while b"\r\n\r\n" not in self.request:
                self.request += conn.recv(4096)
            conn.sendall(HEAD)
            for part in self.parts:
                time.sleep(self.pause)
                conn.sendall(part)
            if self.cut:
                return
            if not self.hold:
                conn.sendall(b"0\r\n\r\n")
                return
            try:
                while conn.recv(4096):  # b"" once the client shut its side
                    pass
            except OSError:
                pass
            self.client_gone.set()

    def close(self) -> None:
        self._listener.close()
        self._thread.join(5)


@pytest.fixture
def watchers() -> Iterator[list[_Watcher]]:
    made: list[_Watcher] = []
    yield made
    for watcher in made:
        watcher.close()


def _transport(watcher: _Watcher) -> Transport:
    return Transport(TransportSettings("http", "127.0.0.1", watcher.port), connect_timeout=2.0, timeout=0.2)


def test_lines_come_whole_however_the_chunks_cut_them(watchers: list[_Watcher]) -> None:
    """Events split across chunks (and chunks holding several) read back as whole lines, with
    silences longer than the transport's per-read timeout (0.2 s) between them."""
    events = b'{"type":"ADDED","object":{}}\n{"type":"BOOKMARK","object":{}}\n{"type":"DELETED"}\n'
    parts = [_chunk(events[:7]), _chunk(events[7:40]), _chunk(events[40:])]
    watcher = _Watcher(parts, pause=0.3)
    watchers.append(watcher)
    stream = _transport(watcher).stream("/apis/x?watch=true", {"Authorization": "Bearer t"}, deadline=5.0)
    assert stream.status == 200
    lines = []
    while line := stream.readline():
        lines.append(line)
    stream.close()
    assert b"".join(lines) == events
    assert len(lines) == 3
    assert watcher.request.startswith(b"GET /apis/x?watch=true HTTP/1.1\r\n")
    assert b"Authorization: Bearer t" in watcher.request


def test_close_from_another_thread_ends_a_blocked_read(watchers: list[_Watcher]) -> None:
    """The publisher stops a watch that waits for the next event: the read returns at once and
    the server sees the connection go."""
    watcher = _Watcher([_chunk(b'{"type":"ADDED"}\n')], hold=True)
    watchers.append(watcher)
    stream = _transport(watcher).stream("/w", {}, deadline=30.0)
    assert stream.readline() == b'{"type":"ADDED"}\n'
    ended: list[object] = []

    def read() -> None:
        try:
            ended.append(stream.readline())
        except Exception as exc:
            ended.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.2)
    stream.close()
    reader.join(5)
    assert not reader.is_alive(), "the read waited for its 30 s deadline"
    assert ended  # returned (b"") or raised: either way, no longer blocked
    assert watcher.client_gone.wait(5)


def test_a_silence_longer_than_the_deadline_is_a_timeout(watchers: list[_Watcher]) -> None:
    watcher = _Watcher([], hold=True)
    watchers.append(watcher)
    stream = _transport(watcher).stream("/w", {}, deadline=0.5)
    with pytest.raises(TimeoutError):
        stream.readline()
    stream.close()


def test_a_line_without_end_is_refused_not_buffered_forever(watchers: list[_Watcher]) -> None:
    watcher = _Watcher([_chunk(b"x" * 5000)], hold=True)
    watchers.append(watcher)
    stream = _transport(watcher).stream("/w", {}, deadline=5.0)
    with pytest.raises(ProtocolError, match="longer than 1024 bytes"):
        stream.readline(limit=1024)
    stream.close()


@pytest.mark.parametrize(
    "parts",
    [
        pytest.param([_chunk(b'{"type":"ADDED"}\n')], id="between-chunks"),
        pytest.param([b"10\r\n" + b'{"type":"ADD'], id="inside-a-chunk"),
    ],
)
def test_a_stream_cut_before_its_last_chunk_is_an_error(watchers: list[_Watcher], parts: list[bytes]) -> None:
    """The server (or a proxy) closing the watch without the last chunk is not a clean end:
    a line reader that took EOF for the end would return b"" for it; the stream raises (the watch
    is then retried under the backoff, not renewed at once)."""
    watcher = _Watcher(parts, cut=True)
    watchers.append(watcher)
    stream = _transport(watcher).stream("/w", {}, deadline=5.0)
    with pytest.raises(ConnectionClosedError, match=r"before its end|into the answer"):
        while stream.readline():
            pass
    stream.close()


def test_a_stream_that_ends_with_its_last_chunk_ends_cleanly(watchers: list[_Watcher]) -> None:
    watcher = _Watcher([_chunk(b'{"type":"ADDED"}\n')])
    watchers.append(watcher)
    stream = _transport(watcher).stream("/w", {}, deadline=5.0)
    assert [stream.readline(), stream.readline()] == [b'{"type":"ADDED"}\n', b""]
    stream.close()
