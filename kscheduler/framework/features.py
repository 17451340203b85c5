"""Feature gates: upstream's gate names for the behaviours kscheduler implements.

Defaults are kube-scheduler v1.37's. ``--feature-gates`` sets them once at
startup, before anything is parsed or built (:func:`configure`); the code reads
the module-level :data:`GATES` per pod or per profile, never per node.

A gate kscheduler does not implement, or a locked gate set against its lock, is
refused (:class:`FeatureGateError`), never ignored. See docs/feature-gates.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SCHEDULER_POP_FROM_BACKOFF_Q = "SchedulerPopFromBackoffQ"
POD_LEVEL_RESOURCES = "PodLevelResources"
NOMINATED_NODE_NAME_FOR_EXPECTATION = "NominatedNodeNameForExpectation"
NODE_DECLARED_FEATURES = "NodeDeclaredFeatures"
SCHEDULER_ASYNC_PREEMPTION = "SchedulerAsyncPreemption"
VOLUME_LIMIT_SCALING = "VolumeLimitScaling"
OPPORTUNISTIC_BATCHING = "OpportunisticBatching"
STORAGE_CAPACITY_SCORING = "StorageCapacityScoring"
IN_PLACE_POD_VERTICAL_SCALING = "InPlacePodVerticalScaling"
IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING = "InPlacePodLevelResourcesVerticalScaling"
#: Beta in 1.37 and on only with --min-compatibility-version >= 1.37, so off by
#: default in a v1.37 kube-scheduler (whose minimum compatibility version is 1.36).
DRA_FRACTIONAL_CAPACITY_RANGE = "DRAFractionalCapacityRange"


@dataclass(frozen=True, slots=True)
class GateSpec:
    default: bool
    #: Upstream's stage in v1.37.
    stage: str
    #: The only value kscheduler accepts (a gate locked upstream, or one kscheduler
    #: implements only on); None: both values work.
    locked: bool | None = None
    #: Whether upstream locks it too (only the message differs).
    upstream_locked: bool = False


#: Every gate ``--feature-gates`` accepts, with v1.37's default.
KNOWN: Mapping[str, GateSpec] = {
    SCHEDULER_POP_FROM_BACKOFF_Q: GateSpec(True, "BETA"),
    POD_LEVEL_RESOURCES: GateSpec(True, "BETA"),
    NOMINATED_NODE_NAME_FOR_EXPECTATION: GateSpec(True, "BETA"),
    NODE_DECLARED_FEATURES: GateSpec(True, "GA", locked=True, upstream_locked=True),
    SCHEDULER_ASYNC_PREEMPTION: GateSpec(True, "BETA", locked=True),
    VOLUME_LIMIT_SCALING: GateSpec(True, "BETA"),
    OPPORTUNISTIC_BATCHING: GateSpec(True, "BETA"),
    STORAGE_CAPACITY_SCORING: GateSpec(True, "BETA"),
    IN_PLACE_POD_VERTICAL_SCALING: GateSpec(True, "GA", locked=True, upstream_locked=True),
    IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING: GateSpec(True, "BETA"),
    DRA_FRACTIONAL_CAPACITY_RANGE: GateSpec(False, "BETA"),
}

#: Gates that upstream refuses to enable while one they depend on is disabled
#: (v1.37's dependency table, for the gates in KNOWN).
DEPENDENCIES: Mapping[str, tuple[str, ...]] = {
    IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING: (
        IN_PLACE_POD_VERTICAL_SCALING,
        NODE_DECLARED_FEATURES,
        POD_LEVEL_RESOURCES,
    ),
}


#: kube-scheduler gates of v1.37 that kscheduler does not implement (named as such
#: in the error, rather than as unknown).
NOT_IMPLEMENTED = frozenset(
    {
        "GenericWorkload",
        "InPlacePodVerticalScalingSchedulerPreemption",
        "SchedulerAsyncAPICalls",
        "TaintTolerationComparisonOperators",
        "TopologyAwareWorkloadScheduling",
        "CompositePodGroup",
        "PodGroupPreemptionPolicy",
        "InterPodAffinityHostnameFastPath",
        "SchedulerPreQueueingHints",
        "ClearingNominatedNodeNameAfterBinding",
        "DynamicResourceAllocation",
        "DRAPrioritizedList",
        "DRAAdminAccess",
        "DRAExtendedResource",
        "DRADeviceTaints",
        "DRADeviceTaintRules",
        "DRAResourceClaimDeviceStatus",
        "DRAPartitionableDevices",
        "DRAConsumableCapacity",
        "DRADeviceBindingConditions",
        "DRASchedulerFilterTimeout",
        "DRAWorkloadResourceClaims",
    }
)


class FeatureGateError(ValueError):
    """A ``--feature-gates`` value kscheduler cannot honour; the message names the gate."""


@dataclass(slots=True)
class FeatureGates:
    pop_from_backoff_q: bool = True
    pod_level_resources: bool = True
    nominated_node_name_for_expectation: bool = True
    node_declared_features: bool = True
    volume_limit_scaling: bool = True
    opportunistic_batching: bool = True
    storage_capacity_scoring: bool = True
    in_place_pod_vertical_scaling: bool = True
    in_place_pod_level_resources_vertical_scaling: bool = True
    dra_fractional_capacity_range: bool = False

    def enabled(self, name: str) -> bool:
        return {
            SCHEDULER_POP_FROM_BACKOFF_Q: self.pop_from_backoff_q,
            POD_LEVEL_RESOURCES: self.pod_level_resources,
            NOMINATED_NODE_NAME_FOR_EXPECTATION: self.nominated_node_name_for_expectation,
            NODE_DECLARED_FEATURES: self.node_declared_features,
            VOLUME_LIMIT_SCALING: self.volume_limit_scaling,
            OPPORTUNISTIC_BATCHING: self.opportunistic_batching,
            STORAGE_CAPACITY_SCORING: self.storage_capacity_scoring,
            IN_PLACE_POD_VERTICAL_SCALING: self.in_place_pod_vertical_scaling,
            IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING: (
                self.in_place_pod_level_resources_vertical_scaling
            ),
            DRA_FRACTIONAL_CAPACITY_RANGE: self.dra_fractional_capacity_range,
        }.get(name, KNOWN[name].default if name in KNOWN else False)


#: The gates in force; set by :func:`configure`.
GATES = FeatureGates()

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_feature_gates(value: str) -> dict[str, bool]:
    """``Name=true,Other=false`` (upstream's syntax and boolean spellings) -> settings.

    Raises FeatureGateError naming the first gate that is malformed, unknown to
    kscheduler, or set against its lock, or a gate left enabled while one it
    depends on is disabled (:data:`DEPENDENCIES`)."""
    out: dict[str, bool] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep:
            raise FeatureGateError(f"missing bool value for {name}")
        raw = raw.strip()
        if raw in _TRUE:
            on = True
        elif raw in _FALSE:
            on = False
        else:
            raise FeatureGateError(f"invalid value of {name}={raw}, err: invalid syntax")
        spec = KNOWN.get(name)
        if spec is None:
            known = ", ".join(sorted(KNOWN))
            if name in NOT_IMPLEMENTED:
                raise FeatureGateError(
                    f"feature gate {name} is not implemented by kscheduler (it implements: {known})"
                )
            raise FeatureGateError(
                f"unrecognized feature gate: {name} (kscheduler implements: {known})"
            )
        if spec.locked is not None and on != spec.locked:
            value = str(spec.locked).lower()
            raise FeatureGateError(
                f"cannot set feature gate {name} to {str(on).lower()}, "
                + (
                    f"feature is locked to {value}"
                    if spec.upstream_locked
                    else f"kscheduler implements it only as {value}"
                )
            )
        out[name] = on
    for name, deps in DEPENDENCIES.items():
        if not out.get(name, KNOWN[name].default):
            continue
        off = [d for d in sorted(deps) if not out.get(d, KNOWN[d].default)]
        if off:
            raise FeatureGateError(
                f"{name} is enabled, but depends on features that are disabled: [{' '.join(off)}]"
            )
    return out


def gates_from(settings: Mapping[str, bool]) -> FeatureGates:
    """FeatureGates with v1.37's defaults overridden by ``settings``."""

    def get(name: str) -> bool:
        return settings.get(name, KNOWN[name].default)

    return FeatureGates(
        pop_from_backoff_q=get(SCHEDULER_POP_FROM_BACKOFF_Q),
        pod_level_resources=get(POD_LEVEL_RESOURCES),
        nominated_node_name_for_expectation=get(NOMINATED_NODE_NAME_FOR_EXPECTATION),
        node_declared_features=get(NODE_DECLARED_FEATURES),
        volume_limit_scaling=get(VOLUME_LIMIT_SCALING),
        opportunistic_batching=get(OPPORTUNISTIC_BATCHING),
        storage_capacity_scoring=get(STORAGE_CAPACITY_SCORING),
        in_place_pod_vertical_scaling=get(IN_PLACE_POD_VERTICAL_SCALING),
        in_place_pod_level_resources_vertical_scaling=get(
            IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING
        ),
        dra_fractional_capacity_range=get(DRA_FRACTIONAL_CAPACITY_RANGE),
    )


def configure(gates: FeatureGates) -> None:
    """Put ``gates`` in force (startup, before pods are parsed and profiles built).

    GATES is updated in place, so modules that imported it see the change."""
    for name in FeatureGates.__slots__:
        setattr(GATES, name, getattr(gates, name))
