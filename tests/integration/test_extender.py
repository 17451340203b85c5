"""An HTTP extender in the test process: its filter, prioritize and bind verdicts decide
where kscheduler places pods on a real kube-apiserver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiohttp import web

from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

VERDICT = "extender.example.com/verdict"


class Extender:
    """Filter: drops nodes labelled verdict=reject (FailedNodes) and verdict=never
    (FailedAndUnresolvableNodes). Prioritize: 10 for verdict=best, 0 otherwise.
    Bind: POSTs the Binding itself and remembers it. Node objects are sent whole."""

    def __init__(self, rest: RestClient) -> None:
        self.rest = rest
        self.calls: list[str] = []
        self.bound: list[tuple[str, str]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    @staticmethod
    def _verdict(node: dict[str, Any]) -> str:
        return str((node["metadata"].get("labels") or {}).get(VERDICT, ""))

    async def filter(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.calls.append("filter")
        keep, failed, never = [], {}, {}
        for n in args["Nodes"]["items"]:
            v = self._verdict(n)
            name = n["metadata"]["name"]
            if v == "reject":
                failed[name] = "the extender rejects this node"
            elif v == "never":
                never[name] = "the extender never uses this node"
            elif (args["Pod"]["metadata"].get("labels") or {}).get("deny") == "all":
                failed[name] = "the extender rejects this pod"
            else:
                keep.append(n)
        return web.json_response(
            {
                "Nodes": {"items": keep},
                "NodeNames": None,
                "FailedNodes": failed,
                "FailedAndUnresolvableNodes": never,
                "Error": "",
            }
        )

    async def prioritize(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.calls.append("prioritize")
        return web.json_response(
            [
                {"Host": n["metadata"]["name"], "Score": 10 if self._verdict(n) == "best" else 0}
                for n in args["Nodes"]["items"]
            ]
        )

    async def bind(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.calls.append("bind")
        ns, name, node = args["PodNamespace"], args["PodName"], args["Node"]
        await self.rest.post(
            f"/api/v1/namespaces/{ns}/pods/{name}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": args["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
        )
        self.bound.append((name, node))
        return web.json_response({"Error": ""})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/scheduler/filter", self.filter)
        app.router.add_post("/scheduler/prioritize", self.prioritize)
        app.router.add_post("/scheduler/bind", self.bind)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def config(self) -> str:
        return f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: http://127.0.0.1:{self.port}/scheduler
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 5
  httpTimeout: 5s
"""


@pytest_asyncio.fixture
async def extender(rest: RestClient) -> AsyncIterator[Extender]:
    ext = Extender(rest)
    await ext.start()
    try:
        yield ext
    finally:
        await ext.stop()


async def test_placement_follows_the_extenders_verdicts_and_scores(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    extender: Extender,
) -> None:
    await create_nodes(
        rest,
        [
            # the roomiest nodes are the ones the extender turns down
            make_node("ext-rejected", cpu="32", memory="64Gi", labels={VERDICT: "reject"}),
            make_node("ext-never", cpu="32", memory="64Gi", labels={VERDICT: "never"}),
            make_node("ext-plain", cpu="8", memory="16Gi"),
            make_node("ext-best", cpu="8", memory="16Gi", labels={VERDICT: "best"}),
        ],
    )
    pods = [
        make_pod(f"p{i}", namespace, cpu="500m", memory="256Mi", scheduler_name=SCHEDULER)
        for i in range(6)
    ]
    async with running_kscheduler(control_plane, extender.config()):
        await create_pods(rest, pods)

        async def all_bound() -> dict[str, str] | None:
            items = (await rest.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]
            placed = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in items}
            return placed if all(placed.values()) else None

        placed = await wait_for(all_bound, what="all pods bound")

        # a pod the extender rejects everywhere stays pending with its reasons
        await create_pods(
            rest,
            [
                make_pod(
                    "denied",
                    namespace,
                    cpu="100m",
                    scheduler_name=SCHEDULER,
                    labels={"deny": "all"},
                )
            ],
        )

        async def failed() -> str | None:
            p = await rest.get(f"/api/v1/namespaces/{namespace}/pods/denied")
            for c in (p.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    return str(c.get("message"))
            return None

        message = await wait_for(failed, what="denied pod reported unschedulable")
    # the extender's filter kept the pods off the rejected nodes, its scores (x weight 5 x 10)
    # outweighed the plugins' preference for emptier nodes
    assert set(placed.values()) == {"ext-best"}, placed
    # and it bound them itself
    assert sorted(extender.bound) == sorted((name, "ext-best") for name in placed)
    assert {"filter", "prioritize", "bind"} <= set(extender.calls)
    # (followed by what preemption found: the unresolvable node is not even tried)
    assert message.startswith(
        "0/4 nodes are available: 1 the extender never uses this node, "
        "1 the extender rejects this node, 2 the extender rejects this pod."
    ), message


async def test_ignorable_extender_that_is_down_does_not_block(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(rest, [make_node("ign-1", cpu="4")])
    config = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: http://127.0.0.1:1/down
  filterVerb: filter
  bindVerb: bind
  ignorable: true
  httpTimeout: 1s
"""
    async with running_kscheduler(control_plane, config):
        await create_pods(rest, [make_pod("p", namespace, cpu="100m", scheduler_name=SCHEDULER)])

        async def bound() -> str:
            p = await rest.get(f"/api/v1/namespaces/{namespace}/pods/p")
            return str(p["spec"].get("nodeName") or "")

        assert await wait_for(bound, what="pod bound despite the extender") == "ign-1"
