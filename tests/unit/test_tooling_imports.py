"""bench/, scripts/ and harness/ never import the test suite.

The benchmarks and scripts share the test doubles and host-tree generators through ``harness/``
(neither the wheel nor the image carries it); the test suite itself is no library: a benchmark
that imported ``tests`` would break whenever a test moved. The second test proves the scan fails
on such an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOLING = ("bench", "scripts", "harness")


def _imports_of_tests(root: Path) -> list[str]:
    found: list[str] = []
    for top in TOOLING:
        for path in sorted((root / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                found += [
                    f"{path.relative_to(root)}:{node.lineno} imports {n}"
                    for n in names
                    if n == "tests" or n.startswith("tests.")
                ]
    return found


def test_bench_scripts_and_harness_do_not_import_tests() -> None:
    assert _imports_of_tests(REPO) == []


def test_the_scan_finds_a_planted_import(tmp_path: Path) -> None:
    for top in TOOLING:
        (tmp_path / top).mkdir()
    (tmp_path / "bench" / "x.py").write_text("def f() -> None:\n    from tests.support import poll\n")
    (tmp_path / "scripts" / "y.py").write_text("import tests.conftest\n")
    assert _imports_of_tests(tmp_path) == [
        "bench/x.py:2 imports tests.support",
        "scripts/y.py:1 imports tests.conftest",
    ]
