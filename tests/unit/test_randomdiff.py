"""The randomized differential test's own rules: the generator is deterministic and
covers what it claims, the reference's log is read right, and a decision is
compared as documented (ties tolerated, scores and messages exact)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kscheduler.explain import Explanation, NodeVerdict, PluginScore
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.status import Status
from kscheduler.randomdiff import (
    NODE_OPERATORS,
    TAINT_EFFECTS,
    ReferenceDecision,
    compare_decision,
    generate,
    parse_reference_log,
    parse_seeds,
)

SEEDS = range(40)


def _walk(value: Any) -> Any:
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def test_same_seed_same_case() -> None:
    a, b = generate(7), generate(7)
    assert json.dumps([a.nodes, a.pods]) == json.dumps([b.nodes, b.pods])
    assert json.dumps(generate(8).pods) != json.dumps(a.pods)


def test_generated_pods_parse() -> None:
    for seed in SEEDS:
        for raw in generate(seed).pods:
            pod = parse_pod(json.loads(json.dumps(raw)))
            assert pod.parse_error is None, (seed, raw["metadata"]["name"], pod.parse_error)


def test_generator_covers_the_features() -> None:
    ops: set[str] = set()
    effects: set[str] = set()
    seen: set[str] = set()
    for seed in SEEDS:
        case = generate(seed)
        for node in case.nodes:
            effects.update(t["effect"] for t in node["spec"].get("taints", []))
            if node["spec"].get("unschedulable"):
                seen.add("cordoned")
        for pod in case.pods:
            spec = pod["spec"]
            for v in _walk(spec):
                if isinstance(v, dict) and "operator" in v and "effect" not in v:
                    ops.add(v["operator"])
            if any(c.get("restartPolicy") == "Always" for c in spec.get("initContainers", [])):
                seen.add("sidecar")
            if any("restartPolicy" not in c for c in spec.get("initContainers", [])):
                seen.add("init")
            if "resources" in spec:
                seen.add("pod-level")
            if any("ports" in c for c in spec["containers"]):
                seen.add("hostPort")
            if "nodeSelector" in spec:
                seen.add("nodeSelector")
            for t in spec.get("tolerations", []):
                seen.add(f"toleration:{t.get('effect', '')}")
            for c in spec.get("topologySpreadConstraints", []):
                seen.add(c["whenUnsatisfiable"])
                seen.update(
                    k for k in ("minDomains", "nodeAffinityPolicy", "matchLabelKeys") if k in c
                )
            aff = spec.get("affinity", {})
            for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
                for mode, terms in aff.get(kind, {}).items():
                    seen.add(f"{kind}:{mode[:8]}")
                    for t in terms if isinstance(terms, list) else []:
                        term = t.get("podAffinityTerm", t)
                        seen.update(k for k in ("namespaces", "namespaceSelector") if k in term)
            if any("matchFields" in v for v in _walk(spec) if isinstance(v, dict)):
                seen.add("matchFields")
    assert set(NODE_OPERATORS) <= ops
    assert set(TAINT_EFFECTS) == effects
    for want in [
        "cordoned",
        "sidecar",
        "init",
        "pod-level",
        "hostPort",
        "nodeSelector",
        "DoNotSchedule",
        "ScheduleAnyway",
        "minDomains",
        "nodeAffinityPolicy",
        "matchLabelKeys",
        "namespaces",
        "namespaceSelector",
        "matchFields",
        "toleration:NoSchedule",
        "toleration:PreferNoSchedule",
        "toleration:NoExecute",
        "toleration:",
        "nodeAffinity:required",
        "nodeAffinity:preferre",
        "podAffinity:required",
        "podAntiAffinity:required",
        "podAntiAffinity:preferre",
    ]:
        assert want in seen, want


def test_parse_reference_log() -> None:
    text = "\n".join(
        [
            'I1203 12:00:00.1 1 schedule_one.go:984] "Plugin scored node for pod" '
            'pod="ns/p01" plugin="TaintToleration" node="n0" score=300',
            'I1203 12:00:00.1 1 schedule_one.go:984] "Plugin scored node for pod" '
            'pod="ns/p01" plugin="NodeResourcesFit" node="n1" score=42',
            'I1203 12:00:00.1 1 schedule_one.go:984] "Plugin scored node for pod" '
            'pod="ns/p011" plugin="NodeResourcesFit" node="n1" score=7',
            'I1203 12:00:00.2 1 batch.go:103] "OpportunisticBatch provided node hint" '
            'profile="reference" pod="ns/p01" cycleCount=4 hint="n3" remainingNodes=2',
        ]
    )
    scores, hint = parse_reference_log(text, "ns/p01")
    assert scores == {("TaintToleration", "n0"): 300, ("NodeResourcesFit", "n1"): 42}
    assert hint == "n3"
    assert parse_reference_log(text, "ns/other") == ({}, "")


def _ex(*verdicts: NodeVerdict, fit_error: str = "") -> Explanation:
    ex = Explanation(pod="ns/p", uid="u", profile="kscheduler", scheduler_name="x")
    ex.verdicts = list(verdicts)
    feasible = [v for v in verdicts if v.feasible]
    for v in feasible:
        v.total = sum(s.weighted for s in v.scores.values())
    if feasible:
        ex.best_total = max(v.total or 0 for v in feasible)
        ex.best_nodes = sorted(v.node for v in feasible if v.total == ex.best_total)
    ex.fit_error = fit_error
    return ex


def _ok(node: str, **scores: int) -> NodeVerdict:
    return NodeVerdict(node, scores={p: PluginScore(s, s, s) for p, s in scores.items()})


def test_compare_tie_tolerated_with_equal_scores() -> None:
    ex = _ex(_ok("a", Fit=50), _ok("b", Fit=50), _ok("c", Fit=10))
    ref = ReferenceDecision(node="b", scores={("Fit", "a"): 50, ("Fit", "b"): 50, ("Fit", "c"): 10})
    assert compare_decision(ref, ex) == []
    # a plugin the reference scores 0 everywhere and kscheduler does not run adds nothing
    ref.scores[("VolumeBinding", "a")] = 0
    assert compare_decision(ref, ex) == []


def test_compare_reports_a_score_and_a_worse_node() -> None:
    ex = _ex(_ok("a", Fit=50), _ok("b", Fit=40))
    ref = ReferenceDecision(node="b", scores={("Fit", "a"): 50, ("Fit", "b"): 60})
    assert compare_decision(ref, ex) == ["Fit scores node b 60 in the reference, 40 in kscheduler"]
    ref = ReferenceDecision(node="b", scores={("Fit", "a"): 50, ("Fit", "b"): 40})
    assert compare_decision(ref, ex) == ["the reference chose b, not among kscheduler's best ['a']"]


def test_compare_feasible_sets() -> None:
    ex = _ex(_ok("a", Fit=50), NodeVerdict("b", Status.unschedulable("Insufficient cpu")))
    ref = ReferenceDecision(node="b")
    (diff,) = compare_decision(ref, ex)
    assert "kscheduler rejects" in diff and "Insufficient cpu" in diff
    ref = ReferenceDecision(node="a", scores={("Fit", "a"): 50, ("Fit", "c"): 50})
    assert compare_decision(ref, ex)[0].startswith("feasible nodes differ")
    # nothing scored: one feasible node on both sides, or the batching hint
    assert compare_decision(ReferenceDecision(node="a"), ex) == []
    two = _ex(_ok("a", Fit=50), _ok("b", Fit=40))
    assert compare_decision(ReferenceDecision(node="a"), two)
    assert compare_decision(ReferenceDecision(node="b", hint="b"), two) == []


def test_compare_messages_word_for_word() -> None:
    msg = "0/1 nodes are available: 1 Insufficient cpu."
    ex = _ex(NodeVerdict("a", Status.unschedulable("Insufficient cpu")), fit_error=msg)
    assert compare_decision(ReferenceDecision(message=msg), ex) == []
    (diff,) = compare_decision(ReferenceDecision(message=msg + " "), ex)
    assert diff.startswith("messages differ")
    (diff,) = compare_decision(ReferenceDecision(message=msg), _ex(_ok("a")))
    assert "kscheduler finds ['a'] feasible" in diff


@pytest.mark.parametrize(("text", "seeds"), [("7", [7]), ("1-3", [1, 2, 3]), ("1,5-6", [1, 5, 6])])
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "1-", "-2", "1-b"])
def test_parse_seeds_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="seeds"):
        parse_seeds(text)
