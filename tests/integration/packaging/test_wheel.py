"""What the wheel (and so the image, which installs it) holds: numadra's own modules, nothing else.

Builds the wheel the way a user's ``pip install .`` does (``pip wheel --no-deps``, build isolation
on) and reads its file list. The runtime package must not carry tests, benchmarks or scripts, nor
the test doubles and fixtures of ``harness/`` and ``tests/support/`` (the fake apiserver, the test
kubelet client, the host tree generator, ...); ``driver/testing/`` is where a package-internal
copy of them would sit, so it is named too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TEST_DOUBLES = ("driver/testing/", "harness/", "tests/")


def _tracked(*paths: str) -> list[str]:
    return subprocess.run(
        ["git", "ls-files", *paths], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The wheel's file names, built from a copy of the tracked files.

    A copy, because setuptools builds in the source tree and reuses its ``build/lib``: a module
    deleted from the repo but left there would still ship, and the test would not see the repo.
    """
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for path in _tracked("pyproject.toml", "README.md", "driver", "cdi"):
        target = source / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, target)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("numadra-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _sources() -> set[str]:
    """The files setuptools is configured to ship: the packages' modules and typing markers."""
    return {
        path
        for path in _tracked("driver", "cdi")
        if path.endswith((".py", "/py.typed"))
        or (path.startswith("driver/_proto/") and path.endswith(".pyi"))
    }


def test_the_wheel_holds_the_package_sources_and_nothing_else(wheel_files: set[str]) -> None:
    payload = {name for name in wheel_files if ".dist-info/" not in name}
    assert payload == _sources(), (
        f"missing: {sorted(_sources() - payload)[:10]}, unexpected: {sorted(payload - _sources())[:10]}"
    )
    assert not {name for name in payload if name.startswith(("tests/", "bench/", "scripts/", "deploy/"))}


def test_the_wheel_holds_no_test_doubles(wheel_files: set[str]) -> None:
    assert sorted(name for name in wheel_files if name.startswith(TEST_DOUBLES)) == []
    assert sorted(name for name in wheel_files if "fake" in name.rsplit("/", 1)[-1]) == []
