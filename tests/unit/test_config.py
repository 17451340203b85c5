"""kscheduler.config: KubeSchedulerConfiguration v1 loading, defaults, validation,
plugin merging and multiPoint expansion, against a fake plugin registry."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kscheduler.config import (
    DEFAULT_LEASE_NAME,
    DEFAULT_SCHEDULER_NAME,
    ConfigError,
    KubeSchedulerConfiguration,
    PluginRef,
    PluginSpec,
    WeightedPlugin,
    load_config,
    parse_config,
)
from kscheduler.framework.args import Fields, parse_duration

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


# -- fake registry ------------------------------------------------------------


@dataclass(frozen=True)
class FitArgs:
    type: str = "LeastAllocated"
    resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))


def parse_fit_args(raw: Mapping[str, Any]) -> FitArgs:
    f = Fields(raw)
    strategy = f.obj("scoringStrategy")
    kind = strategy.string(
        "type",
        "LeastAllocated",
        choices=("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"),
    )
    resources = []
    for rf in strategy.objects("resources"):
        name = rf.required_string("name")
        weight = rf.integer("weight", 1, minimum=1, maximum=100)
        rf.done()
        resources.append((name, weight))
    strategy.done()
    f.strings("ignoredResources")
    f.done()
    return FitArgs(kind, tuple(resources) or FitArgs.resources)


@dataclass(frozen=True)
class AffinityArgs:
    hard_pod_affinity_weight: int = 1


def parse_affinity_args(raw: Mapping[str, Any]) -> AffinityArgs:
    f = Fields(raw)
    weight = f.integer("hardPodAffinityWeight", 1, minimum=0, maximum=100)
    f.done()
    return AffinityArgs(weight)


@dataclass(frozen=True)
class FifoArgs:
    reverse: bool = False


def parse_fifo_args(raw: Mapping[str, Any]) -> FifoArgs:
    f = Fields(raw)
    reverse = f.boolean("reverse", False)
    f.done()
    return FifoArgs(reverse)


@dataclass(frozen=True)
class Spec:
    extension_points: frozenset[str]
    parse_args: Callable[[Mapping[str, Any]], object] | None = None


def spec(*points: str, args: Callable[[Mapping[str, Any]], object] | None = None) -> Spec:
    return Spec(frozenset(points), args)


REGISTRY: dict[str, PluginSpec] = {
    "SchedulingGates": spec("preEnqueue"),
    "PrioritySort": spec("queueSort"),
    "NodeUnschedulable": spec("filter"),
    "NodeName": spec("filter"),
    "TaintToleration": spec("filter", "preScore", "score"),
    "NodeAffinity": spec("preFilter", "filter", "preScore", "score"),
    "NodePorts": spec("preFilter", "filter"),
    "NodeResourcesFit": spec("preFilter", "filter", "preScore", "score", args=parse_fit_args),
    "VolumeRestrictions": spec("preFilter", "filter"),
    "NodeVolumeLimits": spec("preFilter", "filter"),
    "VolumeBinding": spec("preFilter", "filter", "reserve", "preBind", "preScore", "score"),
    "VolumeZone": spec("preFilter", "filter"),
    "PodTopologySpread": spec("preFilter", "filter", "preScore", "score"),
    "InterPodAffinity": spec("preFilter", "filter", "preScore", "score", args=parse_affinity_args),
    "DefaultPreemption": spec("postFilter"),
    "NodeResourcesBalancedAllocation": spec("preScore", "score"),
    "ImageLocality": spec("score"),
    "DefaultBinder": spec("bind"),
    # not default plugins
    "FifoSort": spec("queueSort", args=parse_fifo_args),
    "Custom": spec("filter", "score"),
    "CustomBinder": spec("bind"),
}

DEFAULT_PRE_FILTER = (
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
)
DEFAULT_FILTER = (
    "NodeName",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
)
DEFAULT_PRE_SCORE = (
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "VolumeBinding",
    "PodTopologySpread",
    "InterPodAffinity",
    "NodeResourcesBalancedAllocation",
)
DEFAULT_SCORE = (
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("VolumeBinding", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
)


def load(
    body: str, registry: Mapping[str, PluginSpec] = REGISTRY, **kw: Any
) -> KubeSchedulerConfiguration:
    return load_config(HEADER + textwrap.dedent(body), registry=registry, **kw)


def load_error(body: str, registry: Mapping[str, PluginSpec] = REGISTRY, **kw: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(body, registry, **kw)
    err = info.value
    assert str(err) == (f"{err.path}: {err.reason}" if err.path else err.reason)
    return str(err)


# -- defaults -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "# nothing but a comment\n", "---\n", "{}\n", HEADER],
    ids=["empty", "comment", "empty-document", "empty-object", "header-only"],
)
def test_defaults(text: str) -> None:
    c = load_config(text, registry=REGISTRY)
    assert c.parallelism == 16
    assert c.percentage_of_nodes_to_score == 0
    assert (c.pod_initial_backoff_seconds, c.pod_max_backoff_seconds) == (1, 10)
    le = c.leader_election
    assert le.leader_elect is True
    assert (le.lease_duration, le.renew_deadline, le.retry_period) == (15.0, 10.0, 2.0)
    assert le.resource_lock == "leases"
    assert le.resource_namespace == "kube-system"
    assert le.resource_name == DEFAULT_LEASE_NAME == "kscheduler"
    cc = c.client_connection
    assert (cc.kubeconfig, cc.qps, cc.burst) == ("", 50.0, 100)
    assert c.extenders == ()
    assert c.enable_profiling and c.enable_contention_profiling
    assert len(c.profiles) == 1
    p = c.profiles[0]
    assert p.scheduler_name == DEFAULT_SCHEDULER_NAME == "kscheduler"
    assert p.percentage_of_nodes_to_score is None
    assert c.profile("kscheduler") is p
    assert c.profile("default-scheduler") is None


def test_default_plugins_resolved() -> None:
    plugins = load_config("", registry=REGISTRY).profiles[0].plugins
    assert plugins.pre_enqueue == ("SchedulingGates",)
    assert plugins.queue_sort == ("PrioritySort",)
    assert plugins.pre_filter == DEFAULT_PRE_FILTER
    assert plugins.filter == DEFAULT_FILTER
    assert plugins.post_filter == ("DefaultPreemption",)
    assert plugins.pre_score == DEFAULT_PRE_SCORE
    assert plugins.score == tuple(WeightedPlugin(n, w) for n, w in DEFAULT_SCORE)
    assert plugins.reserve == ("VolumeBinding",)
    assert plugins.permit == ()
    assert plugins.pre_bind == ("VolumeBinding",)
    assert plugins.bind == ("DefaultBinder",)
    assert plugins.post_bind == ()
    assert plugins.names("score") == tuple(n for n, _ in DEFAULT_SCORE)
    assert plugins.names("filter") == DEFAULT_FILTER


def test_default_args_come_from_the_plugins() -> None:
    p = load_config("", registry=REGISTRY).profiles[0]
    assert p.plugin_args["NodeResourcesFit"] == FitArgs()
    assert p.plugin_args["InterPodAffinity"] == AffinityArgs()
    assert p.plugin_args["PrioritySort"] is None
    assert set(p.plugin_args) == {
        "SchedulingGates",
        "PrioritySort",
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DefaultPreemption",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
        "DefaultBinder",
    }


def test_missing_defaults_are_skipped() -> None:
    small = {n: REGISTRY[n] for n in ("PrioritySort", "NodeName", "ImageLocality", "DefaultBinder")}
    p = load_config("", registry=small).profiles[0]
    assert p.plugins.filter == ("NodeName",)
    assert p.plugins.score == (WeightedPlugin("ImageLocality", 1),)
    assert set(p.plugin_args) == set(small)


def test_missing_defaults_rejected_when_asked() -> None:
    small = {n: REGISTRY[n] for n in ("PrioritySort", "DefaultBinder")}
    with pytest.raises(ConfigError) as info:
        load_config("", registry=small, skip_missing_defaults=False)
    assert str(info.value) == (
        'profiles[0].plugins.multiPoint: default plugin "SchedulingGates" is not registered'
    )
    # ... unless the config itself drops them
    c = load(
        """
        profiles:
        - plugins:
            multiPoint:
              enabled: [{name: PrioritySort}, {name: DefaultBinder}]
              disabled: [{name: "*"}]
        """,
        small,
        skip_missing_defaults=False,
    )
    assert c.profiles[0].plugins.bind == ("DefaultBinder",)


def test_args_for_missing_default_plugin_are_ignored() -> None:
    small = {n: REGISTRY[n] for n in ("PrioritySort", "DefaultBinder")}
    body = """
        profiles:
        - pluginConfig:
          - name: VolumeBinding
            args: {bindTimeoutSeconds: 600}
        """
    assert load(body, small).profiles[0].plugin_args.keys() == {"PrioritySort", "DefaultBinder"}
    assert load_error(body, small, skip_missing_defaults=False) == (
        'profiles[0].pluginConfig[0].name: unknown plugin "VolumeBinding"'
    )


# -- top-level fields ---------------------------------------------------------


def test_full_top_level() -> None:
    c = load(
        """
        parallelism: 8
        percentageOfNodesToScore: 30
        podInitialBackoffSeconds: 2
        podMaxBackoffSeconds: 60
        enableProfiling: false
        delayCacheUntilActive: true
        healthzBindAddress: 0.0.0.0:10251
        metricsBindAddress: 0.0.0.0:10251
        leaderElection:
          leaderElect: false
          leaseDuration: 1m30s
          renewDeadline: 1m
          retryPeriod: 500ms
          resourceName: my-lease
          resourceNamespace: sched
        clientConnection:
          kubeconfig: /etc/kube/config
          qps: 200.5
          burst: 400
          contentType: application/json
          acceptContentTypes: application/json
        """
    )
    assert isinstance(c, KubeSchedulerConfiguration)
    assert (c.parallelism, c.percentage_of_nodes_to_score) == (8, 30)
    assert (c.pod_initial_backoff_seconds, c.pod_max_backoff_seconds) == (2, 60)
    assert (c.enable_profiling, c.enable_contention_profiling) == (False, False)
    assert c.delay_cache_until_active is True
    assert c.healthz_bind_address == "0.0.0.0:10251"
    le = c.leader_election
    assert le.leader_elect is False
    assert (le.lease_duration, le.renew_deadline, le.retry_period) == (90.0, 60.0, 0.5)
    assert (le.resource_name, le.resource_namespace) == ("my-lease", "sched")
    cc = c.client_connection
    assert (cc.kubeconfig, cc.qps, cc.burst) == ("/etc/kube/config", 200.5, 400)
    assert (cc.content_type, cc.accept_content_types) == ("application/json", "application/json")


def test_zero_means_unset_as_upstream() -> None:
    c = load(
        """
        leaderElection: {leaseDuration: 0s, renewDeadline: "0", resourceName: ""}
        clientConnection: {qps: 0, burst: 0}
        """
    )
    assert c.leader_election.lease_duration == 15.0
    assert c.leader_election.renew_deadline == 10.0
    assert c.leader_election.resource_name == "kscheduler"
    assert (c.client_connection.qps, c.client_connection.burst) == (50.0, 100)


def test_null_means_unset() -> None:
    c = load("parallelism:\nleaderElection:\nprofiles:\n")
    assert c.parallelism == 16
    assert c.profiles[0].scheduler_name == "kscheduler"


def test_read_from_path(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + "parallelism: 4\n")
    assert load_config(path, registry=REGISTRY).parallelism == 4
    with pytest.raises(ConfigError, match=r"cannot read .*missing\.yaml"):
        load_config(tmp_path / "missing.yaml", registry=REGISTRY)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15s", 15.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("2h45m", 9900.0),
        ("100us", 0.0001),
        ("100\u00b5s", 0.0001),
        ("10ns", 1e-8),
        ("0", 0.0),
        ("-2s", -2.0),
        ("+2s", 2.0),
    ],
)
def test_parse_duration(text: str, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "15", "s", "1x", "1.2.3s", "1 s", "-", "1e3s", "."])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# -- errors: one table, exact messages ------------------------------------------

ERRORS: list[tuple[str, str, str]] = [
    # strict parsing: unknown fields, with their paths
    ("unknown-top-level", "schedulerName: x\n", "schedulerName: unknown field"),
    (
        "unknown-in-plugin-set",
        "profiles:\n- plugins:\n    score:\n      enabeld: []\n",
        "profiles[0].plugins.score.enabeld: unknown field",
    ),
    (
        "unknown-extension-point",
        "profiles:\n- plugins:\n    scoring: {}\n",
        "profiles[0].plugins.scoring: unknown field",
    ),
    (
        "unknown-in-plugin",
        "profiles:\n- plugins:\n    filter:\n      enabled: [{name: Custom, wieght: 2}]\n",
        "profiles[0].plugins.filter.enabled[0].wieght: unknown field",
    ),
    (
        "unknown-in-leader-election",
        "leaderElection: {leaseDurration: 15s}\n",
        "leaderElection.leaseDurration: unknown field",
    ),
    (
        "unknown-in-tls",
        "extenders:\n- urlPrefix: http://x\n  tlsConfig: {insecur: true}\n",
        "extenders[0].tlsConfig.insecur: unknown field",
    ),
    (
        "unknown-in-profile",
        "profiles:\n- schedulerName: a\n  plugin: {}\n",
        "profiles[0].plugin: unknown field",
    ),
    (
        "unknown-in-args",
        "profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args: {hardPodWeight: 2}\n",
        "profiles[0].pluginConfig[0].args.hardPodWeight: unknown field",
    ),
    # wrong types
    (
        "string-for-int",
        "podMaxBackoffSeconds: ten\n",
        'podMaxBackoffSeconds: expected integer, got string "ten"',
    ),
    ("bool-for-int", "parallelism: true\n", "parallelism: expected integer, got boolean true"),
    (
        "float-for-int",
        "percentageOfNodesToScore: 1.5\n",
        "percentageOfNodesToScore: expected integer, got number 1.5",
    ),
    (
        "int-for-bool",
        "leaderElection: {leaderElect: 1}\n",
        "leaderElection.leaderElect: expected boolean, got integer 1",
    ),
    ("object-for-list", "profiles: {a: 1}\n", "profiles: expected list, got object"),
    (
        "string-for-object",
        "leaderElection: yes please\n",
        'leaderElection: expected object, got string "yes please"',
    ),
    (
        "list-for-string",
        "profiles:\n- schedulerName: [a]\n",
        "profiles[0].schedulerName: expected string, got list",
    ),
    (
        "string-for-weight",
        "profiles:\n- plugins:\n    score:\n      enabled: [{name: Custom, weight: high}]\n",
        'profiles[0].plugins.score.enabled[0].weight: expected integer, got string "high"',
    ),
    (
        "int32-overflow",
        "parallelism: 4294967296\n",
        "parallelism: must be at most 2147483647, got 4294967296",
    ),
    # durations
    (
        "duration-without-unit",
        'leaderElection: {leaseDuration: "15"}\n',
        'leaderElection.leaseDuration: missing unit in duration "15"',
    ),
    (
        "duration-as-number",
        "leaderElection: {leaseDuration: 15}\n",
        'leaderElection.leaseDuration: expected duration string (e.g. "15s"), got integer 15',
    ),
    (
        "duration-bad-unit",
        "leaderElection: {retryPeriod: 2d}\n",
        'leaderElection.retryPeriod: unknown unit "d" in duration "2d"',
    ),
    (
        "duration-garbage",
        "extenders:\n- {urlPrefix: 'http://x', httpTimeout: soon}\n",
        'extenders[0].httpTimeout: invalid duration "soon"',
    ),
    # value validation
    ("parallelism-zero", "parallelism: 0\n", "parallelism: must be greater than 0, got 0"),
    (
        "percentage-above-100",
        "percentageOfNodesToScore: 101\n",
        "percentageOfNodesToScore: must be in the range 0..100, got 101",
    ),
    (
        "profile-percentage-negative",
        "profiles:\n- percentageOfNodesToScore: -1\n",
        "profiles[0].percentageOfNodesToScore: must be in the range 0..100, got -1",
    ),
    (
        "initial-backoff-zero",
        "podInitialBackoffSeconds: 0\n",
        "podInitialBackoffSeconds: must be greater than 0, got 0",
    ),
    (
        "max-backoff-below-initial",
        "podInitialBackoffSeconds: 20\n",
        "podMaxBackoffSeconds: must be greater than or equal to podInitialBackoffSeconds (20),"
        " got 10",
    ),
    ("negative-burst", "clientConnection: {burst: -1}\n", "clientConnection.burst: must be"),
    # leader election timings
    (
        "lease-not-above-renew",
        "leaderElection: {leaseDuration: 10s}\n",
        "leaderElection.leaseDuration: must be greater than renewDeadline (10s), got 10s",
    ),
    (
        "renew-not-above-retry",
        "leaderElection: {renewDeadline: 2s}\n",
        "leaderElection.renewDeadline: must be greater than 1.2 x retryPeriod (2s;"
        " 1.2 is the retry jitter), got 2s",
    ),
    (
        "renew-within-jitter",
        "leaderElection: {renewDeadline: 5s, retryPeriod: 4.5s}\n",
        "leaderElection.renewDeadline: must be greater than 1.2 x retryPeriod",
    ),
    (
        "negative-retry",
        "leaderElection: {retryPeriod: -1s}\n",
        "leaderElection.retryPeriod: must be greater than 0, got -1s",
    ),
    (
        "endpoints-lock",
        "leaderElection: {resourceLock: endpoints}\n",
        'leaderElection.resourceLock: must be "leases", got "endpoints"',
    ),
    # profiles
    (
        "duplicate-scheduler-name",
        "profiles:\n- schedulerName: a\n- schedulerName: b\n- schedulerName: a\n",
        'profiles[2].schedulerName: duplicate scheduler name "a" (also used by profiles[0])',
    ),
    (
        "name-required-with-two-profiles",
        "profiles:\n- schedulerName: a\n- {}\n",
        "profiles[1].schedulerName: required",
    ),
    (
        "empty-name",
        "profiles:\n- schedulerName: ''\n",
        "profiles[0].schedulerName: required",
    ),
    # plugins
    (
        "unknown-plugin",
        "profiles:\n- plugins:\n    filter:\n      enabled: [{name: Custom}, {name: Foo}]\n",
        'profiles[0].plugins.filter.enabled[1].name: unknown plugin "Foo"',
    ),
    (
        "unknown-multipoint-plugin",
        "profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: Foo}]\n",
        'profiles[0].plugins.multiPoint.enabled[0].name: unknown plugin "Foo"',
    ),
    (
        "unknown-disabled-plugin",
        "profiles:\n- plugins:\n    score:\n      disabled: [{name: Fooo}]\n",
        'profiles[0].plugins.score.disabled[0].name: unknown plugin "Fooo"',
    ),
    (
        "plugin-name-required",
        "profiles:\n- plugins:\n    filter:\n      enabled: [{weight: 1}]\n",
        "profiles[0].plugins.filter.enabled[0].name: required",
    ),
    (
        "plugin-enabled-twice",
        "profiles:\n- plugins:\n    filter:\n      enabled: [{name: Custom}, {name: Custom}]\n",
        'profiles[0].plugins.filter.enabled[1].name: plugin "Custom" is already enabled at'
        " profiles[0].plugins.filter.enabled[0]",
    ),
    (
        "plugin-not-implementing-point",
        "profiles:\n- plugins:\n    filter:\n      enabled: [{name: ImageLocality}]\n",
        'profiles[0].plugins.filter.enabled[0].name: plugin "ImageLocality" does not'
        " implement filter",
    ),
    (
        "negative-weight",
        "profiles:\n- plugins:\n    score:\n      enabled: [{name: Custom, weight: -2}]\n",
        "profiles[0].plugins.score.enabled[0].weight: must be positive (unset or 0 means 1),"
        " got -2",
    ),
    (
        "two-queue-sorts",
        "profiles:\n- plugins:\n    queueSort:\n      enabled: [{name: FifoSort}]\n",
        "profiles[0].plugins.queueSort: exactly one queueSort plugin is required, got 2"
        " (PrioritySort, FifoSort)",
    ),
    (
        "no-queue-sort",
        "profiles:\n- plugins:\n    queueSort:\n      disabled: [{name: '*'}]\n",
        "profiles[0].plugins.queueSort: exactly one queueSort plugin is required, got 0",
    ),
    (
        "no-bind",
        "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{name: DefaultBinder}]\n",
        "profiles[0].plugins.bind: at least one bind plugin is required",
    ),
    (
        "queue-sort-mismatch",
        "profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n"
        "      enabled: [{name: FifoSort}]\n      disabled: [{name: '*'}]\n",
        'profiles[1].plugins.queueSort: must be the same for all profiles: "FifoSort" here,'
        ' "PrioritySort" in profiles[0]',
    ),
    (
        "queue-sort-args-mismatch",
        "profiles:\n"
        "- schedulerName: a\n"
        "  plugins: {queueSort: {enabled: [{name: FifoSort}], disabled: [{name: '*'}]}}\n"
        "- schedulerName: b\n"
        "  plugins: {queueSort: {enabled: [{name: FifoSort}], disabled: [{name: '*'}]}}\n"
        "  pluginConfig: [{name: FifoSort, args: {reverse: true}}]\n",
        'profiles[1].pluginConfig: args of queueSort plugin "FifoSort" must be the same for all'
        " profiles",
    ),
    # pluginConfig
    (
        "args-error-path",
        "profiles:\n- pluginConfig:\n"
        "  - {name: InterPodAffinity, args: {hardPodAffinityWeight: 1}}\n"
        "  - {name: PrioritySort}\n"
        "  - name: NodeResourcesFit\n"
        "    args:\n"
        "      scoringStrategy: {type: LeastUsed}\n",
        "profiles[0].pluginConfig[2].args.scoringStrategy.type: unsupported value"
        ' "LeastUsed": must be one of "LeastAllocated", "MostAllocated",'
        ' "RequestedToCapacityRatio"',
    ),
    (
        "args-nested-list-path",
        "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n"
        "      scoringStrategy:\n        resources: [{name: cpu}, {name: memory, weight: 0}]\n",
        "profiles[0].pluginConfig[0].args.scoringStrategy.resources[1].weight: must be at least"
        " 1, got 0",
    ),
    (
        "args-not-an-object",
        "profiles:\n- pluginConfig:\n  - {name: InterPodAffinity, args: [1]}\n",
        "profiles[0].pluginConfig[0].args: expected object, got list",
    ),
    (
        "args-wrong-kind",
        "profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n"
        "    args: {kind: NodeResourcesFitArgs}\n",
        'profiles[0].pluginConfig[0].args.kind: expected "InterPodAffinityArgs" for plugin'
        ' "InterPodAffinity", got "NodeResourcesFitArgs"',
    ),
    (
        "args-for-argless-plugin",
        "profiles:\n- pluginConfig:\n  - {name: NodeName, args: {x: 1}}\n",
        'profiles[0].pluginConfig[0].args: plugin "NodeName" takes no args',
    ),
    (
        "args-of-disabled-plugin-still-validated",
        "profiles:\n- plugins: {multiPoint: {disabled: [{name: InterPodAffinity}]}}\n"
        "  pluginConfig:\n  - {name: InterPodAffinity, args: {hardPodAffinityWeight: 101}}\n",
        "profiles[0].pluginConfig[0].args.hardPodAffinityWeight: must be at most 100, got 101",
    ),
    (
        "duplicate-plugin-config",
        "profiles:\n- pluginConfig:\n  - {name: InterPodAffinity}\n  - {name: InterPodAffinity}\n",
        'profiles[0].pluginConfig[1].name: duplicate pluginConfig for "InterPodAffinity"'
        " (first at profiles[0].pluginConfig[0])",
    ),
    (
        "unknown-plugin-config",
        "profiles:\n- pluginConfig:\n  - {name: Foo, args: {}}\n",
        'profiles[0].pluginConfig[0].name: unknown plugin "Foo"',
    ),
    # extenders
    (
        "extender-url-required",
        "extenders:\n- {filterVerb: filter}\n",
        "extenders[0].urlPrefix: required",
    ),
    (
        "extender-weight-required",
        "extenders:\n- {urlPrefix: 'http://x', prioritizeVerb: prioritize}\n",
        "extenders[0].weight: must be positive when prioritizeVerb is set, got 0",
    ),
    (
        "two-extender-binders",
        "extenders:\n- {urlPrefix: 'http://a', bindVerb: bind}\n"
        "- {urlPrefix: 'http://b', bindVerb: bind}\n",
        "extenders[1].bindVerb: only one extender can implement bind (extenders[0] does)",
    ),
    (
        "extender-native-resource",
        "extenders:\n- urlPrefix: http://x\n  managedResources: [{name: cpu}]\n",
        'extenders[0].managedResources[0].name: "cpu" is not an extended resource name: it'
        " needs a domain prefix (example.com/foo)",
    ),
    (
        "extender-reserved-resource",
        "extenders:\n- urlPrefix: http://x\n  managedResources: [{name: kubernetes.io/gpu}]\n",
        'extenders[0].managedResources[0].name: "kubernetes.io/gpu" is not an extended resource'
        " name: that prefix is reserved",
    ),
    (
        "extender-duplicate-resource",
        "extenders:\n- urlPrefix: http://a\n  managedResources: [{name: example.com/gpu}]\n"
        "- urlPrefix: http://b\n  managedResources: [{name: example.com/gpu}]\n",
        'extenders[1].managedResources[0].name: duplicate managed resource "example.com/gpu"'
        " (also at extenders[0].managedResources[0])",
    ),
    (
        "extender-bad-cert-data",
        "extenders:\n- urlPrefix: http://x\n  tlsConfig: {caData: 'not base64!'}\n",
        "extenders[0].tlsConfig.caData: expected base64-encoded data",
    ),
]


@pytest.mark.parametrize(("body", "expected"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors(body: str, expected: str) -> None:
    message = load_error(body)
    assert message.startswith(expected), message


def test_error_fields() -> None:
    with pytest.raises(ConfigError) as info:
        load("podMaxBackoffSeconds: ten\n")
    assert info.value.path == "podMaxBackoffSeconds"
    assert info.value.reason == 'expected integer, got string "ten"'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (HEADER + "parallelism: [\n", "YAML syntax error: line 4, column 1:"),
        (HEADER + "parallelism: 1\n  bad: indent\n", "YAML syntax error: line 4, column 6:"),
        (HEADER + "parallelism: 1\nparallelism: 2\n", "YAML syntax error: line 4, column 1:"),
        ("- a\n- b\n", "expected object, got list"),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
            'apiVersion: unsupported "kubescheduler.config.k8s.io/v1beta3":'
            ' only "kubescheduler.config.k8s.io/v1" is read',
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeProxyConfiguration\n",
            'kind: expected "KubeSchedulerConfiguration", got "KubeProxyConfiguration"',
        ),
        (
            "kind: KubeSchedulerConfiguration\nparallelism: 2\n",
            'apiVersion: required ("kubescheduler.config.k8s.io/v1")',
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nparallelism: 2\n",
            'kind: required ("KubeSchedulerConfiguration")',
        ),
        ("/etc/kscheduler.yaml", "expected a KubeSchedulerConfiguration object"),
    ],
    ids=[
        "unclosed",
        "indent",
        "duplicate-key",
        "not-an-object",
        "old-api-version",
        "wrong-kind",
        "missing-api-version",
        "missing-kind",
        "path-as-str",
    ],
)
def test_document_errors(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(text, registry=REGISTRY)
    assert str(info.value).startswith(expected), str(info.value)


def test_leader_election_off_skips_timing_checks() -> None:
    c = load("leaderElection: {leaderElect: false, leaseDuration: 1s, renewDeadline: 5s}\n")
    assert c.leader_election.leader_elect is False


# -- plugin merging and multiPoint expansion ----------------------------------


def resolved(body: str, point: str) -> tuple[Any, ...]:
    plugins = load(body).profiles[0].plugins
    if point == "score":
        return tuple((p.name, p.weight) for p in plugins.score)
    return plugins.names(point)


MERGES: list[tuple[str, str, str, tuple[Any, ...]]] = [
    (
        "disable-all-multipoint-then-enable",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled: [{name: PrioritySort}, {name: Custom, weight: 4}, {name: DefaultBinder}]
              disabled: [{name: "*"}]
        """,
        "filter",
        ("Custom",),
    ),
    (
        "disable-all-multipoint-score",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled: [{name: PrioritySort}, {name: Custom, weight: 4}, {name: DefaultBinder}]
              disabled: [{name: "*"}]
        """,
        "score",
        (("Custom", 4),),
    ),
    (
        "disable-all-at-one-point",
        """
        profiles:
        - plugins:
            filter:
              enabled: [{name: NodeName}, {name: Custom}]
              disabled: [{name: "*"}]
        """,
        "filter",
        ("NodeName", "Custom"),
    ),
    (
        "disable-all-at-one-point-keeps-others",
        """
        profiles:
        - plugins:
            filter:
              disabled: [{name: "*"}]
        """,
        "preFilter",
        DEFAULT_PRE_FILTER,
    ),
    (
        "disable-one-at-one-point",
        """
        profiles:
        - plugins:
            score:
              disabled: [{name: ImageLocality}, {name: NodeAffinity}]
        """,
        "score",
        tuple(s for s in DEFAULT_SCORE if s[0] not in ("ImageLocality", "NodeAffinity")),
    ),
    (
        "disable-in-multipoint-removes-everywhere",
        """
        profiles:
        - plugins:
            multiPoint:
              disabled: [{name: TaintToleration}]
        """,
        "filter",
        tuple(n for n in DEFAULT_FILTER if n != "TaintToleration"),
    ),
    (
        "new-plugin-appended-at-point",
        """
        profiles:
        - plugins:
            filter:
              enabled: [{name: Custom}]
        """,
        "filter",
        (*DEFAULT_FILTER, "Custom"),
    ),
    (
        "new-plugin-appended-to-multipoint",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled: [{name: Custom, weight: 5}]
        """,
        "score",
        (*DEFAULT_SCORE, ("Custom", 5)),
    ),
    (
        "reconfigured-default-moves-first-at-point",
        """
        profiles:
        - plugins:
            filter:
              enabled: [{name: Custom}, {name: NodeAffinity}]
        """,
        "filter",
        ("NodeAffinity", *(n for n in DEFAULT_FILTER if n != "NodeAffinity"), "Custom"),
    ),
    (
        "disable-and-reenable-moves-last",
        """
        profiles:
        - plugins:
            filter:
              enabled: [{name: NodeUnschedulable}]
              disabled: [{name: NodeUnschedulable}]
        """,
        "filter",
        (*(n for n in DEFAULT_FILTER if n != "NodeUnschedulable"), "NodeUnschedulable"),
    ),
    (
        "score-weight-override-at-point",
        """
        profiles:
        - plugins:
            score:
              enabled: [{name: ImageLocality, weight: 5}]
        """,
        "score",
        (("ImageLocality", 5), *DEFAULT_SCORE[:-1]),
    ),
    (
        "score-weight-override-in-multipoint-keeps-place",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled: [{name: TaintToleration, weight: 7}]
        """,
        "score",
        (("TaintToleration", 7), *DEFAULT_SCORE[1:]),
    ),
    (
        "point-entry-without-weight-means-1",
        """
        profiles:
        - plugins:
            score:
              enabled: [{name: PodTopologySpread}]
        """,
        "score",
        (("PodTopologySpread", 1), *(s for s in DEFAULT_SCORE if s[0] != "PodTopologySpread")),
    ),
    (
        "zero-weight-means-1",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled: [{name: Custom, weight: 0}]
        """,
        "score",
        (*DEFAULT_SCORE, ("Custom", 1)),
    ),
    (
        "replace-binder",
        """
        profiles:
        - plugins:
            bind:
              enabled: [{name: CustomBinder}]
              disabled: [{name: DefaultBinder}]
        """,
        "bind",
        ("CustomBinder",),
    ),
    (
        "extra-binder-after-default",
        """
        profiles:
        - plugins:
            bind:
              enabled: [{name: CustomBinder}]
        """,
        "bind",
        ("DefaultBinder", "CustomBinder"),
    ),
    (
        "replace-queue-sort",
        """
        profiles:
        - plugins:
            queueSort:
              enabled: [{name: FifoSort}]
              disabled: [{name: "*"}]
        """,
        "queueSort",
        ("FifoSort",),
    ),
    (
        "multipoint-enabled-wins-over-its-own-disabled",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled: [{name: Custom}]
              disabled: [{name: Custom}]
        """,
        "filter",
        (*DEFAULT_FILTER, "Custom"),
    ),
]


@pytest.mark.parametrize(
    ("body", "point", "expected"), [m[1:] for m in MERGES], ids=[m[0] for m in MERGES]
)
def test_merge(body: str, point: str, expected: tuple[Any, ...]) -> None:
    assert resolved(body, point) == expected


def test_disabled_everywhere_is_still_instantiated() -> None:
    # As upstream: a plugin enabled through multiPoint gets args even if every point
    # it implements disables it.
    p = load(
        """
        profiles:
        - plugins:
            score: {disabled: [{name: ImageLocality}]}
        """
    ).profiles[0]
    assert "ImageLocality" not in p.plugins.names("score")
    assert "ImageLocality" in p.plugin_args


def test_plugins_as_written_are_kept() -> None:
    p = load(
        """
        profiles:
        - plugins:
            score:
              enabled: [{name: ImageLocality, weight: 5}]
              disabled: [{name: "*"}]
        """
    ).profiles[0]
    assert p.plugins_config.score.enabled == (PluginRef("ImageLocality", 5),)
    assert p.plugins_config.get("score").disabled == ("*",)
    assert p.plugins_config.multi_point.enabled == ()


# -- profiles and args --------------------------------------------------------


def test_two_profiles() -> None:
    c = load(
        """
        percentageOfNodesToScore: 20
        profiles:
        - schedulerName: kscheduler
        - schedulerName: kscheduler-spread
          percentageOfNodesToScore: 50
          plugins:
            score:
              enabled: [{name: PodTopologySpread, weight: 10}]
              disabled: [{name: "*"}]
          pluginConfig:
          - name: NodeResourcesFit
            args:
              apiVersion: kubescheduler.config.k8s.io/v1
              kind: NodeResourcesFitArgs
              scoringStrategy:
                type: MostAllocated
                resources: [{name: cpu, weight: 3}]
        """
    )
    assert [p.scheduler_name for p in c.profiles] == ["kscheduler", "kscheduler-spread"]
    first, second = c.profiles
    assert first.percentage_of_nodes_to_score is None
    assert second.percentage_of_nodes_to_score == 50
    assert first.plugins.score == tuple(WeightedPlugin(n, w) for n, w in DEFAULT_SCORE)
    assert second.plugins.score == (WeightedPlugin("PodTopologySpread", 10),)
    assert first.plugin_args["NodeResourcesFit"] == FitArgs()
    assert second.plugin_args["NodeResourcesFit"] == FitArgs("MostAllocated", (("cpu", 3),))
    assert c.profile("kscheduler-spread") is second


def test_same_queue_sort_args_in_all_profiles_is_fine() -> None:
    c = load(
        """
        profiles:
        - schedulerName: a
          plugins: {queueSort: {enabled: [{name: FifoSort}], disabled: [{name: "*"}]}}
          pluginConfig: [{name: FifoSort, args: {reverse: true}}]
        - schedulerName: b
          plugins: {queueSort: {enabled: [{name: FifoSort}], disabled: [{name: "*"}]}}
          pluginConfig: [{name: FifoSort, args: {reverse: true}}]
        """
    )
    assert [p.plugin_args["FifoSort"] for p in c.profiles] == [FifoArgs(True)] * 2


def test_plugin_config_for_plugin_not_enabled_is_not_stored() -> None:
    p = load("profiles:\n- pluginConfig: [{name: FifoSort, args: {reverse: true}}]\n").profiles[0]
    assert "FifoSort" not in p.plugin_args


def test_args_null_and_type_meta_only() -> None:
    p = load(
        """
        profiles:
        - pluginConfig:
          - name: InterPodAffinity
          - name: NodeResourcesFit
            args: {kind: NodeResourcesFitArgs, apiVersion: kubescheduler.config.k8s.io/v1}
          - name: NodeName
            args: {}
        """
    ).profiles[0]
    assert p.plugin_args["InterPodAffinity"] == AffinityArgs()
    assert p.plugin_args["NodeResourcesFit"] == FitArgs()
    assert p.plugin_args["NodeName"] is None


def test_bad_default_args_are_reported() -> None:
    def broken(raw: Mapping[str, Any]) -> object:
        raise ConfigError("x", "always broken")

    registry = {**REGISTRY, "ImageLocality": spec("score", args=broken)}
    with pytest.raises(ConfigError) as info:
        load_config("", registry=registry)
    assert str(info.value) == (
        'profiles[0].pluginConfig: default args of plugin "ImageLocality" are invalid:'
        " x: always broken"
    )


def test_registry_with_unknown_point_is_a_bug() -> None:
    with pytest.raises(ValueError, match="Filter"):
        parse_config(None, registry={**REGISTRY, "Bad": spec("Filter")})


# -- extenders ----------------------------------------------------------------


def test_extenders() -> None:
    c = load(
        """
        extenders:
        - urlPrefix: https://ext.example:8443/scheduler
          filterVerb: filter
          prioritizeVerb: prioritize
          preemptVerb: preempt
          bindVerb: bind
          weight: 3
          enableHTTPS: true
          tlsConfig:
            insecure: false
            serverName: ext.example
            caFile: /ca.pem
            caData: aGVsbG8=
          httpTimeout: 1m
          nodeCacheCapable: true
          managedResources:
          - {name: example.com/gpu, ignoredByScheduler: true}
          ignorable: true
        - urlPrefix: http://other
        """
    )
    first, second = c.extenders
    assert first.url_prefix == "https://ext.example:8443/scheduler"
    assert (first.filter_verb, first.prioritize_verb, first.preempt_verb, first.bind_verb) == (
        "filter",
        "prioritize",
        "preempt",
        "bind",
    )
    assert first.weight == 3
    assert first.enable_https and first.node_cache_capable and first.ignorable
    assert first.tls_config is not None
    assert first.tls_config.server_name == "ext.example"
    assert first.tls_config.ca_data == b"hello"
    assert first.http_timeout == 60.0
    assert first.managed_resources[0].name == "example.com/gpu"
    assert first.managed_resources[0].ignored_by_scheduler is True
    assert second.http_timeout == 5.0
    assert second.tls_config is None
    assert second.weight == 0


# -- the Fields helper --------------------------------------------------------


def test_fields_helper() -> None:
    f = Fields({"a": 1, "b": [{"c": "x"}, {"c": "y"}], "s": ["p", "q"], "o": None}, "root")
    assert f.integer("a", 0) == 1
    assert [g.string("c") for g in f.objects("b")] == ["x", "y"]
    assert f.strings("s") == ("p", "q")
    assert f.obj("o").path == "root.o"
    assert f.integer("missing", 7) == 7
    f.done()
    g = Fields({"a": 1, "extra": 2}, "")
    g.integer("a", 0)
    with pytest.raises(ConfigError) as info:
        g.done()
    assert str(info.value) == "extra: unknown field"
    with pytest.raises(ConfigError) as info:
        Fields({"s": ["p", 3]}, "x").strings("s")
    assert str(info.value) == "x.s[1]: expected string, got integer 3"
    with pytest.raises(ConfigError) as info:
        Fields({1: "x"}, "m")
    assert str(info.value) == "m: field names must be strings, got integer 1"


def test_config_error_under() -> None:
    assert str(ConfigError("a.b", "bad").under("p[0].args")) == "p[0].args.a.b: bad"
    assert str(ConfigError("[1].c", "bad").under("p.list")) == "p.list[1].c: bad"
    assert str(ConfigError("", "bad").under("p")) == "p: bad"


def test_yaml_dates_stay_strings() -> None:
    c = load("profiles:\n- schedulerName: 2024-01-01\n")
    assert c.profiles[0].scheduler_name == "2024-01-01"


def test_json_is_yaml() -> None:
    text = (
        '{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",'
        ' "profiles": [{"schedulerName": "json"}]}'
    )
    assert load_config(text, registry=REGISTRY).profiles[0].scheduler_name == "json"
