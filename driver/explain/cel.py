"""A small evaluator for the CEL selector forms that DeviceClasses and claims use on our devices.

Not a CEL implementation: it covers what real selectors of this driver look like
(``device.driver == "numadra.dev" && device.attributes["numadra.dev"].type == "gpu"``, std
attributes such as ``device.attributes["resource.kubernetes.io"].numaNode == 0``, capacity checks
with ``quantity()`` and ``compareTo``/``isGreaterThan``, ``has()``, ``in``, optional ``.?x``
with ``orValue``, string methods). Anything else is reported as *unknown* with the reason, never
guessed: ``explain`` then says "cannot evaluate" instead of claiming a match or a mismatch.

Semantics follow the Kubernetes device environment: an unknown attribute domain is an empty map;
an unknown attribute inside a domain is a runtime error ("no such key"), which makes the scheduler
fail the allocation, so it is reported as such. ``&&``/``||`` absorb errors the CEL way
(``false && error`` is false).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any

from driver.kube.quantity import format_quantity, parse_quantity

__all__ = ["CelDevice", "Outcome", "evaluate"]


@dataclass(frozen=True, slots=True)
class CelDevice:
    """The ``device`` variable: attributes and capacity grouped by domain."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Fraction]]
    allow_multiple_allocations: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """Result of one selector on one device: True, False, or None (cannot evaluate); ``why`` says."""

    matches: bool | None
    why: str = ""
    error: bool = False  # a CEL runtime error (the scheduler fails the allocation on it)
    #: source text of the values that made a false expression false (``device.attributes[...].type``)
    culprits: tuple[str, ...] = ()


class _UnsupportedError(Exception):
    """The expression uses something this evaluator does not model."""


class _CelError(Exception):
    """A CEL runtime error (no such key, type mismatch)."""


# ---------------------------------------------------------------------------------------- lexing
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d+|\d+)(?P<unsigned>[uU])?|(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|!=|<=|>=|&&|\|\||\.\?|\[\?|[<>!()\[\].,?:+\-*/%{}]))",
    re.ASCII,  # CEL's digits are ASCII: "٣" is no number literal
)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # num | str | ident | op | end
    value: Any
    start: int
    end: int


_ESCAPE = re.compile(
    r"\\(?:([abfnrtv\\'\"`?])|x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|([0-3][0-7]{2})|(.))"
)
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unescape(body: str) -> str:
    """The value of a CEL string literal's body: its escapes decoded, every other character kept.

    (Not Python's ``unicode_escape`` codec: it reads its input as Latin-1 and turns "é" into "Ã©".)
    """

    def one(m: re.Match[str]) -> str:
        simple, hex2, hex4, hex8, octal, other = m.groups()
        if simple is not None:
            return _SIMPLE_ESCAPES.get(simple, simple)
        if other is not None:
            raise _UnsupportedError(f"unknown escape \\{other} in a string literal")
        code = int(hex2 or hex4 or hex8, 16) if octal is None else int(octal, 8)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise _UnsupportedError(f"escape of an invalid code point {code:#x}")
        return chr(code)

    return _ESCAPE.sub(one, body)


def _lex(text: str) -> list[_Tok]:
    pos, out = 0, []
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _UnsupportedError(f"cannot read {text[pos : pos + 12]!r}")
        kind = m.lastgroup if m.lastgroup != "unsigned" else "num"
        raw = m.group(kind or "op")
        value: Any = raw
        if kind == "num" and m.group("unsigned"):
            if "." in raw:
                raise _UnsupportedError(f"cannot read {m.group(0).strip()!r}")
            value = _Uint(int(raw))
        elif kind == "num":
            value = float(raw) if "." in raw else int(raw)
        elif kind == "str":
            value = _unescape(raw[1:-1])
        out.append(_Tok(kind or "op", value, m.start(kind or "op"), m.end()))
        pos = m.end()
    out.append(_Tok("end", None, len(text), len(text)))
    return out


# ---------------------------------------------------------------------------------------- parsing
@dataclass(frozen=True, slots=True)
class _Node:
    kind: str  # lit ident select index call method unary binary list
    start: int
    end: int
    value: Any = None  # literal value, identifier/field/function/operator name
    args: tuple[_Node, ...] = ()
    optional: bool = False


class _Parser:
    _REL = ("==", "!=", "<", "<=", ">", ">=", "in")

    def __init__(self, text: str) -> None:
        self.toks = _lex(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self, value: str | None = None) -> _Tok:
        tok = self.toks[self.i]
        if value is not None and tok.value != value:
            raise _UnsupportedError(f"expected {value!r} at offset {tok.start}")
        self.i += 1
        return tok

    def parse(self) -> _Node:
        node = self.or_()
        if self.peek().kind != "end":
            raise _UnsupportedError(
                f"unsupported syntax at offset {self.peek().start} ({self.peek().value!r})"
            )
        return node

    def _binary(self, ops: tuple[str, ...], sub: Callable[[], _Node]) -> _Node:
        left = sub()
        while self.peek().kind in ("op", "ident") and self.peek().value in ops:
            op = self.take().value
            right = sub()
            left = _Node("binary", left.start, right.end, op, (left, right))
        return left

    def or_(self) -> _Node:
        return self._binary(("||",), self.and_)

    def and_(self) -> _Node:
        return self._binary(("&&",), self.rel)

    def rel(self) -> _Node:
        return self._binary(self._REL, self.add)

    def add(self) -> _Node:
        return self._binary(("+", "-"), self.mul)

    def mul(self) -> _Node:
        return self._binary(("*", "/", "%"), self.unary)

    def unary(self) -> _Node:
        tok = self.peek()
        if tok.kind == "op" and tok.value in ("!", "-"):
            self.take()
            operand = self.unary()
            return _Node("unary", tok.start, operand.end, tok.value, (operand,))
        return self.postfix()

    def postfix(self) -> _Node:
        node = self.primary()
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.value in (".", ".?"):
                self.take()
                name = self.take()
                if name.kind != "ident":
                    raise _UnsupportedError(f"expected a field name at offset {name.start}")
                if self.peek().value == "(" and tok.value == ".":
                    args, end = self.arguments()
                    node = _Node("method", node.start, end, name.value, (node, *args))
                else:
                    node = _Node("select", node.start, name.end, name.value, (node,), tok.value == ".?")
            elif tok.kind == "op" and tok.value in ("[", "[?"):
                self.take()
                key = self.or_()
                end = self.take("]").end
                node = _Node("index", node.start, end, None, (node, key), tok.value == "[?")
            else:
                return node

    def arguments(self) -> tuple[tuple[_Node, ...], int]:
        self.take("(")
        args: list[_Node] = []
        while self.peek().value != ")":
            args.append(self.or_())
            if self.peek().value == ",":
                self.take()
        return tuple(args), self.take(")").end

    def primary(self) -> _Node:  # noqa: PLR0911 -- one branch per literal kind
        tok = self.take()
        if tok.kind in ("num", "str"):
            return _Node("lit", tok.start, tok.end, tok.value)
        if tok.kind == "ident":
            if tok.value in ("true", "false"):
                return _Node("lit", tok.start, tok.end, tok.value == "true")
            if tok.value == "null":
                return _Node("lit", tok.start, tok.end, None)
            if self.peek().value == "(":
                args, end = self.arguments()
                return _Node("call", tok.start, end, tok.value, args)
            return _Node("ident", tok.start, tok.end, tok.value)
        if tok.value == "(":
            inner = self.or_()
            return replace(inner, start=tok.start, end=self.take(")").end)
        if tok.value == "[":
            items: list[_Node] = []
            while self.peek().value != "]":
                items.append(self.or_())
                if self.peek().value == ",":
                    self.take()
            return _Node("list", tok.start, self.take("]").end, None, tuple(items))
        raise _UnsupportedError(f"unsupported syntax at offset {tok.start} ({tok.value!r})")


@lru_cache(maxsize=256)
def _parse(text: str) -> _Node | str:
    """The AST, or the reason why it cannot be parsed (cached: classes are evaluated per device)."""
    try:
        return _Parser(text).parse()
    except _UnsupportedError as exc:
        return str(exc)


# ---------------------------------------------------------------------------------------- values
@dataclass(frozen=True, slots=True)
class _Qty:
    value: Fraction

    def __str__(self) -> str:
        return f"quantity {format_quantity(self.value)}"


@dataclass(frozen=True, slots=True)
class _Uint:
    """A CEL uint (``3u``): equal to and ordered with ints and doubles, never added to them."""

    value: int


@dataclass(frozen=True, slots=True)
class _Map:
    """A map value; ``strict`` maps raise "no such key" on a missing key (attribute domains)."""

    entries: Mapping[str, Any]
    strict: bool
    what: str


@dataclass(frozen=True, slots=True)
class _Opt:
    present: bool
    value: Any = None


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _Qty):
        return format_quantity(value.value)
    if isinstance(value, _Map):
        return f"<{value.what}>"
    if isinstance(value, _Uint):
        return f"{value.value}u"
    return str(value)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """int, uint or double: CEL compares these with each other by value."""
    return isinstance(value, int | float | _Uint) and not isinstance(value, bool)


def _number(value: int | float | _Uint) -> int | float:
    return value.value if isinstance(value, _Uint) else value


def _int64(value: int) -> int:
    """CEL ints are int64: a result outside that range is an overflow error, not a bigger number."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _CelError("integer overflow")
    return value


def _int_arithmetic(op: str, left: int, right: int) -> int:
    """CEL's int64 arithmetic: ``/`` truncates toward zero and ``%`` takes the dividend's sign."""
    if op == "+":
        return _int64(left + right)
    if op == "-":
        return _int64(left - right)
    if op == "*":
        return _int64(left * right)
    if right == 0:
        raise _CelError("division by zero" if op == "/" else "modulus by zero")
    quotient = abs(left) // abs(right)
    if (left < 0) != (right < 0):
        quotient = -quotient
    return _int64(quotient) if op == "/" else left - right * quotient


#: syntax Python's ``re`` and RE2 (the regex engine of Kubernetes' CEL) read differently or only
#: one of them has: lookaround, comments, conditionals, backreferences, \Z, possessive
#: quantifiers, POSIX classes (a backslash before them is not told apart: no answer then either)
_NOT_RE2 = re.compile(r"\(\?[=!<>(#]|\(\?P=|\\[1-9]|\\Z|[*+?}]\+|\[:")
#: the flags of ``(?flags)`` and ``(?flags:...)`` groups (named groups ``(?P<`` are skipped)
_INLINE_FLAGS = re.compile(r"\(\?([^():]*)[):]")


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.ASCII)  # RE2's \d \w \s \b are ASCII-only, like re.ASCII
    except re.error as exc:
        raise _UnsupportedError(f"regular expression {pattern!r}: {exc}") from exc


def _re2_pattern(pattern: str, target: str) -> re.Pattern[str]:
    """``pattern`` compiled by Python's ``re`` where it means what RE2 makes of it; else unsupported.

    RE2 rejects what Python alone reads (a lookahead: the scheduler fails the allocation), and
    Python rejects what RE2 alone reads (\\z, \\pL): either way explain does not guess.
    """
    flags = "".join(f for f in _INLINE_FLAGS.findall(pattern) if not f.startswith("P<"))
    if (
        _NOT_RE2.search(pattern)
        or set(flags) - set("ims-")  # both know i, m and s
        or ("i" in flags and not (pattern + target).isascii())  # re.ASCII folds ASCII case only
    ):
        raise _UnsupportedError(f"regular expression {pattern!r} uses syntax RE2 reads otherwise")
    return _compiled(pattern)


def _uint_arithmetic(op: str, left: int, right: int) -> _Uint:
    """CEL's uint64 arithmetic: below zero or above 2**64 - 1 is an overflow error."""
    if op in ("/", "%"):
        if right == 0:
            raise _CelError("division by zero" if op == "/" else "modulus by zero")
        value = left // right if op == "/" else left % right  # both >= 0: no sign rules
    else:
        value = left + right if op == "+" else left - right if op == "-" else left * right
    if not 0 <= value <= _UINT64_MAX:
        raise _CelError("unsigned integer overflow")
    return _Uint(value)


def _equal(left: Any, right: Any) -> bool:
    """CEL equality: numbers by value across int and double, lists item by item, else same type."""
    if _is_number(left) and _is_number(right):
        return bool(_number(left) == _number(right))
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, _Map) and isinstance(right, _Map):
        return left.entries.keys() == right.entries.keys() and all(
            _equal(v, right.entries[k]) for k, v in left.entries.items()
        )
    return type(left) is type(right) and bool(left == right)


class _Evaluator:
    def __init__(self, text: str, device: CelDevice) -> None:
        self.text = text
        self.device = device
        self.culprits: list[str] = []

    def src(self, node: _Node) -> str:
        return self.text[node.start : node.end].strip()

    # -- values
    def eval(self, node: _Node) -> Any:  # noqa: PLR0911, PLR0912 -- one branch per node kind
        kind = node.kind
        if kind == "lit":
            return node.value
        if kind == "list":
            return [self.eval(a) for a in node.args]
        if kind == "ident":
            if node.value == "device":
                return self._device_map()
            raise _UnsupportedError(f"unknown variable {node.value!r}")
        if kind == "select":
            return self._lookup(self.eval(node.args[0]), node.value, node.optional)
        if kind == "index":
            key = self.eval(node.args[1])
            if not isinstance(key, str | int):
                raise _UnsupportedError(f"index of type {type(key).__name__}")
            base = self.eval(node.args[0])
            if isinstance(base, list) and isinstance(key, int):
                if not 0 <= key < len(base):
                    raise _CelError(f"index {key} out of range")
                return base[key]
            return self._lookup(base, str(key), node.optional)
        if kind == "unary":
            value = self.eval(node.args[0])
            if node.value == "!":
                return not self._bool(value, node.args[0])
            if _is_int(value):
                return _int64(-value)
            if isinstance(value, float):
                return -value
            raise _CelError(f"cannot negate {_show(value)}")
        if kind == "binary":
            return self._binary(node)
        if kind == "call":
            return self._call(node)
        if kind == "method":
            return self._method(node)
        raise _UnsupportedError(f"node {kind}")  # pragma: no cover -- the parser makes no other kinds

    def _device_map(self) -> _Map:
        d = self.device
        attrs = {dom: _Map(vals, True, f'attributes["{dom}"]') for dom, vals in d.attributes.items()}
        caps = {
            dom: _Map({k: _Qty(v) for k, v in vals.items()}, True, f'capacity["{dom}"]')
            for dom, vals in d.capacity.items()
        }
        return _Map(
            {
                "driver": d.driver,
                "attributes": _Map(attrs, False, "attributes"),
                "capacity": _Map(caps, False, "capacity"),
                "allowMultipleAllocations": d.allow_multiple_allocations,
            },
            True,
            "device",
        )

    def _lookup(self, base: Any, key: str, optional: bool) -> Any:
        if isinstance(base, _Opt):
            if not base.present:
                return base
            return self._lookup(base.value, key, True)
        if not isinstance(base, _Map):
            raise _CelError(f"{_show(base)} has no fields (looking up {key!r})")
        if key in base.entries:
            value = base.entries[key]
            return _Opt(True, value) if optional else value
        if optional:
            return _Opt(False)
        if base.strict:
            raise _CelError(f"no such key: {key} (in {base.what})")
        return _Map({}, True, f'{base.what}["{key}"]')  # unknown domain: an empty map

    def _bool(self, value: Any, node: _Node) -> bool:
        if not isinstance(value, bool):
            raise _CelError(f"{self.src(node)} is {_show(value)}, not a bool")
        return value

    def _binary(self, node: _Node) -> Any:  # noqa: PLR0911 -- one branch per operator family
        op = node.value
        if op in ("&&", "||"):
            return self._logic(node)
        left, right = self.eval(node.args[0]), self.eval(node.args[1])
        if op == "in":
            if isinstance(right, list):
                return any(_equal(left, item) for item in right)
            if isinstance(right, _Map):
                return isinstance(left, str) and left in right.entries
            raise _CelError(f"'in' needs a list or map, got {_show(right)}")
        if op in ("==", "!="):
            equal = _equal(left, right)
            return equal if op == "==" else not equal
        if op in ("<", "<=", ">", ">="):
            ok_types = (
                (_is_number(left) and _is_number(right))
                or (isinstance(left, str) and isinstance(right, str))
                or (isinstance(left, bool) and isinstance(right, bool))  # CEL orders false < true
            )
            if not ok_types:
                raise _CelError(f"no such overload: {_show(left)} {op} {_show(right)}")
            if _is_number(left):
                left, right = _number(left), _number(right)
            return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]
        if _is_int(left) and _is_int(right):
            return _int_arithmetic(op, left, right)
        if isinstance(left, _Uint) and isinstance(right, _Uint):
            return _uint_arithmetic(op, left.value, right.value)
        if isinstance(left, _Uint) != isinstance(right, _Uint) and _is_number(left) and _is_number(right):
            raise _CelError(f"no such overload: {_show(left)} {op} {_show(right)} (uint with int or double)")
        if op == "+" and isinstance(left, str) and isinstance(right, str):
            return left + right
        raise _UnsupportedError(f"operator {op} on {_show(left)} and {_show(right)}")

    def _logic(self, node: _Node) -> bool:
        """CEL's commutative && / ||: a deciding operand wins over an error in the other."""
        decisive = node.value == "||"  # the value that decides the result on its own
        failure: Exception | None = None
        for arg in node.args:
            try:
                if self._bool(self.eval(arg), arg) is decisive:
                    return decisive
            except (_CelError, _UnsupportedError) as exc:
                if failure is None or isinstance(exc, _UnsupportedError):
                    failure = exc
        if failure is not None:
            raise failure
        return not decisive

    def _call(self, node: _Node) -> Any:
        name, args = node.value, node.args
        if name == "has":
            if len(args) != 1 or args[0].kind != "select":
                raise _UnsupportedError("has() needs a field selection")
            base = self.eval(args[0].args[0])
            return isinstance(base, _Map) and args[0].value in base.entries
        values = [self.eval(a) for a in args]
        if name == "quantity" and len(values) == 1 and isinstance(values[0], str):
            try:
                return _Qty(parse_quantity(values[0]))
            except ValueError as exc:
                raise _CelError(str(exc)) from exc
        if name == "size" and len(values) == 1:
            return self._size(values[0])
        raise _UnsupportedError(f"function {name}()")

    def _size(self, value: Any) -> int:
        if isinstance(value, str | list):
            return len(value)
        if isinstance(value, _Map):
            return len(value.entries)
        raise _CelError(f"size() of {_show(value)}")

    def _method(self, node: _Node) -> Any:  # noqa: PLR0911, PLR0912 -- one branch per supported method
        name = node.value
        target = self.eval(node.args[0])
        values = [self.eval(a) for a in node.args[1:]]
        if isinstance(target, _Opt):
            if name == "orValue" and len(values) == 1:
                return target.value if target.present else values[0]
            if name == "hasValue" and not values:
                return target.present
            if name == "value" and not values:
                if not target.present:
                    raise _CelError("optional.none() dereference")
                return target.value
        if isinstance(target, _Qty) and len(values) == 1 and isinstance(values[0], _Qty):
            a, b = target.value, values[0].value
            if name == "compareTo":
                return (a > b) - (a < b)
            if name == "isGreaterThan":
                return a > b
            if name == "isLessThan":
                return a < b
        if isinstance(target, _Qty) and not values and name == "asInteger":
            # Kubernetes refuses a conversion that loses anything (1500m, or beyond int64)
            if target.value.denominator != 1:
                raise _CelError(f"{_show(target)} is not an integer (asInteger() would lose precision)")
            return _int64(target.value.numerator)
        if isinstance(target, _Qty) and not values and name == "asApproximateFloat":
            return float(target.value)
        if isinstance(target, str) and len(values) == 1 and isinstance(values[0], str):
            if name == "startsWith":
                return target.startswith(values[0])
            if name == "endsWith":
                return target.endswith(values[0])
            if name == "contains":
                return values[0] in target
            if name == "matches":
                return _re2_pattern(values[0], target).search(target) is not None
        if name == "size" and not values:
            return self._size(target)
        raise _UnsupportedError(f"method {name}() on {_show(target)}")

    # -- explanations
    def why_false(self, node: _Node) -> str:  # noqa: PLR0911, PLR0912 -- one branch per node shape
        """Point at the part of a false expression that made it false, with the values involved."""
        if node.kind == "binary" and node.value == "&&":
            parts = []
            for arg in node.args:
                try:
                    if self.eval(arg) is False:
                        parts.append(self.why_false(arg))
                except (_CelError, _UnsupportedError):
                    continue
            return "; ".join(parts) or f"{self.src(node)} is false"
        if node.kind == "binary" and node.value == "||":
            return "none holds: " + " | ".join(self.why_false(arg) for arg in node.args)
        if node.kind == "binary" and node.value in self._cmp_ops:
            left, right = node.args
            try:
                lv, rv = self.eval(left), self.eval(right)
            except (_CelError, _UnsupportedError):
                return f"{self.src(node)} is false"
            if left.kind == "lit" and right.kind != "lit":
                left, right, lv, rv = right, left, rv, lv
            self.culprits.append(self.src(left))
            want = {"==": "", "!=": "not "}.get(node.value, f"{node.value} ")
            return f"{self.src(left)} is {_show(lv)}, wants {want}{_show(rv)}"
        if node.kind == "method" and node.args[0].kind != "lit":
            try:
                target = self.eval(node.args[0])
            except (_CelError, _UnsupportedError):
                target = None
            if target is not None:
                return f"{self.src(node)} is false ({self.src(node.args[0])} is {_show(target)})"
        if node.kind == "unary" and node.value == "!":
            return f"{self.src(node.args[0])} is true"
        if node.kind == "call" and node.value == "has":
            return f"{self.src(node.args[0])} is not set"
        return f"{self.src(node)} is false"

    _cmp_ops = ("==", "!=", "<", "<=", ">", ">=", "in")


def evaluate(expression: str, device: CelDevice) -> Outcome:
    """Evaluate one selector expression against one device."""
    ast = _parse(expression)
    if isinstance(ast, str):
        return Outcome(None, f"cannot evaluate {expression!r}: {ast}")
    ev = _Evaluator(expression, device)
    try:
        value = ev.eval(ast)
    except _UnsupportedError as exc:
        return Outcome(None, f"cannot evaluate {expression!r}: {exc}")
    except _CelError as exc:
        return Outcome(
            False, f"CEL error in {expression!r}: {exc} (the scheduler fails the allocation)", True
        )
    if not isinstance(value, bool):
        return Outcome(False, f"{expression!r} gives {_show(value)}, not a bool (a CEL error)", True)
    if value:
        return Outcome(True)
    why = ev.why_false(ast)
    return Outcome(False, why, culprits=tuple(ev.culprits))
