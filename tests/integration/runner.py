"""Run kscheduler in-process against the harness control plane (for tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from kscheduler.app import Options, SchedulerApp
from kscheduler.config import load_config
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.kube import KubeClient
from kscheduler.plugins import in_tree_registry

SCHEDULER = "kscheduler"


@asynccontextmanager
async def running_kscheduler(
    cp: ControlPlane,
    config: str = "",
    *,
    kubeconfig: str | None = None,
    qps: float = -1,
    burst: int = 1000,
) -> AsyncIterator[SchedulerApp]:
    registry = in_tree_registry()
    cfg = load_config(config, registry=registry)
    kube = await KubeClient.from_kubeconfig(
        kubeconfig or str(cp.scheduler_kubeconfig), qps=qps, burst=burst, pool_size=80
    )
    app = SchedulerApp(cfg, registry, kube, Options(leader_elect=False, shutdown_grace=10))
    stop = asyncio.Event()
    task = asyncio.create_task(app.run(stop), name="kscheduler-under-test")
    try:
        async with asyncio.timeout(30):
            synced = asyncio.create_task(app.synced.wait())
            done, _ = await asyncio.wait({synced, task}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                task.result()
                raise RuntimeError("kscheduler stopped before its caches synced")
        yield app
    finally:
        stop.set()
        try:
            async with asyncio.timeout(30):
                await task
        finally:
            await kube.close()


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
