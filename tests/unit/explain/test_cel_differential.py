"""explain's CEL evaluator against a real CEL runtime (cel-expr-python: the CEL C++ runtime).

``driver/explain/cel.py`` is hand-written so that it can say *why* a selector is false; this test
keeps it honest. The same corpus of selectors runs through both on the same devices, and wherever
both give an answer they must give the same one: true, false, or a runtime error (which the
scheduler treats as "allocation fails"). Where ours says "cannot evaluate" (``matches is None``)
or the real runtime refuses the expression at compile time (the apiserver rejects such a selector,
so it never meets a device), there is nothing to compare.

The corpus: the DeviceClass selectors of deploy/, every selector in the YAML of docs/ and
deploy/examples/, every selector-like string in the explain tests, and 1,500 generated ones built
from the devices' own attribute names and values (seeded, so a failure reproduces; other seeds are
worth a run after a change to the evaluator, ``NUMADRA_CEL_SEEDS=1,2,3,4,5,6``: those six, 140,060
comparisons, found the uint bug).

Kubernetes' CEL environment is modelled on the runtime's side as it behaves for selectors:

* ``device.attributes[domain]`` of a domain the device lacks is an empty map (so a field of it is
  "no such key", ``.?field`` is none): every domain the expression names gets one;
* ``quantity(s)`` and the Quantity methods (``compareTo``, ``isGreaterThan``, ``isLessThan``,
  ``asInteger``, ``asApproximateFloat``) are declared as functions over an opaque map holding the
  exact value; ``asInteger`` fails on a fraction or an int64 overflow, as Kubernetes' does. The
  string is parsed by ``driver.kube.quantity`` (tested against the apiserver's forms on its own).

Not modelled: ``semver`` values (no device of ours publishes a version attribute). The runtime's
regular expressions are RE2, like the scheduler's (cel-go uses Go's RE2 syntax).
"""

from __future__ import annotations

import ast
import os
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from driver.explain.cel import CelDevice, evaluate
from driver.explain.devices import devices_from_inventory
from driver.inventory.discovery import discover
from driver.kube.quantity import parse_quantity
from harness.hosttree import write_host_tree
from harness.topologies import TOPOLOGIES

cel = pytest.importorskip("cel_expr_python.cel", reason="cel-expr-python (test extra) is not installed")
ext_optional = pytest.importorskip("cel_expr_python.ext.ext_optional")
ext_strings = pytest.importorskip("cel_expr_python.ext.ext_strings")

REPO = Path(__file__).resolve().parents[3]
DRIVER = "numadra.dev"
STD = "resource.kubernetes.io"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: the key of the one-entry map that stands for a Quantity on the runtime's side
_Q = "__quantity__"


# ------------------------------------------------------------------------------ the real runtime
def _q(value: Fraction) -> dict[str, str]:
    return {_Q: str(value)}


def _unq(value: Any) -> Fraction:
    if not isinstance(value, dict) or set(value) != {_Q}:
        raise TypeError(f"not a quantity: {value!r}")
    return Fraction(value[_Q])


def _as_integer(value: Any) -> int:
    exact = _unq(value)
    if exact.denominator != 1 or not INT64_MIN <= exact.numerator <= INT64_MAX:
        raise ValueError(f"cannot convert {exact} to an int64 without loss")
    return exact.numerator


def _real_env() -> Any:
    quantity_t = cel.Type.Map(cel.Type.STRING, cel.Type.STRING)
    t = cel.Type

    def member(name: str, result: Any, impl: Callable[..., Any], *params: Any) -> Any:
        return cel.FunctionDecl(
            name, [cel.Overload(f"quantity_{name}", result, [quantity_t, *params], True, impl)]
        )

    functions = [
        cel.FunctionDecl(
            "quantity",
            [cel.Overload("quantity_string", quantity_t, [t.STRING], False, lambda s: _q(parse_quantity(s)))],
        ),
        member("compareTo", t.INT, lambda a, b: (_unq(a) > _unq(b)) - (_unq(a) < _unq(b)), quantity_t),
        member("isGreaterThan", t.BOOL, lambda a, b: _unq(a) > _unq(b), quantity_t),
        member("isLessThan", t.BOOL, lambda a, b: _unq(a) < _unq(b), quantity_t),
        member("asInteger", t.INT, _as_integer),
        member("asApproximateFloat", t.DOUBLE, lambda a: float(_unq(a))),
    ]
    return cel.NewEnv(
        variables={"device": t.Map(t.STRING, t.DYN)},
        extensions=[ext_optional.ExtOptional(), ext_strings.ExtStrings()],
        functions=functions,
    )


_DOMAIN = re.compile(r"""(?:attributes|capacity)\s*\[\??\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]""")


def _real_device(device: CelDevice, expression: str) -> dict[str, Any]:
    """``device`` as a plain map, with an empty map for each domain the expression names."""
    named = {a or b for a, b in _DOMAIN.findall(expression)}
    attributes: dict[str, Any] = {domain: {} for domain in named}
    attributes.update({domain: dict(values) for domain, values in device.attributes.items()})
    capacity: dict[str, Any] = {domain: {} for domain in named}
    capacity.update(
        {domain: {k: _q(v) for k, v in values.items()} for domain, values in device.capacity.items()}
    )
    return {
        "driver": device.driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": device.allow_multiple_allocations,
    }


@dataclass(frozen=True)
class _Answer:
    """``value`` True/False, or None with ``error`` set (a runtime error or a non-bool result)."""

    value: bool | None
    error: str = ""


def _real(env: Any, expression: str, device: CelDevice) -> _Answer | None:
    """The runtime's answer; None when it refuses the expression at compile time."""
    try:
        program = env.compile(expression)
    except RuntimeError:
        return None
    result = program.eval(data={"device": _real_device(device, expression)})
    if result.type() == cel.Type.BOOL:
        return _Answer(bool(result.value()))
    return _Answer(None, f"{result.type().name()}: {result.value()}")


def _ours(expression: str, device: CelDevice) -> _Answer | None:
    outcome = evaluate(expression, device)
    if outcome.matches is None:
        return None
    if outcome.error:
        return _Answer(None, outcome.why)
    return _Answer(outcome.matches)


# ----------------------------------------------------------------------------------- the devices
def _devices() -> list[tuple[str, CelDevice]]:
    """One device per attribute set of each of the DGX-class and hostile hosts, plus two by hand."""
    import tempfile

    out: dict[tuple[Any, ...], tuple[str, CelDevice]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for topology in ("dgx", "hostile"):
            host = Path(tmp) / topology
            write_host_tree(host, TOPOLOGIES[topology])
            inventory = discover(host, use_nvml=False)
            for view in devices_from_inventory(inventory, "node", DRIVER):
                shape = (topology, *sorted((d, tuple(sorted(v))) for d, v in view.attributes.items()))
                out.setdefault(shape, (f"{topology}/{view.name}", view.cel()))
    out[("bools",)] = (
        "by-hand/bools",
        CelDevice(DRIVER, {DRIVER: {"type": "x", "flag": True, "off": False, "zero": 0, "one": 1}}, {}),
    )
    out[("fraction",)] = (
        "by-hand/fraction",
        CelDevice(DRIVER, {DRIVER: {"type": "cpu"}}, {DRIVER: {"cpus": Fraction(3, 2)}}),
    )
    return list(out.values())


DEVICES = _devices()


# ------------------------------------------------------------------------------------ the corpus
def _yaml_expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        cel_part = node.get("cel")
        if isinstance(cel_part, dict) and isinstance(cel_part.get("expression"), str):
            yield cel_part["expression"]
        for value in node.values():
            yield from _yaml_expressions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _yaml_expressions(value)


def _documents(path: Path) -> Iterator[Any]:
    texts = [path.read_text()]
    if path.suffix == ".md":
        texts = re.findall(r"```ya?ml\n(.*?)```", texts[0], flags=re.DOTALL)
    for text in texts:
        if "{{" in text:  # a Helm template: its rendering is deploy/kustomize's twin
            continue
        try:
            yield from yaml.safe_load_all(text)
        except yaml.YAMLError:
            continue


def _repo_selectors() -> list[str]:
    """Selectors of deploy/ and docs/ (YAML files and ```yaml blocks of Markdown)."""
    found: list[str] = []
    for base in ("deploy", "docs"):
        for path in sorted((REPO / base).rglob("*")):
            if path.suffix in (".yaml", ".yml", ".md") and path.is_file():
                for doc in _documents(path):
                    found.extend(_yaml_expressions(doc))
    return found


def _test_selectors() -> list[str]:
    """Whole string constants of the explain tests that read the device (not f-string pieces)."""
    found: list[str] = []
    for path in sorted((REPO / "tests" / "unit" / "explain").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        pieces = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in pieces
                and "device." in node.value
            ):
                found.append(node.value)
    return found


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _generated(count: int, seed: int = 15) -> list[str]:
    """Selectors over the devices' own names and values, with neighbours of each value."""
    rng = random.Random(seed)
    fields: list[tuple[str, Any]] = [("device.driver", DRIVER), ("device.allowMultipleAllocations", True)]
    quantities: list[str] = []
    for _, device in DEVICES:
        for domain, values in device.attributes.items():
            for name, value in values.items():
                fields.append((f'device.attributes["{domain}"].{name}', value))
                fields.append((f'device.attributes["{domain}"]["{name}"]', value))
        for domain, caps in device.capacity.items():
            quantities.extend(f'device.capacity["{domain}"].{name}' for name in caps)
    fields += [
        (f'device.attributes["{DRIVER}"].noSuchAttribute', 1),
        ('device.attributes["other.example.com"].x', "x"),
    ]
    quantities.append('device.capacity["other.example.com"].cpus')
    ints = [-7, -2, -1, 0, 1, 2, 3, 7, 112, 400000, INT64_MAX]
    strings = ["gpu", "nic", "cpu", "", "enp", "mlx5", "0000:17", "é", "NVIDIA H100 80GB HBM3"]
    plain = [*ints, *strings, True, False, 2.5, 0.0, -1.5]

    def near(value: Any) -> Any:
        if isinstance(value, bool):
            return rng.choice([value, not value, 1, 0, "true"])
        if isinstance(value, int):
            return rng.choice([value, value + 1, value - 1, -value, float(value), str(value)])
        if isinstance(value, str):
            cut = rng.randrange(len(value) + 1)
            return rng.choice([value, value[:cut], value.upper(), value + "x", len(value)])
        return rng.choice(plain)

    regexes = [
        "(?=e)",
        "(e)\\1",
        "0\\z",
        "0\\Z",
        "[",
        "(?i)ENP",
        "(?i)ü",
        "\\d+",
        "[[:alpha:]]",
        "\\pL",
        "(?P<n>e)",
    ]
    escaped = ['"\\u00dc"', '"\\x41"', '"\\101"', '"a\\tb"', '"\\\\"', "'\\''", '"\\U0001F600"']

    def lit() -> str:
        kind = rng.random()
        if kind < 0.05:
            return rng.choice(escaped)
        if kind < 0.1:
            return "[" + ", ".join(_literal(rng.choice(plain)) for _ in range(rng.randrange(4))) + "]"
        if kind < 0.15:
            return f"{rng.choice([0, 1, 3])}u"
        return _literal(rng.choice(plain))

    def compare() -> str:
        path, value = rng.choice(fields)
        other = _literal(near(value)) if rng.random() < 0.7 else lit()
        op = rng.choice(["==", "!=", "<", "<=", ">", ">=", "==", "!="])
        shape = rng.randrange(12)
        if shape == 0:
            return f"{path} in [{other}, {lit()}]"
        if shape == 1:
            return f"{other} {op} {path}"
        if shape == 2:
            n, m = rng.choice(ints), rng.choice([-3, -2, 2, 3, 0])
            return f"{path} {rng.choice(['/', '%', '+', '-', '*'])} {m} {op} {n}"
        if shape == 3:
            method = rng.choice(["startsWith", "endsWith", "contains", "matches"])
            arg = rng.choice([*strings, "^enp[0-9]+", "[0-9]$", "H1.0", *regexes])
            return f"{path}.{method}({_literal(arg)})"
        if shape == 4:
            return f"size({path}) {op} {rng.choice(ints)}"
        if shape == 5:
            return f"has({path})" if not path.endswith("]") else f"has({path.rpartition('[')[0]})"
        if shape == 6:
            if path.endswith("]"):
                head, _, key = path.rpartition("[")
                optional = f"{head}[?{key}"
            else:
                head, _, name = path.rpartition(".")
                optional = f"{head}.?{name}"
            return f"{optional}.orValue({other}) {op} {other}"
        if shape == 7:
            q = rng.choice(quantities or ['quantity("1")'])
            amount = rng.choice(["0", "1", "8", "112", "1500m", "1Ti", "1100Gi", "2Gi", "bad!"])
            method = rng.choice(["compareTo", "isGreaterThan", "isLessThan"])
            tail = f" {op} 0" if method == "compareTo" else ""
            return f'{q}.{method}(quantity("{amount}")){tail}'
        if shape == 8:
            q = rng.choice(quantities or ['quantity("1")'])
            return f"{q}.{rng.choice(['asInteger', 'asApproximateFloat'])}() {op} {rng.choice(ints)}"
        if shape == 9:
            return f"{path} + {other} {op} {other}"
        if shape == 10:
            return f"-{path} {op} {other}"
        return f"{path} {op} {other}"

    def expr(depth: int) -> str:
        roll = rng.random()
        if depth == 0 or roll < 0.5:
            return compare()
        if roll < 0.6:
            return f"!({expr(depth - 1)})"
        join = rng.choice(["&&", "||"])
        return f"({expr(depth - 1)}) {join} ({expr(depth - 1)})"

    return [expr(2) for _ in range(count)]


def _corpus() -> list[str]:
    """The fixed corpus; ``NUMADRA_CEL_SEEDS=1,2,3`` adds 2,500 generated selectors per seed."""
    extra = [int(seed) for seed in os.environ.get("NUMADRA_CEL_SEEDS", "").split(",") if seed.strip()]
    generated = [*_generated(1500), *(e for seed in extra for e in _generated(2500, seed))]
    return list(dict.fromkeys([*_repo_selectors(), *_test_selectors(), *generated]))


# ---------------------------------------------------------------------------------------- tests
def test_the_corpus_holds_the_shipped_selectors() -> None:
    """The DeviceClass selectors are in it (the corpus reads the files it claims to read)."""
    shipped = _repo_selectors()
    assert f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"' in shipped
    assert len(_test_selectors()) >= 20


def test_ours_agrees_with_the_cel_runtime_wherever_both_answer() -> None:
    env = _real_env()
    compared = 0
    disagreements: list[str] = []
    for expression in _corpus():
        for name, device in DEVICES:
            try:
                ours = _ours(expression, device)
            except Exception as exc:  # explain must answer, never crash
                disagreements.append(f"{expression!r} on {name}: ours raised {exc!r}")
                continue
            if ours is None:
                continue
            real = _real(env, expression, device)
            if real is None:
                continue
            compared += 1
            if ours.value != real.value:
                disagreements.append(f"{expression!r} on {name}: ours {ours}, CEL {real}")
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(disagreements[:60])
    assert compared > 5000  # the comparison really ran, not skipped wholesale


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        pytest.param('device.driver == "numadra.dev"', True, id="driver"),
        pytest.param('device.attributes["other.io"].?x.orValue(3) == 3', True, id="unknown-domain"),
        pytest.param('device.attributes["numadra.dev"].nope == 1', None, id="no-such-key"),
        pytest.param('device.capacity["numadra.dev"].cpus.asInteger() == 1', None, id="fraction"),
    ],
)
def test_the_runtime_model_behaves_like_kubernetes(expression: str, value: bool | None) -> None:
    """The runtime side itself: unknown domains are empty maps, a fraction has no int64 form."""
    device = CelDevice(DRIVER, {DRIVER: {"type": "cpu"}}, {DRIVER: {"cpus": Fraction(3, 2)}})
    answer = _real(_real_env(), expression, device)
    assert answer is not None
    assert answer.value is value
