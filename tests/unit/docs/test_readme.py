"""The front-page docs name only what exists: numadra commands, flags and repository paths.

An operator copies commands from the README; a flag renamed in the code and not in the README is a
command that fails on their node. So:

* every `numadra <subcommand> ...` in the README (its code blocks and code spans) parses with
  numadra's own argument parser;
* every `--flag` in a code span of the README and docs/design.md is an option of some numadra
  subcommand (other tools' flags appear only inside whole command lines, which this does not read);
* every repository path the README, CONTRIBUTING and docs/design.md name exists.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from driver.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
MD = ".md"
README = ROOT / ("README" + MD)
FLAG_DOCS = [README, ROOT / "docs" / ("design" + MD)]
PATH_DOCS = [README, ROOT / ("CONTRIBUTING" + MD), ROOT / "docs" / ("design" + MD)]

_FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
#: a numadra command line (first on its line, or run by `kubectl exec ... --`), up to a shell
#: comment, redirection, pipe or the end of the line
_COMMAND = re.compile(r"(?:^\s*|(?<= -- ))numadra +([a-z][\w-]*[^#>|;&\n`]*)")
_FLAG = re.compile(r"^(--[a-z][\w-]*)(?:[ =]\S+)?$")
_REPO_PATH = re.compile(r"(?<![\w./-])((?:\.ci|api|bench|cdi|deploy|docs|driver|scripts|tests)/[\w./-]*)")


def _code(text: str) -> list[str]:
    """The code of a Markdown text: each fenced block's lines and each code span."""
    found: list[str] = []
    for block in _FENCED.findall(text):
        found.extend(block.splitlines())
    found.extend(_CODE_SPAN.findall(_FENCED.sub("", text)))
    return found


def readme_commands(text: str) -> list[list[str]]:
    """argv (without `numadra`) of every numadra command line in the Markdown text's code."""
    commands: list[list[str]] = []
    for line in _code(text):
        for match in _COMMAND.findall(line):
            commands.append(shlex.split(match.replace('"$pod"', "pod")))
    return commands


def parse_problem(argv: list[str]) -> str | None:
    """Why numadra's parser refuses this argv, or None when it parses."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            return err.getvalue().strip() or f"exit {exc.code}"
    return None


def numadra_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of the parser and its subcommands, nested ones included.

    argparse has no public view of a parser's actions; ``_actions`` is how its own help is built.
    """
    options: set[str] = set()
    for action in parser._actions:
        options.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                options |= numadra_options(sub)
    return options


def code_flags(text: str) -> set[str]:
    """`--flag` and `--flag value` code spans of a Markdown text: the flags its prose names."""
    return {m.group(1) for span in _CODE_SPAN.findall(text) if (m := _FLAG.match(span.strip()))}


def missing_paths(root: Path, text: str) -> list[str]:
    """Repository paths (`deploy/...`, `tests/...`) named in the text that do not exist under root."""
    named = {p.rstrip(".,") for p in _REPO_PATH.findall(text)}
    return sorted(p for p in named if not (root / p).exists())


def test_every_numadra_command_of_the_readme_parses() -> None:
    """`numadra discover -o table`, the explain and state lines: numadra's parser accepts each."""
    commands = readme_commands(README.read_text())
    assert ["discover", "-o", "table"] in commands
    assert {argv[0] for argv in commands} >= {"discover", "explain", "state", "health"}
    assert {" ".join(argv): parse_problem(argv) for argv in commands if parse_problem(argv)} == {}


@pytest.mark.parametrize("doc", FLAG_DOCS, ids=lambda p: p.name)
def test_every_flag_named_is_a_numadra_option(doc: Path) -> None:
    """A `--flag` in the prose is one numadra has (renamed or removed flags fail here)."""
    flags = code_flags(doc.read_text())
    assert "--host-root" in flags
    assert sorted(flags - numadra_options(build_parser())) == []


@pytest.mark.parametrize("doc", PATH_DOCS, ids=lambda p: p.name)
def test_every_repository_path_named_exists(doc: Path) -> None:
    """`deploy/kustomize/base`, `scripts/build-image.sh`, ...: each is in the repository."""
    assert missing_paths(ROOT, doc.read_text()) == []


def test_the_checks_catch_a_wrong_command_flag_and_path(tmp_path: Path) -> None:
    """A renamed subcommand, a bad choice, a flag numadra lacks and a missing path are each caught."""
    (tmp_path / "deploy").mkdir()
    text = (
        "```console\nnumadra discovery -o table\nnumadra discover -o pdf   # a comment\n```\n"
        "Use `--host-roots` or `--pinning nri`; files in `deploy/` and `deploy/kustomise/base`.\n"
    )
    problems = [parse_problem(argv) for argv in readme_commands(text)]
    assert len(problems) == 2
    assert all(problems)
    assert "invalid choice: 'discovery'" in str(problems[0])
    assert "invalid choice: 'pdf'" in str(problems[1])
    assert code_flags(text) - numadra_options(build_parser()) == {"--host-roots"}
    assert missing_paths(tmp_path, text) == ["deploy/kustomise/base"]
