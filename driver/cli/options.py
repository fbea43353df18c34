"""The options of the ``numadra`` subcommands, each declared once, and the parent parsers made of them.

The options of ``numadra run`` are the fields of :class:`driver.config.RunConfig` that carry a
:class:`~driver.config.Flag` (:func:`config_options`): the flag is the field's name, the default
the field's (as the text a flag or an environment variable would carry), the choices the values of
its ``Literal`` or enum type, a ``bool`` a ``--x/--no-x`` switch. Each becomes an :class:`Option`,
which declares it on a parser. The options several subcommands take (``Flag.shared``) are in
:data:`SHARED`; a subcommand takes the ones it needs through :func:`parent`
(``add_parser(..., parents=[parent("--host-root", ...)])``), so every subcommand shows the same
help for the same flag. ``numadra run`` reads every option from its environment variable too
(``with_env``): its parser leaves a flag that was not given at None, and
:func:`driver.cli.runflags.config_from_args` falls back to the variable, then to the default.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, fields
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from driver.config import FLAG, Flag, Parse, RunConfig

__all__ = [
    "RUN_OPTIONS",
    "SHARED",
    "ConfigOption",
    "Option",
    "choices_of",
    "config_options",
    "default_text",
    "env_name",
    "parent",
]


def env_name(flag: str) -> str:
    """``NUMADRA_<FLAG>``: the environment variable of a ``run`` option without a documented name."""
    return "NUMADRA_" + flag.removeprefix("--").replace("-", "_").upper()


@dataclass(frozen=True, slots=True)
class Option:
    """One option: its flag, help, default and environment variables (the first set one counts)."""

    flag: str
    help: str
    default: str = ""  # "" where the default is derived (described by the help) or empty
    env: tuple[str, ...] = ()  # () -> (NUMADRA_<FLAG>,)
    choices: tuple[str, ...] = ()
    boolean: bool = False
    path: bool = False  # argparse hands a Path (run converts every option itself)
    metavar: str = ""

    @property
    def dest(self) -> str:
        """The argparse attribute name."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def variables(self) -> tuple[str, ...]:
        """The environment variables ``run`` reads for it, in order."""
        return self.env or (env_name(self.flag),)

    @property
    def where(self) -> str:
        """How an error names it: the flag and its variables."""
        return f"{self.flag} (env {', '.join(self.variables)})"

    def add_to(self, parser: argparse.ArgumentParser, *, with_env: bool = False) -> None:
        """Declare it on ``parser``; ``with_env``: not given means None, and the help names the variables."""
        shown = f"{self.help} [env {', '.join(self.variables)}]" if with_env else self.help
        if self.boolean:
            default = None if with_env else self.default == "true"
            parser.add_argument(
                self.flag, dest=self.dest, action=argparse.BooleanOptionalAction, default=default, help=shown
            )
            return
        if self.default:
            shown = f"{shown} (default {self.default})"
        metavar = self.metavar or (f"{{{','.join(self.choices)}}}" if self.choices else self.dest.upper())
        if with_env:  # run checks and converts the text itself, the environment's alike
            parser.add_argument(self.flag, dest=self.dest, default=None, metavar=metavar, help=shown)
            return
        parser.add_argument(
            self.flag,
            dest=self.dest,
            default=self.default or None,
            choices=self.choices or None,
            type=Path if self.path else str,
            metavar=metavar,
            help=shown,
        )


@dataclass(frozen=True, slots=True)
class ConfigOption:
    """A flagged field of a config dataclass: its :class:`Option`, its type and its extra check."""

    option: Option
    #: the field's type, resolved (``typing.get_type_hints``)
    hint: Any
    parse: Parse | None


def _unwrap_optional(hint: Any) -> Any:
    """``X`` of ``X | None``; any other type unchanged."""
    args = get_args(hint)
    if get_origin(hint) in (UnionType, Union) and len(args) == 2 and type(None) in args:
        return next(a for a in args if a is not type(None))
    return hint


def choices_of(hint: Any) -> tuple[str, ...]:
    """The values a field of type ``hint`` takes: a ``Literal``'s, or a string enum's; else ()."""
    hint = _unwrap_optional(hint)
    if get_origin(hint) is Literal:
        return tuple(str(value) for value in get_args(hint))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return tuple(str(member.value) for member in hint)
    return ()


def default_text(value: object) -> str:
    """A field's default as ``--help`` shows it and as a flag would carry it ("": none shown)."""
    if value is MISSING or value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, frozenset | set | tuple | list):
        return ",".join(str(v) for v in sorted(value))
    return str(value)


def config_options(config: type) -> tuple[ConfigOption, ...]:
    """The options of ``config``'s fields that carry a :class:`~driver.config.Flag`, in field order.

    Flag ``--<field-name>``; default, choices and switch-ness read from the field (module docstring).
    """
    hints = get_type_hints(config)
    found: list[ConfigOption] = []
    for item in fields(config):
        spec = item.metadata.get(FLAG)
        if not isinstance(spec, Flag):
            continue
        hint = hints[item.name]
        option = Option(
            "--" + item.name.replace("_", "-"),
            spec.help,
            default_text(item.default),
            env=spec.env,
            choices=choices_of(hint),
            boolean=hint is bool,
            path=spec.path,
            metavar=spec.metavar,
        )
        found.append(ConfigOption(option, hint, spec.parse))
    return tuple(found)


#: every option of ``numadra run``: the flagged fields of :class:`~driver.config.RunConfig`
RUN_OPTIONS: tuple[ConfigOption, ...] = config_options(RunConfig)

#: the options more than one subcommand takes, by flag (the run options marked ``shared``)
SHARED: dict[str, Option] = {
    o.option.flag: o.option
    for o in RUN_OPTIONS
    if RunConfig.__dataclass_fields__[o.option.dest].metadata[FLAG].shared
}


def parent(*flags: str, with_env: bool = False) -> argparse.ArgumentParser:
    """A parent parser holding these shared options, in this order (KeyError for an unknown one)."""
    parser = argparse.ArgumentParser(add_help=False)
    for flag in flags:
        SHARED[flag].add_to(parser, with_env=with_env)
    return parser
