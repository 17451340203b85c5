"""Run kscheduler in-process against the harness control plane (for tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kscheduler.difftest import running_kscheduler

SCHEDULER = "kscheduler"

__all__ = ["SCHEDULER", "running_kscheduler", "wait_for"]


async def wait_for(
    check: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "",
) -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last={last!r}")
