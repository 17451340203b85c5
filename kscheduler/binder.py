"""Background tasks of the scheduler (bind cycles, status writes), tracked and drained."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger("kscheduler.binder")


class TaskTracker:
    """Runs coroutines as named tasks with bounded concurrency; nothing is fire-and-forget.

    ``spawn`` never blocks the scheduling loop: the concurrency bound is applied
    inside the task, so at most ``limit`` coroutines run their body at once.
    """

    def __init__(self, *, limit: int = 64, name: str = "task") -> None:
        self._sem = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task[None]] = set()
        self._name = name
        self.accepting = True

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None] | None:
        if not self.accepting:
            coro.close()
            return None
        task = asyncio.get_running_loop().create_task(self._run(coro, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        try:
            async with self._sem:
                await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background task failed", task=name)

    async def drain(self, timeout: float) -> int:
        """Stop accepting work and wait up to ``timeout`` for running tasks.

        Returns how many tasks were still running and got cancelled.
        """
        self.accepting = False
        if not self._tasks:
            return 0
        pending = set(self._tasks)
        _, still = await asyncio.wait(pending, timeout=timeout)
        for t in still:
            t.cancel()
        if still:
            await asyncio.gather(*still, return_exceptions=True)
        return len(still)

    async def cancel_all(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
