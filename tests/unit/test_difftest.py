"""The differential runner's scenario parsing, observation and comparison (no cluster)."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from kscheduler import difftest
from kscheduler.difftest import (
    PodOutcome,
    ReferenceVersionError,
    RunOutcome,
    ScenarioError,
    check_expectations,
    compare,
    kscheduler_config,
    merge_pod_status,
    observe,
    parse_scenario,
    reference_version,
)

NODES = [{"name": "n{i}", "count": 3}]


def scenario(**fields: Any) -> Any:
    return parse_scenario({"name": "t", "nodes": NODES, **fields})


def run(which: Any, pods: dict[str, PodOutcome], **extra: Any) -> RunOutcome:
    return RunOutcome(scheduler=which, pods=pods, **extra)


def bound(name: str, node: str, events: tuple[str, ...] = ("Scheduled",)) -> PodOutcome:
    return PodOutcome(name, exists=True, node=node, events=events)


def test_node_is_compared_for_every_bound_pod_without_an_expectation() -> None:
    sc = scenario(pods=[{"name": "p"}])
    diffs = compare(
        sc, run("reference", {"p": bound("p", "n0")}), run("kscheduler", {"p": bound("p", "n1")})
    )
    assert [(d.pod, d.field) for d in diffs] == [("p", "node")]


def test_a_tie_accepts_two_nodes_of_the_set_and_nothing_else() -> None:
    sc = scenario(pods=[{"name": "p"}], expect={"p": {"tie": ["n0", "n1"]}})
    assert sc.expect["p"].bound is True
    ref = run("reference", {"p": bound("p", "n0")})
    assert compare(sc, ref, run("kscheduler", {"p": bound("p", "n1")})) == []
    ours = run("kscheduler", {"p": bound("p", "n2")})
    assert [d.field for d in compare(sc, ref, ours)] == ["node"]
    assert [d.field for d in check_expectations(sc, ours)] == ["node in tie"]
    assert check_expectations(sc, ref) == []


@pytest.mark.parametrize(
    ("facts", "text"),
    [
        ({"sameNode": True}, "removed"),
        ({"tie": ["n0"]}, "two or more"),
        ({"tie": ["n0", "n9"]}, "no such node 'n9'"),
        ({"tie": ["n0", "n1"], "node": "n0"}, "not both"),
        ({"tie": ["n0", "n1"], "bound": False}, "pending"),
        ({"nominated": "n7"}, "no such node"),
        ({"nominatedDuringRun": "n7"}, "nominatedDuringRun: no such node"),
    ],
)
def test_bad_expectations_name_the_field(facts: dict[str, Any], text: str) -> None:
    with pytest.raises(ScenarioError, match=text):
        scenario(pods=[{"name": "p"}], expect={"p": facts})


def test_nominated_node_and_event_reasons_are_compared() -> None:
    sc = scenario(pods=[{"name": "p"}])
    pending = PodOutcome("p", exists=True, reason="Unschedulable", message="m", nominated_node="n0")
    other = PodOutcome("p", exists=True, reason="Unschedulable", message="m", nominated_node="n1")
    diffs = compare(sc, run("reference", {"p": pending}), run("kscheduler", {"p": other}))
    assert [d.field for d in diffs] == ["nominatedNodeName"]
    a = bound("p", "n0", ("FailedScheduling", "Scheduled"))
    b = bound("p", "n0", ("Scheduled",))
    diffs = compare(sc, run("reference", {"p": a}), run("kscheduler", {"p": b}))
    assert [d.field for d in diffs] == ["event reasons"]


def test_a_nomination_seen_during_the_run_is_expected() -> None:
    sc = scenario(pods=[{"name": "p"}], expect={"p": {"nominatedDuringRun": "n1"}})
    seen = run("kscheduler", {"p": bound("p", "n1")}, nominated_seen={"p": {"n1"}})
    assert check_expectations(sc, seen) == []
    never = run("kscheduler", {"p": bound("p", "n1")})
    assert [d.field for d in check_expectations(sc, never)] == ["nominated during the run"]
    elsewhere = run("kscheduler", {"p": bound("p", "n1")}, nominated_seen={"p": {"n0"}})
    assert [d.field for d in check_expectations(sc, elsewhere)] == ["nominated during the run"]


def test_victims_events_are_compared_after_deletion() -> None:
    sc = scenario(existingPods=[{"name": "v", "node": "n0"}], pods=[{"name": "p"}])
    gone = PodOutcome("v", exists=False, events=("Preempted",))
    silent = PodOutcome("v", exists=False)
    diffs = compare(
        sc,
        run("reference", {"v": gone, "p": bound("p", "n0")}),
        run("kscheduler", {"v": silent, "p": bound("p", "n0")}),
    )
    assert [(d.pod, d.field) for d in diffs] == [("v", "event reasons")]


def test_a_pdb_status_and_a_workload_in_objects_are_refused() -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b"},
        "spec": {"minAvailable": 1},
        "status": {"disruptionsAllowed": 1},
    }
    with pytest.raises(ScenarioError, match="disruption controller"):
        scenario(objects=[pdb])
    with pytest.raises(ScenarioError, match="goes in workloads"):
        scenario(objects=[deployment("web", 2)])


def deployment(name: str, replicas: int, kind: str = "Deployment") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "pause"}]},
            },
        },
    }


def test_workloads_parse_statefulset_pods_by_name_and_workload_expectations() -> None:
    sc = scenario(
        workloads=[deployment("web", 2), deployment("db", 3, "StatefulSet")],
        expect={"db-2": {"node": "n2"}, "web": {"bound": 2, "nodes": ["n1", "n0"]}},
        updates=[{"workload": "web", "patch": {"spec": {"replicas": 3}}}],
    )
    assert sc.scheduled_names == ["db-0", "db-1", "db-2"]
    assert sc.expect_workloads["web"].nodes == ("n0", "n1")
    assert sc.updates[0].workload == "web"
    with pytest.raises(ScenarioError, match="no such pod"):
        scenario(workloads=[deployment("db", 2, "StatefulSet")], expect={"db-2": {"bound": True}})
    bad = deployment("web", 1)
    bad["spec"]["template"]["spec"]["schedulerName"] = "x"
    with pytest.raises(ScenarioError, match="schedulerName"):
        scenario(workloads=[bad])
    with pytest.raises(ScenarioError, match="no such workload"):
        scenario(
            workloads=[deployment("web", 1)], updates=[{"workload": "nope", "patch": {"a": 1}}]
        )
    with pytest.raises(ScenarioError, match="expected one of"):
        scenario(workloads=[{**deployment("j", 1), "apiVersion": "batch/v1", "kind": "Job"}])


def test_after_nominated_must_name_an_earlier_pod() -> None:
    sc = scenario(pods=[{"name": "a"}, {"name": "b", "afterNominated": "a"}])
    assert sc.pods[1].after_nominated == "a"
    with pytest.raises(ScenarioError, match="afterNominated"):
        scenario(pods=[{"name": "b", "afterNominated": "a"}, {"name": "a"}])


def test_device_conditions_are_lists_of_condition_types_per_claim() -> None:
    sc = scenario(deviceConditions={"gpu": [["failed"], ["attached", "ready"]], "ns/x": [["a"]]})
    assert sc.device_conditions == {
        "default/gpu": (("failed",), ("attached", "ready")),
        "ns/x": (("a",),),
    }
    for bad in ({"gpu": []}, {"gpu": ["attached"]}, {"gpu": [[""]]}):
        with pytest.raises(ScenarioError, match=r"deviceConditions\.gpu"):
            scenario(deviceConditions=bad)


def _pod(name: str, uid: str, node: str | None, owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid}
    if owner is not None:
        meta["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "ReplicaSet"}]
    status: dict[str, Any] = {}
    if node is None:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
        ]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


def test_observe_follows_a_deployment_through_its_replicasets_and_reads_events() -> None:
    sc = scenario(workloads=[deployment("web", 3)], pods=[{"name": "p"}])
    dep = deployment("web", 3)
    dep["metadata"].update(uid="d1", generation=1)
    dep["status"] = {
        "observedGeneration": 1,
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 2,
    }
    rs = {"metadata": {"uid": "rs1", "ownerReferences": [{"uid": "d1", "controller": True}]}}
    pods = [
        _pod("web-a", "u1", "n1", "rs1"),
        _pod("web-b", "u2", "n0", "rs1"),
        _pod("web-c", "u3", None, "rs1"),
        _pod("stray", "u4", "n2", "other"),
        _pod("p", "u5", "n2"),
    ]
    events = [
        {"regarding": {"kind": "Pod", "uid": "u1"}, "reason": "Scheduled"},
        {"regarding": {"kind": "Pod", "uid": "u3"}, "reason": "FailedScheduling"},
        {"regarding": {"kind": "Pod", "uid": "u5"}, "reason": "Scheduled"},
        {"regarding": {"kind": "Pod", "uid": "u5"}, "reason": "Scheduled"},
        {"regarding": {"kind": "ReplicaSet", "uid": "rs1"}, "reason": "SuccessfulCreate"},
    ]
    seen = observe(sc, pods=pods, events=events, workloads={"web": dep}, replicasets=[rs])
    web = seen.workloads["web"]
    assert web.nodes == ("n0", "n1") and web.pending == 1
    assert web.get("ready") == 2 and web.settled  # one pod unschedulable: nothing more comes
    assert seen.pods["p"].events == ("Scheduled",)
    assert ("n1", "", "", ("Scheduled",)) in web.pods


def test_a_deployment_mid_rollout_is_not_settled() -> None:
    sc = scenario(workloads=[deployment("web", 2)])
    dep = deployment("web", 2)
    dep["metadata"].update(uid="d1", generation=2)
    dep["status"] = {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1}
    rs = {"metadata": {"uid": "rs1", "ownerReferences": [{"uid": "d1", "controller": True}]}}
    pods = [
        _pod("a", "u1", "n0", "rs1"),
        _pod("b", "u2", "n1", "rs1"),
        _pod("c", "u3", "n2", "rs1"),
    ]
    seen = observe(sc, pods=pods, workloads={"web": dep}, replicasets=[rs])
    assert not seen.workloads["web"].settled


def test_claims_are_compared_and_expected() -> None:
    sc = scenario(expectClaims={"data": {"volumeName": "pv-a", "phase": "Bound"}})
    claim = {
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"volumeName": "pv-a"},
        "status": {"phase": "Bound"},
    }
    ref = run("reference", {}, claims=dict(observe(sc, pods=[], claims=[claim]).claims))
    other = {**claim, "spec": {"volumeName": "pv-b"}}
    ours = run("kscheduler", {}, claims=dict(observe(sc, pods=[], claims=[other]).claims))
    assert [d.field for d in compare(sc, ref, ours)] == ["claim"]
    assert check_expectations(sc, ref) == []
    assert [d.field for d in check_expectations(sc, ours)] == ["volumeName"]


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "kube-scheduler"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def test_reference_version_reads_the_binary(tmp_path: Path) -> None:
    assert await reference_version(_script(tmp_path, 'echo "Kubernetes v1.2.3"')) == "v1.2.3"
    with pytest.raises(ReferenceVersionError, match="exited 3"):
        await reference_version(_script(tmp_path, "echo nope; exit 3"))


def _resource_claim(name: str, devices: list[str], **meta: Any) -> dict[str, Any]:
    claim: dict[str, Any] = {"metadata": {"name": name, "namespace": "default", **meta}}
    if devices:
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": "gpu.example.com", "pool": "n0", "device": d}
                        for d in devices
                    ]
                },
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": []}]},
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        }
    return claim


def test_resource_claims_are_compared_and_expected() -> None:
    sc = scenario(
        expectClaims={
            "gpu": {"devices": ["gpus/n0/gpu-0", "gpus/n0/gpu-1"]},
            "p:shared": {"allocated": False},
        }
    )
    generated = _resource_claim(
        "p-shared-x7k2",
        [],
        annotations={"resource.kubernetes.io/pod-claim-name": "shared"},
        ownerReferences=[{"kind": "Pod", "name": "p", "uid": "u", "controller": True}],
    )
    ref_seen = observe(
        sc, pods=[], resource_claims=[_resource_claim("gpu", ["gpu-0", "gpu-1"]), generated]
    )
    assert set(ref_seen.device_claims) == {"default/gpu", "default/p:shared"}
    assert ref_seen.device_claims["default/gpu"].reserved_for == ("p",)
    ref = run("reference", {}, device_claims=dict(ref_seen.device_claims))
    ours_seen = observe(
        sc, pods=[], resource_claims=[_resource_claim("gpu", ["gpu-1", "gpu-0"]), generated]
    )
    ours = run("kscheduler", {}, device_claims=dict(ours_seen.device_claims))
    assert compare(sc, ref, ref) == []
    diffs = compare(sc, ref, ours)
    assert [(d.pod, d.field) for d in diffs] == [("default/gpu", "resourceclaim")]
    assert "gpus=gpu.example.com/n0/gpu-0" in diffs[0].reference
    assert check_expectations(sc, ref) == []
    assert [d.field for d in check_expectations(sc, ours)] == ["devices"]


def test_the_claim_for_a_pods_extended_resources_is_named_after_the_pod() -> None:
    sc = scenario(expectClaims={"p:extended-resources": {"devices": ["gpus/n0/gpu-0"]}})
    owner = [{"kind": "Pod", "name": "p", "uid": "u", "controller": True}]
    note = {"resource.kubernetes.io/extended-resource-claim": "true"}

    def seen(name: str, device: str) -> Any:
        claim = _resource_claim(name, [device], annotations=note, ownerReferences=owner)
        return observe(sc, pods=[], resource_claims=[claim]).device_claims

    ref = run("reference", {}, device_claims=dict(seen("p-extended-resources-ab12c", "gpu-0")))
    same = run("kscheduler", {}, device_claims=dict(seen("p-extended-resources-zz9x8", "gpu-0")))
    other = run("kscheduler", {}, device_claims=dict(seen("p-extended-resources-zz9x8", "gpu-1")))
    assert set(ref.device_claims) == {"default/p:extended-resources"}
    assert compare(sc, ref, same) == []
    assert [d.field for d in compare(sc, ref, other)] == ["resourceclaim"]
    assert check_expectations(sc, ref) == []
    assert [d.field for d in check_expectations(sc, other)] == ["devices"]


def test_resource_claim_expectations_are_checked_when_parsed() -> None:
    with pytest.raises(ScenarioError, match="request/pool/device"):
        scenario(expectClaims={"gpu": {"devices": ["n0/gpu-0"]}})
    with pytest.raises(ScenarioError, match="unallocated claim has no devices"):
        scenario(expectClaims={"gpu": {"allocated": False, "devices": ["r/n0/gpu-0"]}})
    with pytest.raises(ScenarioError, match="or a ResourceClaim's"):
        scenario(expectClaims={"gpu": {"phase": "Bound", "allocated": True}})


def test_an_existing_pods_status_is_kept_for_after_it_runs_and_refused_elsewhere() -> None:
    resized = {"containerStatuses": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}
    sc = scenario(existingPods=[{"name": "v", "node": "n0", "cpu": "500m", "status": resized}])
    assert sc.existing_pods[0]["status"] == resized
    assert sc.existing_pods[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    with pytest.raises(ScenarioError, match="status"):
        scenario(pods=[{"name": "p", "status": resized}])
    with pytest.raises(ScenarioError, match=r"status\.containerStatuses"):
        scenario(
            existingPods=[
                {"name": "v", "node": "n0", "status": {"containerStatuses": [{"ready": True}]}}
            ]
        )
    with pytest.raises(ScenarioError, match=r"status\.conditions.*type"):
        scenario(existingPods=[{"name": "v", "node": "n0", "status": {"conditions": [{"x": 1}]}}])


def test_merge_pod_status_merges_container_statuses_by_name_and_conditions_by_type() -> None:
    running = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {"name": "main", "ready": True, "resources": {"limits": {"cpu": "2"}}},
            {"name": "side", "ready": True},
        ],
    }
    wanted = {
        "containerStatuses": [
            {"name": "main", "resources": {"requests": {"cpu": "1500m"}}},
            {"name": "extra", "ready": False},
        ],
        "conditions": [
            {"type": "PodResizePending", "status": "True"},
            {"type": "Ready", "reason": "Resized"},
        ],
    }
    merged = merge_pod_status(running, wanted)
    assert merged["phase"] == "Running"
    assert merged["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "Resized"},
        {"type": "PodResizePending", "status": "True"},
    ]
    assert merged["containerStatuses"] == [
        {
            "name": "main",
            "ready": True,
            "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "1500m"}},
        },
        {"name": "side", "ready": True},
        {"name": "extra", "ready": False},
    ]
    assert running["containerStatuses"][0]["resources"] == {"limits": {"cpu": "2"}}


def test_scheduler_config_is_top_level_for_both_and_checked() -> None:
    sc = scenario(schedulerConfig={"podInitialBackoffSeconds": 60})
    assert sc.scheduler_config == {"podInitialBackoffSeconds": 60}
    assert "podInitialBackoffSeconds: 60" in kscheduler_config({}, sc.scheduler_config)
    with pytest.raises(ScenarioError, match="schedulerConfig: unknown field"):
        scenario(schedulerConfig={"profiles": []})


def test_shares_are_compared_by_form_and_consumed_capacity() -> None:
    sc = scenario(expectClaims={"gpu": {"shares": ["memory=10Gi"]}})

    def seen(share_id: Any, consumed: dict[str, str] | None) -> Any:
        claim = _resource_claim("gpu", ["gpu-0"])
        result = claim["status"]["allocation"]["devices"]["results"][0]
        if share_id is not None:
            result["shareID"] = share_id
        if consumed is not None:
            result["consumedCapacity"] = consumed
        return observe(sc, pods=[], resource_claims=[claim]).device_claims

    ten = {"memory": "10Gi"}
    ref = run("reference", {}, device_claims=dict(seen(str(uuid.uuid4()), ten)))
    same = run("kscheduler", {}, device_claims=dict(seen(str(uuid.uuid4()), ten)))
    more = run("kscheduler", {}, device_claims=dict(seen(str(uuid.uuid4()), {"memory": "12Gi"})))
    bad = run("kscheduler", {}, device_claims=dict(seen("not-a-uuid", ten)))
    unshared = run("kscheduler", {}, device_claims=dict(seen(None, ten)))
    assert ref.device_claims["default/gpu"].shares == ("memory=10Gi",)
    assert "[memory=10Gi]" in ref.device_claims["default/gpu"].summary()
    assert compare(sc, ref, same) == []
    for other in (more, bad, unshared):
        assert [d.field for d in compare(sc, ref, other)] == ["resourceclaim"]
        assert [d.field for d in check_expectations(sc, other)] == ["shares"]
    assert bad.device_claims["default/gpu"].shares[0].startswith("bad shareID")
    assert unshared.device_claims["default/gpu"].shares == ("unshared memory=10Gi",)


def test_feature_gates_are_checked_and_passed_to_the_reference() -> None:
    sc = scenario(featureGates={"DRAFractionalCapacityRange": True})
    assert sc.feature_gates == {"DRAFractionalCapacityRange": True}
    assert difftest._feature_gates_args(sc.feature_gates) == [
        "--feature-gates=DRAFractionalCapacityRange=true"
    ]
    assert difftest._feature_gates_args(scenario().feature_gates) == []
    with pytest.raises(ScenarioError, match="featureGates: unrecognized feature gate: Bogus"):
        scenario(featureGates={"Bogus": True})
    with pytest.raises(ScenarioError, match="featureGates: expected NAME"):
        scenario(featureGates={"DRAFractionalCapacityRange": "yes"})
