"""The CLI front: version output and exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from driver import __version__
from driver.cli import main


def test_version_prints_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``numadra version`` prints the package version and exits 0."""
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == f"numadra {__version__}"


def test_unknown_subcommand_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad subcommand exits 2 with a one-line reason."""
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("numadra: ")
    assert len(err.strip().splitlines()) == 1


def test_parser_loads_no_heavy_library() -> None:
    """Every command (the OCI hook run per container too) builds the parser: it must stay light."""
    code = (
        "import sys\n"
        "from driver.cli import build_parser\n"
        "build_parser()\n"
        "heavy = ('yaml', 'grpc', 'google', 'prometheus_client', 'kubernetes')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
