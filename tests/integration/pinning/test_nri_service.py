"""NriService: the NRI plugin of ``numadra run`` on its own thread, against a runtime's real socket."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.errors import ConfigError
from driver.pinning.factory import NriService, nri_service
from harness.fake_nri_runtime import FakeNriRuntime

WAIT = 10.0


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """AF_UNIX paths are limited to 107 bytes: a short directory under /tmp."""
    with tempfile.TemporaryDirectory(prefix="nri", dir="/tmp") as name:
        yield Path(name)


def _service(directory: Path, environ: dict[str, str] | None = None) -> NriService:
    return nri_service(
        socket=directory / "nri.sock",
        claim_lookup=lambda _uid: None,
        node_shared_pool=None,
        pinner_lock=directory / "pinner.lock",
        environ=environ or {},
    )


def _plugin_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "nri-plugin"}


@pytest.mark.parametrize("raw", ["abc", "-1", "9" * 40])
def test_a_bad_inherited_socket_fd_is_a_config_error(short_dir: Path, raw: str) -> None:
    """NRI_PLUGIN_SOCKET that is no descriptor number: a ConfigError naming the variable (exit 2);
    one of 40 digits reached socket(fileno=) and raised OverflowError in the connect thread."""
    with pytest.raises(ConfigError, match="NRI_PLUGIN_SOCKET"):
        _service(short_dir, {"NRI_PLUGIN_SOCKET": raw})


def test_start_connects_in_the_background_and_stop_lets_go(short_dir: Path) -> None:
    """The runtime may come up after the driver: start returns at once, the plugin registers
    once the socket listens, and stop closes the connection and ends the thread."""
    service = _service(short_dir)
    before = _plugin_threads()
    service.start()
    runtime = FakeNriRuntime(short_dir / "nri.sock")  # the runtime starts later
    try:
        conn = runtime.accept(timeout=WAIT)
        assert service.plugin.connected
        service.stop()
        assert _plugin_threads() == before
        assert not service.plugin.connected
        conn.close()
    finally:
        runtime.close()
    service.stop()  # idempotent


def test_stop_without_a_runtime_ends_the_retry_loop(short_dir: Path) -> None:
    """No runtime ever listens: stop still ends the thread that keeps retrying."""
    service = _service(short_dir)
    before = _plugin_threads()
    service.start()
    service.stop()
    assert _plugin_threads() == before
