"""`kscheduler explain` against the real apiserver agrees with what the daemon then does."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from kscheduler.annotations import SimulatorAnnotations
from kscheduler.app import SchedulerApp
from kscheduler.config import load_config
from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod, taint
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from kscheduler.explain import DryRunKubeClient, Explanation, explain_pod, render_table
from kscheduler.plugins import in_tree_registry
from kscheduler.server import HealthServer
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

ROOT = Path(__file__).resolve().parents[2]


async def explain_in_process(cp: ControlPlane, namespace: str, name: str) -> Explanation:
    """Explain as the scheduler's own identity, asserting that nothing was written."""
    registry = in_tree_registry()
    cfg = load_config("", registry=registry)
    kube = await DryRunKubeClient.from_kubeconfig(str(cp.scheduler_kubeconfig))
    assert isinstance(kube, DryRunKubeClient)
    try:
        ex = await explain_pod(kube, cfg, registry, namespace, name)
    finally:
        await kube.close()
    assert kube.writes == [], kube.writes
    return ex


async def explain_cli(cp: ControlPlane, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kscheduler",
        "explain",
        *args,
        "--kubeconfig",
        str(cp.scheduler_kubeconfig),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def get_pod(rest: RestClient, namespace: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = await rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod


async def debug_explain(app: SchedulerApp, key: str) -> dict[str, Any] | None:
    """GET /debug/explain?pod=key from the daemon's HTTP server."""
    server = HealthServer(app, host="127.0.0.1", port=0, registry=CollectorRegistry())
    port = await server.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/debug/explain", params={"pod": key}) as resp,
        ):
            if resp.status == 404:
                return None
            assert resp.status == 200, await resp.text()
            data: dict[str, Any] = await resp.json()
            return data
    finally:
        await server.stop()


def scheduled_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


async def test_explain_names_the_node_the_daemon_then_picks(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(
        rest,
        [
            make_node("roomy", cpu="8", memory="16Gi"),
            make_node("busy", cpu="8", memory="16Gi"),
            make_node("tiny", cpu="1", memory="16Gi"),
            make_node("reserved", cpu="32", memory="64Gi", taints=[taint("dedicated", "db")]),
        ],
    )
    # load on "busy" (bound directly) makes "roomy" the strict winner
    await create_pods(
        rest,
        [
            make_pod("load", namespace, cpu="5", memory="8Gi", node_name="busy"),
            make_pod("web", namespace, cpu="2", memory="1Gi", scheduler_name=SCHEDULER),
        ],
    )

    ex = await explain_in_process(control_plane, namespace, "web")
    assert (ex.would_choose, ex.why) == ("roomy", "best-score"), render_table(ex)
    verdicts = {v.node: v for v in ex.verdicts}
    assert verdicts["busy"].feasible
    assert verdicts["tiny"].rejecting_plugin == "NodeResourcesFit"
    assert verdicts["reserved"].rejecting_plugin == "TaintToleration"
    assert not (await get_pod(rest, namespace, "web"))["spec"].get("nodeName"), "explain bound it"

    rc, out, err = await explain_cli(control_plane, f"{namespace}/web", "-o", "json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["selection"]["wouldChoose"] == "roomy"
    assert data["selection"]["tie"] is False
    by_node = {v["node"]: v for v in data["verdicts"]}
    assert by_node["tiny"]["plugin"] == "NodeResourcesFit"
    assert by_node["tiny"]["code"] == "UnschedulableAndUnresolvable"
    assert by_node["tiny"]["reasons"] == ["Insufficient cpu"]
    roomy = by_node["roomy"]
    assert roomy["rank"] == 1
    assert roomy["total"] == sum(s["weighted"] for s in roomy["scores"].values())
    for plugin, score in verdicts["roomy"].scores.items():
        assert roomy["scores"][plugin] == {
            "raw": score.raw,
            "normalized": score.normalized,
            "weighted": score.weighted,
        }

    async with running_kscheduler(control_plane) as app:

        async def bound() -> str | None:
            node: str | None = (await get_pod(rest, namespace, "web"))["spec"].get("nodeName")
            return node

        assert await wait_for(bound, what="web bound") == ex.would_choose
        record = await wait_for(lambda: debug_explain(app, f"{namespace}/web"), what="record")

    # the daemon's own record of the attempt carries the same scores
    assert record["result"] == "scheduled" and record["node"] == "roomy"
    roomy_v = verdicts["roomy"]
    assert record["detail"]["score"] == roomy_v.total
    assert record["detail"]["scores"] == {p: s.weighted for p, s in roomy_v.scores.items()}
    assert record["detail"]["feasibleNodes"] == len(ex.feasible)

    # bound now: explain says where, and evaluates it as if it were pending again
    again = await explain_in_process(control_plane, namespace, "web")
    assert again.bound_node == "roomy"
    assert again.would_choose == "roomy"
    fit_before = {v.node: v.scores["NodeResourcesFit"].raw for v in ex.verdicts if v.feasible}
    fit_after = {v.node: v.scores["NodeResourcesFit"].raw for v in again.verdicts if v.feasible}
    assert fit_after == fit_before, render_table(again)
    rc, out, err = await explain_cli(control_plane, f"{namespace}/web")
    assert rc == 0, err
    assert out.startswith(f"Pod {namespace}/web (profile {SCHEDULER}): bound to roomy\n")
    assert "Would choose: roomy -- best total" in out


async def test_explain_message_equals_the_condition_the_daemon_writes(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(
        rest,
        [
            make_node("a", cpu="2", memory="4Gi"),
            make_node("b", cpu="2", memory="4Gi"),
            make_node("c", cpu="16", memory="4Gi", taints=[taint("maintenance")]),
        ],
    )
    # equal-priority load: Insufficient cpu, and preemption finds no victims
    await create_pods(
        rest,
        [
            make_pod("load-a", namespace, cpu="1500m", node_name="a"),
            make_pod("load-b", namespace, cpu="1500m", node_name="b"),
            make_pod("stuck", namespace, cpu="1", scheduler_name=SCHEDULER),
        ],
    )
    ex = await explain_in_process(control_plane, namespace, "stuck")
    assert ex.would_choose == "" and not ex.feasible
    assert ex.fit_error.startswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
    )
    # the dry-run PostFilter's verdict ends the message, as it does the daemon's
    assert ex.fit_error.endswith(
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )

    rc, out, err = await explain_cli(control_plane, f"{namespace}/stuck", "-o", "yaml")
    assert rc == 0, err
    assert f"fitError: '{ex.fit_error}'" in out or f"fitError: {ex.fit_error}" in out

    async with running_kscheduler(control_plane) as app:

        async def condition() -> dict[str, Any] | None:
            cond = scheduled_condition(await get_pod(rest, namespace, "stuck"))
            return cond if cond and cond.get("status") == "False" else None

        cond = await wait_for(condition, what="PodScheduled=False on the stuck pod")
        record = await debug_explain(app, f"{namespace}/stuck")
    assert cond["reason"] == "Unschedulable"
    assert cond["message"] == ex.fit_error
    assert record is not None and record["message"] == ex.fit_error
    rejections = {
        (r["plugin"], r["code"], tuple(r["reasons"])): r["nodes"]
        for r in record["detail"]["rejections"]
    }
    assert rejections == {
        ("NodeResourcesFit", "Unschedulable", ("Insufficient cpu",)): 2,
        (
            "TaintToleration",
            "UnschedulableAndUnresolvable",
            ("node(s) had untolerated taint(s)",),
        ): 1,
    }


async def test_explain_exit_status_for_a_missing_pod(
    control_plane: ControlPlane, namespace: str
) -> None:
    rc, out, err = await explain_cli(control_plane, f"{namespace}/nope")
    assert rc == 1
    assert out == ""
    assert f"pod {namespace}/nope not found" in err


async def test_simulator_annotations_written_when_the_profile_opts_in(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    p = "kube-scheduler-simulator.sigs.k8s.io/"
    await create_nodes(
        rest, [make_node("roomy", cpu="8", memory="16Gi"), make_node("tiny", cpu="1")]
    )
    async with running_kscheduler(control_plane) as app:
        app.scheduler.annotations = SimulatorAnnotations([SCHEDULER])
        await create_pods(
            rest,
            [
                make_pod("web", namespace, cpu="2", memory="1Gi", scheduler_name=SCHEDULER),
                make_pod("stuck", namespace, cpu="16", scheduler_name=SCHEDULER),
            ],
        )

        async def annotated(name: str) -> dict[str, str] | None:
            pod = await get_pod(rest, namespace, name)
            a: dict[str, str] = pod["metadata"].get("annotations") or {}
            return a if p + "selected-node" in a else None

        web = await wait_for(lambda: annotated("web"), what="annotations on web")
        stuck = await wait_for(lambda: annotated("stuck"), what="annotations on stuck")
        assert (await get_pod(rest, namespace, "web"))["spec"]["nodeName"] == "roomy"
        await asyncio.sleep(3)  # attempts after the pod updates must not write again
        stuck_later = await annotated("stuck")

    assert web[p + "selected-node"] == "roomy"
    filt = json.loads(web[p + "filter-result"])
    assert set(filt["roomy"].values()) == {"passed"}
    assert filt["tiny"]["NodeResourcesFit"] == "Insufficient cpu"
    assert set(json.loads(web[p + "score-result"])) == {"roomy"}
    final = json.loads(web[p + "finalscore-result"])["roomy"]
    assert final["TaintToleration"] == "300"
    history = json.loads(web[p + "result-history"])
    assert len(history) == 1 and history[0][p + "selected-node"] == "roomy"

    assert stuck[p + "selected-node"] == ""
    filt = json.loads(stuck[p + "filter-result"])
    assert {v["NodeResourcesFit"] for v in filt.values()} == {"Insufficient cpu"}
    assert json.loads(stuck[p + "score-result"]) == {}
    assert stuck_later is not None
    assert len(json.loads(stuck_later[p + "result-history"])) <= 2
