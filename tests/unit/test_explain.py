"""explain's evaluation and rendering, and the simulator annotations, over the in-tree
plugins with in-memory fakes: at 5 nodes and at 500."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import orjson
import yaml

from kscheduler.algorithm import Algorithm, FilterRecord, FitError
from kscheduler.annotations import (
    FILTER,
    FINAL_SCORE,
    HISTORY,
    PREFILTER_STATUS,
    PREFIX,
    PRESCORE,
    SCORE,
    SELECTED_NODE,
    TOTAL_ANNOTATION_SIZE_LIMIT,
    TRUNCATED_KEY,
    SimulatorAnnotations,
    parse_profiles,
)
from kscheduler.app import profile_specs
from kscheduler.cache import Cache, Snapshot
from kscheduler.config import load_config
from kscheduler.explain import (
    DEFAULT_LIMIT,
    Explanation,
    evaluate,
    render_json,
    render_table,
    render_yaml,
    shown,
    to_dict,
)
from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.runtime import Framework
from kscheduler.framework.types import PodInfo
from kscheduler.plugins import in_tree_registry
from kscheduler.queue import SchedulingQueue
from kscheduler.scheduler import Scheduler
from tests.unit.builders import field_in, node, pod
from tests.unit.fakes import FakeClient, FakeObjects, FakeRecorder

PROFILE = "kscheduler"


def default_framework(
    cache: Cache, config: str = "", client: FakeClient | None = None
) -> tuple[Framework, Snapshot, FakeClient]:
    registry = in_tree_registry()
    spec = profile_specs(load_config(config, registry=registry))[0]
    snap = Snapshot(cache)
    client = client or FakeClient()
    fwk = Framework(
        spec,
        registry,
        snapshot=snap,
        objects=FakeObjects(),
        client=client,
        recorder=FakeRecorder(),
    )
    return fwk, snap, client


def ours(name: str, cpu: str, memory: str = "1Gi", **spec: Any) -> PodInfo:
    raw = pod(name).req(cpu=cpu, memory=memory).raw()
    raw["spec"]["schedulerName"] = PROFILE
    raw["spec"].update(spec)
    return parse_pod(raw)


def busy(name: str, on: str, cpu: str) -> PodInfo:
    return pod(name, "other").req(cpu=cpu, memory="512Mi").build().with_node(on)


def five_nodes() -> Cache:
    """One clear winner (big, empty), one runner-up, three rejected for different reasons."""
    c = Cache()
    c.add_node(node("big").alloc(cpu="8", memory="16Gi", pods="110").record())
    c.add_node(node("mid").alloc(cpu="4", memory="8Gi", pods="110").record())
    c.add_pod(busy("m1", "mid", "1"))
    c.add_node(node("small").alloc(cpu="1", memory="8Gi", pods="110").record())
    c.add_node(node("full").alloc(cpu="4", memory="8Gi", pods="110").record())
    c.add_pod(busy("f1", "full", "3"))
    c.add_node(node("gpu").alloc(cpu="8", memory="16Gi", pods="110").taint("gpu", "yes").record())
    return c


def five_hundred_nodes() -> Cache:
    """Varied load (distinct scores) and four kinds of rejection."""
    c = Cache()
    rng = random.Random(7)
    for i in range(500):
        name = f"node-{i:03d}"
        b = node(name).alloc(cpu="8", memory="32Gi", pods="110")
        if i % 10 == 3:
            b.taint("dedicated", "batch")
        if i % 25 == 7:
            b.unschedulable()
        c.add_node(b.record())
        used = 7 if i % 6 == 0 else rng.randrange(0, 5)
        if used:
            c.add_pod(busy(f"load-{i}", name, str(used)))
    return c


def explain(fwk: Framework, snap: Snapshot, p: PodInfo, **kw: Any) -> Explanation:
    snap.update()
    return asyncio.run(evaluate(fwk, Algorithm(), snap, p, **kw))


# ---------------------------------------------------------------------------- 5 nodes


def test_five_nodes_verdicts_scores_and_choice() -> None:
    fwk, snap, _ = default_framework(five_nodes())
    ex = explain(fwk, snap, ours("web", "2"))
    assert ex.would_choose == "big" and ex.why == "best-score"
    assert ex.best_nodes == ["big"]
    v = {x.node: x for x in ex.verdicts}
    assert v["big"].feasible and v["mid"].feasible
    assert v["small"].rejecting_plugin == "NodeResourcesFit"
    assert v["small"].status is not None and v["small"].status.reasons == ["Insufficient cpu"]
    assert v["full"].rejecting_plugin == "NodeResourcesFit"
    assert v["gpu"].rejecting_plugin == "TaintToleration"
    assert v["gpu"].status is not None
    assert v["gpu"].status.code.label == "UnschedulableAndUnresolvable"
    weights = dict(ex.score_plugins)
    for name in ("big", "mid"):
        node_v = v[name]
        assert node_v.total == sum(s.weighted for s in node_v.scores.values())
        for plugin, s in node_v.scores.items():
            assert s.weighted == s.normalized * weights[plugin]
    # TaintToleration normalizes (reversed): raw 0 intolerable taints -> 100
    taint = v["big"].scores["TaintToleration"]
    assert (taint.raw, taint.normalized, taint.weighted) == (0, 100, 300)
    assert v["big"].total is not None and v["mid"].total is not None
    assert v["big"].total > v["mid"].total


def test_five_nodes_table_is_readable_and_sorted() -> None:
    fwk, snap, _ = default_framework(five_nodes())
    text = render_table(explain(fwk, snap, ours("web", "2")))
    lines = text.splitlines()
    assert lines[0] == "Pod default/web (profile kscheduler): pending"
    assert "5 nodes: 2 feasible, 3 rejected (dry run: nothing was written)." in lines
    assert any(line.startswith("Would choose: big -- best total") for line in lines)
    header = next(line for line in lines if line.strip().startswith("#  NODE"))
    assert header.split()[:3] == ["#", "NODE", "TOTAL"]
    assert "Taint" in header.split() and "Fit" in header.split()
    i = lines.index(header)
    assert lines[i + 1].split()[:2] == ["1", "big"]
    assert lines[i + 2].split()[:2] == ["2", "mid"]
    rej = lines.index("Rejected nodes, grouped by reason (3):")
    rows = [line.split()[0] for line in lines[rej + 2 : rej + 5]]
    # two NodeResourcesFit groups and one TaintToleration group, each its own reason
    assert sorted(rows) == ["full", "gpu", "small"]
    assert "not shown" not in text
    assert all(len(line) <= 110 for line in lines), text
    assert "  Taint     TaintToleration, weight 3" in lines


def test_json_and_yaml_carry_machine_readable_fields() -> None:
    fwk, snap, _ = default_framework(five_nodes())
    ex = explain(fwk, snap, ours("web", "2"))
    data = json.loads(render_json(ex))
    assert data == yaml.safe_load(render_yaml(ex))
    assert data["selection"]["wouldChoose"] == "big"
    assert data["nodes"] == {"total": 5, "feasible": 2, "rejected": 3, "shown": 5}
    verdicts = {v["node"]: v for v in data["verdicts"]}
    assert verdicts["gpu"]["plugin"] == "TaintToleration"
    assert verdicts["gpu"]["code"] == "UnschedulableAndUnresolvable"
    assert verdicts["gpu"]["reasons"] == ["node(s) had untolerated taint(s)"]
    big = verdicts["big"]
    assert big["feasible"] and big["rank"] == 1 and big["code"] == "Success"
    assert set(big["scores"]["TaintToleration"]) == {"raw", "normalized", "weighted"}
    assert big["total"] == sum(s["weighted"] for s in big["scores"].values())
    assert {r["plugin"] for r in data["rejections"]} == {"NodeResourcesFit", "TaintToleration"}
    assert sum(r["nodes"] for r in data["rejections"]) == 3


def test_nothing_fits_gives_the_daemons_message() -> None:
    cache = five_nodes()
    fwk, snap, _ = default_framework(cache)
    ex = explain(fwk, snap, ours("huge", "16"))
    assert ex.would_choose == "" and not ex.feasible
    snap.update()
    try:
        Algorithm().schedule_pod(fwk, CycleState(), ours("huge", "16"), snap)
    except FitError as fe:
        expected_head = str(fe)
    else:
        raise AssertionError("expected a FitError")
    assert ex.fit_error.startswith(expected_head.rstrip("."))
    assert ex.fit_error.startswith("0/5 nodes are available: ")
    text = render_table(ex)
    assert "No node fits. The daemon reports" in text
    assert f"  {ex.fit_error}\n" in text


def test_explain_agrees_with_the_scheduler_loop() -> None:
    """The same framework run by Scheduler.schedule_one binds where explain says, and
    writes explain's message when nothing fits."""

    async def attempt(p: PodInfo) -> tuple[FakeClient, Explanation, Scheduler]:
        cache = five_nodes()
        client = FakeClient()
        fwk, snap, _ = default_framework(cache, client=client)
        snap.update()
        ex = await evaluate(fwk, Algorithm(), snap, p)
        q = SchedulingQueue(sort_key=fwk.queue_sort_key(), pre_enqueue=lambda _: None, events={})
        s = Scheduler(
            cache=cache,
            queue=q,
            profiles={PROFILE: fwk},
            algorithm=Algorithm(),
            status_writer=client,
            snapshot=snap,
        )
        q.add(p)
        qp = await q.pop()
        assert qp is not None
        await s.schedule_one(qp)
        await s.binds.drain(5)
        await s.writes.drain(5)
        return client, ex, s

    client, ex, s = asyncio.run(attempt(ours("web", "2")))
    assert client.bound == [("default/web", ex.would_choose)]
    rec = s.last_attempts["default/web"]
    assert rec.detail is not None and rec.detail["feasibleNodes"] == 2
    big = next(v for v in ex.verdicts if v.node == "big")
    assert rec.detail["score"] == big.total
    assert rec.detail["scores"] == {p: sc.weighted for p, sc in big.scores.items()}

    client, ex, s = asyncio.run(attempt(ours("huge", "16")))
    assert client.bound == []
    (_, patch), *_ = client.status_patches
    assert patch["status"]["conditions"][0]["message"] == ex.fit_error
    rec = s.last_attempts["default/huge"]
    assert rec.detail is not None
    assert {r["plugin"] for r in rec.detail["rejections"]} == {
        "NodeResourcesFit",
        "TaintToleration",
    }
    assert sum(r["nodes"] for r in rec.detail["rejections"]) == 5


def test_tie_is_reported_not_resolved() -> None:
    c = Cache()
    for name in ("a", "b", "c"):
        c.add_node(node(name).alloc(cpu="4", memory="8Gi", pods="110").record())
    fwk, snap, _ = default_framework(c)
    ex = explain(fwk, snap, ours("web", "1"))
    assert ex.why == "tie" and ex.would_choose == ""
    assert ex.best_nodes == ["a", "b", "c"]
    text = render_table(ex)
    assert "Tie: 3 nodes share the best total" in text
    assert "the daemon picks one of them at random" in text
    assert to_dict(ex)["selection"]["tie"] is True


def test_prefilter_narrowing_is_attributed() -> None:
    c = five_nodes()
    fwk, snap, _ = default_framework(c)
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [field_in("mid", "small")]
            }
        }
    }
    ex = explain(fwk, snap, ours("pinned", "2", affinity=affinity))
    assert ex.pre_filter_narrowed_by == ["NodeAffinity"]
    v = {x.node: x for x in ex.verdicts}
    assert v["big"].stage == "PreFilter" and v["big"].rejecting_plugin == "NodeAffinity"
    assert v["mid"].feasible and ex.would_choose == "mid" and ex.why == "only-feasible"
    assert "NodeAffinity (PreFilter)" in render_table(ex)


def test_nominated_node_that_passes_is_the_answer() -> None:
    fwk, snap, _ = default_framework(five_nodes())
    raw = pod("web").req(cpu="2", memory="1Gi").nominated("mid").raw()
    raw["spec"]["schedulerName"] = PROFILE
    ex = explain(fwk, snap, parse_pod(raw))
    assert ex.would_choose == "mid" and ex.why == "nominated"
    assert ex.best_nodes == ["big"]  # still shown: the scores are there


# ---------------------------------------------------------------------------- 500 nodes


def test_five_hundred_nodes_truncated_with_a_histogram() -> None:
    fwk, snap, _ = default_framework(five_hundred_nodes())
    ex = explain(fwk, snap, ours("web", "2"))
    assert ex.num_nodes == 500
    text = render_table(ex)
    lines = text.splitlines()
    assert len(lines) < 60, text
    assert all(len(line) <= 110 for line in lines), text
    rows = shown(ex, DEFAULT_LIMIT)
    assert len(rows) == DEFAULT_LIMIT
    # feasible first, best total first
    totals = [v.total for v in rows if v.feasible]
    assert totals == sorted(totals, reverse=True)
    assert rows[0].node == ex.would_choose or ex.why == "tie"
    summary = lines.index("480 more nodes not shown (--all-nodes or --limit N shows them):")
    hist_lines = lines[summary + 1 : lines.index("Score plugins:") - 1]
    assert sum(int(line.split()[0]) for line in hist_lines) == 480
    hist = "\n".join(lines[summary:])
    assert "TaintToleration: node(s) had untolerated taint" in hist
    assert "NodeResourcesFit: Insufficient cpu" in hist
    assert "NodeUnschedulable: node(s) were unschedulable" in hist
    assert "feasible, totals " in hist


def test_five_hundred_nodes_when_nothing_fits_shows_every_reason() -> None:
    fwk, snap, _ = default_framework(five_hundred_nodes())
    ex = explain(fwk, snap, ours("huge", "9"))
    rows = shown(ex, DEFAULT_LIMIT)
    groups = {(v.rejecting_plugin, v.status.message if v.status else "") for v in rows}
    # every rejection group gets at least one row before any group gets a second
    assert {g[0] for g in groups} == {"NodeResourcesFit", "TaintToleration", "NodeUnschedulable"}
    text = render_table(ex)
    assert text.count("\n") < 60
    assert "0/500 nodes are available: " in text
    # rows of one reason stay together
    plugins = [v.rejecting_plugin for v in rows]
    assert plugins == sorted(plugins, key=plugins.index)


def test_five_hundred_nodes_json_lists_every_node_unless_limited() -> None:
    fwk, snap, _ = default_framework(five_hundred_nodes())
    ex = explain(fwk, snap, ours("web", "2"))
    data = orjson.loads(render_json(ex))
    assert len(data["verdicts"]) == 500 and data["nodes"]["shown"] == 500
    assert sum(r["nodes"] for r in data["rejections"]) == data["nodes"]["rejected"]
    assert len(to_dict(ex, limit=10)["verdicts"]) == 10
    everything = render_table(ex, limit=None)
    assert "not shown" not in everything and len(everything.splitlines()) > 500


def test_sampling_is_called_out() -> None:
    fwk, snap, _ = default_framework(
        five_hundred_nodes(),
        config="apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: kscheduler\n  percentageOfNodesToScore: 10\n",
    )
    ex = explain(fwk, snap, ours("web", "1"))
    assert ex.feasible_to_find == 100 and ex.sampled
    assert "stops filtering once it has found 100 feasible nodes" in render_table(ex).replace(
        "\n  ", " "
    )


# ---------------------------------------------------------------------------- annotations


def annotate(
    cache: Cache, p: PodInfo, ann: SimulatorAnnotations | None = None
) -> tuple[dict[str, Any] | None, Framework]:
    fwk, snap, _ = default_framework(cache)
    ann = ann or SimulatorAnnotations([PROFILE])
    state = CycleState()
    rec = ann.begin(fwk, state, p)
    assert isinstance(rec, FilterRecord)
    snap.update()
    try:
        result = Algorithm().schedule_pod(fwk, state, p, snap, record=rec)
    except FitError as fe:
        return ann.patch(fwk, state, p, rec, fit_error=fe), fwk
    return ann.patch(fwk, state, p, rec, selected=result.suggested_host), fwk


def test_simulator_annotations_shapes() -> None:
    patch, _ = annotate(five_nodes(), ours("web", "2"))
    assert patch is not None
    a = patch["metadata"]["annotations"]
    assert a[PREFIX + SELECTED_NODE] == "big"
    filt = json.loads(a[PREFIX + FILTER])
    assert set(filt) == {"big", "mid", "small", "full", "gpu"}
    assert set(filt["big"].values()) == {"passed"}
    assert filt["gpu"]["TaintToleration"] == "node(s) had untolerated taint(s)"
    assert filt["small"]["NodeResourcesFit"] == "Insufficient cpu"
    # Filter stops at the first failing plugin
    assert list(filt["small"])[-1] == "NodeResourcesFit"
    assert set(list(filt["small"].values())[:-1]) == {"passed"}
    assert "NodeResourcesFit" not in filt["gpu"]  # TaintToleration comes first
    score = json.loads(a[PREFIX + SCORE])
    final = json.loads(a[PREFIX + FINAL_SCORE])
    assert set(score) == set(final) == {"big", "mid"}
    assert final["big"]["TaintToleration"] == "300" and score["big"]["TaintToleration"] == "0"
    assert all(isinstance(v, str) for v in final["mid"].values())
    pre = json.loads(a[PREFIX + PREFILTER_STATUS])
    assert pre["NodeResourcesFit"] == "success"
    prescore = json.loads(a[PREFIX + PRESCORE])
    assert prescore["TaintToleration"] == "success" and prescore["InterPodAffinity"] == ""
    history = json.loads(a[PREFIX + HISTORY])
    assert len(history) == 1 and history[0][PREFIX + SELECTED_NODE] == "big"
    assert PREFIX + HISTORY not in history[0]


def test_simulator_annotations_on_failure_and_history() -> None:
    p = ours("huge", "16")
    patch, _ = annotate(five_nodes(), p)
    assert patch is not None
    a = patch["metadata"]["annotations"]
    assert a[PREFIX + SELECTED_NODE] == ""
    assert json.loads(a[PREFIX + SCORE]) == {} and json.loads(a[PREFIX + PRESCORE]) == {}
    # the same result again on the pod: nothing to write
    p.annotations.update(a)
    again, _ = annotate(five_nodes(), p)
    assert again is None
    # a different result appends to the history
    c = five_nodes()
    c.add_node(node("huge-node").alloc(cpu="32", memory="64Gi", pods="110").record())
    third, _ = annotate(c, p)
    assert third is not None
    history = json.loads(third["metadata"]["annotations"][PREFIX + HISTORY])
    assert [h[PREFIX + SELECTED_NODE] for h in history] == ["", "huge-node"]


def test_simulator_annotations_stay_within_the_size_limit() -> None:
    c = Cache()
    for i in range(3000):
        c.add_node(node(f"a-rather-long-node-name-{i:05d}").alloc(cpu="1").record())
    patch, _ = annotate(c, ours("web", "2"))
    assert patch is not None
    a = patch["metadata"]["annotations"]
    size = sum(len(k) + len(v.encode()) for k, v in a.items() if v is not None)
    assert size <= TOTAL_ANNOTATION_SIZE_LIMIT
    assert "of 3000 evaluated nodes" in a[TRUNCATED_KEY]
    assert 0 < len(json.loads(a[PREFIX + FILTER])) < 3000


def test_simulator_annotations_opt_in_and_profiles() -> None:
    fwk, _, _ = default_framework(five_nodes())
    off = SimulatorAnnotations(["other"])
    state = CycleState()
    assert off.begin(fwk, state, ours("web", "2")) is None and state.record is False
    raw = pod("web").req(cpu="2").nominated("mid").raw()
    raw["spec"]["schedulerName"] = PROFILE
    assert SimulatorAnnotations([PROFILE]).begin(fwk, CycleState(), parse_pod(raw)) is None
    assert parse_profiles("a, b", {"a", "b", "c"}) == ["a", "b"]
    for bad in ("", "a,x"):
        try:
            parse_profiles(bad, {"a"})
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


# ---------------------------------------------------------------------------- DRA


def _dra_objects() -> FakeObjects:
    driver = "gpu.example.com"

    def slice_(node_name: str, n: int) -> dict[str, Any]:
        return {
            "metadata": {"name": f"{node_name}-gpu", "uid": node_name, "resourceVersion": "1"},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}"} for i in range(n)],
            },
        }

    def claim(name: str, count: int) -> dict[str, Any]:
        return {
            "metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": "gpu", "count": count}}
                    ]
                }
            },
        }

    gpu_class = {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }
    return FakeObjects(
        {
            "resourceslices": [slice_("big", 3), slice_("mid", 1)],
            "deviceclasses": [gpu_class],
            "resourceclaims": [claim("two", 2), claim("one", 1)],
        }
    )


def _dra_framework() -> tuple[Framework, Snapshot]:
    registry = in_tree_registry()
    spec = profile_specs(load_config("", registry=registry))[0]
    c = Cache()
    for name in ("big", "mid", "small"):
        c.add_node(node(name).alloc(cpu="8", memory="16Gi", pods="110").record())
    snap = Snapshot(c)
    fwk = Framework(
        spec,
        registry,
        snapshot=snap,
        objects=_dra_objects(),
        client=FakeClient(),
        recorder=FakeRecorder(),
    )
    return fwk, snap


def _with_claims(*names: str) -> PodInfo:
    return ours(
        "gpu-user",
        "1",
        resourceClaims=[{"name": f"c-{n}", "resourceClaimName": n} for n in names],
    )


def test_claims_devices_per_node_or_why_none() -> None:
    fwk, snap = _dra_framework()
    ex = explain(fwk, snap, _with_claims("two", "one"))
    by_node = {v.node: v for v in ex.verdicts}
    assert ex.would_choose == "big"
    big = by_node["big"].devices
    assert big is not None
    assert [(c.pod_claim, c.claim, c.devices, c.reason) for c in big] == [
        (
            "c-two",
            "default/two",
            ["gpus: gpu.example.com/big/gpu-0", "gpus: gpu.example.com/big/gpu-1"],
            "",
        ),
        ("c-one", "default/one", ["gpus: gpu.example.com/big/gpu-2"], ""),
    ]
    mid = by_node["mid"].devices
    assert mid is not None and [c.devices for c in mid] == [[], []]
    assert mid[0].reason.startswith("no free devices on the node")
    assert mid[1].reason == (
        "fits alone, but not together with the pod's other claims: gpus: gpu.example.com/mid/gpu-0"
    )
    small = by_node["small"].devices
    assert small is not None and all(c.reason.startswith("no free devices") for c in small)
    text = render_table(ex)
    assert "DRA devices per node (DynamicResources)" in text
    assert "c-one (default/one): gpus: gpu.example.com/big/gpu-2" in text
    assert "c-two (default/two): none -- no free devices on the node" in text
    got = json.loads(render_json(ex))
    rows = {r["node"]: r for r in got["verdicts"]}
    assert rows["big"]["devices"][1] == {
        "claim": "default/one",
        "podClaim": "c-one",
        "allocated": False,
        "devices": ["gpus: gpu.example.com/big/gpu-2"],
        "reason": None,
    }


def test_a_pod_without_claims_shows_no_devices() -> None:
    fwk, snap = _dra_framework()
    ex = explain(fwk, snap, ours("plain", "1"))
    assert all(v.devices is None for v in ex.verdicts)
    assert "DRA devices" not in render_table(ex)
    assert all(r["devices"] is None for r in json.loads(render_json(ex))["verdicts"])
