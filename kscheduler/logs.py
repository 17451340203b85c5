"""structlog setup: JSON lines when not on a terminal, readable console on one."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

#: -v count -> stdlib level
_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG}


def configure(
    verbosity: int = 1, *, stream: TextIO | None = None, json: bool | None = None
) -> None:
    """Configure structlog once for the process.

    ``verbosity`` 0 logs warnings, 1 (the default) each attempt's result, 2+ debug.
    ``json`` forces the renderer; by default JSON unless ``stream`` is a terminal.
    """
    stream = stream or sys.stderr
    level = _LEVELS.get(verbosity, logging.DEBUG)
    if json is None:
        json = not stream.isatty()
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=stream.isatty())]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        level=max(level, logging.INFO), stream=stream, format="%(levelname)s %(name)s %(message)s"
    )
