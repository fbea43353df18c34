"""How ``python -m pytest -n`` splits the suite (tests/support/workers.py), on a real xdist run.

A small project laid out like this one (``tests/e2e``, ``tests/node``, ``tests/unit``) runs under
two real pytest-xdist workers with this suite's hooks; every test writes down which worker ran it
and in which order. The e2e and node tiers share host state and must never run at the same moment
on two workers; a module on a module-scoped fixture stays together so that fixture starts once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_CONFTEST = """\
from tests.conftest import pytest_xdist_make_scheduler  # noqa: F401  (this suite's scheduler)
"""

_TEST = """\
import os
from pathlib import Path


def _record(name: str) -> None:
    worker = os.environ["PYTEST_XDIST_WORKER"]
    with (Path(os.environ["WORKERS_OUT"]) / worker).open("a") as out:
        out.write(f"{__file__.split('/tests/', 1)[1]}::{name}\\n")

"""


def _project(root: Path, modules: dict[str, int], shared: frozenset[str]) -> None:
    """Test modules of ``count`` tests each; those in ``shared`` use a module-scoped fixture."""
    for module, count in modules.items():
        path = root / "tests" / module
        path.parent.mkdir(parents=True, exist_ok=True)
        fixture = "import pytest\n\n\n@pytest.fixture(scope='module')\ndef once() -> None:\n    pass\n\n\n"
        uses = "once: None" if module in shared else ""
        body = "".join(f"def test_{n}({uses}) -> None:\n    _record('test_{n}')\n\n\n" for n in range(count))
        path.write_text(_TEST + (fixture if module in shared else "") + body)
    (root / "conftest.py").write_text(_CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\n")  # the rootdir: node ids start with tests/


def _run(root: Path, *args: str) -> dict[str, list[str]]:
    """Run the project under two workers; worker -> the tests it ran, in order."""
    out = root / "out"
    out.mkdir()
    # the repo's own `tests` package (a regular package) wins over the project's namespace one
    env = {**os.environ, "WORKERS_OUT": str(out), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *args, "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {path.name: path.read_text().split() for path in sorted(out.iterdir())}


@pytest.mark.parametrize(
    "dist", [[], ["--dist", "load"], ["--dist", "loadfile"]], ids=["n", "load", "loadfile"]
)
def test_tiers_share_one_worker_and_shared_fixtures_keep_their_module_whole(
    tmp_path: Path, dist: list[str]
) -> None:
    """Whatever ``--dist`` says: every e2e and node test on one worker, back to back, before
    anything else there; a module on a module-scoped fixture on one worker, in one stretch."""
    modules = {"e2e/test_e2e_a.py": 3, "e2e/test_e2e_b.py": 2, "node/test_node_a.py": 3}
    modules |= {f"unit/test_unit_{n}.py": 12 if n == 0 else 4 for n in range(6)}
    shared = frozenset({"unit/test_unit_0.py", "unit/test_unit_1.py"})
    _project(tmp_path, modules, shared)
    ran = _run(tmp_path, *dist)

    assert sorted(test for tests in ran.values() for test in tests) == sorted(
        f"{module}::test_{n}" for module, count in modules.items() for n in range(count)
    )
    kube = [worker for worker, tests in ran.items() if any(t.startswith(("e2e/", "node/")) for t in tests)]
    assert len(kube) == 1, ran
    tests = ran[kube[0]]
    tier = [n for n, test in enumerate(tests) if test.startswith(("e2e/", "node/"))]
    assert tier == list(range(8)), tests  # first on its worker, nothing in between
    for module in shared:
        holders = [worker for worker, tests in ran.items() if any(t.startswith(module) for t in tests)]
        assert len(holders) == 1, (module, ran)
        at = [n for n, test in enumerate(ran[holders[0]]) if test.startswith(module)]
        assert at == list(range(at[0], at[0] + modules[module])), (module, ran)
    assert len(ran) == 2, ran  # the rest was shared: both workers ran something
