"""The flags of ``numadra run`` and their checks: flags and environment -> a checked RunConfig.

The flags are the flagged fields of :class:`driver.config.RunConfig`
(:data:`driver.cli.options.RUN_OPTIONS`); this module declares them on the ``run`` parser and
reads a config back. Every flag has an environment variable, so a DaemonSet can set values
through ``env`` as well as ``args``; a flag on the command line wins. The documented ones keep
their names (``NODE_NAME``, ``POD_UID``, from the downward API); the others are
``NUMADRA_<FLAG>``. ``--kubeconfig`` also reads ``KUBECONFIG``; without either the in-cluster
service account is used. Values from the environment get the same checks as flags: a bad one is a
:class:`~driver.errors.ConfigError` (exit 2) with one line that names both the flag and the
variable.

A value is checked by its field's type (a choice of its ``Literal`` or enum, a boolean, a path,
text, empty for None), then by the field's own check (``Flag.parse``) where it has one.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, Literal, TypeVar, get_origin

from driver.cli.options import RUN_OPTIONS, ConfigOption, Option
from driver.config import RunConfig
from driver.errors import ConfigError

__all__ = ["OPTIONS", "add_flags", "config_from_args", "read_config"]

#: the service account credential the in-cluster config reads
_IN_POD_CREDENTIAL = "/var/run/secrets/kubernetes.io/serviceaccount/token"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

#: every option of ``numadra run``, in ``--help`` order
OPTIONS: tuple[Option, ...] = tuple(o.option for o in RUN_OPTIONS)

_Config = TypeVar("_Config")


def add_flags(parser: argparse.ArgumentParser, options: Sequence[ConfigOption] = RUN_OPTIONS) -> None:
    """Declare ``options`` on ``parser``, each also read from its environment variables."""
    for item in options:
        item.option.add_to(parser, with_env=True)


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _raw(option: Option, args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """The option as text: the flag if given, else its first environment variable set, else the default."""
    given = getattr(args, option.dest, None)
    if given is not None:
        return _text(given)
    value = next((env[v] for v in option.variables if v in env), None)
    return value if value is not None else option.default


def _by_type(hint: Any, text: str, where: str) -> Any:
    """``text`` as a value of type ``hint`` (choices and booleans are checked before)."""
    if hint is str or get_origin(hint) is Literal:
        return text
    if hint is Path:
        return Path(text)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(text)
    if hint in (str | None, Path | None):
        return _by_type(str if hint == str | None else Path, text, where) if text else None
    raise ConfigError(f"{where}: no conversion for a field of type {hint!r} (give its Flag a parse)")


def _value(item: ConfigOption, text: str) -> Any:
    option = item.option
    if option.choices and text not in option.choices:
        raise ConfigError(f"{option.where} must be one of {'|'.join(option.choices)}, got {text!r}")
    if option.boolean:
        if text.lower() not in _TRUE | _FALSE:
            raise ConfigError(f"{option.where} must be true or false, got {text!r}")
        return text.lower() in _TRUE
    if item.parse is not None:
        return item.parse(text, option.where)
    return _by_type(item.hint, text, option.where)


def read_config(
    config: type[_Config],
    options: Sequence[ConfigOption],
    args: argparse.Namespace,
    env: Mapping[str, str],
) -> _Config:
    """``config`` built from ``options`` (its flagged fields) as given by ``args`` and ``env``."""
    return config(**{item.option.dest: _value(item, _raw(item.option, args, env)) for item in options})


def _check_cluster_access(kubeconfig: str | None, env: Mapping[str, str]) -> None:
    """Fail at start, not in a background thread: the kubeconfig exists, or we run in a pod."""
    where = next(o.where for o in OPTIONS if o.dest == "kubeconfig")
    if kubeconfig is not None:
        if not Path(kubeconfig).is_file():
            raise ConfigError(f"{where} {kubeconfig} is not a file")
        return
    if not env.get("KUBERNETES_SERVICE_HOST") or not Path(_IN_POD_CREDENTIAL).is_file():
        raise ConfigError(
            "no --kubeconfig and not in a pod (no KUBERNETES_SERVICE_HOST or service account token "
            f"{_IN_POD_CREDENTIAL}); pass --kubeconfig outside a cluster"
        )


def _check_aux_cpus(config: RunConfig) -> None:
    """``--aux-cpus`` only with ``--node-allocatable``: CPUs the scheduler does not count are not ours."""
    if config.aux_cpus and not config.node_allocatable:
        where = next(o.where for o in OPTIONS if o.dest == "aux_cpus")
        raise ConfigError(
            f"{where} {config.aux_cpus} needs --node-allocatable: without the device's cpu overhead "
            "in its slice the scheduler does not count those CPUs, and numadra would hand out CPUs "
            "that pods placed by requests alone also count on"
        )


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> RunConfig:
    """Flags + environment -> a checked :class:`~driver.config.RunConfig`; ConfigError names the bad one."""
    env = os.environ if env is None else env
    config = read_config(RunConfig, RUN_OPTIONS, args, env)
    _check_aux_cpus(config)
    _check_cluster_access(config.kubeconfig, env)
    return config
