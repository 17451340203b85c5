"""Randomized differential test: generated clusters and pods through the reference
kube-scheduler and kscheduler (see :mod:`kscheduler.randomdiff`).

A few seeds run with ``make test``; ``make random-diff`` (marker ``slow``) runs
many more. A failure names its seed; replay it with
``python -m kscheduler.randomdiff --seed N -v`` or here with
``KSCHEDULER_RANDOM_SEEDS=N pytest tests/integration/test_random_differential.py``.
"""

from __future__ import annotations

import os

import pytest

from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from kscheduler.randomdiff import CaseRunner, generate, parse_seeds

FAST_SEEDS = [1, 2, 3, 4]
SLOW_SEEDS = list(range(100, 140))
_REPLAY = os.environ.get("KSCHEDULER_RANDOM_SEEDS", "")


async def _play(control_plane: ControlPlane, rest: RestClient, seed: int) -> None:
    result = await CaseRunner(control_plane, rest).run(generate(seed))
    print(result.report(verbose=True))
    # the case must have exercised both sides of the comparison
    assert result.pods, f"seed {seed}: no pod was played"
    assert result.ok, f"kscheduler differs from kube-scheduler:\n{result.report()}"


@pytest.mark.parametrize("seed", parse_seeds(_REPLAY) if _REPLAY else FAST_SEEDS)
async def test_random_seed(
    control_plane: ControlPlane, rest: RestClient, fresh_nodes: None, seed: int
) -> None:
    await _play(control_plane, rest, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
async def test_random_seed_slow(
    control_plane: ControlPlane, rest: RestClient, fresh_nodes: None, seed: int
) -> None:
    await _play(control_plane, rest, seed)
