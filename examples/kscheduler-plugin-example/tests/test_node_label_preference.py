"""NodeLabelPreference on its own, and as kscheduler sees it once this package is installed."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kscheduler.config import ConfigError, load_config
from kscheduler.framework import CycleState, NodeInfo
from kscheduler.framework.parse import parse_node, parse_pod
from kscheduler.plugins import ENTRY_POINT_GROUP, full_registry

from kscheduler_plugin_example import ENTRY, NAME, NodeLabelPreference, parse_args

POD = parse_pod({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": {}})


def node(name: str, **labels: str) -> NodeInfo:
    rec = parse_node({"metadata": {"name": name, "labels": labels}, "status": {}})
    return NodeInfo(rec.name, rec)


# ---- args ---------------------------------------------------------------------------------


def test_args() -> None:
    args = parse_args({"label": "example.com/disk", "scores": {"ssd": 100, "hdd": 20}})
    assert args.label == "example.com/disk"
    assert dict(args.scores) == {"ssd": 100, "hdd": 20}
    assert args.default_score == 0
    assert parse_args({"label": "tier", "scores": {"": 5}, "defaultScore": 50}).default_score == 50


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ({}, "label: required"),
        ({"label": "a/b/c", "scores": {"x": 1}}, "label: invalid label key 'a/b/c'"),
        ({"label": "-bad", "scores": {"x": 1}}, "label: invalid label key '-bad'"),
        ({"label": "disk"}, "scores: required: at least one label value and its score"),
        ({"label": "disk", "scores": {"ssd": 150}}, "scores.ssd: must be at most 100, got 150"),
        (
            {"label": "disk", "scores": {"ssd": "high"}},
            'scores.ssd: expected integer, got string "high"',
        ),
        ({"label": "disk", "scores": {"a b": 1}}, "scores.a b: not a valid label value"),
        (
            {"label": "disk", "scores": {"x": 1}, "defaultScore": -1},
            "defaultScore: must be at least 0",
        ),
        ({"label": "disk", "scores": {"x": 1}, "weight": 2}, "weight: unknown field"),
    ],
)
def test_bad_args_name_the_field(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_args(raw)
    assert str(ei.value).startswith(error), str(ei.value)


# ---- scoring ------------------------------------------------------------------------------


def test_score_by_label_value() -> None:
    plugin = NodeLabelPreference(
        parse_args({"label": "disk", "scores": {"ssd": 100, "hdd": 20}, "defaultScore": 5})
    )
    state = CycleState()
    got = {
        ni.name: plugin.score(state, POD, ni)
        for ni in (
            node("fast", disk="ssd"),
            node("slow", disk="hdd"),
            node("odd", disk="tape"),
            node("bare"),
        )
    }
    assert got == {"fast": (100, None), "slow": (20, None), "odd": (5, None), "bare": (5, None)}


# ---- as an installed plugin -------------------------------------------------------------------


def test_registered_through_the_entry_point() -> None:
    (ep,) = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=NAME)
    assert ep.load() is ENTRY
    assert ep.dist is not None and ep.dist.name == "kscheduler-plugin-example"
    registry = full_registry()
    assert registry[NAME] is ENTRY
    assert registry[NAME].extension_points == frozenset({"score"})


CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: kscheduler
  plugins:
    score:
      enabled:
      - name: NodeLabelPreference
        weight: 3
  pluginConfig:
  - name: NodeLabelPreference
    args:
      label: example.com/disk
      scores: {ssd: 100, hdd: %s}
"""


def test_enabled_and_configured_like_an_in_tree_plugin() -> None:
    cfg = load_config(CONFIG % 20, registry=full_registry())
    (profile,) = cfg.profiles
    assert dict(profile.plugins.score_weights())[NAME] == 3
    args: Any = profile.plugin_args[NAME]
    assert dict(args.scores) == {"ssd": 100, "hdd": 20}
    with pytest.raises(ConfigError) as ei:
        load_config(CONFIG % 500, registry=full_registry())
    assert (
        str(ei.value) == "profiles[0].pluginConfig[0].args.scores.hdd: must be at most 100, got 500"
    )


def test_kscheduler_rejects_a_bad_config_for_it_at_startup(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CONFIG % "lots")
    done = subprocess.run(
        [sys.executable, "-m", "kscheduler", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        'profiles[0].pluginConfig[0].args.scores.hdd: expected integer, got string "lots"'
        in done.stderr
    )
