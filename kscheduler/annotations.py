"""Each attempt's results written on the pod as kube-scheduler-simulator annotations.

Opt-in per profile (``kscheduler --simulator-annotations PROFILE[,PROFILE]``), off
by default: anyone who may read the pod may read the annotations, which name every
node and why it was rejected. Tools built for kube-scheduler-simulator read a
live kscheduler through the same keys and JSON shapes as the simulator's
result store (values are JSON text, scores are decimal strings):

=======================================  ===============================================
``<prefix>prefilter-result-status``      ``{plugin: "success" | message}`` ("" = Skip)
``<prefix>filter-result``                ``{node: {plugin: "passed" | message}}``
``<prefix>prescore-result``              ``{plugin: "success" | message}`` ("" = Skip)
``<prefix>score-result``                 ``{node: {plugin: "raw score"}}``
``<prefix>finalscore-result``            ``{node: {plugin: "normalized x weight"}}``
``<prefix>selected-node``                the chosen node, "" when nothing fit
``<prefix>result-history``               JSON list of the earlier attempts' maps
=======================================  ===============================================

``<prefix>`` is ``kube-scheduler-simulator.sigs.k8s.io/``; simulators before late
2024 used ``scheduler-simulator/`` (:data:`LEGACY_PREFIX`). Filter stops at a
node's first failing plugin, so a rejected node lists the plugins that passed
before it and the one that failed. Only the nodes the attempt evaluated appear
(the daemon samples large clusters). ``prefilter-result`` (each PreFilter
plugin's node list) is not written: the framework keeps only their merge.

The annotations go through the pods/status subresource, which the scheduler's
RBAC already allows. An attempt whose results equal what the pod already carries
is not written again (a write is a pod update, which would requeue an
unschedulable pod); the history keeps the newest entries that fit the 256 KiB
annotation limit. When the results themselves do not fit, the per-node maps keep
the selected node, the best-scoring ones and a sample of rejected ones, and
``kscheduler/simulator-result-truncated`` says how many nodes were left out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import orjson

from kscheduler.algorithm import FilterRecord, FitError
from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.runtime import Framework
from kscheduler.framework.status import Status
from kscheduler.framework.types import PodInfo

PREFIX = "kube-scheduler-simulator.sigs.k8s.io/"
LEGACY_PREFIX = "scheduler-simulator/"

PREFILTER_STATUS = "prefilter-result-status"
FILTER = "filter-result"
PRESCORE = "prescore-result"
SCORE = "score-result"
FINAL_SCORE = "finalscore-result"
SELECTED_NODE = "selected-node"
HISTORY = "result-history"

PASSED = "passed"
SUCCESS = "success"

#: Set by kscheduler (not a simulator key) when the per-node maps had to be cut.
TRUNCATED_KEY = "kscheduler/simulator-result-truncated"

#: The apiserver's limit on the total size of a pod's annotations (keys + values).
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
#: Left free for annotations others add between our read and our write.
SIZE_MARGIN = 8 * 1024

#: State key under which Framework.run_score leaves plugin -> (raw, normalized)
#: score lists, in the order of the scored nodes, when ``state.record`` is set.
RECORD_SCORES_KEY = "RecordScores"


def recorded_scores(state: CycleState) -> Mapping[str, tuple[list[int], list[int]]]:
    """Raw and normalized scores per plugin recorded by the last run_score."""
    got = state.get(RECORD_SCORES_KEY)
    return got if isinstance(got, dict) else {}


def parse_profiles(text: str, known: Collection[str]) -> list[str]:
    """``PROFILE[,PROFILE]`` -> names; ValueError naming any unknown profile."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("expected PROFILE[,PROFILE]")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"no profile named {', '.join(unknown)} (profiles: {', '.join(sorted(known))})"
        )
    return names


class SimulatorAnnotations:
    """Decides per attempt whether to record detail, and builds the pod patch."""

    def __init__(self, profiles: Iterable[str], *, prefix: str = PREFIX) -> None:
        self.profiles = frozenset(profiles)
        self.prefix = prefix

    def begin(self, fwk: Framework, state: CycleState, pod: PodInfo) -> FilterRecord | None:
        """Before schedule_pod: a record to pass as ``record=`` when the profile opts in.

        A pod with a nominated node gets none: recording would bypass the
        algorithm's fast path that tries the nominated node alone.
        """
        if fwk.profile_name not in self.profiles or pod.nominated_node_name:
            return None
        state.record = True
        return FilterRecord()

    def patch(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        record: FilterRecord,
        *,
        selected: str = "",
        fit_error: FitError | None = None,
    ) -> dict[str, Any] | None:
        """The pods/status patch for this attempt, or None when nothing changed."""
        maps = _Maps.build(fwk, state, record, selected, fit_error)
        current = pod.annotations
        ours = {self.prefix + k for k in _KEYS} | {self.prefix + HISTORY, TRUNCATED_KEY}
        others = _size({k: v for k, v in current.items() if k not in ours})
        budget = TOTAL_ANNOTATION_SIZE_LIMIT - SIZE_MARGIN - others
        values = maps.encode(self.prefix, maps.nodes)
        nodes = maps.nodes
        while _size(values) > budget // 2 and len(nodes) > 1:
            nodes = nodes[: len(nodes) // 2]
            values = maps.encode(self.prefix, nodes)
            values[TRUNCATED_KEY] = (
                f"per-node results list {len(nodes)} of {len(maps.nodes)} evaluated nodes "
                "(annotation size limit)"
            )
        if all(current.get(k) == v for k, v in values.items()) and (
            TRUNCATED_KEY in values or TRUNCATED_KEY not in current
        ):
            return None
        history = _history(current.get(self.prefix + HISTORY))
        history.append(values)
        room = budget - _size(values) - len(self.prefix + HISTORY)
        encoded = _dumps(history)
        while len(encoded.encode()) > room and history:
            history.pop(0)
            encoded = _dumps(history)
        out: dict[str, Any] = dict(values)
        out[self.prefix + HISTORY] = encoded
        if TRUNCATED_KEY not in values and TRUNCATED_KEY in current:
            out[TRUNCATED_KEY] = None  # strategic merge: delete the stale marker
        return {"metadata": {"annotations": out}}


_KEYS = (PREFILTER_STATUS, FILTER, PRESCORE, SCORE, FINAL_SCORE, SELECTED_NODE)


class _Maps:
    """The attempt's results as the simulator's maps, before encoding."""

    __slots__ = ("filter", "final", "nodes", "prefilter", "prescore", "score", "selected")

    def __init__(self) -> None:
        self.prefilter: dict[str, str] = {}
        self.filter: dict[str, dict[str, str]] = {}
        self.prescore: dict[str, str] = {}
        self.score: dict[str, dict[str, str]] = {}
        self.final: dict[str, dict[str, str]] = {}
        self.selected = ""
        #: evaluated nodes, most interesting first (kept first when cutting for size)
        self.nodes: list[str] = []

    @classmethod
    def build(
        cls,
        fwk: Framework,
        state: CycleState,
        record: FilterRecord,
        selected: str,
        fit_error: FitError | None,
    ) -> _Maps:
        m = cls()
        m.selected = selected
        rejected: Status | None = None
        if fit_error is not None and fit_error.diagnosis.pre_filter_msg:
            rejected = fit_error.diagnosis.node_to_status.absent
        for name in (p.name for p in fwk.pre_filter_plugins):
            if rejected is not None and rejected.plugin == name:
                m.prefilter[name] = rejected.message
                break
            m.prefilter[name] = "" if name in state.skip_filter_plugins else SUCCESS

        filters = [p.name for p in fwk.filter_plugins if p.name not in state.skip_filter_plugins]
        for node, st in record.statuses.items():
            verdicts: dict[str, str] = {}
            for name in filters:
                if st is not None and name == st.plugin:
                    verdicts[name] = st.message
                    break
                verdicts[name] = PASSED
            else:
                if st is not None:  # rejected outside the Filter plugins themselves
                    verdicts[st.plugin or "Filter"] = st.message
            m.filter[node] = verdicts

        if fit_error is None and record.feasible:
            for name in (p.name for p in fwk.pre_score_plugins):
                m.prescore[name] = "" if name in state.skip_score_plugins else SUCCESS
            raw = recorded_scores(state)
            scored = list(record.totals)  # the order of every plugin's scores
            for plugin, weighted in record.scores.items():
                raw_scores = raw.get(plugin, ([], []))[0]
                for i, (node, score) in enumerate(zip(scored, weighted, strict=True)):
                    if i < len(raw_scores):
                        m.score.setdefault(node, {})[plugin] = str(raw_scores[i])
                    m.final.setdefault(node, {})[plugin] = str(score)

        totals = record.totals
        feasible = sorted(record.feasible, key=lambda n: (n != selected, -totals.get(n, 0), n))
        rejected_nodes = [n for n, st in record.statuses.items() if st is not None]
        m.nodes = feasible + rejected_nodes
        return m

    def encode(self, prefix: str, nodes: list[str]) -> dict[str, str]:
        keep = set(nodes) if len(nodes) < len(self.nodes) else None

        def only(d: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
            return d if keep is None else {n: v for n, v in d.items() if n in keep}

        return {
            prefix + PREFILTER_STATUS: _dumps(self.prefilter),
            prefix + FILTER: _dumps(only(self.filter)),
            prefix + PRESCORE: _dumps(self.prescore),
            prefix + SCORE: _dumps(only(self.score)),
            prefix + FINAL_SCORE: _dumps(only(self.final)),
            prefix + SELECTED_NODE: self.selected,
        }


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _size(values: Mapping[str, str]) -> int:
    return sum(len(k) + len(v.encode()) for k, v in values.items())


def _history(text: str | None) -> list[dict[str, str]]:
    if not text:
        return []
    try:
        got = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(got, list):
        return []
    return [e for e in got if isinstance(e, dict)]
