"""Differential scenarios: the real kube-scheduler and kscheduler on the same cluster.

One test per tests/scenarios/*.yaml. Each plays the scenario through both
schedulers on fresh state of the session control plane and asserts that

- the reference meets the scenario's own expectations (else the scenario is
  wrong, and the test fails whatever ``knownDifference`` says);
- kscheduler agrees with the reference and meets the same expectations.

A scenario marked ``knownDifference: "<reason>"`` is expected to differ: the
test xfails while it does and fails as soon as it agrees (strict), so the
marker is removed together with the bug.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kscheduler.controlplane.harness import ControlPlane
from kscheduler.difftest import Scenario, format_result, load_scenario, run_scenario

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
SCENARIO_FILES = sorted(SCENARIO_DIR.glob("*.yaml"))


def test_there_are_scenarios() -> None:
    assert SCENARIO_FILES, f"no scenarios in {SCENARIO_DIR}"


@pytest.fixture(params=SCENARIO_FILES, ids=lambda p: p.stem)
def scenario(request: pytest.FixtureRequest) -> Scenario:
    path: Path = request.param
    return load_scenario(path)


async def test_scenario(control_plane: ControlPlane, scenario: Scenario) -> None:
    result = await run_scenario(control_plane, scenario)
    report = format_result(result, verbose=True)
    assert not result.reference_failures, (
        f"the reference kube-scheduler breaks the scenario's own expectations "
        f"(fix the scenario):\n{report}"
    )
    if scenario.known_difference:
        if result.ok:
            pytest.fail(
                f"known difference no longer seen; remove knownDifference from "
                f"{scenario.path}:\n{report}"
            )
        seen = [d.describe() for d in (*result.differences, *result.our_failures)]
        pytest.xfail("; ".join([scenario.known_difference, *seen]))
    assert result.ok, f"kscheduler differs from kube-scheduler:\n{report}"
