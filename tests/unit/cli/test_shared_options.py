"""The options several subcommands take are declared once: one help text and one default each."""

from __future__ import annotations

import pytest

from driver.cli import EXIT_OK, main
from driver.cli.options import SHARED

#: the command lines whose --help is read, and the shared flags each takes
TAKES = {
    ("discover",): {
        "--host-root",
        "--node-name",
        "--driver-name",
        "--reserved-cpus",
        "--isolated-cpus",
        "--devices",
        "--node-allocatable",
        "--aux-cpus",
        "--numa-node-list",
        "--cdi-dir",
        "--nvidia-driver-root",
    },
    ("state",): {"--driver-name", "--plugin-dir", "--cdi-dir", "--node-name", "--host-root"},
    ("explain",): {"--kubeconfig", "--host-root", "--node-name", "--driver-name", "--plugin-dir"},
    ("health", "clear"): {"--driver-name", "--plugin-dir"},
    ("run",): set(SHARED),
}


def _help(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == EXIT_OK
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


@pytest.mark.parametrize("argv", list(TAKES), ids=[" ".join(a) for a in TAKES])
def test_a_shared_flag_has_one_help_in_every_subcommand(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    """Each subcommand shows the shared declaration of each shared flag it takes, and no other."""
    text = _help(capsys, argv)
    for flag, option in SHARED.items():
        if flag in TAKES[argv]:
            assert f"{flag} " in text
            assert option.help in text, f"{' '.join(argv)} {flag}: not the shared help"
        else:
            assert f"{flag} " not in text, f"{' '.join(argv)} takes {flag}"
