"""The CEL subset explain evaluates: results, explanations, errors and honest "unknown"."""

from __future__ import annotations

from fractions import Fraction

import pytest

from driver.explain.cel import CelDevice, evaluate
from driver.kube.quantity import format_quantity, parse_quantity

NIC = CelDevice(
    driver="numadra.dev",
    attributes={
        "numadra.dev": {"type": "nic", "rdma": True, "speedMbps": 400000, "interfaceName": "enp23s0np0"},
        "resource.kubernetes.io": {"numaNode": 1, "pcieRoot": "pci0000:15"},
    },
    capacity={},
)
CPU = CelDevice(
    driver="numadra.dev",
    attributes={"numadra.dev": {"type": "cpu", "cpuCount": 112}},
    capacity={"numadra.dev": {"cpus": Fraction(112), "memory": parse_quantity("1Ti")}},
    allow_multiple_allocations=True,
)


@pytest.mark.parametrize(
    ("expression", "device", "expected"),
    [
        pytest.param('device.driver == "numadra.dev"', NIC, True, id="driver"),
        pytest.param('device.attributes["numadra.dev"].type == "nic"', NIC, True, id="type"),
        pytest.param('device.attributes["numadra.dev"]["type"] == "nic"', NIC, True, id="index-syntax"),
        pytest.param('device.attributes["resource.kubernetes.io"].numaNode == 0', NIC, False, id="numa"),
        pytest.param(
            'device.attributes["numadra.dev"].rdma && device.attributes["numadra.dev"].speedMbps >= 100000',
            NIC,
            True,
            id="bool-and-int",
        ),
        pytest.param('device.attributes["numadra.dev"].type in ["gpu", "nic"]', NIC, True, id="in-list"),
        pytest.param('!(device.attributes["numadra.dev"].type == "gpu")', NIC, True, id="not"),
        pytest.param(
            'device.attributes["numadra.dev"].interfaceName.startsWith("enp")', NIC, True, id="startsWith"
        ),
        pytest.param(
            'device.attributes["numadra.dev"].interfaceName.matches("^enp[0-9]+s0")', NIC, True, id="matches"
        ),
        pytest.param('has(device.attributes["numadra.dev"].productName)', NIC, False, id="has-missing"),
        pytest.param(
            'device.attributes["other.io"].?x.orValue(3) == 3', NIC, True, id="optional-unknown-domain"
        ),
        pytest.param(
            'device.capacity["numadra.dev"].cpus.compareTo(quantity("8")) >= 0', CPU, True, id="compareTo"
        ),
        pytest.param(
            'device.capacity["numadra.dev"].memory.isGreaterThan(quantity("2Ti"))', CPU, False, id="gt"
        ),
        pytest.param(
            'device.capacity["numadra.dev"].memory.isLessThan(quantity("1100Gi"))', CPU, True, id="lt"
        ),
        pytest.param("device.allowMultipleAllocations", CPU, True, id="multi-allocations"),
        pytest.param(
            'false && device.attributes["numadra.dev"].nope == 1', NIC, False, id="and-absorbs-error"
        ),
        pytest.param('true || device.attributes["numadra.dev"].nope == 1', NIC, True, id="or-absorbs-error"),
        pytest.param("size(device.attributes) == 2", NIC, True, id="size"),
        pytest.param('device.attributes["numadra.dev"].cpuCount / 2 == 56', CPU, True, id="arithmetic"),
    ],
)
def test_evaluates(expression: str, device: CelDevice, expected: bool) -> None:
    """Supported forms give the same answer CEL would."""
    outcome = evaluate(expression, device)
    assert (outcome.matches, outcome.error) == (expected, False), outcome.why


NUMA = 'device.attributes["resource.kubernetes.io"].numaNode'
TYPE = 'device.attributes["numadra.dev"].type'
SPEED = 'device.attributes["numadra.dev"].speedMbps'
PRODUCT = 'device.attributes["numadra.dev"].productName'


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        pytest.param(f"{NUMA} == 0", f"{NUMA} is 1, wants 0", id="equality"),
        pytest.param(f"0 == {NUMA}", f"{NUMA} is 1, wants 0", id="literal-first"),
        pytest.param(f"{SPEED} > 500000", f"{SPEED} is 400000, wants > 500000", id="ordering"),
        pytest.param(
            f'device.driver == "numadra.dev" && {TYPE} == "gpu"',
            f'{TYPE} is "nic", wants "gpu"',
            id="and-part",
        ),
        pytest.param(f"has({PRODUCT})", f"{PRODUCT} is not set", id="has"),
        pytest.param(f'!({TYPE} == "nic")', f'({TYPE} == "nic") is true', id="not"),
    ],
)
def test_explains_why_false(expression: str, why: str) -> None:
    """A false selector says which part failed and with which value."""
    outcome = evaluate(expression, NIC)
    assert outcome.matches is False
    assert outcome.why == why


def test_missing_attribute_is_a_cel_error() -> None:
    """An unknown attribute in a known domain is a runtime error, as in the scheduler."""
    outcome = evaluate('device.attributes["numadra.dev"].productName == "X"', NIC)
    assert (outcome.matches, outcome.error) == (False, True)
    assert "no such key: productName" in outcome.why


def test_type_mismatch_is_a_cel_error() -> None:
    """Ordering a string against an int is an error (no such overload), not a silent false."""
    outcome = evaluate('device.attributes["numadra.dev"].interfaceName > 3', NIC)
    assert outcome.error is True
    assert "no such overload" in outcome.why


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param('semver("1.2.0").major() == 1', id="semver"),
        pytest.param('device.attributes["numadra.dev"].speedMbps > 1 ? true : false', id="ternary"),
        pytest.param('device.attributes["numadra.dev"].all(x, x > 1)', id="macro"),
        pytest.param("request.name == 'x'", id="unknown-variable"),
        pytest.param('device.driver == "a" @', id="garbage"),
    ],
)
def test_unsupported_is_unknown_not_a_guess(expression: str) -> None:
    """Expressions outside the subset give matches=None with a reason, never True or False."""
    outcome = evaluate(expression, NIC)
    assert outcome.matches is None
    assert outcome.why.startswith("cannot evaluate")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("8", Fraction(8), id="int"),
        pytest.param("500m", Fraction(1, 2), id="milli"),
        pytest.param("64Gi", Fraction(64 * 2**30), id="gibi"),
        pytest.param("1.5G", Fraction(1_500_000_000), id="decimal-giga"),
        pytest.param("1e3", Fraction(1000), id="exponent"),
        pytest.param(".5Ki", Fraction(512), id="leading-dot"),
    ],
)
def test_parse_quantity(text: str, value: Fraction) -> None:
    """Kubernetes quantity strings parse exactly."""
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1 Gi", "1GB", "--1"])
def test_parse_quantity_rejects(text: str) -> None:
    """Malformed quantities are a ValueError naming the text."""
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_format_quantity_prefers_binary_suffixes() -> None:
    """Byte amounts print with the largest exact binary suffix; small counts stay plain and
    round thousands take the decimal suffix, exactly as the apiserver stores them."""
    assert [format_quantity(Fraction(n)) for n in (112, 2**30, 3 * 2**20, 1000)] == [
        "112",
        "1Gi",
        "3Mi",
        "1k",
    ]


def test_culprits_name_the_failing_values() -> None:
    """A false expression lists the sources of the values that made it false (and only those)."""
    outcome = evaluate(f'device.driver == "numadra.dev" && {TYPE} == "gpu"', NIC)
    assert outcome.culprits == (TYPE,)
    assert evaluate(f'{TYPE} == "nic"', NIC).culprits == ()


# Bugs the differential test (test_cel_differential.py) found against the CEL runtime, one each.
DRIVER = "numadra.dev"
BOOLS = CelDevice(DRIVER, {DRIVER: {"type": "x", "flag": True, "off": False, "zero": 0}}, {})
NUMA = 'device.attributes["resource.kubernetes.io"].numaNode'


@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_arithmetic_with_zero_does_not_crash(op: str) -> None:
    """``x + 0`` used to compute ``x % 0`` too and raise ZeroDivisionError out of explain."""
    assert evaluate(f"{NUMA} {op} 0 == {0 if op == '*' else 1}", NIC).matches is True


@pytest.mark.parametrize(
    ("expression", "device", "expected"),
    [
        pytest.param(f"{NUMA} in [true]", NIC, False, id="1-is-not-true"),
        pytest.param(f'device.attributes["{DRIVER}"].flag in [1]', BOOLS, False, id="true-is-not-1"),
        pytest.param(f'device.attributes["{DRIVER}"].zero in [false]', BOOLS, False, id="0-is-not-false"),
        pytest.param(f'device.attributes["{DRIVER}"].flag in [true]', BOOLS, True, id="true-is-true"),
        pytest.param(f'device.attributes["{DRIVER}"].zero in [0.0]', BOOLS, True, id="0-is-0.0"),
        pytest.param(f'device.attributes["{DRIVER}"].zero in [[0], 0]', BOOLS, True, id="nested"),
    ],
)
def test_in_uses_cel_equality(expression: str, device: CelDevice, expected: bool) -> None:
    """``in`` compared with Python's ``==``, where True == 1: a bool matched an int."""
    assert evaluate(expression, device).matches is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.attributes["{DRIVER}"].off < device.attributes["{DRIVER}"].flag', True),
        (f'device.attributes["{DRIVER}"].flag <= false', False),
        (f'true >= device.attributes["{DRIVER}"].flag', True),
    ],
)
def test_bools_are_ordered(expression: str, expected: bool) -> None:
    """CEL orders false < true; this was reported as a CEL error."""
    outcome = evaluate(expression, BOOLS)
    assert (outcome.matches, outcome.error) == (expected, False)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f"-{NUMA} - 6 == -7", True, id="setup"),
        pytest.param(f"(-{NUMA} - 6) / 2 == -3", True, id="div-truncates-toward-zero"),
        pytest.param(f"(-{NUMA} - 6) % 2 == -1", True, id="mod-has-the-dividends-sign"),
        pytest.param(f"7 % (-{NUMA} - 1) == 1", True, id="mod-negative-divisor"),
    ],
)
def test_integer_division_is_cels(expression: str, expected: bool) -> None:
    """``/`` floored and ``%`` took the divisor's sign (Python's rules): -7 / 2 gave -4, not -3."""
    assert evaluate(expression, NIC).matches is expected


@pytest.mark.parametrize(
    "expression",
    [
        f"{NUMA} + 9223372036854775807 > 0",
        f"{NUMA} * 9223372036854775807 * 2 > 0",
        f"-({NUMA} - 9223372036854775807 - 2) > 0",
    ],
)
def test_int64_overflow_is_an_error(expression: str) -> None:
    """Results beyond int64 were Python big ints; CEL fails the expression (so does the scheduler)."""
    outcome = evaluate(expression, NIC)
    assert (outcome.matches, outcome.error) == (False, True)
    assert "overflow" in outcome.why


def test_as_integer_refuses_to_lose_precision() -> None:
    """``quantity("1500m").asInteger()`` was 1; Kubernetes fails on a lossy conversion."""
    half = CelDevice(DRIVER, {DRIVER: {"type": "cpu"}}, {DRIVER: {"cpus": Fraction(3, 2)}})
    outcome = evaluate(f'device.capacity["{DRIVER}"].cpus.asInteger() == 1', half)
    assert (outcome.matches, outcome.error) == (False, True)
    assert evaluate(f'device.capacity["{DRIVER}"].cpus.asInteger() == 112', CPU).matches is True


def test_bool_is_not_an_int_operand() -> None:
    """``1 + true`` was 2 (Python's bool is an int); CEL has no such overload."""
    assert evaluate(f'{NUMA} + device.attributes["{DRIVER}"].rdma == 2', NIC).matches is not True


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        pytest.param('"é"', "é", id="utf-8-kept"),
        pytest.param('"Ü\\u00dc"', "ÜÜ", id="u-escape"),
        pytest.param('"\\x41\\101"', "AA", id="hex-and-octal"),
        pytest.param('"\\U0001F600"', "\U0001f600", id="U-escape"),
        pytest.param("'it\\'s'", "it's", id="quote"),
        pytest.param('"a\\tb\\\\"', "a\tb\\", id="tab-and-backslash"),
    ],
)
def test_string_literals_decode_as_cel_does(literal: str, value: str) -> None:
    """Non-ASCII literals went through Latin-1 ("é" became "Ã©"), so they never matched a device."""
    device = CelDevice(DRIVER, {DRIVER: {"productName": value}}, {})
    assert evaluate(f'device.attributes["{DRIVER}"].productName == {literal}', device).matches is True
    assert evaluate(f"size({literal}) == {len(value)}", device).matches is True


def test_an_unknown_escape_is_not_guessed() -> None:
    assert evaluate('device.driver == "\\q"', NIC).matches is None


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("[", id="invalid-for-both"),
        pytest.param("0\\\\z", id="re2-only-escape"),
        pytest.param("\\\\pL", id="re2-only-class"),
        pytest.param("(?=e)", id="python-only-lookahead"),
        pytest.param("(e)\\\\1", id="python-only-backreference"),
        pytest.param("0\\\\Z", id="python-only-end"),
        pytest.param("[[:alpha:]]", id="posix-class"),
        pytest.param("(?x)e", id="python-only-flag"),
    ],
)
def test_regex_syntax_re2_reads_otherwise_is_not_guessed(pattern: str) -> None:
    """matches() ran Python's re: an invalid or RE2-only pattern raised out of explain, and
    Python-only syntax answered where the scheduler's RE2 fails the expression."""
    assert evaluate(f'{TYPE}.matches("{pattern}")', NIC).matches is None


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        pytest.param("^n\\\\w+$", True, id="word"),
        pytest.param("(?i)^NIC$", True, id="ascii-ignorecase"),
        pytest.param("(?P<kind>ni)c", True, id="named-group"),
        pytest.param("\\\\d", False, id="no-digit"),
    ],
)
def test_regex_both_engines_read_alike(pattern: str, expected: bool) -> None:
    assert evaluate(f'{TYPE}.matches("{pattern}")', NIC).matches is expected


def test_regex_digit_class_is_ascii_as_in_re2() -> None:
    """Python's \\d also matches other scripts' digits; RE2's (and so the scheduler's) does not."""
    device = CelDevice(DRIVER, {DRIVER: {"type": "x", "serial": "\u0663"}}, {})  # ARABIC-INDIC 3
    assert evaluate(f'device.attributes["{DRIVER}"].serial.matches("\\\\d")', device).matches is False


@pytest.mark.parametrize(
    ("expression", "matches", "error"),
    [
        pytest.param(f"{NUMA} == 1u", True, False, id="uint-equals-int"),
        pytest.param(f"{NUMA} < 2u", True, False, id="uint-orders-with-int"),
        pytest.param(f"{NUMA} + 1u == 2", False, True, id="int-plus-uint-is-an-error"),
        pytest.param("3u - 4u < 5u", False, True, id="uint-underflow"),
        pytest.param("18446744073709551615u + 1u > 0u", False, True, id="uint-overflow"),
        pytest.param("7u / 2u == 3u", True, False, id="uint-division"),
    ],
)
def test_uints_are_not_ints(expression: str, matches: bool, error: bool) -> None:
    """``3u`` was read as the int 3, so int + uint added up where CEL has no such overload."""
    outcome = evaluate(expression, NIC)
    assert (outcome.matches, outcome.error) == (matches, error)


def test_a_uint_is_not_negated() -> None:
    outcome = evaluate("-(1u) < 0", NIC)
    assert (outcome.matches, outcome.error) == (False, True)
