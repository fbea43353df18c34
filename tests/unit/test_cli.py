"""The CLI front: version output and exit codes."""

from __future__ import annotations

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
