"""A ``numadra run`` flag is declared in one place: a field of the config made by ``flag(...)``.

A synthetic config with one flagged field of each kind shows that the field alone gives the
argparse option (name, help, default, choices, switch), its environment variables and the value
in the config; the real table is held to the same rule: every choice list is the values of the
field's ``Literal`` or enum type, and no module of the CLI bridges a type with ``cast``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
from enum import Enum, StrEnum
from pathlib import Path
from typing import Literal, get_args, get_origin, get_type_hints

import pytest

import driver.cli
import driver.config
from driver.cli.options import RUN_OPTIONS, config_options
from driver.cli.runflags import add_flags, read_config
from driver.config import RunConfig, flag, seconds
from driver.errors import ConfigError

Size = Literal["s", "m", "l"]


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Synthetic:
    """A config of four flags and one field that is not a flag."""

    size: Size = flag("how big", "m")
    colour: Colour = flag("which colour", Colour.RED, env=("COLOUR", "PAINT"))
    wait: float = flag("seconds to wait", 1.5, parse=seconds(zero_ok=True))
    loud: bool = flag("shout", False)
    hidden: int = 3


OPTIONS = config_options(Synthetic)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="synthetic")
    add_flags(parser, OPTIONS)
    return parser


def _read(argv: list[str], env: dict[str, str]) -> Synthetic:
    return read_config(Synthetic, OPTIONS, _parser().parse_args(argv), env)


def test_a_field_is_its_option() -> None:
    """Flag, help, default, environment and choices all come from the field."""
    by_flag = {item.option.flag: item.option for item in OPTIONS}
    assert list(by_flag) == ["--size", "--colour", "--wait", "--loud"]  # not --hidden
    assert by_flag["--size"].choices == ("s", "m", "l")
    assert by_flag["--colour"].choices == ("red", "blue")
    assert by_flag["--colour"].variables == ("COLOUR", "PAINT")
    assert by_flag["--wait"].variables == ("NUMADRA_WAIT",)
    assert [o.default for o in by_flag.values()] == ["m", "red", "1.5", "false"]
    assert by_flag["--loud"].boolean and not by_flag["--size"].boolean


def test_the_field_appears_in_argparse_help() -> None:
    text = " ".join(_parser().format_help().split())
    assert "--size {s,m,l} how big [env NUMADRA_SIZE] (default m)" in text
    assert "--loud, --no-loud shout [env NUMADRA_LOUD]" in text
    assert "--hidden" not in text


def test_the_field_is_read_from_flag_environment_and_default() -> None:
    assert _read([], {}) == Synthetic()
    from_env = _read([], {"NUMADRA_SIZE": "s", "PAINT": "blue", "NUMADRA_WAIT": "0", "NUMADRA_LOUD": "yes"})
    assert from_env == Synthetic(size="s", colour=Colour.BLUE, wait=0.0, loud=True)
    from_flags = _read(
        ["--size", "l", "--colour", "red", "--no-loud"], {"NUMADRA_SIZE": "s", "COLOUR": "blue"}
    )
    assert from_flags == Synthetic(size="l", colour=Colour.RED, loud=False)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        pytest.param({"NUMADRA_SIZE": "xl"}, ("--size (env NUMADRA_SIZE)", "s|m|l", "'xl'"), id="choice"),
        pytest.param({"PAINT": "green"}, ("--colour (env COLOUR, PAINT)", "red|blue"), id="enum"),
        pytest.param({"NUMADRA_WAIT": "-1"}, ("--wait (env NUMADRA_WAIT)", ">= 0 seconds"), id="parse"),
        pytest.param({"NUMADRA_LOUD": "maybe"}, ("--loud (env NUMADRA_LOUD)", "true or false"), id="switch"),
    ],
)
def test_a_bad_value_names_the_flag_and_its_variables(env: dict[str, str], words: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as raised:
        _read([], env)
    for word in words:
        assert word in str(raised.value)


def _values_of(hint: object) -> tuple[str, ...]:
    if get_origin(hint) is Literal:
        return tuple(str(v) for v in get_args(hint))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return tuple(str(m.value) for m in hint)
    return ()


def test_every_run_choice_list_is_its_field_s_type() -> None:
    """Each option with choices is a Literal or enum field, and offers exactly its values."""
    hints = get_type_hints(RunConfig)
    typed = {name for name, hint in hints.items() if _values_of(hint)}
    assert {"pinning", "log_format", "log_level", "taint_unhealthy", "hotplug", "isolated_cpus"} <= typed
    with_choices = {item.option.dest for item in RUN_OPTIONS if item.option.choices}
    assert with_choices == typed
    for item in RUN_OPTIONS:
        assert item.option.choices == _values_of(hints[item.option.dest]), item.option.flag


def _casts(source: str) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", "") == "cast" or getattr(node.func, "attr", "") == "cast")
    ]


def test_no_module_of_the_cli_casts_a_flag_to_its_type() -> None:
    """The text of a flag becomes its type by the field's check, never by ``cast``."""
    modules = [*Path(driver.cli.__file__).parent.glob("*.py"), Path(driver.config.__file__)]
    found = [f"{path.name}:{line}" for path in modules for line in _casts(path.read_text())]
    assert found == []
    assert _casts('from typing import cast\nx = cast("LogFormat", raw["log_format"])\n') == [2]
