r"""Every number numadra reads as text goes through one ASCII-strict parser, and no entry point
that reads one raises anything but its own documented error.

``"²"`` is a digit to ``str.isdigit`` and no number to ``int``/``float``: a guard ``isdigit()``
followed by ``float()`` raised ValueError out of the apiserver client for a ``Retry-After: ²``
answer, which ended the slice publisher's thread. The class has three parts here:

* a property of :func:`~driver.untrusted.values.ascii_int`: it returns ``int(text)`` exactly when
  ``text`` is ASCII digits of bounded length in bounds, and else our error, never another;
* a scan (AST) of ``driver/`` and ``cdi/``: no ``.isdigit()`` / ``.isdecimal()`` /
  ``.isnumeric()`` guard, no ``int()`` / ``float()`` straight over a ``.get(...)`` lookup (a
  header, an environment variable, a JSON field), and no regular expression with ``\d`` compiled
  without ``re.ASCII`` (Python's ``\d`` matches every script's digits), each proven able to fail
  on planted source;
* the entry points that read a number from the outside, fed hostile digits (non-ASCII ones,
  signs, blanks, underscores, thousands of digits): the Retry-After of a real HTTP answer, a watch
  ERROR event's code, the in-cluster port, ``--metrics-address``, ``NRI_PLUGIN_SOCKET``, sysfs
  counts and integer files.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from driver.errors import ConfigError, KubeError, UntrustedValueError
from driver.inventory.sysfs import parse_count, read_int
from driver.kube.client import KubeClient
from driver.kube.incluster import InCluster
from driver.observability.address import parse_address
from driver.pinning.factory import nri_service
from driver.slices.features import refused_fields
from driver.untrusted.values import MAX_TEXT_DIGITS, ascii_int
from harness.fakeapiserver import FakeApiServer, Fault

REPO = Path(__file__).resolve().parents[3]
#: digits of other scripts (superscript two, Arabic-Indic three, fullwidth one), and what ``int`` forgives
HOSTILE_DIGITS = ["²", "٣", "\uff11", "\U0001d7d8"]
_ALPHABET = "0123456789abcdefABCDEF" + "".join(HOSTILE_DIGITS) + " +-_x\t"
#: text shaped like numbers and their near misses
NUMBER_TEXT = (
    st.text(alphabet=_ALPHABET, max_size=30)
    | st.builds(lambda d, n: d * n, st.sampled_from(["9", *HOSTILE_DIGITS]), st.integers(1, 200))
    | st.text(max_size=8)
)


def _is_ascii_digits(text: str, alphabet: str = "0123456789") -> bool:
    return bool(text) and all(c in alphabet for c in text)


@settings(max_examples=600, deadline=None)
@given(NUMBER_TEXT, st.integers(-(10**30), 10**30), st.integers(0, 10**30))
def test_ascii_int_is_int_of_ascii_digits_in_bounds_or_our_error(text: str, lo: int, span: int) -> None:
    hi = lo + span
    digits = text[1:] if text.startswith("-") and lo < 0 else text
    try:
        value = ascii_int(text, what="Retry-After", lo=lo, hi=hi)
    except UntrustedValueError as exc:
        assert exc.what == "Retry-After"
        assert not (_is_ascii_digits(digits) and len(digits) <= MAX_TEXT_DIGITS and lo <= int(text) <= hi)
        return
    assert _is_ascii_digits(digits) and len(digits) <= MAX_TEXT_DIGITS
    assert value == int(text) and lo <= value <= hi


@settings(max_examples=300, deadline=None)
@given(NUMBER_TEXT)
def test_ascii_int_in_base_16_takes_hex_digits_only(text: str) -> None:
    try:
        value = ascii_int(text, what="netdev flags", lo=0, hi=1 << 96, base=16)
    except UntrustedValueError:
        assert not (_is_ascii_digits(text, "0123456789abcdefABCDEF") and len(text) <= MAX_TEXT_DIGITS)
        return
    assert value == int(text, 16)


@pytest.mark.parametrize("text", [*HOSTILE_DIGITS, " 7", "7 ", "+7", "1_000", "0x10", "", "-", "9" * 25])
def test_what_int_forgives_is_refused(text: str) -> None:
    with pytest.raises(UntrustedValueError, match="Retry-After"):
        ascii_int(text, what="Retry-After", lo=-10, hi=10**30)


# -- the scan ---------------------------------------------------------------------------------------

_GUARDS = frozenset({"isdigit", "isdecimal", "isnumeric"})
_RE_CALLS = frozenset({"compile", "match", "fullmatch", "search", "finditer", "findall", "sub", "split"})


def _unicode_digit_regex(node: ast.Call) -> bool:
    """``re.<call>("...\\d...")`` without ``re.ASCII`` (or ``re.A``) among its arguments."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr in _RE_CALLS and ast.unparse(func.value) == "re"):
        return False
    pattern = node.args[0] if node.args else None
    if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str) and "\\d" in pattern.value):
        return False
    rest = " ".join(ast.unparse(a) for a in [*node.args[1:], *(k.value for k in node.keywords)])
    return "re.ASCII" not in rest and "re.A" not in rest.split(" | ")


def _violations(source: str, rel: str) -> list[str]:
    """``rel:line: what`` for each digit guard, and each int()/float() straight over a .get()."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _GUARDS:
            found.append(f"{rel}:{node.lineno}: .{func.attr}() accepts non-ASCII digits: use ascii_int")
        elif _unicode_digit_regex(node):
            found.append(f"{rel}:{node.lineno}: \\d without re.ASCII matches every script's digits")
        elif isinstance(func, ast.Name) and func.id in ("int", "float") and node.args:
            arg = node.args[0]
            while isinstance(arg, ast.BoolOp | ast.Call) and not _is_get(arg):
                # int(x.get("a") or 1), int(str(x.get("a"))): look through the wrapping
                arg = arg.values[0] if isinstance(arg, ast.BoolOp) else (arg.args[0] if arg.args else arg)
                if isinstance(arg, ast.Call) and not arg.args and not _is_get(arg):
                    break
            if _is_get(arg):
                found.append(
                    f"{rel}:{node.lineno}: {func.id}() over a looked-up value: use ascii_int or bounded_int"
                )
    return found


def _is_get(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"


def _tree_violations() -> list[str]:
    found = []
    for top in ("driver", "cdi"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel.startswith("driver/_proto/"):
                continue
            found += _violations(path.read_text(encoding="utf-8"), rel)
    return found


def test_no_number_is_parsed_from_text_outside_ascii_int() -> None:
    assert _tree_violations() == []


@pytest.mark.parametrize(
    "planted",
    [
        'def f(h):\n    v = h.get("retry-after", "")\n    return float(v) if v.isdigit() else None\n',
        "def f(s):\n    return s.isdecimal() or s.isnumeric()\n",
        'def f(env):\n    return int(env.get("PORT"))\n',
        'def f(obj):\n    return int(obj.get("code") or 500)\n',
        'def f(obj):\n    return float(str(obj.get("delay")))\n',
        'import re\nINDEX = re.compile(r"devices\\[(\\d+)\\]")\n',
        'import re\ndef f(s):\n    return re.fullmatch(r"\\d+", s, re.IGNORECASE)\n',
    ],
)
def test_the_scan_finds_a_planted_parse(planted: str) -> None:
    assert _violations(planted, "driver/planted.py")


# -- the entry points, fed hostile digits -----------------------------------------------------------

#: what an HTTP header can carry (latin-1, no line breaks): the hostile digits that survive the trip
_HEADER_TEXT = st.text(alphabet="0123456789²¹³ +-_.x", min_size=1, max_size=24).map(str.strip).filter(bool)


@pytest.fixture(scope="module")
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    server.start()
    server.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    yield server
    server.close()


#: the longest Retry-After the client honours (driver/kube/client.py), in seconds
_DAY_S = 86400


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_HEADER_TEXT)
@example(value="86400")
@example(value="87000")  # past a day: ignored (hypothesis drew it in CI; the test had no bound)
def test_a_retry_after_from_the_wire_is_seconds_or_nothing(api: FakeApiServer, value: str) -> None:
    api.inject_fault(Fault(429, method="GET", path_contains="/nodes/", retry_after=value))
    client = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    try:
        with pytest.raises(KubeError) as caught:
            client.get_node("n")
    finally:
        client.close()
    # delta-seconds of ASCII digits, up to a day (the client's bound); anything else says nothing
    expected = float(value) if _is_ascii_digits(value) and int(value) <= _DAY_S else None
    assert caught.value.status == 429 and caught.value.retry_after == expected


@pytest.mark.parametrize("code", ["²", "410", 4.5e300, 10**400, None, True, [410], -1])
def test_a_watch_error_event_with_any_code_is_a_kube_error(api: FakeApiServer, code: object) -> None:
    event = {"type": "ERROR", "object": {"kind": "Status", "code": code, "message": "planted"}}
    line = json.dumps(event).encode() + b"\n"
    api.inject_fault(Fault(200, query_contains="watch=true", body=line))
    client = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    try:
        with pytest.raises(KubeError) as caught:
            list(client.watch_resource_slices(timeout_seconds=5))
    finally:
        client.close()
    assert caught.value.status == 500  # no code that is a status code: a server error


@settings(max_examples=200, deadline=None)
@given(NUMBER_TEXT)
def test_the_in_cluster_port_is_a_port_or_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, port: str
) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": port}
    sa = tmp_path_factory.mktemp("sa")
    (sa / "token").write_text("eyJhbGciOi.t\n")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    try:
        got = InCluster(env, token_file=str(sa / "token"), ca_file=str(sa / "ca.crt"))
    except ConfigError:
        assert not (port and _is_ascii_digits(port) and 0 < int(port) < 65536)
        return
    assert _is_ascii_digits(port) and got.settings.port == int(port)


@settings(max_examples=300, deadline=None)
@given(NUMBER_TEXT)
def test_the_metrics_address_port_is_a_port_or_a_config_error(port: str) -> None:
    try:
        _, got = parse_address(f"127.0.0.1:{port}")
    except ConfigError:
        assert not (_is_ascii_digits(port) and len(port) <= MAX_TEXT_DIGITS and int(port) <= 65535)
        return
    assert got == int(port) and _is_ascii_digits(port)


@settings(max_examples=200, deadline=None)
@given(NUMBER_TEXT)
def test_the_nri_socket_fd_is_a_number_or_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, fd: str
) -> None:
    tmp = tmp_path_factory.mktemp("nri")
    try:
        service = nri_service(
            socket=tmp / "nri.sock",
            claim_lookup=lambda _uid: None,
            node_shared_pool=None,
            pinner_lock=tmp / "lock",
            environ={"NRI_PLUGIN_SOCKET": fd},
        )
    except ConfigError as exc:
        assert "NRI_PLUGIN_SOCKET" in str(exc)
        return
    service.stop()  # never started: nothing to undo but the pools
    assert fd == "" or _is_ascii_digits(fd)


@settings(max_examples=400, deadline=None)
@given(NUMBER_TEXT)
def test_a_kernel_count_is_its_ascii_digits_or_none(text: str) -> None:
    got = parse_count(text)
    if got is None:
        assert not (_is_ascii_digits(text) and len(text) <= MAX_TEXT_DIGITS and int(text) < 1 << 64)
    else:
        assert _is_ascii_digits(text) and got == int(text)


@settings(max_examples=200, deadline=None)
@given(NUMBER_TEXT, st.sampled_from([10, 16]))
def test_a_sysfs_integer_file_is_a_number_or_none(
    tmp_path_factory: pytest.TempPathFactory, text: str, base: int
) -> None:
    path = tmp_path_factory.mktemp("sysfs") / "numa_node"
    path.write_text(text + "\n", encoding="utf-8")
    got = read_int(str(path), base)
    stripped = text.strip()  # read_text strips the file's text
    digits = (stripped.removeprefix("0x") if base == 16 else stripped).removeprefix("-")
    if got is not None:
        assert _is_ascii_digits(digits, "0123456789abcdefABCDEF" if base == 16 else "0123456789")
        assert got == int(stripped, base)


@pytest.mark.parametrize("index", ["٣", "9" * 5000, "0", "1"])
def test_a_422_message_with_any_device_index_names_no_field_or_a_real_one(index: str) -> None:
    """The apiserver's 422 text is the wire too: an index of any digits is a device of ours or nothing."""
    sent = {"spec": {"devices": [{"name": "gpu-0", "attributes": {"models": {"strings": ["a", "b"]}}}]}}
    message = f'spec.devices[{index}].attributes[models]: Required value: must specify one of: "bool", "int"'
    found = refused_fields(sent, message)
    assert len(found) == (1 if index == "0" else 0)
