"""KubeSchedulerConfiguration v1: load, default, validate and resolve plugins.

``load_config`` reads the same YAML file kube-scheduler takes with ``--config``
(``apiVersion: kubescheduler.config.k8s.io/v1``, ``kind:
KubeSchedulerConfiguration``) into frozen dataclasses, with kube-scheduler's
defaults and validation. Two defaults differ on purpose, because kscheduler runs
*beside* kube-scheduler as a secondary scheduler:

- the single default profile is named :data:`DEFAULT_SCHEDULER_NAME`
  (``"kscheduler"``), not ``"default-scheduler"``;
- the leader-election Lease is named :data:`DEFAULT_LEASE_NAME`
  (``"kscheduler"``), not ``"kube-scheduler"``: two different schedulers
  contending for one Lease would take turns, each stopping the other.

Parsing is strict: an unknown field, a value of the wrong type or an invalid
value raises :class:`ConfigError` naming the field by its dotted path, e.g.
``profiles[0].plugins.score.enabled[1].weight: expected integer, got string "x"``.

Plugins are resolved per profile as kube-scheduler does it: the default plugin
set is the multiPoint list :data:`DEFAULT_MULTI_POINT`; the user's plugin sets are
merged into the defaults point by point (a re-configured default keeps its place,
new plugins are appended, ``disabled`` removes, ``"*"`` removes every default);
then each multiPoint plugin is placed at every extension point it implements,
after the plugins the user re-configured at that point and before the ones the
user added there. The config cannot know which points a plugin implements, so
the caller passes a registry of :class:`PluginSpec`. Plugin args are parsed by
the plugins themselves (``PluginSpec.parse_args``), defaults included.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

import yaml

from kscheduler.framework.args import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    ConfigError,
    Fields,
    describe,
    join_path,
)

API_GROUP = "kubescheduler.config.k8s.io"
API_VERSION = f"{API_GROUP}/v1"
KIND = "KubeSchedulerConfiguration"

DEFAULT_SCHEDULER_NAME = "kscheduler"
"""schedulerName of the default profile (used when the config has exactly one
profile that names none). kube-scheduler's is "default-scheduler"; kscheduler is a
secondary scheduler, so pods opt in with ``spec.schedulerName: kscheduler`` and
pods that name no scheduler stay with kube-scheduler."""

DEFAULT_LEASE_NAME = "kscheduler"
"""leaderElection.resourceName default. Never "kube-scheduler": sharing the
Lease with kube-scheduler would make the two schedulers fight over leadership."""

DEFAULT_LEASE_NAMESPACE = "kube-system"
"""leaderElection.resourceNamespace default, as upstream."""

DEFAULT_CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
"""clientConnection.contentType default, as upstream (kept for fidelity only)."""

DEFAULT_EXTENDER_HTTP_TIMEOUT = 5.0
"""Seconds an extender call may take when httpTimeout is unset or zero (upstream's
DefaultExtenderTimeout)."""

MAX_NODE_SCORE = 100
"""Highest score one plugin gives one node; a weighted sum must fit in int64."""

MAX_TOTAL_SCORE = INT64_MAX
"""Upper bound of the sum over score plugins of weight * MAX_NODE_SCORE."""

EXTENSION_POINTS: tuple[str, ...] = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)
"""Extension point names as spelled in the config (and in PluginSpec)."""

MULTI_POINT = "multiPoint"
"""The pseudo extension point that enables a plugin at every point it implements."""

_PLUGIN_SET_FIELDS: tuple[str, ...] = (*EXTENSION_POINTS, MULTI_POINT)
_ATTR = {p: re.sub(r"(?<!^)([A-Z])", r"_\1", p).lower() for p in _PLUGIN_SET_FIELDS}


class PluginSpec(Protocol):
    """What the config needs to know of a registered plugin."""

    @property
    def extension_points(self) -> frozenset[str]:
        """The extension points (names from EXTENSION_POINTS) the plugin implements."""
        ...

    @property
    def parse_args(self) -> Callable[[Mapping[str, Any]], object] | None:
        """Parse and validate the plugin's args (``{}`` gives the defaults); raise
        ConfigError with a path relative to the args object. None: no args."""
        ...


@dataclass(frozen=True, slots=True)
class PluginRef:
    """One ``{name, weight}`` entry of a plugin set, as written."""

    name: str
    weight: int | None = None
    """Only meaningful at score (and multiPoint, for plugins that score); unset or 0
    means 1 there, as upstream."""


DEFAULT_MULTI_POINT: tuple[PluginRef, ...] = (
    PluginRef("SchedulingGates"),
    PluginRef("PrioritySort"),
    PluginRef("NodeName"),
    PluginRef("NodeUnschedulable"),
    # Highest weight: a node's PreferNoSchedule taints are the admin's own wish.
    PluginRef("TaintToleration", 3),
    # Preferences the pod itself states outweigh the resource heuristics below.
    PluginRef("NodeAffinity", 2),
    PluginRef("NodePorts"),
    PluginRef("NodeResourcesFit", 1),
    PluginRef("VolumeRestrictions"),
    PluginRef("NodeVolumeLimits"),
    PluginRef("VolumeBinding"),
    PluginRef("VolumeZone"),
    PluginRef("PodTopologySpread", 2),
    PluginRef("InterPodAffinity", 2),
    PluginRef("DynamicResources", 2),
    PluginRef("DefaultPreemption"),
    PluginRef("NodeResourcesBalancedAllocation", 1),
    PluginRef("ImageLocality", 1),
    PluginRef("DefaultBinder"),
    PluginRef("NodeDeclaredFeatures"),
)
"""kube-scheduler's default profile (default_plugins.go), in order, with score
weights. DynamicResources sits right before DefaultPreemption, as upstream inserts
it when its feature gate is on (the default since 1.34); NodeDeclaredFeatures comes
last, as upstream appends it when its gate is on (GA and locked on in 1.37). Upstream's list also
names the removed in-tree volume-limit plugins; kscheduler does not."""

DEFAULT_PLUGIN_NAMES: frozenset[str] = frozenset(p.name for p in DEFAULT_MULTI_POINT)


@dataclass(frozen=True, slots=True)
class PluginSet:
    """``{enabled, disabled}`` for one extension point, as written."""

    enabled: tuple[PluginRef, ...] = ()
    """Empty: the defaults for this point are kept as they are."""
    disabled: tuple[str, ...] = ()
    """Names of default plugins to drop here; ``"*"`` drops them all."""


@dataclass(frozen=True, slots=True)
class Plugins:
    """A profile's ``plugins`` section, as written (before merging with defaults).

    Every field defaults to an empty set, which means "keep the defaults here".
    """

    pre_enqueue: PluginSet = PluginSet()
    queue_sort: PluginSet = PluginSet()
    pre_filter: PluginSet = PluginSet()
    filter: PluginSet = PluginSet()
    post_filter: PluginSet = PluginSet()
    pre_score: PluginSet = PluginSet()
    score: PluginSet = PluginSet()
    reserve: PluginSet = PluginSet()
    permit: PluginSet = PluginSet()
    pre_bind: PluginSet = PluginSet()
    bind: PluginSet = PluginSet()
    post_bind: PluginSet = PluginSet()
    multi_point: PluginSet = PluginSet()

    def get(self, point: str) -> PluginSet:
        """The set for ``point`` (a name from EXTENSION_POINTS, or "multiPoint")."""
        value: PluginSet = getattr(self, _ATTR[point])
        return value


class WeightedPlugin(NamedTuple):
    """A score plugin and the weight its scores are multiplied by."""

    name: str
    weight: int


@dataclass(frozen=True, slots=True)
class ResolvedPlugins:
    """The plugins that run at each extension point, in the order they run.

    Fields default to empty only so the type can be built by hand in tests; the
    loader always fills them (queue_sort has one plugin, bind at least one).
    """

    pre_enqueue: tuple[str, ...] = ()
    queue_sort: tuple[str, ...] = ()
    pre_filter: tuple[str, ...] = ()
    filter: tuple[str, ...] = ()
    post_filter: tuple[str, ...] = ()
    pre_score: tuple[str, ...] = ()
    score: tuple[WeightedPlugin, ...] = ()
    reserve: tuple[str, ...] = ()
    permit: tuple[str, ...] = ()
    pre_bind: tuple[str, ...] = ()
    bind: tuple[str, ...] = ()
    post_bind: tuple[str, ...] = ()

    def names(self, point: str) -> tuple[str, ...]:
        """Plugin names at ``point`` (a name from EXTENSION_POINTS), in order."""
        if point == "score":
            return tuple(p.name for p in self.score)
        value: tuple[str, ...] = getattr(self, _ATTR[point])
        return value

    def score_weights(self) -> dict[str, int]:
        return {p.name: p.weight for p in self.score}


@dataclass(frozen=True, slots=True)
class KubeSchedulerProfile:
    """One scheduling profile: the pods whose spec.schedulerName matches it."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    """Required and unique; defaults only when the config has a single profile."""
    percentage_of_nodes_to_score: int | None = None
    """None: use the global percentageOfNodesToScore (upstream semantics)."""
    plugins: ResolvedPlugins = ResolvedPlugins()
    """Defaults merged with the config, multiPoint expanded."""
    plugin_args: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    """Every plugin the profile instantiates -> its parsed args (None for plugins
    without args). Plugins without pluginConfig get their parse_args({}) defaults."""
    plugins_config: Plugins = Plugins()
    """The ``plugins`` section as written, for /configz and debugging."""


@dataclass(frozen=True, slots=True)
class LeaderElectionConfiguration:
    """``leaderElection``: the Lease that gates the scheduling loop."""

    leader_elect: bool = True
    """On by default, as upstream: running two replicas must be safe."""
    lease_duration: float = 15.0
    """Seconds a standby waits after the last renewal before taking over (upstream)."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps retrying a renewal before it gives up (upstream);
    must be below lease_duration so it stops before anyone else may start."""
    retry_period: float = 2.0
    """Seconds between acquire/renew attempts (upstream); client-go requires
    renew_deadline > 1.2 * retry_period (its retry jitter)."""
    resource_lock: str = "leases"
    """Only Lease objects are supported, as upstream since 1.28."""
    resource_name: str = DEFAULT_LEASE_NAME
    """"kscheduler", not upstream's "kube-scheduler": see DEFAULT_LEASE_NAME."""
    resource_namespace: str = DEFAULT_LEASE_NAMESPACE
    """kube-system, as upstream: where cluster components keep their Leases."""


@dataclass(frozen=True, slots=True)
class ClientConnectionConfiguration:
    """``clientConnection``: how to reach the API server."""

    kubeconfig: str = ""
    """Empty: in-cluster config, or the usual kubeconfig lookup (the CLI decides)."""
    qps: float = 50.0
    """Client-side request rate, upstream's scheduler default (50, not client-go's
    5): binds are one request each, so this caps throughput. Negative: no limit."""
    burst: int = 100
    """Requests allowed above qps in a burst; upstream's scheduler default."""
    content_type: str = DEFAULT_CONTENT_TYPE
    """Upstream's default; kscheduler's client always speaks JSON, kept for fidelity."""
    accept_content_types: str = ""
    """Empty: the client's own Accept header (JSON)."""


@dataclass(frozen=True, slots=True)
class ExtenderTLSConfig:
    """``extenders[].tlsConfig``; every field defaults to unset, as upstream."""

    insecure: bool = False
    """Skip server certificate verification: for tests only, so off."""
    server_name: str = ""
    """Empty: verify against the host name of urlPrefix."""
    cert_file: str = ""
    """Empty: no client certificate (the extender may not ask for one)."""
    key_file: str = ""
    """Empty: no client key, goes with cert_file."""
    ca_file: str = ""
    """Empty: trust the system CA bundle."""
    cert_data: bytes = b""
    """PEM (base64 in the YAML); empty: use cert_file. Wins over cert_file."""
    key_data: bytes = b""
    """PEM (base64 in the YAML); empty: use key_file. Wins over key_file."""
    ca_data: bytes = b""
    """PEM (base64 in the YAML); empty: use ca_file. Wins over ca_file."""


@dataclass(frozen=True, slots=True)
class ExtenderManagedResource:
    """An extended resource an extender manages."""

    name: str
    """Required: an extended resource name such as example.com/gpu."""
    ignored_by_scheduler: bool = False
    """False: NodeResourcesFit still checks the resource, as upstream."""


@dataclass(frozen=True, slots=True)
class Extender:
    """``extenders[]``: an HTTP scheduler extender, shared by all profiles."""

    url_prefix: str
    """Required: verbs are POSTed to {url_prefix}/{verb}."""
    filter_verb: str = ""
    """Empty: the extender does not filter (every verb is opt-in, as upstream)."""
    preempt_verb: str = ""
    """Empty: the extender is not consulted during preemption."""
    prioritize_verb: str = ""
    """Empty: the extender does not score nodes."""
    bind_verb: str = ""
    """Empty: DefaultBinder binds; at most one extender may bind."""
    weight: int = 0
    """Multiplier of prioritize scores; must be > 0 when prioritize_verb is set
    (upstream has no default for it)."""
    enable_https: bool = False
    """Plain HTTP unless asked, as upstream."""
    tls_config: ExtenderTLSConfig | None = None
    """None: default TLS settings when enable_https is set."""
    http_timeout: float = DEFAULT_EXTENDER_HTTP_TIMEOUT
    """Seconds per call; 5 s like upstream's extender client (zero means this)."""
    node_cache_capable: bool = False
    """False: send whole Node objects, as upstream."""
    managed_resources: tuple[ExtenderManagedResource, ...] = ()
    """Empty: every pod is sent to the extender."""
    ignorable: bool = False
    """False: an unreachable extender fails the scheduling attempt, as upstream."""


@dataclass(frozen=True, slots=True)
class KubeSchedulerConfiguration:
    """A loaded, defaulted and validated KubeSchedulerConfiguration."""

    api_version: str = API_VERSION
    """Only kubescheduler.config.k8s.io/v1 is read: the version kube-scheduler serves."""
    kind: str = KIND
    """Always KubeSchedulerConfiguration."""
    parallelism: int = 16
    """Concurrency of the filter/score loops upstream (16); must be > 0."""
    percentage_of_nodes_to_score: int = 0
    """0: adaptive (50% minus 1% per 125 nodes, at least 5%), as upstream."""
    pod_initial_backoff_seconds: int = 1
    """Backoff after a pod's first failed attempt, doubling per attempt (upstream)."""
    pod_max_backoff_seconds: int = 10
    """Backoff cap (upstream); must be >= pod_initial_backoff_seconds."""
    leader_election: LeaderElectionConfiguration = LeaderElectionConfiguration()
    """Upstream's defaults, except the Lease name (see DEFAULT_LEASE_NAME)."""
    client_connection: ClientConnectionConfiguration = ClientConnectionConfiguration()
    """Upstream's scheduler defaults (qps 50, burst 100)."""
    profiles: tuple[KubeSchedulerProfile, ...] = ()
    """Never empty once loaded: no profiles means one default profile."""
    extenders: tuple[Extender, ...] = ()
    """None by default, as upstream."""
    enable_profiling: bool = True
    """Upstream's default; accepted for compatibility, kscheduler serves no pprof."""
    enable_contention_profiling: bool = True
    """Upstream's default, which follows enable_profiling; accepted and unused."""
    delay_cache_until_active: bool = False
    """Upstream default: fill caches before winning the election, for fast failover."""
    healthz_bind_address: str | None = None
    """Deprecated upstream, accepted and ignored: kscheduler's serving address is a
    CLI flag. None: not given."""
    metrics_bind_address: str | None = None
    """Deprecated upstream, accepted and ignored, like healthz_bind_address."""

    def profile(self, scheduler_name: str) -> KubeSchedulerProfile | None:
        """The profile for pods with this spec.schedulerName, if any."""
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None


# ---------------------------------------------------------------------------
# Loading


def load_config(
    source: str | os.PathLike[str],
    *,
    registry: Mapping[str, PluginSpec],
    skip_missing_defaults: bool = True,
) -> KubeSchedulerConfiguration:
    """Load a KubeSchedulerConfiguration.

    ``source`` is a path (any ``os.PathLike``, e.g. ``pathlib.Path``) to read, or a
    ``str`` holding the YAML (or JSON) text itself. An empty document gives all
    defaults. ``registry`` maps plugin names to specs. With
    ``skip_missing_defaults`` (the default), plugins of DEFAULT_MULTI_POINT that are
    not in the registry are left out of the default set; without it they are an
    error. Raises ConfigError.
    """
    if isinstance(source, str):
        text = source
    else:
        name = os.fspath(source)
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError("", f"cannot read {name}: {e.strerror or e}") from e
        except UnicodeDecodeError as e:
            raise ConfigError("", f"cannot read {name}: not UTF-8 text ({e.reason})") from e
    return parse_config(
        _load_yaml(text), registry=registry, skip_missing_defaults=skip_missing_defaults
    )


def parse_config(
    raw: object,
    *,
    registry: Mapping[str, PluginSpec],
    skip_missing_defaults: bool = True,
) -> KubeSchedulerConfiguration:
    """Like load_config, from an already decoded document (None: empty)."""
    _check_registry(registry)
    if isinstance(raw, str):
        raise ConfigError(
            "",
            f"expected a {KIND} object, got {describe(raw)} (to read a file, pass a pathlib.Path)",
        )
    f = Fields(raw)
    if f.keys():
        api_version = f.optional_string("apiVersion")
        if api_version is None:
            raise f.error("apiVersion", f'required ("{API_VERSION}")')
        if api_version != API_VERSION:
            raise f.error(
                "apiVersion", f'unsupported "{api_version}": only "{API_VERSION}" is read'
            )
        kind = f.optional_string("kind")
        if kind is None:
            raise f.error("kind", f'required ("{KIND}")')
        if kind != KIND:
            raise f.error("kind", f'expected "{KIND}", got "{kind}"')

    parallelism = f.integer("parallelism", 16, minimum=INT32_MIN, maximum=INT32_MAX)
    if parallelism <= 0:
        raise f.error("parallelism", f"must be greater than 0, got {parallelism}")
    percentage = f.integer("percentageOfNodesToScore", 0, minimum=INT32_MIN, maximum=INT32_MAX)
    _check_percentage(f, "percentageOfNodesToScore", percentage)
    initial_backoff = f.integer("podInitialBackoffSeconds", 1)
    if initial_backoff <= 0:
        raise f.error("podInitialBackoffSeconds", f"must be greater than 0, got {initial_backoff}")
    max_backoff = f.integer("podMaxBackoffSeconds", 10)
    if max_backoff < initial_backoff:
        raise f.error(
            "podMaxBackoffSeconds",
            f"must be greater than or equal to podInitialBackoffSeconds ({initial_backoff}),"
            f" got {max_backoff}",
        )
    leader_election = _parse_leader_election(f.obj("leaderElection"))
    client_connection = _parse_client_connection(f.obj("clientConnection"))
    enable_profiling = f.boolean("enableProfiling", True)
    enable_contention_profiling = f.boolean("enableContentionProfiling", enable_profiling)
    delay_cache_until_active = f.boolean("delayCacheUntilActive", False)
    healthz_bind_address = f.optional_string("healthzBindAddress")
    metrics_bind_address = f.optional_string("metricsBindAddress")
    extenders = _parse_extenders(f)
    profile_items = f.items("profiles")
    f.done()

    profiles = _parse_profiles(profile_items, registry, skip_missing_defaults)
    return KubeSchedulerConfiguration(
        parallelism=parallelism,
        percentage_of_nodes_to_score=percentage,
        pod_initial_backoff_seconds=initial_backoff,
        pod_max_backoff_seconds=max_backoff,
        leader_election=leader_election,
        client_connection=client_connection,
        profiles=profiles,
        extenders=extenders,
        enable_profiling=enable_profiling,
        enable_contention_profiling=enable_contention_profiling,
        delay_cache_until_active=delay_cache_until_active,
        healthz_bind_address=healthz_bind_address,
        metrics_bind_address=metrics_bind_address,
    )


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and keeps timestamps as strings."""


# Go's YAML decoder hands dates to string fields as strings; so do we.
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):
            break  # construct_mapping reports it
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(text: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = e.problem or "invalid YAML"
        if e.context:
            what += f" ({e.context})"
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError("", f"YAML syntax error: {where}{what}") from None
    except yaml.YAMLError as e:
        raise ConfigError("", f"YAML syntax error: {e}") from None


def _check_registry(registry: Mapping[str, PluginSpec]) -> None:
    known = set(EXTENSION_POINTS)
    for name, spec in registry.items():
        unknown = set(spec.extension_points) - known
        if unknown:
            raise ValueError(f"plugin {name!r} lists unknown extension points {sorted(unknown)}")


def _check_percentage(f: Fields, name: str, value: int) -> None:
    if not 0 <= value <= 100:
        raise f.error(name, f"must be in the range 0..100, got {value}")


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


# ---------------------------------------------------------------------------
# Top-level sections


def _parse_leader_election(f: Fields) -> LeaderElectionConfiguration:
    d = LeaderElectionConfiguration()
    leader_elect = f.boolean("leaderElect", d.leader_elect)
    # As upstream, a zero duration or empty string means "unset".
    lease_duration = f.duration("leaseDuration", 0.0) or d.lease_duration
    renew_deadline = f.duration("renewDeadline", 0.0) or d.renew_deadline
    retry_period = f.duration("retryPeriod", 0.0) or d.retry_period
    resource_lock = f.string("resourceLock") or d.resource_lock
    resource_name = f.string("resourceName") or d.resource_name
    resource_namespace = f.string("resourceNamespace") or d.resource_namespace
    f.done()
    if leader_elect:
        # Upstream validates the timings only when leader election is on.
        for name, value in (
            ("leaseDuration", lease_duration),
            ("renewDeadline", renew_deadline),
            ("retryPeriod", retry_period),
        ):
            if value <= 0:
                raise f.error(name, f"must be greater than 0, got {_fmt_seconds(value)}")
        if lease_duration <= renew_deadline:
            raise f.error(
                "leaseDuration",
                f"must be greater than renewDeadline ({_fmt_seconds(renew_deadline)}),"
                f" got {_fmt_seconds(lease_duration)}",
            )
        if renew_deadline <= 1.2 * retry_period:
            raise f.error(
                "renewDeadline",
                f"must be greater than 1.2 x retryPeriod ({_fmt_seconds(retry_period)};"
                f" 1.2 is the retry jitter), got {_fmt_seconds(renew_deadline)}",
            )
        if resource_lock != "leases":
            raise f.error("resourceLock", f'must be "leases", got "{resource_lock}"')
    return LeaderElectionConfiguration(
        leader_elect=leader_elect,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        resource_lock=resource_lock,
        resource_name=resource_name,
        resource_namespace=resource_namespace,
    )


def _parse_client_connection(f: Fields) -> ClientConnectionConfiguration:
    d = ClientConnectionConfiguration()
    kubeconfig = f.string("kubeconfig")
    accept_content_types = f.string("acceptContentTypes")
    content_type = f.string("contentType") or d.content_type
    qps = f.number("qps", 0.0) or d.qps  # zero means unset, as upstream
    burst = f.integer("burst", 0, minimum=INT32_MIN, maximum=INT32_MAX)
    f.done()
    if burst < 0:
        raise f.error("burst", f"must be non-negative, got {burst}")
    return ClientConnectionConfiguration(
        kubeconfig=kubeconfig,
        qps=qps,
        burst=burst or d.burst,
        content_type=content_type,
        accept_content_types=accept_content_types,
    )


def _parse_extenders(top: Fields) -> tuple[Extender, ...]:
    extenders: list[Extender] = []
    binder: str | None = None
    managed_seen: dict[str, str] = {}
    for f in top.objects("extenders"):
        url_prefix = f.optional_string("urlPrefix")
        filter_verb = f.string("filterVerb")
        preempt_verb = f.string("preemptVerb")
        prioritize_verb = f.string("prioritizeVerb")
        bind_verb = f.string("bindVerb")
        weight = f.integer("weight", 0)
        enable_https = f.boolean("enableHTTPS", False)
        tls_fields = f.optional_obj("tlsConfig")
        tls_config = _parse_tls(tls_fields) if tls_fields is not None else None
        http_timeout = f.duration("httpTimeout", 0.0)
        node_cache_capable = f.boolean("nodeCacheCapable", False)
        managed: list[ExtenderManagedResource] = []
        for mf in f.objects("managedResources"):
            name = mf.optional_string("name")
            ignored = mf.boolean("ignoredByScheduler", False)
            mf.done()
            if not name:
                raise mf.error("name", "required")
            problem = _extended_resource_problem(name)
            if problem:
                raise mf.error("name", f'"{name}" {problem}')
            if name in managed_seen:
                raise mf.error(
                    "name", f'duplicate managed resource "{name}" (also at {managed_seen[name]})'
                )
            managed_seen[name] = mf.path
            managed.append(ExtenderManagedResource(name=name, ignored_by_scheduler=ignored))
        ignorable = f.boolean("ignorable", False)
        f.done()
        if not url_prefix:
            raise f.error("urlPrefix", "required")
        if prioritize_verb and weight <= 0:
            raise f.error("weight", f"must be positive when prioritizeVerb is set, got {weight}")
        if http_timeout < 0:
            raise f.error("httpTimeout", f"must not be negative, got {_fmt_seconds(http_timeout)}")
        if bind_verb:
            if binder is not None:
                raise f.error("bindVerb", f"only one extender can implement bind ({binder} does)")
            binder = f.path
        extenders.append(
            Extender(
                url_prefix=url_prefix,
                filter_verb=filter_verb,
                preempt_verb=preempt_verb,
                prioritize_verb=prioritize_verb,
                bind_verb=bind_verb,
                weight=weight,
                enable_https=enable_https,
                tls_config=tls_config,
                http_timeout=http_timeout or DEFAULT_EXTENDER_HTTP_TIMEOUT,
                node_cache_capable=node_cache_capable,
                managed_resources=tuple(managed),
                ignorable=ignorable,
            )
        )
    return tuple(extenders)


def _parse_tls(f: Fields) -> ExtenderTLSConfig:
    def data(name: str) -> bytes:
        text = f.string(name)
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise f.error(name, "expected base64-encoded data") from None

    tls = ExtenderTLSConfig(
        insecure=f.boolean("insecure", False),
        server_name=f.string("serverName"),
        cert_file=f.string("certFile"),
        key_file=f.string("keyFile"),
        ca_file=f.string("caFile"),
        cert_data=data("certData"),
        key_data=data("keyData"),
        ca_data=data("caData"),
    )
    f.done()
    return tls


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _extended_resource_problem(name: str) -> str | None:
    """Why ``name`` is not an extended resource name (as upstream checks), or None."""
    prefix, slash, short = name.partition("/")
    if not slash:
        return "is not an extended resource name: it needs a domain prefix (example.com/foo)"
    if "/" in short or not short or len(short) > 63 or not _QUALIFIED_NAME_PART.fullmatch(short):
        return "is not a valid qualified name"
    # Upstream checks the quota form "requests.<name>" too, hence the 9 characters.
    if len(prefix) > 253 - len("requests.") or not _DNS_SUBDOMAIN.fullmatch(prefix):
        return "has an invalid prefix: it must be a DNS subdomain"
    if "kubernetes.io/" in name or name.startswith("requests."):
        return "is not an extended resource name: that prefix is reserved"
    return None


# ---------------------------------------------------------------------------
# Profiles and plugins


@dataclass(slots=True)
class _Entry:
    """An enabled plugin during merging; path is None for a built-in default."""

    name: str
    weight: int | None
    path: str | None


@dataclass(slots=True)
class _UserSet:
    enabled: list[_Entry]
    disabled: list[str]


def _parse_profiles(
    items: list[tuple[str, Any]],
    registry: Mapping[str, PluginSpec],
    skip_missing_defaults: bool,
) -> tuple[KubeSchedulerProfile, ...]:
    if not items:
        items = [("profiles[0]", {})]
    profiles: list[KubeSchedulerProfile] = []
    names: dict[str, str] = {}
    for path, raw in items:
        f = Fields(raw, path)
        profile = _parse_profile(f, registry, skip_missing_defaults, single=len(items) == 1)
        if profile.scheduler_name in names:
            raise f.error(
                "schedulerName",
                f'duplicate scheduler name "{profile.scheduler_name}"'
                f" (also used by {names[profile.scheduler_name]})",
            )
        names[profile.scheduler_name] = path
        profiles.append(profile)
    _check_common_queue_sort(items, profiles)
    return tuple(profiles)


def _check_common_queue_sort(
    items: list[tuple[str, Any]], profiles: list[KubeSchedulerProfile]
) -> None:
    # The queue is shared by all profiles, so they must order pods the same way.
    first = profiles[0]
    (sort_name,) = first.plugins.queue_sort
    for (path, _), p in zip(items[1:], profiles[1:], strict=True):
        (name,) = p.plugins.queue_sort
        if name != sort_name:
            raise ConfigError(
                join_path(path, "plugins.queueSort"),
                f'must be the same for all profiles: "{name}" here, "{sort_name}" in {items[0][0]}',
            )
        if p.plugin_args.get(name) != first.plugin_args.get(name):
            raise ConfigError(
                join_path(path, "pluginConfig"),
                f'args of queueSort plugin "{name}" must be the same for all profiles',
            )


def _parse_profile(
    f: Fields,
    registry: Mapping[str, PluginSpec],
    skip_missing_defaults: bool,
    *,
    single: bool,
) -> KubeSchedulerProfile:
    name = f.optional_string("schedulerName")
    if name is None and single:
        name = DEFAULT_SCHEDULER_NAME
    if not name:
        raise f.error("schedulerName", "required")
    percentage = f.optional_integer(
        "percentageOfNodesToScore", minimum=INT32_MIN, maximum=INT32_MAX
    )
    if percentage is not None:
        _check_percentage(f, "percentageOfNodesToScore", percentage)
    plugins_f = f.obj("plugins")
    user_sets = {
        point: _parse_plugin_set(plugins_f.obj(point), registry) for point in _PLUGIN_SET_FIELDS
    }
    plugins_f.done()
    config_args = _parse_plugin_config(f.items("pluginConfig"), registry, skip_missing_defaults)
    f.done()

    defaults = [
        _Entry(p.name, p.weight, None)
        for p in DEFAULT_MULTI_POINT
        if p.name in registry or not skip_missing_defaults
    ]
    merged = {
        point: _merge(defaults if point == MULTI_POINT else [], user_sets[point])
        for point in _PLUGIN_SET_FIELDS
    }
    multi_enabled, _ = merged[MULTI_POINT]
    for e in multi_enabled:
        if e.name not in registry:  # only built-in defaults can get here
            raise ConfigError(
                join_path(plugins_f.path, MULTI_POINT),
                f'default plugin "{e.name}" is not registered',
            )
    resolved = _expand(plugins_f.path, merged, registry)
    plugin_args = _plugin_args(f.path, merged, config_args, registry)
    return KubeSchedulerProfile(
        scheduler_name=name,
        percentage_of_nodes_to_score=percentage,
        plugins=resolved,
        plugin_args=MappingProxyType(plugin_args),
        plugins_config=Plugins(
            **{
                _ATTR[point]: PluginSet(
                    enabled=tuple(PluginRef(e.name, e.weight) for e in s.enabled),
                    disabled=tuple(s.disabled),
                )
                for point, s in user_sets.items()
            }
        ),
    )


def _parse_plugin_set(f: Fields, registry: Mapping[str, PluginSpec]) -> _UserSet:
    enabled: list[_Entry] = []
    first_seen: dict[str, str] = {}
    for ef in f.objects("enabled"):
        name = ef.optional_string("name")
        weight = ef.optional_integer("weight", minimum=INT32_MIN, maximum=INT32_MAX)
        ef.done()
        if not name:
            raise ef.error("name", "required")
        if name not in registry:
            raise ef.error("name", f'unknown plugin "{name}"')
        if name in first_seen:
            raise ef.error("name", f'plugin "{name}" is already enabled at {first_seen[name]}')
        if weight is not None and weight < 0:
            raise ef.error("weight", f"must be positive (unset or 0 means 1), got {weight}")
        first_seen[name] = ef.path
        enabled.append(_Entry(name, weight, ef.path))
    disabled: list[str] = []
    for df in f.objects("disabled"):
        name = df.optional_string("name")
        df.optional_integer("weight")  # allowed by the schema, meaningless here
        df.done()
        if not name:
            raise df.error("name", "required")
        # Disabling a default kscheduler does not implement yet is a harmless no-op.
        if name != "*" and name not in registry and name not in DEFAULT_PLUGIN_NAMES:
            raise df.error("name", f'unknown plugin "{name}"')
        disabled.append(name)
    f.done()
    return _UserSet(enabled, disabled)


def _parse_plugin_config(
    items: list[tuple[str, Any]],
    registry: Mapping[str, PluginSpec],
    skip_missing_defaults: bool,
) -> dict[str, tuple[str, dict[str, Any]]]:
    """pluginConfig -> {plugin name: (path of its args, args without apiVersion/kind)}."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    first_seen: dict[str, str] = {}
    for path, raw in items:
        f = Fields(raw, path)
        name = f.optional_string("name")
        args_raw = f.raw("args")
        f.done()
        if not name:
            raise f.error("name", "required")
        if name in first_seen:
            raise f.error(
                "name", f'duplicate pluginConfig for "{name}" (first at {first_seen[name]})'
            )
        first_seen[name] = path
        if name not in registry:
            if skip_missing_defaults and name in DEFAULT_PLUGIN_NAMES:
                continue  # args for a default plugin kscheduler does not implement yet
            raise f.error("name", f'unknown plugin "{name}"')
        args = Fields(args_raw, f.child("args"))
        # Args may carry their own type meta, as in kube-scheduler's examples.
        api_version = args.optional_string("apiVersion")
        if api_version is not None and api_version != API_VERSION:
            raise args.error("apiVersion", f'expected "{API_VERSION}", got "{api_version}"')
        kind = args.optional_string("kind")
        if kind is not None and kind != f"{name}Args":
            raise args.error("kind", f'expected "{name}Args" for plugin "{name}", got "{kind}"')
        body = {k: v for k, v in (args_raw or {}).items() if k not in ("apiVersion", "kind")}
        out[name] = (args.path, body)
    return out


def _merge(defaults: list[_Entry], user: _UserSet) -> tuple[list[_Entry], frozenset[str]]:
    """Merge one point's user set into its defaults; returns (enabled, disabled).

    Upstream's rules: unless "*" is disabled, defaults keep their order, minus the
    disabled ones, a default the user enables again is replaced in place by the
    user's entry (its weight wins); the user's other plugins follow, in order.
    """
    disabled = frozenset(user.disabled)
    by_name = {e.name: e for e in user.enabled}
    replaced: set[str] = set()
    enabled: list[_Entry] = []
    if "*" not in disabled:
        for d in defaults:
            if d.name in disabled:
                continue
            if d.name in by_name:
                enabled.append(by_name[d.name])
                replaced.add(d.name)
            else:
                enabled.append(d)
    enabled.extend(e for e in user.enabled if e.name not in replaced)
    return enabled, disabled


def _expand(
    plugins_path: str,
    merged: Mapping[str, tuple[list[_Entry], frozenset[str]]],
    registry: Mapping[str, PluginSpec],
) -> ResolvedPlugins:
    """Place multiPoint plugins at the points they implement (upstream's order)."""
    multi, _ = merged[MULTI_POINT]
    lists: dict[str, list[str]] = {}
    for point in EXTENSION_POINTS:
        explicit, disabled = merged[point]
        for e in explicit:  # user entries: only multiPoint has defaults
            if point not in registry[e.name].extension_points:
                raise ConfigError(
                    join_path(e.path or join_path(plugins_path, point), "name"),
                    f'plugin "{e.name}" does not implement {point}',
                )
        names = [e.name for e in explicit]
        if "*" in disabled:
            lists[point] = names
            continue
        explicit_names = set(names)
        overridden: set[str] = set()
        from_multi: list[str] = []
        for e in multi:
            if point not in registry[e.name].extension_points or e.name in disabled:
                continue
            if e.name in explicit_names:
                overridden.add(e.name)  # the point's own entry wins over multiPoint
            else:
                from_multi.append(e.name)
        lists[point] = (
            [n for n in names if n in overridden]
            + from_multi
            + [n for n in names if n not in overridden]
        )

    queue_sort = lists["queueSort"]
    if len(queue_sort) != 1:
        raise ConfigError(
            join_path(plugins_path, "queueSort"),
            f"exactly one queueSort plugin is required, got {len(queue_sort)}"
            + (f" ({', '.join(queue_sort)})" if queue_sort else ""),
        )
    if not lists["bind"]:
        raise ConfigError(join_path(plugins_path, "bind"), "at least one bind plugin is required")

    # Weights: the score point's own entry first, then multiPoint; unset or 0 is 1.
    score_explicit, _ = merged["score"]
    weights: dict[str, int] = {}
    for e in [*score_explicit, *multi]:
        if e.name not in weights:
            weights[e.name] = e.weight or 1
    score: list[WeightedPlugin] = []
    total = 0
    for name in lists["score"]:
        weight = weights[name]
        if weight * MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
            raise ConfigError(
                join_path(plugins_path, "score"), "total score of score plugins could overflow"
            )
        total += weight * MAX_NODE_SCORE
        score.append(WeightedPlugin(name, weight))

    kwargs: dict[str, Any] = {_ATTR[p]: tuple(lists[p]) for p in EXTENSION_POINTS}
    kwargs["score"] = tuple(score)
    return ResolvedPlugins(**kwargs)


def _plugin_args(
    profile_path: str,
    merged: Mapping[str, tuple[list[_Entry], frozenset[str]]],
    config_args: Mapping[str, tuple[str, dict[str, Any]]],
    registry: Mapping[str, PluginSpec],
) -> dict[str, object]:
    """Parse args for every plugin the profile instantiates (and validate the rest).

    As upstream, a plugin is instantiated when any merged set enables it, even if
    it ends up disabled at every point it implements.
    """
    needed: list[str] = []
    for point in (MULTI_POINT, *EXTENSION_POINTS):
        enabled, _ = merged[point]
        needed.extend(e.name for e in enabled if e.name not in needed)
    out: dict[str, object] = {}
    for name in _unique([*needed, *config_args]):
        parse = registry[name].parse_args
        if name in config_args:
            path, body = config_args[name]
            if parse is None:
                if body:
                    raise ConfigError(path, f'plugin "{name}" takes no args')
                args: object = None
            else:
                try:
                    args = parse(body)
                except ConfigError as e:
                    raise e.under(path) from None
        elif parse is None:
            args = None
        else:
            try:
                args = parse({})
            except ConfigError as e:
                raise ConfigError(
                    join_path(profile_path, "pluginConfig"),
                    f'default args of plugin "{name}" are invalid: {e}',
                ) from None
        if name in needed:
            out[name] = args
    return out


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


__all__ = [
    "API_VERSION",
    "DEFAULT_LEASE_NAME",
    "DEFAULT_MULTI_POINT",
    "DEFAULT_PLUGIN_NAMES",
    "DEFAULT_SCHEDULER_NAME",
    "EXTENSION_POINTS",
    "KIND",
    "MULTI_POINT",
    "ClientConnectionConfiguration",
    "ConfigError",
    "Extender",
    "ExtenderManagedResource",
    "ExtenderTLSConfig",
    "KubeSchedulerConfiguration",
    "KubeSchedulerProfile",
    "LeaderElectionConfiguration",
    "PluginRef",
    "PluginSet",
    "PluginSpec",
    "Plugins",
    "ResolvedPlugins",
    "WeightedPlugin",
    "load_config",
    "parse_config",
]
