"""Every file ``driver/`` and ``cdi/`` read goes through :mod:`driver.untrusted.files`.

The rule is checked on the source (AST), so a raw read added anywhere later fails here, not in a
review: a builtin ``open()``, ``io.open``/``os.fdopen``/``io.FileIO``, any ``.open(...)``,
``.read_text()`` or ``.read_bytes()`` call, and every ``os.open`` outside the primitive. The only
exceptions are listed in :data:`ALLOWED`, each with the reason: writes numadra fully owns (a temp
file created ``O_EXCL``, an append to its own log, a cgroup write) and directory descriptors. An
allowed ``os.open`` must still carry ``O_WRONLY`` or ``O_DIRECTORY`` in its flags, so no read can
hide behind an entry. The second test plants raw reads in a copy of the tree and shows the check
catches them.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the primitive itself: the one module that may call ``os.open`` to read
PRIMITIVE = "driver/untrusted/files.py"

#: (file, enclosing function or "*", callee) -> why it is not a read
ALLOWED: dict[tuple[str, str, str], str] = {
    # cdi/io.py: the atomic writer walks directories with O_DIRECTORY descriptors and creates its
    # temp file O_EXCL | O_NOFOLLOW; nothing is read through either
    ("cdi/io.py", "_open_dir_under", "os.open"): "directory descriptors of the no-follow walk",
    ("cdi/io.py", "_open_child_dir", "os.open"): "a directory descriptor of the no-follow walk",
    ("cdi/io.py", "ensure_dir", "os.open"): "a directory descriptor, to fchmod it",
    ("cdi/io.py", "fsync_dir", "os.open"): "a directory descriptor, to fsync it",
    ("cdi/io.py", "_write_at", "os.open"): "the atomic write's temp file (O_WRONLY | O_CREAT | O_EXCL)",
    ("driver/health/clear.py", "write_clear_request", "os.open"): "the CLI's request, temp file O_EXCL",
    ("driver/state/wal.py", "JournalLog._writer", "os.open"): "O_APPEND descriptor of the journal it read",
    ("driver/state/wal.py", "JournalLog._create", "os.open"): "the new journal's temp file (O_EXCL)",
    ("driver/state/journal.py", "Journal._record_recoveries", "os.open"): "append to state/recoveries.log",
    ("driver/pinning/cgroupfs.py", "_write", "os.open"): "a cgroup file written (O_WRONLY | O_TRUNC)",
    # SerializeLock.open opens its lock file through open_lock_file: not a file read
    # (any function of the file: "*")
    ("driver/kubelet/server.py", "*", "self._lock.open"): "SerializeLock.open",
    ("driver/app.py", "_open_lock", "lock.open"): "SerializeLock.open",
}

_RAW_NAMES = frozenset({"open", "FileIO"})
_RAW_ATTRS = frozenset({"open", "read_text", "read_bytes", "fdopen", "FileIO"})
_WRITE_FLAGS = ("O_WRONLY", "O_DIRECTORY")


def _callee(node: ast.Call) -> str | None:
    """The callee's source when it is a raw read (or a call that could be one), else None."""
    func = node.func
    if isinstance(func, ast.Name) and func.id in _RAW_NAMES:
        return func.id
    if isinstance(func, ast.Attribute) and func.attr in _RAW_ATTRS:
        return ast.unparse(func)
    return None


class _Finder(ast.NodeVisitor):
    def __init__(self, rel: str, tree: ast.Module) -> None:
        self.rel = rel
        self.scope: list[str] = []
        self.found: list[str] = []
        self.used: set[tuple[str, str, str]] = set()
        #: module-level names bound to a flags expression (``_DIR_FLAGS = os.O_RDONLY | ...``)
        self.constants = {
            target.id: ast.unparse(stmt.value)
            for stmt in tree.body
            if isinstance(stmt, ast.Assign)
            for target in stmt.targets
            if isinstance(target, ast.Name)
        }

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped  # noqa: N815

    def _flags(self, node: ast.Call) -> str:
        flags = (
            node.args[1]
            if len(node.args) > 1
            else next((k.value for k in node.keywords if k.arg == "flags"), None)
        )
        if flags is None:
            return ""
        text = ast.unparse(flags)
        return self.constants.get(text, text)

    def visit_Call(self, node: ast.Call) -> None:
        callee = _callee(node)
        if callee is not None:
            key = (self.rel, ".".join(self.scope), callee)
            if key not in ALLOWED:
                key = (self.rel, "*", callee)
            where = (
                f"{self.rel}:{node.lineno} {'.'.join(self.scope) or '<module>'}: {ast.unparse(node)[:100]}"
            )
            if key not in ALLOWED:
                self.found.append(where)
            elif callee == "os.open" and not any(flag in self._flags(node) for flag in _WRITE_FLAGS):
                self.found.append(
                    f"{where} (allowed for writes only, but opens without O_WRONLY/O_DIRECTORY)"
                )
            else:
                self.used.add(key)
        self.generic_visit(node)


def raw_reads(root: Path) -> tuple[list[str], set[tuple[str, str, str]]]:
    """Every raw read under ``root``'s ``driver/`` and ``cdi/``, and the allowlist entries met."""
    found: list[str] = []
    used: set[tuple[str, str, str]] = set()
    for package in ("driver", "cdi"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == PRIMITIVE or rel.startswith("driver/_proto/"):
                continue
            tree = ast.parse(path.read_text(), filename=rel)
            finder = _Finder(rel, tree)
            finder.visit(tree)
            found += finder.found
            used |= finder.used
    return found, used


def test_every_read_goes_through_the_primitive() -> None:
    found, _ = raw_reads(REPO)
    assert found == [], "raw reads outside driver/untrusted/files.py:\n" + "\n".join(found)


def test_every_allowlist_entry_is_still_needed() -> None:
    """An entry whose call is gone is removed, so the list never grows stale cover for a new call."""
    _, used = raw_reads(REPO)
    assert sorted(set(ALLOWED) - used) == []


def test_a_planted_raw_read_is_caught(tmp_path: Path) -> None:
    """A copy of the tree with raw reads planted: in a new module, and an allowed write turned read."""
    for name in ("driver", "cdi"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "driver" / "inventory" / "planted.py").write_text(
        "import io, os\nfrom pathlib import Path\n\n\n"
        "def f(p: str) -> None:\n"
        "    open(p).read()\n"
        "    Path(p).read_text()\n"
        "    Path(p).read_bytes()\n"
        "    io.open(p)\n"
        "    os.fdopen(os.open(p, os.O_RDONLY))\n"
    )
    cgroupfs = tmp_path / "driver" / "pinning" / "cgroupfs.py"
    text = cgroupfs.read_text()
    assert "os.O_WRONLY | os.O_TRUNC" in text
    cgroupfs.write_text(text.replace("os.O_WRONLY | os.O_TRUNC", "os.O_RDONLY"))
    found, _ = raw_reads(tmp_path)
    planted = [line for line in found if line.startswith("driver/inventory/planted.py")]
    assert len(planted) == 6, found
    assert any(line.startswith("driver/pinning/cgroupfs.py") and "writes only" in line for line in found), (
        found
    )
