"""The trivial binder: the control plane's ceiling for bench.run.

    python -m bench.binder --server URL --token-file F --ca-file F \\
        --scheduler-name NAME --namespace NS --ready-file F

It does the API work a scheduler must do for each pod and nothing else: a
watch on the pending pods of ``NAME`` in ``NS``, then for each pod a Binding
to the next node round robin and the same events.k8s.io/v1 ``Scheduled``
Event kube-scheduler writes, with ``--concurrency`` pods in flight. No
filtering or scoring, no client-side rate limit.

bench.run's ceiling is hack/controlplane/cmd/bench-binder, the same work through
client-go over protobuf; this one (``--ceiling-binder python``) speaks JSON, which
costs the apiserver more per pod, so on a control plane short of CPU its rate is
below kube-scheduler's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from kscheduler.controlplane.rest import ApiError, RestClient
from kscheduler.events import micro_time


def binding(pod: dict[str, Any], node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def scheduled_event(pod: dict[str, Any], node: str, controller: str) -> dict[str, Any]:
    """The Event kube-scheduler writes when it has bound a pod."""
    meta = pod["metadata"]
    ns, name = meta["namespace"], meta["name"]
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": ns},
        "eventTime": micro_time(),
        "reportingController": controller,
        "reportingInstance": f"{controller}-{socket.gethostname()}-{os.getpid()}"[:128],
        "action": "Binding",
        "reason": "Scheduled",
        "note": f"Successfully assigned {ns}/{name} to {node}",
        "type": "Normal",
        "regarding": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": ns,
            "name": name,
            "uid": meta["uid"],
            "resourceVersion": meta.get("resourceVersion", ""),
        },
    }


class Binder:
    def __init__(self, api: RestClient, scheduler: str, namespace: str, concurrency: int) -> None:
        self.api = api
        self.scheduler = scheduler
        self.namespace = namespace
        self.concurrency = concurrency
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seen: set[str] = set()
        self.nodes: itertools.cycle[str] = itertools.cycle([""])
        self.bound = 0
        self.failed = 0
        self.last_added = time.monotonic()

    def _selector(self) -> str:
        return f"spec.schedulerName={self.scheduler},spec.nodeName="

    def _offer(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if uid not in self.seen and not pod.get("spec", {}).get("nodeName"):
            self.seen.add(uid)
            self.queue.put_nowait(pod)

    async def prepare(self) -> str:
        names = sorted(n["metadata"]["name"] for n in await self.api.list("/api/v1/nodes"))
        if not names:
            raise SystemExit("bench.binder: the cluster has no nodes")
        self.nodes = itertools.cycle(names)
        return await self.list_pending()

    async def list_pending(self) -> str:
        """Offer every pending pod of the namespace; the list's resourceVersion."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        page = await self.api.get(path, {"fieldSelector": self._selector()})
        for pod in page.get("items", []):
            self._offer(pod)
        return str(page["metadata"]["resourceVersion"])

    async def watch(self, rv: str) -> None:
        url = f"{self.api.base_url}/api/v1/namespaces/{self.namespace}/pods"
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while True:
            params = {
                "watch": "true",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "fieldSelector": self._selector(),
            }
            try:
                async with self.api.session.get(url, params=params, timeout=timeout) as resp:
                    if resp.status != 200:
                        raise ApiError("WATCH", url, resp.status, await resp.text())
                    buf = b""
                    async for chunk in resp.content.iter_any():
                        buf += chunk
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            if not line.strip():
                                continue
                            event = orjson.loads(line)
                            obj = event.get("object") or {}
                            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                            if event.get("type") == "ADDED":
                                self.last_added = time.monotonic()
                                self._offer(obj)
                            elif event.get("type") == "ERROR":
                                raise ApiError("WATCH", url, 410, obj)
            except (ApiError, aiohttp.ClientError, ValueError):
                await asyncio.sleep(0.2)
                rv = await self.list_pending()

    async def resync(self, idle: float = 3.0) -> None:
        """List the pending pods again once the watch has reported nothing new for
        ``idle`` seconds: a pod a watch never reported (a stream cut without an
        error) is bound all the same, at no cost while pods keep coming."""
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - self.last_added >= idle:
                with contextlib.suppress(ApiError, aiohttp.ClientError, TimeoutError):
                    await self.list_pending()

    async def worker(self) -> None:
        while True:
            pod = await self.queue.get()
            meta = pod["metadata"]
            node = next(self.nodes)
            ns = meta["namespace"]
            bind_path = f"/api/v1/namespaces/{ns}/pods/{meta['name']}/binding"
            events_path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
            bound = await self._retrying(bind_path, binding(pod, node))
            if not bound:
                # offered again by the next list of pending pods: a pod is never
                # left unbound because one bind was refused
                self.seen.discard(meta["uid"])
                continue
            if await self._retrying(events_path, scheduled_event(pod, node, self.scheduler)):
                self.bound += 1

    async def _retrying(self, path: str, body: dict[str, Any]) -> bool:
        """POST until it succeeds; a refusal that another try cannot change (a pod
        gone or bound already) ends it. A busy apiserver's 429/5xx and timeouts are
        tried again, as a scheduler's bind would be."""
        for attempt in range(1, 31):
            try:
                await self.api.post(path, body)
                return True
            except ApiError as exc:
                if exc.status >= 429:
                    print(f"bench.binder: {exc}, trying again", file=sys.stderr, flush=True)
                else:
                    print(f"bench.binder: {exc}", file=sys.stderr, flush=True)
                    self.failed += 1
                    return False
            except (aiohttp.ClientError, TimeoutError) as exc:
                print(f"bench.binder: {path}: {exc!r}, trying again", file=sys.stderr, flush=True)
            await asyncio.sleep(min(0.1 * attempt, 2.0))
        self.failed += 1
        return False


async def amain(args: argparse.Namespace) -> int:
    token = await asyncio.to_thread(lambda: Path(args.token_file).read_text().strip())
    api = RestClient(args.server, token, ca_file=args.ca_file, max_connections=args.concurrency + 4)
    binder = Binder(api, args.scheduler_name, args.namespace, args.concurrency)
    try:
        rv = await binder.prepare()
        tasks = [asyncio.create_task(binder.watch(rv)), asyncio.create_task(binder.resync())]
        tasks += [asyncio.create_task(binder.worker()) for _ in range(args.concurrency)]
        await asyncio.to_thread(Path(args.ready_file).write_text, "ready\n")
        print("bench.binder ready", flush=True)
        await asyncio.gather(*tasks)
    finally:
        with contextlib.suppress(Exception):
            await api.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.binder", description=__doc__)
    p.add_argument("--server", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--ca-file", required=True)
    p.add_argument("--scheduler-name", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--ready-file", required=True)
    p.add_argument("--concurrency", type=int, default=64)
    args = p.parse_args(argv)
    if args.concurrency < 1:
        p.error("--concurrency: must be at least 1")
    # stop at once when told to: nothing here needs cleaning up
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        import uvloop

        uvloop.run(amain(args))
    except ImportError:
        asyncio.run(amain(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
