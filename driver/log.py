"""Structured logging setup (structlog), JSON in the DaemonSet and readable on a console.

Every log line about a claim or a device carries ``claim_uid`` / ``device`` as keys: bind them with
``log.bind(claim_uid=...)`` rather than formatting them into the message.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, MutableMapping
from json.encoder import encode_basestring_ascii
from typing import Any, Literal

import structlog

__all__ = ["LogFormat", "configure_logging", "get_logger"]

LogFormat = Literal["json", "console"]


def _fallback(obj: Any) -> Any:
    """What JSON cannot hold goes in as its ``__structlog__()`` or ``repr`` (structlog's rule)."""
    to_log = getattr(obj, "__structlog__", None)
    return to_log() if callable(to_log) else repr(obj)


def _line_encoder() -> Callable[[Any], str]:
    """``json.dumps(event, default=_fallback)``, as one C encoder built once for every line.

    ``JSONEncoder.encode`` builds a new C encoder per call; this one is made with the arguments
    it passes, except the circular-reference markers: a line's values are built for that line
    and never refer to themselves, and without markers the encoder keeps no state between calls,
    so the gRPC threads share it. Without the C accelerator (not CPython): one reused
    ``JSONEncoder``, the same text.
    """
    fallback = json.JSONEncoder(default=_fallback, check_circular=False)
    try:
        from _json import make_encoder  # the C encoder json.encoder itself uses
    except ImportError:  # pragma: no cover - CPython always has it
        return fallback.encode
    # markers, default, encoder, indent, separators, sort_keys, skipkeys, allow_nan
    encoder = make_encoder(None, _fallback, encode_basestring_ascii, None, ": ", ", ", False, False, True)

    def encode(event: Any) -> str:
        return "".join(encoder(event, 0))

    return encode


_encode_line = _line_encoder()


#: (second since the epoch, its "YYYY-MM-DDTHH:MM:SS" in UTC): the lines of one second share it
_second: tuple[int, str] = (-1, "")


def _utc_stamp(ns: int) -> str:
    """The instant ``ns`` (nanoseconds since the epoch) as structlog's ISO UTC stamp writes it.

    That is ``datetime.now(timezone.utc).isoformat()`` with ``Z`` for ``+00:00``: microseconds
    (rounded down, as ``datetime.now`` rounds the clock) after a dot, left out when zero. The
    date and time of day are formatted once per second, not once per line.
    """
    global _second  # noqa: PLW0603 - a cache of one immutable pair, replaced whole
    secs, micros = divmod(ns // 1000, 1_000_000)
    last = _second
    if last[0] != secs:
        last = _second = (secs, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)))
    return f"{last[1]}.{micros:06d}Z" if micros else f"{last[1]}Z"


def _add_timestamp(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """``TimeStamper(fmt="iso", utc=True)``, with the same text (:func:`_utc_stamp`)."""
    event_dict["timestamp"] = _utc_stamp(time.time_ns())
    return event_dict


#: the ``level`` of a method whose name is not its level (structlog's ``map_method_name``)
_LEVEL_OF_METHOD = {"warn": "warning", "exception": "error"}

#: structlog's stack renderer, told to skip this module's frames as it skips its own: called from
#: :func:`_json_line`, it renders the same stack as in its own place in the processor chain
_render_stack = structlog.processors.StackInfoRenderer(additional_ignores=[__name__])


def _json_line(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> str:
    """structlog's JSON chain in one call, with that chain's text.

    The chain is ``add_log_level``, :func:`_add_timestamp`, ``StackInfoRenderer``,
    ``format_exc_info`` and the renderer: a call each per line, and the stack and exception
    renderers look for keys that hardly any line has. Here the level and the timestamp are set as
    those processors set them (an existing key keeps its place), the stack and exception renderers
    run only for a line that has their key (they pop it, and add ``stack`` and ``exception`` last,
    where the chain puts them), then :func:`_encode_line`.
    """
    event_dict["level"] = _LEVEL_OF_METHOD.get(method_name, method_name)
    event_dict["timestamp"] = _utc_stamp(time.time_ns())
    if "stack_info" in event_dict or "exc_info" in event_dict:
        event_dict = _render_stack(logger, method_name, event_dict)
        event_dict = structlog.processors.format_exc_info(logger, method_name, event_dict)
    return _encode_line(event_dict)


def configure_logging(fmt: LogFormat = "console", level: int = logging.INFO, *, cache: bool = False) -> None:
    """Configure structlog once for the process; logs go to stderr so stdout stays for data.

    ``cache``: each module's logger resolves the configuration on its first line and keeps it
    (``numadra run`` and the prepare benchmark: a claim's lines are on the kubelet's call, and an
    uncached logger rebuilds itself for every one). Off where the configuration may change later
    in the process (the CLI's data commands restore the caller's; tests capture lines).
    No processor reads context variables: nothing here binds any, so none merges them. JSON
    lines go through one processor (:func:`_json_line`); the console keeps structlog's chain.
    """
    processors: list[structlog.typing.Processor]
    if fmt == "json":
        processors = [_json_line]
    else:
        processors = [
            structlog.processors.add_log_level,
            _add_timestamp,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=False),
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=cache,
    )


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger bound with the component name."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=name)
    return logger
