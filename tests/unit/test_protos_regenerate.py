"""The committed gRPC stubs are exactly what grpcio-tools generates from api/proto."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver._proto import generate as gen

PROTO_DIR = Path(gen.__file__).resolve().parent


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    """Regenerating the stubs from the .proto files reproduces the committed files byte for byte."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) is needed to regenerate stubs")
    written = gen.generate(tmp_path)
    assert sorted(p.name for p in written) == gen.generated_files()
    differing = [
        name
        for name in gen.generated_files()
        if (tmp_path / name).read_bytes() != (PROTO_DIR / name).read_bytes()
    ]
    assert differing == [], f"stale stubs, run `python -m driver._proto.generate`: {differing}"


def test_no_stray_generated_files() -> None:
    """driver/_proto holds only the expected stubs, the package marker and the generator."""
    present = sorted(p.name for p in PROTO_DIR.iterdir() if p.is_file() and p.suffix in {".py", ".pyi"})
    assert present == sorted([*gen.generated_files(), "__init__.py", "generate.py"])


#: what protoc writes today: the module name in the message code, the message import in the stub
_PB2 = "_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, 'k8s.io.api_pb2', _globals)\n"
_GRPC = "from k8s.io.kubelet import api_pb2 as k8s__io_dot_api__pb2\n"


@pytest.mark.parametrize(
    ("pb2", "grpc", "message"),
    [
        pytest.param(_PB2, "import grpc\n", "one message import in the gRPC stub", id="grpc-import-missing"),
        pytest.param(
            "DESCRIPTOR = None\n", _GRPC, "one module name in the message code", id="module-name-missing"
        ),
    ],
)
def test_generator_fails_loudly_when_protoc_output_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pb2: str, grpc: str, message: str
) -> None:
    """If a new protoc lays out its output differently, the generator stops instead of guessing.

    protoc is replaced by one that writes the changed layout where the real one writes its files.
    """
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (test extra) runs the generator")

    def changed_protoc(args: list[str]) -> int:
        out = Path(next(a for a in args if a.startswith("--python_out=")).split("=", 1)[1])
        (out / "api_pb2.py").write_text(pb2)
        (out / "api_pb2.pyi").write_text("")
        (out / "api_pb2_grpc.py").write_text(grpc)
        return 0

    monkeypatch.setattr(protoc, "main", changed_protoc)
    with pytest.raises(RuntimeError, match=f"dra_v1: expected {message}"):
        gen.generate(tmp_path)
