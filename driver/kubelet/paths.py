"""Where our two unix sockets live, and their names during a rolling update.

The kubelet watches the registration directory for sockets and dials the DRA socket named in the
registration answer. During a rolling update (``POD_UID`` set) two pods of the DaemonSet run at
once, so each needs its own socket names: reusing one would make the new pod unlink the old pod's
socket and break the kubelet's fallback. An AF_UNIX path holds at most
:data:`MAX_SOCKET_PATH_BYTES` plus the NUL, so long pod UIDs fall back to hashed names, in the
same order as the Go helper.

Before a process replaces a socket file left at one of its paths, it connects to it
(:func:`refuse_live_sockets`): a socket that still answers belongs to a running process (a second
``numadra run`` on the same directories without ``POD_UID``, say), and unlinking it would cut
that process off from the kubelet without it noticing. Only a socket nobody serves is stale.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from driver import defaults
from driver.errors import ConfigError

__all__ = [
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRAR_DIR",
    "DRA_SOCKET_NAME",
    "MAX_SOCKET_PATH_BYTES",
    "SERIALIZE_LOCK_NAME",
    "SOCKET_MODE",
    "SocketPaths",
    "default_plugin_dir",
    "dra_socket_path",
    "refuse_live_sockets",
    "registration_socket_path",
    "socket_answers",
    "socket_paths",
]

#: where the kubelet watches for registration sockets
DEFAULT_REGISTRAR_DIR = defaults.REGISTRAR_DIR
#: the kubelet's per-plugin directories; ours is ``<this>/<driver name>``
DEFAULT_PLUGINS_DIR = defaults.PLUGINS_DIR
#: ``sizeof(sun_path)`` of Linux's ``sockaddr_un``, less the terminating NUL
MAX_SOCKET_PATH_BYTES = 107
DRA_SOCKET_NAME = "dra.sock"
SERIALIZE_LOCK_NAME = "serialize.lock"
#: both sockets: the kubelet (root) connects; nobody else on the host may, whatever the umask
SOCKET_MODE = 0o660


@dataclass(frozen=True, slots=True)
class SocketPaths:
    """The absolute paths one plugin process owns."""

    registration: Path
    dra: Path
    lock: Path


def default_plugin_dir(driver_name: str) -> Path:
    """``/var/lib/kubelet/plugins/<driver>``: sockets, journal and metadata when ``--plugin-dir`` is unset."""
    return DEFAULT_PLUGINS_DIR / driver_name


def _fits(path: Path) -> bool:
    return len(str(path).encode()) <= MAX_SOCKET_PATH_BYTES


def _short_hash(data: str, nbytes: int) -> str:
    digest = hashlib.sha256(data.encode()).digest()[:nbytes]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def registration_socket_path(registrar_dir: Path, driver_name: str, pod_uid: str | None) -> Path:
    """``<driver>-reg.sock``, or the first rolling-update name that fits the AF_UNIX limit."""
    if not pod_uid:
        candidates = [f"{driver_name}-reg.sock"]
    else:
        candidates = [
            f"{driver_name}-{pod_uid}-reg.sock",
            f"{driver_name}-{_short_hash(pod_uid, 8)}-reg.sock",
            f"dra-{_short_hash(driver_name + chr(0) + pod_uid, 16)}-reg.sock",
        ]
    for name in candidates:
        path = registrar_dir / name
        if _fits(path):
            return path
    raise ConfigError(
        f"registration socket path {registrar_dir / candidates[-1]} is longer than "
        f"{MAX_SOCKET_PATH_BYTES} bytes; use a shorter --registrar-dir"
    )


def dra_socket_path(plugin_dir: Path, pod_uid: str | None) -> Path:
    """``dra.sock``, or ``dra-<podUID>.sock`` during a rolling update."""
    path = plugin_dir / (f"dra-{pod_uid}.sock" if pod_uid else DRA_SOCKET_NAME)
    if not _fits(path):
        raise ConfigError(
            f"DRA socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes; use a shorter --plugin-dir"
        )
    return path


def socket_paths(registrar_dir: Path, plugin_dir: Path, driver_name: str, pod_uid: str | None) -> SocketPaths:
    """All paths of one process; relative directories are made absolute (the kubelet needs that)."""
    registrar_dir = registrar_dir.absolute()
    plugin_dir = plugin_dir.absolute()
    return SocketPaths(
        registration=registration_socket_path(registrar_dir, driver_name, pod_uid),
        dra=dra_socket_path(plugin_dir, pod_uid),
        lock=plugin_dir / SERIALIZE_LOCK_NAME,
    )


def socket_answers(path: Path, timeout: float = 1.0) -> bool:
    """True when a process accepts connections on the unix socket at ``path``.

    A connection refused (nobody listens: the file of a process that died) or a missing file is
    False; a full accept queue (``EAGAIN``) or a slow accept (timeout) is a live server: True.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError, NotADirectoryError):
            return False
        except TimeoutError:
            return True
        except OSError as exc:
            return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
    return True


def refuse_live_sockets(paths: SocketPaths) -> None:
    """ConfigError when another process still serves one of our socket paths (see the module doc).

    Files that are not sockets are left to the server's own check; dead sockets to its cleanup.
    """
    for path in (paths.registration, paths.dra):
        try:
            mode = path.lstat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISSOCK(mode) and socket_answers(path):
            raise ConfigError(
                f"socket {path} is served by another running process (another numadra on the same "
                "--plugin-dir and --registrar-dir?); refusing to start and replace it: stop that "
                "process first, or give each instance its own POD_UID"
            )
