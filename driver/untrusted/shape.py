"""The one way numadra checks the shape of a document another party wrote, field by field.

A decoded JSON or YAML document is whatever its writer chose: a number where a path belongs, a
list where an object belongs, a string where a list belongs. Code that reads it with ``.get()``
and trusts the types raises ``AttributeError`` or ``TypeError`` somewhere later, far from the
field, and a ``catch Exception`` turns that into "internal error" for every claim that touches
the document. So a document is checked first, against a declared shape, and the checked values
are what the caller uses:

* :class:`Text`, :class:`Integer`, :class:`Boolean`: a scalar of that JSON type (a boolean is not
  an integer), within bounds (length, and no control character where the text is shown to a
  person; range);
* :class:`Choice`: a string that names one of a fixed set, as the value the caller maps it to;
* :class:`ListOf`, :class:`MapOf`: a list (a tuple comes back) or an object with string keys,
  each item checked, with a bound on the count;
* :class:`Record`: an object whose named fields are checked (required or not) and passed, under
  the caller's names, to a builder: a frozen dataclass comes back, or with :data:`AS_DICT`, a dict
  of the checked fields only. Fields not named are ignored: the writer may know more than we read.
* :class:`Unchecked`: a field whose own parser does the checking (it must refuse with our error).

Every refusal is :class:`~driver.errors.UntrustedValueError` whose ``what`` is the field's path
(``devices[3].containerEdits.mounts[0].hostPath``) and whose reason says what was expected and
what came (``must be a string, got a number``). Nothing else escapes a check: the caller skips
the document (or the claim) and names the field. Shapes are immutable and shared by threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from driver.errors import UntrustedValueError
from driver.untrusted.values import bounded_int, is_object, json_type

__all__ = [
    "AS_DICT",
    "Boolean",
    "Choice",
    "Field",
    "Integer",
    "ListOf",
    "MapOf",
    "Record",
    "Shape",
    "Text",
    "Unchecked",
    "at",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: a string field longer than this is refused unless its shape allows more
MAX_TEXT = 4096
#: what ``Mapping.get`` gives for a key the object does not have (``None`` is a value: null)
_ABSENT: Any = object()


def at(path: str, key: str | int) -> str:
    """The path of ``key`` below ``path``: ``a.b`` for a field, ``a[3]`` for an index."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _refuse(path: str, expected: str, value: object) -> UntrustedValueError:
    return UntrustedValueError(path or "the document", f"must be {expected}, got {json_type(value)}")


class Shape(Generic[T_co]):
    """What one value must look like; :meth:`check` returns it as the caller will use it."""

    def check(self, value: object, path: str = "") -> T_co:
        """``value`` checked (and converted: lists become tuples); UntrustedValueError naming ``path``."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Text(Shape[str]):
    """A string of ``min_len`` to ``max_len`` characters; with ``printable``, none of them a
    control character (text a terminal or a report will show: an escape sequence in a planted
    file must not reach the screen)."""

    max_len: int = MAX_TEXT
    min_len: int = 0
    printable: bool = False

    def check(self, value: object, path: str = "") -> str:
        if not isinstance(value, str):
            raise _refuse(path, "a string", value)
        if not self.min_len <= len(value) <= self.max_len:
            size = "empty" if not value else f"{len(value)} characters"
            raise UntrustedValueError(
                path, f"must be {self.min_len} to {self.max_len} characters long, is {size}"
            )
        if self.printable and not value.isprintable():
            raise UntrustedValueError(
                path or "the document", "must be printable text, has a control character"
            )
        return value


@dataclass(frozen=True, slots=True)
class Choice(Shape[T]):
    """A string naming one of ``choices``; the value it maps to comes back. ``unknown`` follows the
    refused string in the error (``'evil' is not one of a, b``), so a caller can say what the set
    is (``is no feature gate numadra knows``)."""

    choices: Mapping[str, T]
    unknown: str = ""

    def check(self, value: object, path: str = "") -> T:
        if not isinstance(value, str):
            raise _refuse(path, "a string", value)
        if value not in self.choices:
            shown = repr(value[:64])  # a planted name is quoted and cut, never shown raw
            why = self.unknown or f"is not one of {', '.join(self.choices)}"
            raise UntrustedValueError(path or "the document", f"{shown} {why}")
        return self.choices[value]


@dataclass(frozen=True, slots=True)
class Integer(Shape[int]):
    """An integer (not a boolean) in ``[lo, hi]``."""

    lo: int
    hi: int

    def check(self, value: object, path: str = "") -> int:
        return bounded_int(value, what=path or "the document", lo=self.lo, hi=self.hi)


@dataclass(frozen=True, slots=True)
class Boolean(Shape[bool]):
    """``true`` or ``false``."""

    def check(self, value: object, path: str = "") -> bool:
        if not isinstance(value, bool):
            raise _refuse(path, "a boolean", value)
        return value


@dataclass(frozen=True, slots=True)
class Unchecked(Shape[object]):
    """Any value, passed on as it came: for a field with a parser of its own that refuses with
    UntrustedValueError (or the caller's error), e.g. a claim's opaque parameters."""

    def check(self, value: object, path: str = "") -> object:
        return value


@dataclass(frozen=True, slots=True)
class ListOf(Shape[tuple[T, ...]]):
    """A list of ``min_items`` to ``max_items`` items, each of shape ``item``; a tuple comes back."""

    item: Shape[T]
    max_items: int
    min_items: int = 0

    def check(self, value: object, path: str = "") -> tuple[T, ...]:
        if not isinstance(value, list | tuple):
            raise _refuse(path, "a list", value)
        if len(value) > self.max_items:
            raise UntrustedValueError(
                path or "the document", f"has {len(value)} items, more than the {self.max_items} allowed"
            )
        if len(value) < self.min_items:
            raise UntrustedValueError(
                path or "the document", f"has {len(value)} items, fewer than the {self.min_items} needed"
            )
        check = self.item.check
        return tuple([check(entry, at(path, index)) for index, entry in enumerate(value)])


@dataclass(frozen=True, slots=True)
class MapOf(Shape[dict[str, T]]):
    """An object of at most ``max_keys`` keys of shape ``key``, each value of shape ``value``."""

    value: Shape[T]
    max_keys: int
    key: Text = Text()

    def check(self, value: object, path: str = "") -> dict[str, T]:
        if not isinstance(value, Mapping):
            raise _refuse(path, "an object", value)
        if len(value) > self.max_keys:
            raise UntrustedValueError(
                path or "the document", f"has {len(value)} keys, more than the {self.max_keys} allowed"
            )
        out: dict[str, T] = {}
        for name, entry in value.items():
            key = self.key.check(name, f"{path or 'the document'} key")
            out[key] = self.value.check(entry, at(path, key))
        return out


@dataclass(frozen=True, slots=True)
class Field(Generic[T]):
    """One named field of a :class:`Record`: passed to the builder as ``name`` when present.

    An absent field is left to the builder's default, unless ``required``. ``null`` is refused
    like any other wrong type, unless ``nullable`` (then it counts as absent).
    """

    name: str
    shape: Shape[T]
    required: bool = False
    nullable: bool = False


def _as_dict(**fields: Any) -> dict[str, Any]:
    return fields


#: a :class:`Record` builder that returns the checked fields as a dict (for a document the caller
#: keeps reading as a mapping once its shape is known)
AS_DICT: Callable[..., dict[str, Any]] = _as_dict


@dataclass(frozen=True, slots=True)
class Record(Shape[T]):
    """An object: each field of ``fields`` (keyed by its JSON name) checked, then ``build(**fields)``.

    Unknown fields are ignored (another writer's extensions), but at most ``max_keys`` keys are
    accepted, so an object cannot carry unbounded work in names we skip.
    """

    build: Callable[..., T]
    fields: Mapping[str, Field[Any]]
    max_keys: int = 256
    _required: tuple[str, ...] = field(init=False, default=())
    _fields: tuple[tuple[str, Field[Any]], ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        required = tuple(key for key, spec in self.fields.items() if spec.required)
        object.__setattr__(self, "_required", required)
        object.__setattr__(self, "_fields", tuple(self.fields.items()))

    def check(self, value: object, path: str = "") -> T:
        if not is_object(value):
            raise _refuse(path, "an object", value)
        if len(value) > self.max_keys:
            raise UntrustedValueError(
                path or "the document", f"has {len(value)} keys, more than the {self.max_keys} allowed"
            )
        for key in self._required:
            if key not in value:
                raise UntrustedValueError(at(path, key), "is required")
        kwargs: dict[str, Any] = {}
        for key, spec in self._fields:
            raw = value.get(key, _ABSENT)
            if raw is _ABSENT or (raw is None and spec.nullable and not spec.required):
                continue
            kwargs[spec.name] = spec.shape.check(raw, at(path, key))
        return self.build(**kwargs)
