"""The Go peers of bench/prepare.py, each built once into a cache dir.

* ``goprep`` (bench/goprep/): built into ``~/.cache/numadra-bench/goprep-<stamp>``, where the stamp
  is a hash of every file of ``bench/goprep`` (go.mod, go.sum, the sources) and of ``go version``.
  Its modules come through the Go module proxy, pinned by the committed go.sum.
* the upstream example driver's kubelet plugin (``sigs.k8s.io/dra-example-driver``,
  ``cmd/dra-example-kubeletplugin``, :data:`EXAMPLE_VERSION`): built from its own module as
  published, into ``~/.cache/numadra-bench/dra-example-kubeletplugin-<version>-<stamp>`` (stamp:
  ``go version``). Neither its code nor the binary enters the repository.

``$NUMADRA_BENCH_CACHE`` moves the cache. A changed source, version or toolchain builds a new
binary; an unchanged one is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["EXAMPLE_MODULE", "EXAMPLE_VERSION", "GoPeerError", "example_peer_binary", "go_peer_binary"]

SOURCE = Path(__file__).resolve().parent / "goprep"

#: the upstream example driver, as users run it (the release its chart ships)
EXAMPLE_MODULE = "sigs.k8s.io/dra-example-driver"
EXAMPLE_VERSION = "v0.4.0"
EXAMPLE_PACKAGE = "./cmd/dra-example-kubeletplugin"


class GoPeerError(RuntimeError):
    """No Go toolchain, or the build failed (the message says which, with the build's output)."""


def _cache_dir() -> Path:
    env = os.environ.get("NUMADRA_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "numadra-bench"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise GoPeerError("no `go` on PATH: the Go peers (bench/goprep, the example driver) cannot be built")
    return go


def _go_version(go: str) -> bytes:
    return subprocess.run(
        [go, "version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.encode()


def _stamp(go: str) -> str:
    digest = hashlib.sha256()
    digest.update(_go_version(go))
    for path in sorted(SOURCE.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _build(go: str, binary: Path, cwd: Path, package: str, what: str, timeout_s: float) -> Path:
    """``go build`` of ``package`` in the module at ``cwd`` into ``binary`` (via a partial name)."""
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(binary.name + ".partial")
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"}
    try:
        built = subprocess.run(
            [go, "build", "-trimpath", "-o", str(partial), package],
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        raise GoPeerError(f"go build of {what} took over {timeout_s:.0f} s") from exc
    if built.returncode != 0:
        raise GoPeerError(f"go build of {what} failed:\n{built.stderr[-4000:]}")
    partial.rename(binary)  # only a finished build carries the stamp's name
    return binary


def go_peer_binary(build_timeout_s: float = 1800) -> Path:
    """The path of the built bench/goprep, building it first when the cache has none for this source.

    A cold build compiles client-go and gRPC: minutes on two cores (5.4 min measured here, with
    the module cache already filled); a warm one is a file check.
    """
    go = _go()
    binary = _cache_dir() / f"goprep-{_stamp(go)}"
    if binary.exists():
        return binary
    return _build(go, binary, SOURCE, ".", "bench/goprep", build_timeout_s)


def example_peer_binary(build_timeout_s: float = 1800) -> Path:
    """The path of the upstream example driver's kubelet plugin, built first when not cached.

    ``go install <module>/cmd/dra-example-kubeletplugin@<version>`` would be the one-line way, but
    it also reads the module's version list for its deprecation check, and a module proxy may
    serve the version and refuse the list. So the exact version is fetched with ``go mod
    download`` (checked against the checksum database like any module) and its command is built
    in the module's own directory with the module's own go.mod and go.sum: the same build.
    """
    go = _go()
    stamp = hashlib.sha256(_go_version(go)).hexdigest()[:12]
    binary = _cache_dir() / f"dra-example-kubeletplugin-{EXAMPLE_VERSION}-{stamp}"
    if binary.exists():
        return binary
    target = f"{EXAMPLE_MODULE}@{EXAMPLE_VERSION}"
    try:
        fetched = subprocess.run(
            [go, "mod", "download", "-json", target],
            check=False,
            capture_output=True,
            text=True,
            timeout=build_timeout_s,
            cwd="/",  # outside any module: the download adds to no go.mod
        )
    except subprocess.TimeoutExpired as exc:
        raise GoPeerError(f"go mod download {target} took over {build_timeout_s:.0f} s") from exc
    try:
        module_dir = Path(json.loads(fetched.stdout)["Dir"])
    except (ValueError, KeyError, TypeError):
        raise GoPeerError(
            f"go mod download {target} failed:\n{(fetched.stdout + fetched.stderr)[-4000:]}"
        ) from None
    return _build(go, binary, module_dir, EXAMPLE_PACKAGE, target, build_timeout_s)
