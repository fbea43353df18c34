"""The committed NRI/ttrpc message modules are exactly what grpcio-tools generates from api/proto/nri."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver._proto.nri import generate as gen

NRI_DIR = Path(gen.__file__).resolve().parent


def test_committed_nri_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    """Regenerating from the .proto files reproduces the committed files byte for byte."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) is needed to regenerate stubs")
    written = gen.generate(tmp_path)
    assert sorted(p.name for p in written) == gen.generated_files()
    differing = [
        n for n in gen.generated_files() if (tmp_path / n).read_bytes() != (NRI_DIR / n).read_bytes()
    ]
    assert differing == [], f"stale stubs, run `python -m driver._proto.nri.generate`: {differing}"


def test_no_stray_files() -> None:
    """driver/_proto/nri holds only the generated modules, the package marker and the generator."""
    present = sorted(p.name for p in NRI_DIR.iterdir() if p.is_file() and p.suffix in {".py", ".pyi"})
    assert present == sorted([*gen.generated_files(), "__init__.py", "generate.py"])
