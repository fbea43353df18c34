"""Structured logging setup (structlog), JSON in the DaemonSet and readable on a console.

Every log line about a claim or a device carries ``claim_uid`` / ``device`` as keys: bind them with
``log.bind(claim_uid=...)`` rather than formatting them into the message.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, Literal

import structlog

__all__ = ["LogFormat", "configure_logging", "get_logger"]

LogFormat = Literal["json", "console"]


def _fallback(obj: Any) -> Any:
    """What JSON cannot hold goes in as its ``__structlog__()`` or ``repr`` (structlog's rule)."""
    to_log = getattr(obj, "__structlog__", None)
    return to_log() if callable(to_log) else repr(obj)


#: one encoder for every line: ``json.dumps`` with ``default=`` would build a new one per line
_ENCODER = json.JSONEncoder(default=_fallback)


def _encode(event: Any, **_: Any) -> str:
    return _ENCODER.encode(event)


def configure_logging(fmt: LogFormat = "console", level: int = logging.INFO, *, cache: bool = False) -> None:
    """Configure structlog once for the process; logs go to stderr so stdout stays for data.

    ``cache``: each module's logger resolves the configuration on its first line and keeps it
    (``numadra run`` and the prepare benchmark: a claim's lines are on the kubelet's call, and an
    uncached logger rebuilds itself for every one). Off where the configuration may change later
    in the process (the CLI's data commands restore the caller's; tests capture lines).
    No processor reads context variables: nothing here binds any, so none merges them.
    """
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_encode)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=cache,
    )


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger bound with the component name."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=name)
    return logger
