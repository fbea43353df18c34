"""A package's names loaded on first use (a module ``__getattr__``, PEP 562).

A few packages re-export names whose modules are heavy (the HTTP client, prometheus, the
inventory model) while a light module of the same package sits on the plugin registration path.
Importing the package must not import the heavy modules, so the package maps each name to the
module that defines it and loads that module when the name is first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["names_from"]


def names_from(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that loads ``homes[name]`` when ``name`` is asked for."""

    def get(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return get
