"""explain -f with pods whose claims come from a ResourceClaimTemplate: the
what-if makes each pod's claim as the resourceclaim controller would, so that
DynamicResources allocates devices to it, and later copies find those devices
taken."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kscheduler.explain import ExplainError
from kscheduler.kube import ApiError
from kscheduler.manifests import POD_CLAIM_NAME_ANNOTATION, ManifestError, claim_from_template
from kscheduler.whatif import render_table
from tests.unit.builders import node
from tests.unit.test_whatif import app_with, deployment, docs_of, run

DRIVER = "gpu.example.com"


def gpu_slice(node_name: str, n: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node_name}-gpu",
            "uid": f"slice-{node_name}",
            "resourceVersion": "1",
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(n)],
        },
    }


GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu", "uid": "class-gpu", "resourceVersion": "1"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
}


def template(name: str, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "metadata": {"labels": {"claim": "gpu"}},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": count}}
                    ]
                }
            },
        },
    }


def gpu_app(per_node: dict[str, int], cpu: str = "8") -> Any:
    nodes = [node(n).alloc(cpu=cpu, memory="16Gi", pods="110").record() for n in per_node]
    app, kube = app_with(nodes)
    for name, n in per_node.items():
        if n:
            app.informers.informer("resourceslices").apply("ADDED", gpu_slice(name, n))
    app.informers.informer("deviceclasses").apply("ADDED", GPU_CLASS)
    app.snapshot.update()
    return app, kube


def gpu_deployment(
    replicas: int, template_name: str = "one-gpu", cpu: str = "100m"
) -> dict[str, Any]:
    return deployment(
        "trainer",
        replicas,
        req={"cpu": cpu, "memory": "64Mi"},
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template_name}],
    )


def test_each_replica_gets_its_own_claim_and_devices_run_out() -> None:
    app, kube = gpu_app({"a": 2, "b": 1, "c": 0})
    result = run(app, kube, docs_of(template("one-gpu"), gpu_deployment(4)))
    nodes = [p.node for p in result.placements]
    assert sorted(n for n in nodes if n) == ["a", "a", "b"]
    last = result.placements[-1]
    assert not last.node
    assert "cannot allocate all claims" in last.fit_error, last.fit_error
    claims = app.informers.get("resourceclaims")
    assert claims is not None
    made = [c for c in claims.list() if c["metadata"]["labels"].get("claim") == "gpu"]
    assert len(made) == 4  # one per pod, as the controller makes them
    for c in made:
        meta = c["metadata"]
        assert meta["name"].startswith("trainer-") and "-gpu-" in meta["name"]
        assert meta["annotations"][POD_CLAIM_NAME_ANNOTATION] == "gpu"
        (owner,) = meta["ownerReferences"]
        assert owner["kind"] == "Pod" and owner["controller"] is True
    assert "ResourceClaimTemplate default/one-gpu" in render_table(result)


def test_max_counts_the_devices_the_copies_claims_take() -> None:
    app, kube = gpu_app({"a": 3, "b": 2, "c": 0, "d": 1})
    result = run(
        app, kube, docs_of(template("two-gpus", 2), gpu_deployment(1, "two-gpus")), max_mode=True
    )
    assert result.max is not None and result.max.method == "per-node"
    assert result.max.count == 2  # a and b hold one pair each; d has one device
    assert result.max.per_node == {"a": 1, "b": 1}
    assert result.max.next is not None
    assert "cannot allocate all claims" in result.max.next.fit_error


def test_a_template_in_neither_the_manifests_nor_the_cluster_is_named() -> None:
    app, kube = gpu_app({"a": 1})

    async def not_found(path: str, params: Any = None) -> Any:
        raise ApiError(404, reason="NotFound", message="not found", path=path)

    kube.get_json = not_found  # type: ignore[method-assign]
    with pytest.raises(ManifestError) as err:
        run(app, kube, docs_of(gpu_deployment(1, "missing")))
    text = str(err.value)
    assert "spec.template.spec.resourceClaims[0].resourceClaimTemplateName" in text
    assert "no ResourceClaimTemplate 'missing'" in text


def test_claim_names_are_cut_in_proportion_as_the_controller_cuts_them() -> None:
    pod = {"metadata": {"name": "p" * 50, "namespace": "ns", "uid": "u"}}
    claim = claim_from_template(pod, "c" * 20, template("t"))
    name = claim["metadata"]["name"]
    # "<pod>-<entry>-" is 72 long: 57 * 50 // 72 = 39 of the pod's name, 57 * 20 // 72
    # = 15 of the entry's, no hyphen before the 5 random characters
    assert name.startswith("p" * 39 + "-" + "c" * 15)
    assert len(name) == 39 + 1 + 15 + 5
    short = claim_from_template(
        {"metadata": {**pod["metadata"], "name": "web-1"}}, "gpu", template("t")
    )
    assert short["metadata"]["name"].startswith("web-1-gpu-")
    assert len(short["metadata"]["name"]) == len("web-1-gpu-") + 5


@pytest.mark.parametrize("seed", range(12))
def test_max_per_node_with_claims_equals_cycle_by_cycle_placement(seed: int) -> None:
    rng = random.Random(seed)
    per_node = {f"n{i}": rng.choice([0, 1, 2, 3, 5]) for i in range(rng.randint(2, 9))}
    cpu = rng.choice(["100m", "1", "2"])
    want = rng.choice([1, 1, 2])
    docs = docs_of(template("t", want), gpu_deployment(1, "t", cpu=cpu))
    app, kube = gpu_app(per_node, cpu="4")
    fast = run(app, kube, docs, max_mode=True)
    app2, kube2 = gpu_app(per_node, cpu="4")
    slow = run(app2, kube2, docs, max_mode=True, max_method="cycles")
    assert fast.max is not None and slow.max is not None
    assert fast.max.method == "per-node" and slow.max.method == "cycle-by-cycle"
    assert fast.max.count == slow.max.count, (per_node, cpu, want)
    assert fast.max.per_node == slow.max.per_node
    assert fast.max.next is not None and slow.max.next is not None
    assert fast.max.next.fit_error == slow.max.next.fit_error


def test_devices_of_several_nodes_or_claims_shared_by_the_copies_are_placed_cycle_by_cycle() -> (
    None
):
    app, kube = gpu_app({"a": 2, "b": 2})
    shared = gpu_slice("a", 1)
    shared["metadata"]["name"] = "rack"
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    shared["spec"]["pool"]["name"] = "rack"
    app.informers.informer("resourceslices").apply("ADDED", shared)
    result = run(app, kube, docs_of(template("one-gpu"), gpu_deployment(1)), max_mode=True)
    assert result.max is not None and result.max.method == "cycle-by-cycle"
    assert result.max.count == 5
    assert "not each on one node" in result.max.why_cycles


def test_a_template_the_identity_may_not_read_is_an_error_naming_it() -> None:
    app, kube = gpu_app({"a": 1})

    async def forbidden(path: str, params: Any = None) -> Any:
        raise ApiError(403, reason="Forbidden", message="cannot get resourceclaimtemplates")

    kube.get_json = forbidden  # type: ignore[method-assign]
    with pytest.raises(ExplainError) as err:
        run(app, kube, docs_of(gpu_deployment(1, "private")))
    text = str(err.value)
    assert "cannot read ResourceClaimTemplate default/private from the cluster" in text
    assert "spec.template.spec.resourceClaims[0].resourceClaimTemplateName" in text
