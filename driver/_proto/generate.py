"""Regenerate the committed stubs in this folder from ``api/proto`` with grpcio-tools.

Run ``python -m driver._proto.generate`` after editing a .proto file. The output is deterministic:
a unit test regenerates into a temporary folder and fails on any byte difference, so the
grpcio-tools version is pinned exactly in pyproject.toml.

protoc names Python modules after the proto path (``k8s.io/.../dra/v1/api.proto`` becomes the
module ``k8s.io....v1.api_pb2``), which cannot be imported from a package. We therefore give every
proto a flat module name and rewrite the two places that name the module: the ``*_pb2_grpc.py``
import of its messages (made relative) and the module name recorded in ``*_pb2.py``.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

__all__ = ["PROTOS", "generate", "generated_files", "main"]

#: flat module stem -> proto path relative to the include root ``api/proto``
PROTOS: dict[str, str] = {
    "dra_v1": "k8s.io/kubelet/pkg/apis/dra/v1/api.proto",
    "dra_v1beta1": "k8s.io/kubelet/pkg/apis/dra/v1beta1/api.proto",
    "health_v1": "k8s.io/kubelet/pkg/apis/dra-health/v1/api.proto",
    "health_v1alpha1": "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1/api.proto",
    "pluginregistration_v1": "k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto",
}

_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
_PROTO_ROOT = Path(__file__).resolve().parents[2] / "api" / "proto"
_GRPC_IMPORT = re.compile(r"^from \S+ import api_pb2 as (\w+)$", re.MULTILINE)
_PB2_MODULE = re.compile(
    r"^(_builder\.BuildTopDescriptorsAndMessages\(DESCRIPTOR, )'[\w.]+'(, _globals\))$", re.MULTILINE
)


def generated_files() -> list[str]:
    """Names of every file :func:`generate` writes, sorted."""
    return sorted(stem + suffix for stem in PROTOS for suffix in _SUFFIXES)


def _fix(stem: str, text: str, suffix: str) -> str:
    """Point the generated text at the flat module names; fail loudly if protoc's output changed."""
    if suffix == "_pb2_grpc.py":
        text, count = _GRPC_IMPORT.subn(rf"from . import {stem}_pb2 as \1", text)
        if count != 1:
            raise RuntimeError(f"{stem}: expected one message import in the gRPC stub, found {count}")
    elif suffix == "_pb2.py":
        text, count = _PB2_MODULE.subn(rf"\1'driver._proto.{stem}_pb2'\2", text)
        if count != 1:
            raise RuntimeError(f"{stem}: expected one module name in the message code, found {count}")
    return text


def generate(out_dir: Path, proto_root: Path = _PROTO_ROOT) -> list[Path]:
    """Compile every proto into ``out_dir`` under its flat name; return the written paths."""
    from grpc_tools import protoc

    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="numadra-protoc-") as tmp:
        for stem, proto in PROTOS.items():
            # one protoc run per file into its own folder: protoc's own output layout (it rewrites
            # "k8s.io" and "dra-health") then never matters, there is exactly one of each file
            work = Path(tmp) / stem
            work.mkdir()
            args = [
                "grpc_tools.protoc",
                f"-I{proto_root}",
                f"--python_out={work}",
                f"--pyi_out={work}",
                f"--grpc_python_out={work}",
                proto,
            ]
            if protoc.main(args) != 0:
                raise RuntimeError(f"protoc failed for {proto} under {proto_root}")
            for suffix in _SUFFIXES:
                (source,) = work.rglob(f"api{suffix}")
                target = out_dir / f"{stem}{suffix}"
                target.write_text(_fix(stem, source.read_text(encoding="utf-8"), suffix), encoding="utf-8")
                written.append(target)
    return written


def main() -> int:
    """Regenerate the stubs in place, next to this file."""
    for path in generate(Path(__file__).resolve().parent):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
