"""The CLI front: version output and exit codes."""

from __future__ import annotations

import gc
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


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        pytest.param(
            ["--node-name", "Bad_Node"], "--node-name 'Bad_Node' is not a valid node name", id="node"
        ),
        pytest.param(
            ["--driver-name", "d" * 64],
            "is not a DNS subdomain of at most 63 characters",
            id="driver-too-long",
        ),
    ],
)
def test_discover_rejects_bad_names_with_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """discover checks node and driver names like run does: one line naming the flag, exit 2."""
    assert main(["discover", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("collecting", [True, False])
def test_main_gives_the_caller_its_collector_state_back(collecting: bool) -> None:
    """main() turns the cyclic collector off for the start-up; a caller in this process gets the
    state it had, on or off."""
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        assert main(["version"]) == 0
        assert gc.isenabled() is collecting
        with pytest.raises(SystemExit):
            main(["no-such-command"])
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()
