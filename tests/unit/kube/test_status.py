"""Only the apiserver's Status decides that an object is gone (issue 32, the answer that decides).

``is_not_found`` is held to the one answer that means it: HTTP 404 with a JSON Status,
``reason: NotFound``, naming the very object. Everything else, a proxy's page quoting the old
magic text included, decides nothing. ``parse_status`` takes any bytes without raising
(hypothesis). And a scan of ``driver/`` (AST) finds no decision made on an error's text: no
``... in str(exc)`` inside an ``except`` and no ``"not found" in ...``; planted modules prove the
scan finds both.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, TypeGuard

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.errors import KubeError
from driver.kube.status import is_not_found, parse_status

DRIVER = Path(__file__).resolve().parents[3] / "driver"

NOT_FOUND: dict[str, Any] = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'resourceclaims.resource.k8s.io "c1" not found',
    "reason": "NotFound",
    "details": {"name": "c1", "group": "resource.k8s.io", "kind": "resourceclaims"},
    "code": 404,
}


def _error(body: bytes, status: int = 404) -> KubeError:
    return KubeError("get resourceclaims/ns/c1", status=status, api_status=parse_status(body))


def _with(**changes: Any) -> bytes:
    obj = json.loads(json.dumps(NOT_FOUND))
    for key, value in changes.items():
        if key.startswith("details_"):
            obj["details"][key.removeprefix("details_")] = value
        elif value is None:
            obj.pop(key, None)
        else:
            obj[key] = value
    return json.dumps(obj).encode()


def test_the_apiservers_not_found_for_the_claim_decides() -> None:
    assert is_not_found(_error(json.dumps(NOT_FOUND).encode()), "resourceclaims", "c1")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'<html><p>resourceclaims.resource.k8s.io "c1" not found</p></html>', id="html"),
        pytest.param(b'resourceclaims "c1" not found', id="text"),
        pytest.param(b"", id="empty"),
        pytest.param(b"[]", id="json-not-an-object"),
        pytest.param(_with(kind="Pod"), id="not-a-status"),
        pytest.param(_with(kind=None), id="no-kind"),
        pytest.param(_with(apiVersion="v2"), id="other-version"),
        pytest.param(_with(reason="Forbidden"), id="other-reason"),
        pytest.param(_with(code=500), id="other-code"),
        pytest.param(_with(details=None), id="no-details"),
        pytest.param(_with(details_name="c2"), id="another-claim"),
        pytest.param(_with(details_kind="resourceslices"), id="another-resource"),
        pytest.param(_with(details_group="example.com"), id="another-group"),
        pytest.param(_with(details_name=["c1"]), id="name-not-a-string"),
    ],
)
def test_any_other_answer_decides_nothing(body: bytes) -> None:
    assert not is_not_found(_error(body), "resourceclaims", "c1")


def test_a_not_found_status_behind_another_http_status_decides_nothing() -> None:
    """A proxy relaying a Status with its own 502 (or a 200 error page): the HTTP status must agree."""
    assert not is_not_found(_error(json.dumps(NOT_FOUND).encode(), status=502), "resourceclaims", "c1")


def test_a_status_without_a_group_counts_for_the_core_group_and_where_none_is_given() -> None:
    body = _with(details={"name": "n1", "kind": "nodes"})
    assert is_not_found(_error(body), "nodes", "n1", group="")
    assert is_not_found(
        _error(_with(details={"name": "c1", "kind": "resourceclaims"})), "resourceclaims", "c1"
    )


_KEYS = st.sampled_from(["kind", "apiVersion", "details", "reason", "code", "name", "group"])
_LEAVES = st.none() | st.booleans() | st.integers() | st.sampled_from(["Status", "v1", "NotFound"])
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)
_BODIES = st.binary(max_size=300) | _VALUES.map(lambda value: json.dumps(value).encode())


@given(_BODIES)
def test_parse_status_takes_any_bytes(body: bytes) -> None:
    status = parse_status(body)
    assert status is None or (isinstance(status.reason, str) and isinstance(status.code, int))


# -- the scan ---------------------------------------------------------------------------------


def _text_of(node: ast.AST, names: set[str]) -> bool:
    """``node`` is the text of one of the caught errors: ``str(e)``, ``repr(e)``, ``f"{e}"``,
    ``e.args`` or ``e.message``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr"):
        return any(isinstance(a, ast.Name) and a.id in names for a in node.args)
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))
    if isinstance(node, ast.Attribute) and node.attr in ("args", "message"):
        return isinstance(node.value, ast.Name) and node.value.id in names
    return False


def _says_not_found(node: ast.AST) -> bool:
    """``node`` is a literal (or f-string) that mentions "not found"."""
    if not isinstance(node, ast.Constant | ast.JoinedStr):
        return False
    texts = [p.value for p in ast.walk(node) if isinstance(p, ast.Constant) and isinstance(p.value, str)]
    return any("not found" in text.lower() for text in texts)


def _is_in(node: ast.AST) -> TypeGuard[ast.Compare]:
    return isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)


def _findings(path: Path, root: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    where = str(path.relative_to(root))
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or not handler.name:
            continue
        for node in ast.walk(handler):
            if _is_in(node) and any(_text_of(side, {handler.name}) for side in node.comparators):
                found.append(f"{where}:{node.lineno}: decides on the text of {handler.name}")
    for node in ast.walk(tree):
        if _is_in(node) and _says_not_found(node.left):
            found.append(f"{where}:{node.lineno}: matches 'not found' in a text")
    return found


def _scan(root: Path) -> list[str]:
    return [f for path in sorted(root.rglob("*.py")) for f in _findings(path, root)]


def test_nothing_in_driver_decides_on_an_errors_text() -> None:
    assert _scan(DRIVER) == []


@pytest.mark.parametrize(
    ("planted", "finding"),
    [
        pytest.param(
            "try:\n    f()\nexcept E as exc:\n    if exc.status == 404 and 'x' in str(exc):\n        g()\n",
            "decides on the text of exc",
            id="str-of-the-error",
        ),
        pytest.param(
            "try:\n    f()\nexcept E as err:\n    gone = 'NotFound' in f'{err}'\n",
            "decides on the text of err",
            id="f-string",
        ),
        pytest.param(
            "def gone(message):\n    return f'{name} not found' in message\n", "'not found'", id="literal"
        ),
    ],
)
def test_the_scan_finds_a_planted_text_match(tmp_path: Path, planted: str, finding: str) -> None:
    (tmp_path / "planted.py").write_text(planted)
    found = _scan(tmp_path)
    assert len(found) == 1 and finding in found[0], found
