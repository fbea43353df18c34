"""The one way numadra parses YAML: no aliases, bounded nesting and node count.

A YAML file is bounded in bytes by the read (:mod:`driver.untrusted.files`), but bytes do not
bound what YAML builds from them: an anchor names a node and an alias repeats it, so a file of
a hundred KiB can stand for millions of nodes (the "billion laughs"), and nesting can run the
composer out of stack. The writers numadra reads YAML from never use either: the NVIDIA
Container Toolkit's CDI spec, ``kubectl get -o yaml`` and the files a user writes by hand.

So the text is first read as a stream of parser events (libyaml's, when PyYAML has it), which
costs memory for one event at a time: an alias, an anchor, nesting deeper than ``max_depth`` or
more than ``max_nodes`` nodes are refused there, before anything is built. Only then is the
document built by PyYAML's safe loader (plain data: no Python objects), and every failure of
either step is :class:`~driver.errors.UntrustedValueError` naming ``what``.

``tests/unit/test_yaml_loads.py`` holds every YAML load in ``driver/`` and ``cdi/`` to this module.
"""

from __future__ import annotations

from typing import Any

from driver.errors import UntrustedValueError

__all__ = ["MAX_YAML_DEPTH", "MAX_YAML_NODES", "load_yaml", "load_yaml_documents"]

#: the deepest nesting of lists and objects accepted (a CDI spec or a Kubernetes object: about 10)
MAX_YAML_DEPTH = 64
#: the most nodes (scalars, lists, objects) a document may hold unless the caller allows more
MAX_YAML_NODES = 1_000_000


def _loader() -> Any:
    """PyYAML's safe loader, libyaml's when it is there (imported here: most commands never parse YAML)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_events(text: str | bytes, *, what: str, max_depth: int, max_nodes: int) -> int:
    """Walk the parser's events; refuse aliases, anchors, deep nesting, too many nodes.

    Returns how many documents the stream holds.
    """
    import yaml

    depth = nodes = documents = 0
    for event in yaml.parse(text, Loader=_loader()):
        if isinstance(event, yaml.AliasEvent):
            raise UntrustedValueError(what, f"uses the alias *{event.anchor}: YAML aliases are refused")
        if isinstance(event, yaml.NodeEvent):
            if event.anchor is not None:
                raise UntrustedValueError(
                    what, f"defines the anchor &{event.anchor}: YAML anchors are refused"
                )
            nodes += 1
            if nodes > max_nodes:
                raise UntrustedValueError(what, f"holds more than the {max_nodes} YAML nodes allowed")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise UntrustedValueError(what, f"is nested more than {max_depth} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
    return documents


def _load(text: str | bytes, *, what: str, max_depth: int, max_nodes: int, every: bool) -> list[Any]:
    import yaml

    try:
        documents = _check_events(text, what=what, max_depth=max_depth, max_nodes=max_nodes)
        if not every and documents > 1:
            raise UntrustedValueError(what, f"holds {documents} YAML documents, not one")
        # the stream was checked above: no alias, bounded depth and size; the safe loader builds data only
        return list(yaml.load_all(text, Loader=_loader()))
    except UntrustedValueError:
        raise
    except RecursionError:
        raise UntrustedValueError(what, "is nested too deeply") from None
    # YAMLError: not YAML (the message names the line); ValueError: an integer of too many digits;
    # ArithmeticError: a number the constructor cannot represent
    except (yaml.YAMLError, ValueError, ArithmeticError) as exc:
        raise UntrustedValueError(what, f"is not YAML ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.split())[:300] or type(exc).__name__


def load_yaml(
    text: str | bytes,
    *,
    what: str,
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
) -> Any:
    """The one document of ``text`` (None when it is empty); UntrustedValueError naming ``what``."""
    docs = _load(text, what=what, max_depth=max_depth, max_nodes=max_nodes, every=False)
    return docs[0] if docs else None


def load_yaml_documents(
    text: str | bytes,
    *,
    what: str,
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
) -> list[Any]:
    """Every document of ``text`` (``---`` separated), empty ones as None; UntrustedValueError
    naming ``what``. ``max_nodes`` bounds the whole stream."""
    return _load(text, what=what, max_depth=max_depth, max_nodes=max_nodes, every=True)
