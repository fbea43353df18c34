"""Container images for the node tier, made locally from Debian's busybox-static: nothing is pulled.

An image is one layer (``/bin/busybox`` and a symlink per applet) written as a docker-archive
(``manifest.json`` + config + layer tar, the format ``docker save`` / ``podman save`` write), which
``ctr -n k8s.io images import`` loads into containerd's image store for the CRI plugin. Writing
the archive directly (rather than ``podman import`` + ``podman save``) leaves nothing in podman's
store on the host and needs no podman; the format is small and documented (docker's
image/spec/v1.2 "save" layout).

Two images: ``busybox`` for the workloads and ``pause`` for pod sandboxes (a shell that exits on
SIGTERM, so sandbox stops are quick).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

__all__ = ["BUSYBOX_IMAGE", "PAUSE_CMD", "PAUSE_IMAGE", "busybox_binary", "write_image_archive"]

BUSYBOX_IMAGE = "localhost/numadra-node/busybox:1"
PAUSE_IMAGE = "localhost/numadra-node/pause:1"
PAUSE_CMD = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]


def busybox_binary() -> Path | None:
    """Debian's static busybox (package busybox-static), None when not installed."""
    for candidate in (Path("/bin/busybox"), Path("/usr/bin/busybox")):
        if candidate.is_file():
            res = subprocess.run([str(candidate), "--list"], capture_output=True, text=True, check=False)
            if res.returncode == 0 and "sh" in res.stdout.split():
                return candidate
    return None


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    tar.addfile(info)


def _layer(busybox: Path) -> bytes:
    """The one layer: /bin/busybox, /bin/<applet> -> busybox, and the usual empty dirs."""
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "run", "var", "usr", "usr/bin"):
            _add_dir(tar, d)
        _add_dir(tar, "tmp", 0o1777)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in sorted(set(applets) - {"busybox"}):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(passwd))
    return buf.getvalue()


def write_image_archive(path: Path, reference: str, busybox: Path, cmd: list[str]) -> Path:
    """A docker-archive of a one-layer busybox image tagged ``reference`` running ``cmd``."""
    layer = _layer(busybox)
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/bin:/usr/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created_by": "numadra node tier: busybox-static rootfs"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": [f"{layer_digest}/layer.tar"]}]
    with tarfile.open(path, "w") as tar:
        for name, data in (
            (f"{layer_digest}/layer.tar", layer),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
