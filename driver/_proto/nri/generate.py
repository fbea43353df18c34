"""Regenerate the NRI and ttrpc message modules in this folder from ``api/proto/nri``.

Messages only (``--python_out`` and ``--pyi_out``): ttrpc is not gRPC, numadra's own code in
``driver.pinning.nri`` frames and dispatches the calls. protoc records the module name
``nri.<stem>_pb2`` (from the proto path); it is rewritten to the importable
``driver._proto.nri.<stem>_pb2`` so message classes report their real module. The output is
byte-for-byte deterministic for the pinned grpcio-tools version, which a unit test checks.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

__all__ = ["PROTOS", "generate", "generated_files", "main"]

#: module stem -> proto path relative to ``api/proto``
PROTOS: dict[str, str] = {"api": "nri/api.proto", "ttrpc": "nri/ttrpc.proto"}

_SUFFIXES = ("_pb2.py", "_pb2.pyi")
_PROTO_ROOT = Path(__file__).resolve().parents[3] / "api" / "proto"
_MODULE_NAME = re.compile(r"(_builder\.BuildTopDescriptorsAndMessages\(DESCRIPTOR, )'nri\.(\w+)'")


def generated_files() -> list[str]:
    """Every file :func:`generate` writes, sorted."""
    return sorted(stem + suffix for stem in PROTOS for suffix in _SUFFIXES)


def generate(out_dir: Path, proto_root: Path = _PROTO_ROOT) -> list[Path]:
    """Compile the NRI protos into ``out_dir``; return the written paths."""
    from grpc_tools import protoc

    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="numadra-nri-protoc-") as tmp:
        work = Path(tmp)
        args = ["grpc_tools.protoc", f"-I{proto_root}", f"--python_out={work}", f"--pyi_out={work}"]
        if protoc.main([*args, *PROTOS.values()]) != 0:
            raise RuntimeError(f"protoc failed for {sorted(PROTOS.values())} under {proto_root}")
        for stem in PROTOS:
            for suffix in _SUFFIXES:
                text = (work / "nri" / f"{stem}{suffix}").read_text(encoding="utf-8")
                if suffix == "_pb2.py":
                    text, count = _MODULE_NAME.subn(r"\1'driver._proto.nri.\2'", text)
                    if count != 1:
                        raise RuntimeError(f"{stem}: expected one module name in the generated code, found {count}")
                target = out_dir / f"{stem}{suffix}"
                target.write_text(text, encoding="utf-8")
                written.append(target)
    return written


def main() -> int:
    """Regenerate in place, next to this file."""
    for path in generate(Path(__file__).resolve().parent):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
