"""HTTP endpoints: /metrics, /healthz, /livez, /readyz and /debug/*.

One HealthServer per listener. The secure port (kscheduler run's default) gets
an SSLContext and a DelegatedAuth: every path but the health ones needs an
identity the apiserver vouches for and allows (kscheduler.serving.auth). Without
them the server is plain HTTP and open, which the command line gives only when
asked (--insecure-port).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

if TYPE_CHECKING:
    from kscheduler.app import SchedulerApp
    from kscheduler.serving.auth import DelegatedAuth

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS),
        status=status,
        content_type="application/json",
    )


class HealthServer:
    def __init__(
        self,
        app: SchedulerApp,
        *,
        host: str,
        port: int,
        registry: CollectorRegistry,
        ssl_context: ssl.SSLContext | None = None,
        auth: DelegatedAuth | None = None,
    ) -> None:
        """ssl_context: serve HTTPS; auth: check every request with it (the
        middleware answers 401/403/503 itself). Neither: plain, open HTTP."""
        self.app = app
        self.host = host
        self.port = port
        self.registry = registry
        self.ssl_context = ssl_context
        self.auth = auth
        self._runner: web.AppRunner | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    @web.middleware
    async def _check_access(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        assert self.auth is not None
        peercert = None
        if request.transport is not None:
            peercert = request.transport.get_extra_info("peercert")
        outcome = await self.auth.check(
            method=request.method,
            path=request.path,
            authorization=request.headers.get("Authorization"),
            peercert=peercert,
        )
        if outcome.allowed:
            return await handler(request)
        headers = {"WWW-Authenticate": 'Bearer realm="kscheduler"'} if outcome.status == 401 else {}
        return web.Response(text=outcome.message + "\n", status=outcome.status, headers=headers)

    def routes(self) -> web.Application:
        w = web.Application(middlewares=[self._check_access] if self.auth is not None else [])
        w.router.add_get("/healthz", self.healthz)
        w.router.add_get("/livez", self.healthz)
        w.router.add_get("/readyz", self.readyz)
        w.router.add_get("/metrics", self.metrics)
        w.router.add_get("/debug/queue", self.debug_queue)
        w.router.add_get("/debug/cache", self.debug_cache)
        w.router.add_get("/debug/explain", self.debug_explain)
        return w

    async def start(self) -> int:
        self._runner = web.AppRunner(self.routes(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        server = getattr(site, "_server", None)
        if self.port == 0 and server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- handlers ----------------------------------------------------------------------
    def _health_problems(self) -> list[str]:
        problems = []
        el = self.app.elector
        if el is not None and self.app.leading and not el.is_leader():
            problems.append("leader election: lease not renewed within renewDeadline")
        return problems

    async def healthz(self, request: web.Request) -> web.Response:
        problems = self._health_problems()
        if problems:
            return web.Response(text="\n".join(problems) + "\n", status=500)
        return web.Response(text="ok")

    async def readyz(self, request: web.Request) -> web.Response:
        problems = self._health_problems()
        if not self.app.synced.is_set():
            problems.append("informers: caches not synced")
        if problems:
            return web.Response(text="\n".join(problems) + "\n", status=503)
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def debug_queue(self, request: web.Request) -> web.Response:
        q = self.app.queue
        now = time.monotonic()
        pods = [
            {
                "pod": qp.pod.key,
                "queue": where,
                "attempts": qp.attempts,
                "priority": qp.pod.priority,
                "unschedulablePlugins": sorted(qp.unschedulable_plugins),
                "gatedBy": qp.gated or None,
                "backoffRemainingSeconds": round(max(qp.backoff_expiry - now, 0.0), 3)
                if where == "backoff"
                else None,
            }
            for where, qp in q.pending()
        ]
        return _json({"counts": q.counts(), "pods": pods})

    async def debug_cache(self, request: web.Request) -> web.Response:
        c = self.app.cache
        nodes = []
        for name, ni in sorted(c.nodes.items()):
            nodes.append(
                {
                    "name": name,
                    "exists": ni.node is not None,
                    "pods": len(ni.pods),
                    "requested": ni.requested.as_dict(),
                    "allocatable": ni.allocatable.as_dict(),
                }
            )
        assumed = [p.key for p in c.assumed_pods()]
        return _json({"nodes": nodes, "assumedPods": assumed, "podCount": c.pod_count()})

    async def debug_explain(self, request: web.Request) -> web.Response:
        """The daemon's last real attempt for ?pod=NAMESPACE/NAME.

        ``detail`` holds, on success, the node counts and the chosen node's
        weighted score per plugin (``score`` is its total, ``nodesWithThisScore``
        how many nodes tied on it); when nothing fit, ``rejections``: node counts
        per plugin, Status code and reasons. ``kscheduler explain`` gives every
        node's verdict and every score.
        """
        key = request.query.get("pod", "")
        if not key:
            return _json({"error": "pass ?pod=NAMESPACE/NAME"}, status=400)
        rec = self.app.scheduler.last_attempts.get(key)
        if rec is None:
            return _json({"error": f"no attempt recorded for pod {key!r}"}, status=404)
        return _json(
            {
                "pod": key,
                "result": rec.result,
                "node": rec.node or None,
                "message": rec.message or None,
                "status": rec.status or None,
                "detail": rec.detail,
                "durationSeconds": rec.seconds,
                "time": rec.at,
            }
        )
