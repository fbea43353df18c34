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


@pytest.mark.parametrize(
    ("suffix", "text"),
    [
        pytest.param("_pb2_grpc.py", "import grpc\n", id="grpc-import-missing"),
        pytest.param("_pb2.py", "DESCRIPTOR = None\n", id="module-name-missing"),
    ],
)
def test_generator_fails_loudly_when_protoc_output_changes(suffix: str, text: str) -> None:
    """If a new protoc lays out its output differently, the generator stops instead of guessing."""
    with pytest.raises(RuntimeError, match="expected one"):
        gen._fix("dra_v1", text, suffix)
