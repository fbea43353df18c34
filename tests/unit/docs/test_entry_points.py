"""The entry points agree: one CI definition, the README's test command, the lint hooks.

* `make ci` runs `.ci/run` (the one list of CI steps), and `.ci/run` runs the README's test command
  with its pinned seed; `make test` runs that command too.
* Every `make <target>` the docs and scripts name is a target of the Makefile.
* The pre-commit hooks run every check of `make lint`.

The Makefile is read through `make -n` (what make would run, with its variables expanded), so the
checks see what a developer's `make` runs rather than a regex's idea of it. The last tests plant
drifted copies in ``tmp_path`` to prove the checks can fail.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MD = ".md"
#: the Markdown files and scripts whose `make <target>` mentions must name real targets
NAMING_MAKE = ("README" + MD, "CONTRIBUTING" + MD, "docs", ".ci/run", "Makefile")

_README_TEST = re.compile(r"^Run the tests: `([^`]+)`$", re.MULTILINE)
_MAKE_MENTION = re.compile(r"(?<![\w/-])make +([a-z][\w-]*)")
_FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]+`")
_TARGET = re.compile(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", re.MULTILINE)


def _make_n(root: Path, target: str) -> list[str]:
    """The commands `make -n <target>` prints: what the target runs, variables expanded."""
    if not shutil.which("make"):
        pytest.skip("make is not installed (.ci/run installs it)")
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(root), target, "PYTEST_ARGS="],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def readme_test_command(root: Path) -> str:
    """The README's test command, from its "Run the tests: `...`" line."""
    found = _README_TEST.findall((root / ("README" + MD)).read_text())
    assert len(found) == 1, f"README{MD} needs exactly one line 'Run the tests: `<command>`'"
    return str(found[0])


def ci_test_lines(root: Path) -> list[str]:
    """The lines of .ci/run (outside comments) that run pytest."""
    lines = (root / ".ci" / "run").read_text().splitlines()
    return [
        line.strip() for line in lines if "pytest" in line and not line.lstrip().startswith(("#", "echo"))
    ]


def ci_problems(root: Path) -> list[str]:
    """How `make ci`, `make test`, .ci/run and the README disagree, in words; empty when they agree."""
    problems: list[str] = []
    command = readme_test_command(root)
    ci = _make_n(root, "ci")
    if ci != ["NUMADRA_CI_INSTALL=0 bash .ci/run"]:
        problems.append(f"make ci must run .ci/run without installs, and only that; it runs {ci}")
    runs = ci_test_lines(root)
    if len(runs) != 1 or not runs[0].startswith(command + " --randomly-seed="):
        problems.append(f".ci/run must run `{command} --randomly-seed=...` once; it runs {runs}")
    test = _make_n(root, "test")
    if len(test) != 1 or shlex.split(test[0])[1:] != shlex.split(command)[1:] or "python" not in test[0]:
        problems.append(f"make test must run `{command}` (the venv's python); it runs {test}")
    return problems


def make_targets(root: Path) -> set[str]:
    return set(_TARGET.findall((root / "Makefile").read_text()))


def _commands(path: Path) -> str:
    """The text of a file that holds commands: all of a script, the code of a Markdown file (its
    fenced blocks and code spans; in prose "make" is an English verb)."""
    text = path.read_text()
    if path.suffix != MD:
        return text
    blocks = _FENCED.findall(text)
    return "\n".join([*blocks, *_CODE_SPAN.findall(_FENCED.sub("", text))])


def named_targets(root: Path) -> dict[str, set[str]]:
    """target -> the files that name it as `make <target>` (the first word after make)."""
    found: dict[str, set[str]] = {}
    for name in NAMING_MAKE:
        path = root / name
        for doc in sorted(path.glob("*" + MD)) if path.is_dir() else [path]:
            for target in _MAKE_MENTION.findall(_commands(doc)):
                found.setdefault(target, set()).add(doc.relative_to(root).as_posix())
    return found


def _hook_tool(command: str) -> str:
    """`ruff check`, `ruff format`, `mypy`, `lint-imports`: the check a command line runs."""
    argv = shlex.split(command)
    tool = Path(argv[0]).name
    return f"{tool} {argv[1]}" if tool == "ruff" else tool


def lint_problems(root: Path) -> list[str]:
    """Checks of `make lint` that no pre-commit hook runs."""
    lint = {_hook_tool(line) for line in _make_n(root, "lint")}
    config = yaml.safe_load((root / ".pre-commit-config.yaml").read_text())
    hooks = {_hook_tool(hook["entry"]) for repo in config["repos"] for hook in repo["hooks"]}
    return [f"make lint runs {tool}, no pre-commit hook does" for tool in sorted(lint - hooks)]


# --- the repository ---------------------------------------------------------------------------


def test_make_ci_and_ci_run_are_one_definition() -> None:
    """`make ci` is .ci/run minus installs; both run the README's test command, as does `make test`."""
    assert readme_test_command(ROOT) == "python -m pytest -n auto"
    assert ci_problems(ROOT) == []


def test_every_named_make_target_exists() -> None:
    """A `make <target>` in the README, CONTRIBUTING, docs/, .ci/run or the Makefile's help is real."""
    targets = make_targets(ROOT)
    named = named_targets(ROOT)
    assert {"ci", "test", "coverage", "lint"} <= set(named)
    assert {name: sorted(where) for name, where in named.items() if name not in targets} == {}


def test_pre_commit_runs_every_check_of_make_lint() -> None:
    """ruff check, ruff format, mypy and lint-imports run on commit as in `make lint`."""
    assert lint_problems(ROOT) == []


def test_make_coverage_measures_unit_and_integration() -> None:
    """`make coverage` runs pytest with coverage over exactly the unit and integration tiers."""
    (command,) = _make_n(ROOT, "coverage")
    argv = shlex.split(command)
    assert argv[1:4] == ["-m", "pytest", "--cov"]
    assert [a for a in argv if a.startswith("tests/")] == ["tests/unit", "tests/integration"]


# --- the checks can fail ----------------------------------------------------------------------


def _copy(tmp_path: Path) -> Path:
    for name in ("Makefile", "README" + MD, ".pre-commit-config.yaml", ".ci/run"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer has {old!r}: update this planted drift"
    path.write_text(text.replace(old, new))


def test_a_second_list_of_ci_steps_is_caught(tmp_path: Path) -> None:
    """A `make ci` that lists its own steps again, as it once did, is drift."""
    root = _copy(tmp_path)
    _edit(root / "Makefile", "\tNUMADRA_CI_INSTALL=0 bash .ci/run\n", "\t@echo unit\n\t@echo node\n")
    assert [p.split(";")[0] for p in ci_problems(root)] == [
        "make ci must run .ci/run without installs, and only that"
    ]


def test_a_ci_that_stops_running_the_readme_command_is_caught(tmp_path: Path) -> None:
    """.ci/run running the tiers one by one, or unseeded, no longer runs the README's command."""
    root = _copy(tmp_path)
    _edit(
        root / ".ci" / "run",
        "python -m pytest -n auto --randomly-seed=",
        "python -m pytest -n auto tests/unit --randomly-seed=",
    )
    assert len(ci_problems(root)) == 1
    _edit(
        root / ("README" + MD),
        "Run the tests: `python -m pytest -n auto`",
        "Run the tests: `make everything`",
    )
    assert any("make test must run" in p for p in ci_problems(root))


def test_a_lint_check_without_a_hook_is_caught(tmp_path: Path) -> None:
    """Removing the lint-imports hook leaves one check of `make lint` off the commit path."""
    root = _copy(tmp_path)
    config = yaml.safe_load((root / ".pre-commit-config.yaml").read_text())
    config["repos"][0]["hooks"] = [h for h in config["repos"][0]["hooks"] if h["id"] != "lint-imports"]
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    assert lint_problems(root) == ["make lint runs lint-imports, no pre-commit hook does"]


def test_a_named_target_that_does_not_exist_is_caught(tmp_path: Path) -> None:
    """A doc that says `make tests` (no such target) is reported with the file naming it."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "Makefile").write_text("test:\n\ttrue\n")
    for name in ("README" + MD, "CONTRIBUTING" + MD, ".ci/run"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("run `make test`\n")
    (tmp_path / "docs" / ("x" + MD)).write_text("then `make tests`, or make it `remake all`\n")
    named = named_targets(tmp_path)
    assert {k: v for k, v in named.items() if k not in make_targets(tmp_path)} == {"tests": {"docs/x" + MD}}
