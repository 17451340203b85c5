"""--feature-gates: upstream's syntax, v1.37's defaults, clear errors naming the gate."""

from __future__ import annotations

import pytest

from kscheduler.cli import main
from kscheduler.framework import features as ft


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", {}),
        ("SchedulerPopFromBackoffQ=false", {ft.SCHEDULER_POP_FROM_BACKOFF_Q: False}),
        (
            "PodLevelResources=False, NominatedNodeNameForExpectation=0,"
            "InPlacePodLevelResourcesVerticalScaling=false",
            {
                ft.POD_LEVEL_RESOURCES: False,
                ft.NOMINATED_NODE_NAME_FOR_EXPECTATION: False,
                ft.IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING: False,
            },
        ),
        ("InPlacePodVerticalScaling=true", {ft.IN_PLACE_POD_VERTICAL_SCALING: True}),
        (
            "InPlacePodLevelResourcesVerticalScaling=false",
            {ft.IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING: False},
        ),
        ("NodeDeclaredFeatures=true", {ft.NODE_DECLARED_FEATURES: True}),
        ("SchedulerAsyncPreemption=T", {ft.SCHEDULER_ASYNC_PREEMPTION: True}),
    ],
)
def test_parse(value: str, expected: dict[str, bool]) -> None:
    assert ft.parse_feature_gates(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Bogus=true", "unrecognized feature gate: Bogus"),
        (
            "InPlacePodVerticalScalingSchedulerPreemption=true",
            "feature gate InPlacePodVerticalScalingSchedulerPreemption is not implemented",
        ),
        (
            "InPlacePodVerticalScaling=false",
            "cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true",
        ),
        # upstream's dependency check: the in-place pod-level resize needs PodLevelResources
        (
            "PodLevelResources=false",
            r"InPlacePodLevelResourcesVerticalScaling is enabled, but depends on features "
            r"that are disabled: \[PodLevelResources\]",
        ),
        ("GenericWorkload=true", "feature gate GenericWorkload is not implemented"),
        ("PodLevelResources", "missing bool value for PodLevelResources"),
        ("PodLevelResources=yes", "invalid value of PodLevelResources=yes"),
        (
            "NodeDeclaredFeatures=false",
            "cannot set feature gate NodeDeclaredFeatures to false, feature is locked to true",
        ),
        (
            "SchedulerAsyncPreemption=false",
            "cannot set feature gate SchedulerAsyncPreemption to false, kscheduler implements",
        ),
    ],
)
def test_errors_name_the_gate(value: str, message: str) -> None:
    with pytest.raises(ft.FeatureGateError, match=message):
        ft.parse_feature_gates(value)


def test_defaults_are_v1_37s() -> None:
    g = ft.gates_from({})
    assert g == ft.FeatureGates()
    assert all(g.enabled(name) == spec.default for name, spec in ft.KNOWN.items())
    # on by default except DRAFractionalCapacityRange: its on-by-default entry needs
    # --min-compatibility-version 1.37, above a v1.37 kube-scheduler's default of 1.36
    off = {name for name, spec in ft.KNOWN.items() if not spec.default}
    assert off == {ft.DRA_FRACTIONAL_CAPACITY_RANGE}


def test_gates_from_overrides() -> None:
    g = ft.gates_from({ft.SCHEDULER_POP_FROM_BACKOFF_Q: False})
    assert not g.pop_from_backoff_q
    assert g.pod_level_resources


def test_configure_updates_in_place() -> None:
    gates = ft.GATES
    try:
        ft.configure(ft.gates_from({ft.POD_LEVEL_RESOURCES: False}))
        assert gates is ft.GATES and not gates.pod_level_resources
    finally:
        ft.configure(ft.FeatureGates())
    assert ft.GATES.pod_level_resources


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("--feature-gates=Bogus=true", "Bogus"),
        ("--feature-gates=InPlacePodVerticalScaling=false", "InPlacePodVerticalScaling"),
        ("--feature-gates=PodLevelResources=false", "InPlacePodLevelResourcesVerticalScaling"),
        ("--feature-gates=NodeDeclaredFeatures=false", "NodeDeclaredFeatures"),
    ],
)
def test_cli_exits_2_naming_the_gate(
    flag: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([flag]) == 2
    err = capsys.readouterr().err
    assert "--feature-gates" in err and named in err
