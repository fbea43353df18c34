"""The docs stand alone: every link resolves in the repository, and nothing names a missing doc.

Two checks over every file of the repository (git's tracked and unignored files, or a walk of the
tree where there is no git):

* every relative link of every Markdown file (``[text](path)``, ``[ref]: path``, ``href``/``src``)
  points at a file or directory in the repository, and a ``#fragment`` at a heading (or an
  ``id``/``name`` anchor) of the Markdown file it points at, slugged the way GitHub does;
* no file, code and comments included, names a Markdown file the repository does not hold: a
  token like ``docs/<name>.md`` or ``<name>.md`` must resolve from the file's directory, from the
  root, or as the tail of a repository path. A doc that only exists outside the repository leaves the reader
  of the repository with nothing, so its facts belong in the repository's own docs.

The tests at the bottom plant broken trees in ``tmp_path`` to prove each check can fail. File
names in this module are built as ``stem + MD`` so that its own text names no missing file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[3]
MD = ".md"

#: directories never read by the tree walk (the fallback without git): tools' output, not sources
_NOT_SOURCES = frozenset(
    {".git", ".venv", "build", "dist", ".cache", "__pycache__", ".mypy_cache", ".ruff_cache"}
    | {".pytest_cache", ".hypothesis", "node_modules"}
)
#: Markdown names that may appear without being repository files, each with why (none today)
EXTERNAL_NAMES: dict[str, str] = {}

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_INLINE_LINK = re.compile(r"\]\(\s*<?([^()\s<>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HTML_ANCHOR = re.compile(r"""\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://\S+")
#: a path-like token ending in .md, matched from the start of the token only (linear time)
_MD_NAME = re.compile(r"(?<![\w./-])[\w./-]*\w\.md(?![\w-])")


@dataclass(frozen=True)
class Problem:
    """One broken reference: where it is, what it names, and why it does not resolve."""

    where: str
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.target} ({self.why})"


def repo_files(root: Path) -> list[Path]:
    """The repository's files: git's tracked and unignored ones, or a walk of ``root`` without git."""
    if (root / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
        return sorted(root / name for name in listed.split("\0") if name and (root / name).is_file())
    found: list[Path] = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _NOT_SOURCES and not d.endswith(".egg-info")]
        found.extend(Path(top, name) for name in files)
    return sorted(found)


def _text(path: Path) -> str | None:
    """A file's text, or None for a binary file (a NUL byte in its first 8 KiB)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _prose_lines(markdown: str, *, keep_code_spans: bool = False) -> list[str]:
    """The lines of a Markdown text outside fenced code and comments (blanked, so line numbers
    hold); code spans blanked too unless kept (a heading's text includes them)."""
    text = _COMMENT.sub(lambda m: "\n" * m.group().count("\n"), markdown)
    lines: list[str] = []
    fence = ""
    for line in text.split("\n"):
        opening = _FENCE.match(line)
        if fence:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = ""
            lines.append("")
        elif opening:
            fence = opening.group(1)
            lines.append("")
        else:
            lines.append(line if keep_code_spans else _CODE_SPAN.sub(" ", line))
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image: its text
    text = text.replace("`", "").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every fragment a link may name in this Markdown text: heading slugs and HTML anchors."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    for line in _prose_lines(markdown, keep_code_spans=True):
        heading = _HEADING.match(line)
        if heading:
            slug = github_slug(heading.group(1))
            found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
            seen[slug] += 1
    found.update(_HTML_ANCHOR.findall(_COMMENT.sub("", markdown)))
    return found


def _links(markdown: str) -> list[tuple[int, str]]:
    """(line number, target) of every link in the Markdown text outside code."""
    out: list[tuple[int, str]] = []
    for number, line in enumerate(_prose_lines(markdown), start=1):
        for pattern in (_INLINE_LINK, _REFERENCE_DEF, _HTML_LINK):
            out.extend((number, target) for target in pattern.findall(line))
    return out


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def link_problems(root: Path, files: list[Path]) -> list[Problem]:
    """Relative links of the Markdown files that point at no file, or at no heading of it."""
    root = root.resolve()
    problems: list[Problem] = []
    texts: dict[Path, str] = {}

    def markdown_of(path: Path) -> str:
        if path not in texts:
            texts[path] = path.read_text(errors="replace")
        return texts[path]

    for doc in (f.resolve() for f in files if f.suffix == MD):
        for number, target in _links(markdown_of(doc)):
            if _SCHEME.match(target):  # https:, mailto:: not this check's business
                continue
            where = f"{doc.relative_to(root)}:{number}"
            path_part, _, fragment = target.partition("#")
            path_part = unquote(path_part)
            if not path_part:
                dest = doc
            elif path_part.startswith("/"):
                dest = (root / path_part.lstrip("/")).resolve()
            else:
                dest = (doc.parent / path_part).resolve()
            if not _inside(root, dest):
                problems.append(Problem(where, target, "outside the repository"))
            elif not dest.exists():
                problems.append(Problem(where, target, "no such file"))
            elif fragment:
                if dest.suffix != MD or not dest.is_file():
                    problems.append(Problem(where, target, "a fragment of a file that is not Markdown"))
                elif unquote(fragment) not in anchors(markdown_of(dest)):
                    problems.append(Problem(where, target, f"no heading #{fragment} in {dest.name}"))
    return problems


def name_problems(root: Path, files: list[Path]) -> list[tuple[str, str]]:
    """(file, name) for every Markdown file name in any text file that resolves to no repo file."""
    root = root.resolve()
    rel = [f.resolve().relative_to(root).as_posix() for f in files]
    existing = set(rel)
    problems: set[tuple[str, str]] = set()
    for path, name in zip(files, rel, strict=True):
        text = _text(path)
        if text is None or MD not in text:
            continue
        for token in _MD_NAME.findall(_URL.sub(" ", text)):
            if token in EXTERNAL_NAMES:
                continue
            here = (path.parent / token).resolve()
            from_root = (root / token).resolve()
            if (_inside(root, here) and here.relative_to(root).as_posix() in existing) or (
                _inside(root, from_root) and from_root.relative_to(root).as_posix() in existing
            ):
                continue
            if any(other.endswith("/" + token.lstrip("./")) for other in existing):
                continue
            problems.add((name, token))
    return sorted(problems)


# --- the repository ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files() -> list[Path]:
    found = repo_files(ROOT)
    assert any(f.name == "README" + MD for f in found), f"no README{MD} under {ROOT}"
    return found


def test_every_relative_link_resolves(files: list[Path]) -> None:
    """Every relative link of every Markdown file reaches a repo file, and its #fragment a heading."""
    problems = link_problems(ROOT, files)
    assert [str(p) for p in problems] == []


def test_no_file_names_a_missing_markdown_file(files: list[Path]) -> None:
    """Docs, code, comments and config name only Markdown files the repository holds."""
    found = set(name_problems(ROOT, files))
    assert sorted(found) == [], "cite the fact, or a doc in the repository"


# --- the checks can fail ----------------------------------------------------------------------


def _plant(root: Path, tree: dict[str, str]) -> list[Path]:
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return repo_files(root)


def test_a_planted_tree_with_broken_links_fails(tmp_path: Path) -> None:
    """A missing file, a missing heading, a path out of the tree: each is reported, with its line."""
    guide, other = "docs/guide" + MD, "docs/other" + MD
    files = _plant(
        tmp_path,
        {
            "README" + MD: (
                f"# Top\n\nSee [the guide]({guide}#second-part) and [gone](docs/gone{MD}).\n"
                f"[up](../outside{MD}) and [wrong](#no-such-heading)\n"
            ),
            guide: (
                f"# Guide\n\n## Second part\n\n[back](../README{MD}#top) [other](other{MD}#missing)\n"
                "[pic](pic.png)\n"
            ),
            other: f"# Other\n\n```\n# not a heading\n```\n[ok](guide{MD}#guide)\n",
        },
    )
    problems = [(p.where, p.target) for p in link_problems(tmp_path, files)]
    assert problems == [
        ("README" + MD + ":3", f"docs/gone{MD}"),
        ("README" + MD + ":4", f"../outside{MD}"),
        ("README" + MD + ":4", "#no-such-heading"),
        (guide + ":5", f"other{MD}#missing"),
        (guide + ":6", "pic.png"),
    ]


def test_links_in_code_are_not_links(tmp_path: Path) -> None:
    """A fenced block or a code span shows Markdown syntax; it is no link and no heading."""
    files = _plant(
        tmp_path,
        {"README" + MD: f"# A\n\n```md\n[x](missing{MD})\n```\n\n`[y](missing{MD})` [z](#a)\n"},
    )
    assert link_problems(tmp_path, files) == []


def test_a_planted_tree_naming_a_missing_doc_fails(tmp_path: Path) -> None:
    """A comment, a docstring or a config naming a Markdown file outside the tree is reported."""
    files = _plant(
        tmp_path,
        {
            "README" + MD: "# R\n",
            "docs/pinning" + MD: "# P\n",
            "pkg/mod.py": (
                f'"""See BLUEPRINT{MD} section 3, docs/pinning{MD} and pinning{MD}."""\n'
                f"# also ../README{MD}, docs/lost{MD} and https://example.org/x/CHANGES{MD}\n"
            ),
            "pyproject.toml": f'readme = "README{MD}"  # see NOTES{MD}\n',
        },
    )
    assert name_problems(tmp_path, files) == [
        ("pkg/mod.py", "BLUEPRINT" + MD),
        ("pkg/mod.py", "docs/lost" + MD),
        ("pyproject.toml", "NOTES" + MD),
    ]


def test_git_lists_the_tree_without_ignored_files(tmp_path: Path) -> None:
    """With git, ignored files are not the repository's: a stray doc in build/ is never read."""
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    _plant(tmp_path, {"README" + MD: "# R\n", ".gitignore": "build/\n", "build/x" + MD: "[a](b)\n"})
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    names = {f.relative_to(tmp_path).as_posix() for f in repo_files(tmp_path)}
    assert names == {"README" + MD, ".gitignore"}


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        pytest.param("Quick start", "quick-start", id="plain"),
        pytest.param("Health and `explain`", "health-and-explain", id="code"),
        pytest.param("Isolated CPUs (`isolcpus=`)", "isolated-cpus-isolcpus", id="punctuation"),
        pytest.param("One claim: a GPU + a NIC", "one-claim-a-gpu--a-nic", id="double-dash"),
        pytest.param("Numbers: `index`, `VISIBLE_DEVICES`", "numbers-index-visible_devices", id="underscore"),
        pytest.param(f"See [the guide](x{MD})", "see-the-guide", id="link"),
        pytest.param("Größe ≥ 1.34", "größe--134", id="unicode"),
    ],
)
def test_github_slug(heading: str, slug: str) -> None:
    """Anchors are made as GitHub makes them, so a link that works there passes here."""
    assert github_slug(heading) == slug


def test_repeated_headings_get_numbered_anchors() -> None:
    """The second "Figures" heading of a page is #figures-1."""
    text = '# Figures\n## Figures\n<a id="x"></a>\n### Isolated (`isolcpus=`)\n'
    assert anchors(text) == {"figures", "figures-1", "x", "isolated-isolcpus"}
