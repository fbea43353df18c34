"""The Go peer of bench/prepare.py (bench/goprep/): built once per source into a cache dir.

The binary never enters the repository: it is built with the local Go toolchain into
``~/.cache/numadra-bench/goprep-<stamp>`` (``$NUMADRA_BENCH_CACHE`` moves the cache), where the
stamp is a hash of every file of ``bench/goprep`` (go.mod, go.sum, the sources) and of
``go version``. A changed source or toolchain builds a new binary; an unchanged one is reused.
The modules come through the Go module proxy (``GOPROXY``, pinned by the committed go.sum).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["GoPeerError", "go_peer_binary"]

SOURCE = Path(__file__).resolve().parent / "goprep"


class GoPeerError(RuntimeError):
    """No Go toolchain, or the build failed (the message says which, with the build's output)."""


def _cache_dir() -> Path:
    env = os.environ.get("NUMADRA_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "numadra-bench"


def _stamp(go: str) -> str:
    digest = hashlib.sha256()
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True, timeout=60)
    digest.update(version.stdout.encode())
    for path in sorted(SOURCE.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def go_peer_binary(build_timeout_s: float = 1800) -> Path:
    """The path of the built peer, building it first when the cache has none for this source.

    A cold build compiles client-go and gRPC: minutes on two cores (5.4 min measured here, with
    the module cache already filled); a warm one is a file check.
    """
    go = shutil.which("go")
    if go is None:
        raise GoPeerError("no `go` on PATH: the Go peer (bench/goprep) cannot be built")
    binary = _cache_dir() / f"goprep-{_stamp(go)}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(binary.name + ".partial")
    env = {**os.environ, "GOFLAGS": "-mod=readonly"}
    try:
        built = subprocess.run(
            [go, "build", "-trimpath", "-o", str(partial), "."],
            check=False,
            cwd=SOURCE,
            env=env,
            capture_output=True,
            text=True,
            timeout=build_timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        raise GoPeerError(f"go build of bench/goprep took over {build_timeout_s:.0f} s") from exc
    if built.returncode != 0:
        raise GoPeerError(f"go build of bench/goprep failed:\n{built.stderr[-4000:]}")
    partial.rename(binary)  # only a finished build carries the stamp's name
    return binary
