"""structlog set-up: JSON lines for machines, a console renderer for people at a terminal."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}

LOG_STR_CHARS = 256
"""Longest string a log field shows: group ids, member ids and reasons come from clients
(up to 32 767 bytes each, protocol.limits), and a group event logs several of them."""
LOG_LIST_ITEMS = 64
"""Most items a logged list shows (a member's partitions, decoded from its assignment)."""


def _bounded(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        if len(value) <= LOG_STR_CHARS:
            return value
        return f"{value[:LOG_STR_CHARS]}...(+{len(value) - LOG_STR_CHARS} chars)"
    if isinstance(value, list | tuple) and depth < 4:
        head = [_bounded(v, depth + 1) for v in value[:LOG_LIST_ITEMS]]
        if len(value) > LOG_LIST_ITEMS:
            head.append(f"...(+{len(value) - LOG_LIST_ITEMS} items)")
        return head
    if isinstance(value, dict) and depth < 4:
        return {k: _bounded(v, depth + 1) for k, v in list(value.items())[:LOG_LIST_ITEMS]}
    return value


def bound_fields(logger: Any, method: str, event: MutableMapping[str, Any],
                 ) -> MutableMapping[str, Any]:
    """structlog processor: long client-supplied strings and lists are cut, so one log
    line stays small whatever a client sent."""
    for key, value in event.items():
        if key != "exception" and isinstance(value, str | list | tuple | dict):
            event[key] = _bounded(value)
    return event


def configure_logging(log_format: str = "auto", level: str = "info") -> None:
    """Configure structlog once per process; ``auto`` picks console output on a TTY."""
    use_console = log_format == "console" or (log_format == "auto" and sys.stderr.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            bound_fields,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
