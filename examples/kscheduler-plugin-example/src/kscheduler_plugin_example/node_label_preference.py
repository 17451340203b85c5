"""NodeLabelPreference: a Score plugin that prefers nodes by the value of one label.

Enable it like any in-tree plugin, once this package is installed::

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
          label: example.com/disk      # the node label to look at (required)
          scores:                      # label value -> score in 0..100 (at least one)
            ssd: 100
            hdd: 20
          defaultScore: 0              # nodes without the label or with another value

The plugin only scores: it never rejects a node, so a pod still goes to an
unlisted node when no listed one fits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kscheduler.framework import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    CycleState,
    Handle,
    NodeInfo,
    PluginEntry,
    PodInfo,
    Status,
)
from kscheduler.framework.args import ConfigError, Fields

NAME = "NodeLabelPreference"

_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True, slots=True)
class NodeLabelPreferenceArgs:
    #: The node label whose value decides the score.
    label: str
    #: Label value -> score (0..100).
    scores: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: Score of nodes without the label, or with a value not in ``scores``.
    default_score: int = MIN_NODE_SCORE


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key ([prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return "the prefix must be a DNS subdomain (e.g. example.com)"
    if not name or len(name) > 63 or not _NAME_PART.fullmatch(name):
        return (
            "the name must be 1-63 characters, alphanumeric, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def parse_args(raw: Mapping[str, Any]) -> NodeLabelPreferenceArgs:
    """Validate the plugin's ``pluginConfig`` args; errors name the field."""
    f = Fields(raw)
    label = f.required_string("label")
    problem = label_key_problem(label)
    if problem:
        raise f.error("label", f"invalid label key {label!r}: {problem}")
    scores_f = f.obj("scores")
    scores: dict[str, int] = {}
    label_values = scores_f.keys()  # a Fields reader, not a dict
    for value in label_values:
        if len(value) > 63 or (value and not _NAME_PART.fullmatch(value)):
            raise scores_f.error(value, "not a valid label value")
        scores[value] = scores_f.integer(value, 0, minimum=MIN_NODE_SCORE, maximum=MAX_NODE_SCORE)
    scores_f.done()
    if not scores:
        raise f.error("scores", "required: at least one label value and its score")
    default = f.integer(
        "defaultScore", MIN_NODE_SCORE, minimum=MIN_NODE_SCORE, maximum=MAX_NODE_SCORE
    )
    f.done()
    return NodeLabelPreferenceArgs(label, MappingProxyType(scores), default)


class NodeLabelPreference:
    name = NAME

    def __init__(self, args: NodeLabelPreferenceArgs) -> None:
        self.args = args

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeLabelPreference:
        if not isinstance(args, NodeLabelPreferenceArgs):
            # enabled without pluginConfig: the framework passes parse_args({}), which
            # fails on the missing label; this only guards direct construction
            raise ConfigError("", f"plugin {NAME} needs args (label, scores)")
        return cls(args)

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """The score listed for the node's label value, else defaultScore (never fails)."""
        value = node_info.labels.get(self.args.label)
        if value is None:
            return self.args.default_score, None
        return self.args.scores.get(value, self.args.default_score), None


ENTRY = PluginEntry(NAME, NodeLabelPreference, NodeLabelPreference.new, parse_args)
