"""The docs stay current: every driver package is in the architecture map, and links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_architecture_names_every_driver_package() -> None:
    """docs/architecture.md has a row for each package under driver/ (a new one must be described)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(
        p.parent.name for p in (ROOT / "driver").glob("*/__init__.py") if not p.parent.name.startswith("_")
    )
    assert packages
    missing = [name for name in packages if f"`driver/{name}/`" not in text]
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    """Every relative link in the README and docs/ points at a file that exists."""
    broken = [
        target
        for target in _LINK.findall(doc.read_text())
        if "://" not in target and not (doc.parent / target).exists()
    ]
    assert broken == []
