"""The shape primitive and the YAML loader: a typed value or our error naming the field, always.

The shape's properties: any decoded JSON checked against a declared shape gives the declared
types back (within their bounds) or ``UntrustedValueError`` whose ``what`` is a path the value
has. The loader's: aliases and anchors are refused before anything is built (the classic
"billion laughs" of nested aliases included, in bounded memory), nesting and node count are
bounded, and every other failure of PyYAML is our error too.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.errors import UntrustedValueError
from driver.untrusted.shape import AS_DICT, Boolean, Choice, Field, Integer, ListOf, MapOf, Record, Text
from driver.untrusted.yamldoc import load_yaml, load_yaml_documents


@dataclass(frozen=True, slots=True)
class Item:
    name: str
    count: int = 0
    on: bool = False
    tags: tuple[str, ...] = ()


ITEM = Record(
    Item,
    {
        "name": Field("name", Text(max_len=8, min_len=1), required=True),
        "count": Field("count", Integer(0, 10)),
        "on": Field("on", Boolean(), nullable=True),
        "tags": Field("tags", ListOf(Text(max_len=4), 3)),
    },
    max_keys=6,
)
DOC = Record(
    AS_DICT,
    {"items": Field("items", ListOf(ITEM, 4), required=True), "labels": Field("labels", MapOf(Text(), 3))},
)


@pytest.mark.parametrize(
    ("document", "what", "reason"),
    [
        pytest.param([], "the document", "must be an object, got a list", id="not-object"),
        pytest.param({}, "items", "is required", id="missing"),
        pytest.param(
            {"items": [{"name": 5}]}, "items[0].name", "must be a string, got a number", id="int-name"
        ),
        pytest.param(
            {"items": [{"name": "a", "count": True}]},
            "items[0].count",
            "must be an integer, got a boolean",
            id="bool-count",
        ),
        pytest.param(
            {"items": [{"name": "a", "count": 11}]}, "items[0].count", "must be between 0 and 10", id="range"
        ),
        pytest.param(
            {"items": [{"name": ""}]}, "items[0].name", "must be 1 to 8 characters long, is empty", id="empty"
        ),
        pytest.param(
            {"items": [{"name": "a", "tags": "x"}]},
            "items[0].tags",
            "must be a list, got a string",
            id="str-list",
        ),
        pytest.param(
            {"items": [{"name": "a", "tags": ["a"] * 4}]},
            "items[0].tags",
            "more than the 3 allowed",
            id="count",
        ),
        pytest.param(
            {"items": [{"name": "a", "on": 1}]},
            "items[0].on",
            "must be a boolean, got a number",
            id="int-bool",
        ),
        pytest.param(
            {"items": [], "labels": {"a": 1}}, "labels.a", "must be a string, got a number", id="map-value"
        ),
        pytest.param(
            {"items": [{"name": "a", **{str(k): k for k in range(6)}}]},
            "items[0]",
            "more than the 6",
            id="keys",
        ),
    ],
)
def test_a_wrong_field_is_named_by_its_path(document: object, what: str, reason: str) -> None:
    with pytest.raises(UntrustedValueError) as caught:
        DOC.check(document)
    assert caught.value.what == what
    assert reason in caught.value.reason


def test_a_valid_document_comes_back_typed() -> None:
    """Lists become tuples, records their dataclass; absent fields take the builder's defaults,
    a nullable null counts as absent, and fields nobody declared are ignored."""
    got = DOC.check({"items": [{"name": "a", "tags": ["x"], "on": None, "other": [1]}], "labels": {"k": "v"}})
    assert got == {"items": (Item("a", tags=("x",)),), "labels": {"k": "v"}}


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=30,
)
_NEAR = st.fixed_dictionaries(
    {
        "items": st.lists(
            st.fixed_dictionaries({}, optional=dict.fromkeys(["name", "count", "on", "tags"], _JSON)),
            max_size=5,
        )
    },
    optional={"labels": _JSON},
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_JSON, _NEAR))
def test_any_document_is_typed_or_refused_by_name(document: Any) -> None:
    try:
        got = DOC.check(document)
    except UntrustedValueError as exc:
        assert exc.what == "the document" or exc.what.startswith(("items", "labels")), exc
        return
    for item in got["items"]:
        assert isinstance(item.name, str) and 1 <= len(item.name) <= 8
        assert type(item.count) is int and 0 <= item.count <= 10
        assert type(item.on) is bool
        assert all(isinstance(tag, str) for tag in item.tags)


_SHOWN = Text(max_len=16, printable=True)
_COLOUR = Choice({"red": 1, "blue": 2}, unknown="is no colour we paint")


@pytest.mark.parametrize(
    ("shape", "value", "reason"),
    [
        pytest.param(_SHOWN, "gpu\x1b[2J", "must be printable text", id="escape-sequence"),
        pytest.param(_SHOWN, "a\nb", "must be printable text", id="newline"),
        pytest.param(_COLOUR, "green", "'green' is no colour we paint", id="unknown-choice"),
        pytest.param(_COLOUR, "\x1b[31m" * 20, "is no colour", id="planted-choice-is-quoted"),
        pytest.param(_COLOUR, 1, "must be a string, got a number", id="choice-not-text"),
        pytest.param(ListOf(Text(), 3, min_items=1), [], "fewer than the 1 needed", id="too-few"),
    ],
)
def test_text_shown_to_people_and_choices(shape: Any, value: object, reason: str) -> None:
    """Record files numadra state prints: control characters and unknown names are refused, and
    the refusal itself never carries the planted bytes raw."""
    with pytest.raises(UntrustedValueError) as caught:
        shape.check(value, "doc.field")
    assert caught.value.what == "doc.field"
    assert reason in caught.value.reason
    assert "\x1b" not in str(caught.value)


@given(st.text(max_size=16))
def test_printable_text_is_passed_whole_or_refused(text: str) -> None:
    try:
        assert _SHOWN.check(text, "t") == text
    except UntrustedValueError:
        assert not text.isprintable()
    else:
        assert text.isprintable()


def test_a_choice_gives_the_value_it_names() -> None:
    assert _COLOUR.check("blue") == 2
    assert ListOf(Text(), 3, min_items=1).check(["a"]) == ("a",)


def test_the_billion_laughs_is_refused_before_it_is_built() -> None:
    """Nine levels of ten aliases each: 10**9 strings if expanded. Refused at the first anchor."""
    lines = ['a0: &a0 "lol"']
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 10)]
    tracemalloc.start()
    try:
        with pytest.raises(UntrustedValueError, match="anchor &a0"):
            load_yaml("\n".join(lines), what="laughs.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("a: *missing\n", "alias", id="alias-without-anchor"),
        pytest.param("a: &x 1\n", "anchor &x", id="unused-anchor"),
        pytest.param("- " * 70 + "x\n", "nested more than 64", id="deep-block"),
        pytest.param("[" * 1000 + "]" * 1000, "nested more than 64", id="deep-flow"),
        pytest.param("[" + "1," * 2000 + "1]", "more than the 1000 YAML nodes", id="nodes"),
        pytest.param("a: [\n", "is not YAML", id="broken"),
        pytest.param("a: !!python/object:os.system x\n", "is not YAML", id="python-tag"),
        pytest.param("a: " + "9" * 5000 + "\n", "is not YAML", id="huge-int"),
        pytest.param("a: 1\n---\nb: 2\n", "2 YAML documents", id="two-docs"),
    ],
)
def test_what_the_loader_refuses(text: str, reason: str) -> None:
    with pytest.raises(UntrustedValueError) as caught:
        load_yaml(text, what="f.yaml", max_nodes=1000)
    assert caught.value.what == "f.yaml"
    assert reason in caught.value.reason


def test_plain_documents_load_as_data() -> None:
    assert load_yaml("a: [1, x, true, null]\n", what="f") == {"a": [1, "x", True, None]}
    assert load_yaml('{"json": "too"}', what="f") == {"json": "too"}
    assert load_yaml_documents("a: 1\n---\n---\nb: 2\n", what="f") == [{"a": 1}, None, {"b": 2}]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"\n #,?0")), max_size=80))
def test_any_text_is_data_or_our_error(text: str) -> None:
    """Text made of YAML's syntax characters: a document, or our error; PyYAML's never escapes."""
    try:
        load_yaml_documents(text, what="f")
    except UntrustedValueError as exc:
        assert exc.what == "f"
