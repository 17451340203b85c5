"""Placing one pod: PreFilter -> Filter (sampled) -> PreScore/Score -> pick a host.

Pure and synchronous (no awaits), so the cache cannot change while it runs. With
HTTP extenders configured, :meth:`Algorithm.schedule_pod_with_extenders` awaits
them between Filter and Score and re-checks the nodes that changed meanwhile.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import add, attrgetter, not_

from kscheduler.extender import (
    EXTENDER_NAME,
    ExtenderError,
    HTTPExtender,
    find_nodes_that_pass_extenders,
    prioritize_with_extenders,
)
from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.features import GATES
from kscheduler.framework.helpers import rotation_slice
from kscheduler.framework.interface import NodeToStatus, SharedLister
from kscheduler.framework.runtime import Framework, go_list
from kscheduler.framework.status import Code, Status
from kscheduler.framework.types import NodeInfo, PodInfo

NO_NODES_MSG = "no nodes available to schedule pods"
NODE_GONE_MSG = "node(s) were deleted while the extenders were consulted"
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


@dataclass(slots=True)
class Diagnosis:
    node_to_status: NodeToStatus = field(default_factory=NodeToStatus)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""


class FitError(Exception):
    """No node fits; ``str()`` is kube-scheduler's "0/N nodes are available: ..." message."""

    def __init__(self, pod: PodInfo, num_all_nodes: int, diagnosis: Diagnosis) -> None:
        super().__init__()
        self.pod = pod
        self.num_all_nodes = num_all_nodes
        self.diagnosis = diagnosis

    def reason_histogram(self) -> list[str]:
        d = self.diagnosis.node_to_status
        counts = Counter(chain.from_iterable(map(_reasons, d.statuses.values())))
        absent = self.num_all_nodes - len(d.statuses)
        if d.absent is not None and absent > 0:
            for r in d.absent.reasons:
                counts[r] += absent
        return sorted(f"{n} {r}" for r, n in counts.items())

    def __str__(self) -> str:
        msg = f"0/{self.num_all_nodes} nodes are available:"
        if self.diagnosis.pre_filter_msg:
            msg += f" {self.diagnosis.pre_filter_msg}."
        else:
            hist = self.reason_histogram()
            if hist:
                msg += f" {', '.join(hist)}."
        if self.diagnosis.post_filter_msg:
            # upstream appends the PostFilter message as it is (preemption ends its own with ".")
            msg += f" {self.diagnosis.post_filter_msg}"
        return msg


class ScheduleError(Exception):
    """An Error status from a plugin: the attempt fails and the pod backs off."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


class ScheduleResult:
    """Where the pod goes, and how the feasible nodes scored (none when it was
    placed without scoring: one feasible node, or the nominated node)."""

    __slots__ = (
        "_columns",
        "_detail",
        "_names",
        "_scores",
        "_totals",
        "evaluated_nodes",
        "feasible_nodes",
        "index",
        "suggested_host",
        "total_list",
    )

    def __init__(
        self,
        suggested_host: str,
        evaluated_nodes: int,
        feasible_nodes: int,
        *,
        names: Sequence[str] | Callable[[], Sequence[str]] | None = None,
        totals: list[int] | None = None,
        index: int = -1,
        columns: Callable[[], dict[str, list[int]]] | None = None,
        detail: Callable[[int], dict[str, int]] | None = None,
    ) -> None:
        self.suggested_host = suggested_host
        self.evaluated_nodes = evaluated_nodes
        self.feasible_nodes = feasible_nodes
        #: the weighted total of each scored node, in the order of ``names``
        self.total_list = totals
        #: the chosen node's place among them; -1 when nothing was scored
        self.index = index
        self._names = names
        self._columns = columns
        self._detail = detail
        self._scores: dict[str, list[int]] | None = None
        self._totals: dict[str, int] | None = None

    @property
    def scores(self) -> dict[str, list[int]] | None:
        """Plugin -> weighted scores, in the order of the scored nodes."""
        if self._scores is None and self._columns is not None:
            self._scores = self._columns()
        return self._scores

    @property
    def totals(self) -> dict[str, int] | None:
        """Node -> weighted total."""
        if self._totals is None and self._names is not None and self.total_list is not None:
            names = self._names() if callable(self._names) else self._names
            self._totals = dict(zip(names, self.total_list, strict=True))
        return self._totals

    def host_scores(self) -> dict[str, int]:
        """The chosen node's weighted score per plugin ({} when nothing was scored)."""
        if self.index < 0:
            return {}
        if self._detail is not None:
            return self._detail(self.index)
        scores = self.scores or {}
        return {plugin: s[self.index] for plugin, s in scores.items()}

    @classmethod
    def scored(
        cls,
        nodes: Sequence[NodeInfo],
        evaluated: int,
        scores: dict[str, list[int]],
        totals: list[int],
        index: int,
    ) -> ScheduleResult:
        """The result of scoring ``nodes`` into ``scores`` and choosing ``nodes[index]``."""
        return cls(
            nodes[index].name,
            evaluated,
            len(nodes),
            names=list(map(_name, nodes)),
            totals=totals,
            index=index,
            columns=lambda: scores,
        )


@dataclass(slots=True)
class FilterRecord:
    """Detail of one attempt for explain: every node's verdict, every score."""

    statuses: dict[str, Status | None] = field(default_factory=dict)
    feasible: list[str] = field(default_factory=list)
    scores: dict[str, list[int]] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)


_name = attrgetter("name")
_reasons = attrgetter("reasons")
_code = attrgetter("code")
_plugin = attrgetter("plugin")

#: The fewest nodes filtered together (see Algorithm.find_nodes_that_fit).
MIN_FILTER_CHUNK = 32


def _reject_all(chunk: Sequence[NodeInfo], rejected: dict[int, Status], diag: Diagnosis) -> None:
    """Record the verdicts of a chunk where every node was rejected, as the
    node-by-node loop would (the first error raised), in C-level passes."""
    verdicts = list(map(rejected.__getitem__, range(len(chunk))))
    codes = set(map(_code, verdicts))
    if Code.ERROR in codes:
        raise ScheduleError(next(st for st in verdicts if st.code == Code.ERROR))
    diag.node_to_status.statuses.update(zip(map(_name, chunk), verdicts, strict=True))
    diag.unschedulable_plugins.update(set(map(_plugin, verdicts)) - {""})
    if Code.PENDING in codes:
        diag.pending_plugins.update(
            st.plugin for st in verdicts if st.code == Code.PENDING and st.plugin
        )


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage
    if pct == 0:
        pct = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num = num_all_nodes * pct // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


def sum_scores(n: int, scores: dict[str, list[int]]) -> list[int]:
    """Each of ``n`` nodes' total over the plugins' weighted scores."""
    per_plugin = iter(scores.values())
    totals = list(next(per_plugin, [0] * n))
    for more in per_plugin:
        totals = list(map(add, totals, more))
    return totals


class Algorithm:
    """Holds what persists between cycles: the rotating start index and the RNG."""

    def __init__(
        self, *, percentage_of_nodes_to_score: int = 0, rng: random.Random | None = None
    ) -> None:
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.next_start_node_index = 0
        self.rng = rng or random.Random()

    def schedule_pod(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        snapshot: SharedLister,
        *,
        record: FilterRecord | None = None,
        sample: bool = True,
        cycle: int | None = None,
        skip: Callable[[CycleState], AbstractSet[str]] | None = None,
    ) -> ScheduleResult:
        """Raises FitError when nothing fits, ScheduleError on a plugin error.

        ``cycle`` (the scheduling cycle's number) turns on opportunistic batching
        for a profile that signs pods (see kscheduler.framework.signing). ``skip``:
        see :meth:`find_nodes_that_fit`."""
        nodes = snapshot.node_infos()
        if not nodes:
            raise FitError(pod, 0, Diagnosis(pre_filter_msg=NO_NODES_MSG))
        batching = (
            cycle is not None
            and record is None
            and GATES.opportunistic_batching
            and fwk.batching_possible
        )
        if batching:
            assert cycle is not None
            return self._schedule_batching(fwk, state, pod, snapshot, cycle, sample)
        feasible, diagnosis = self.find_nodes_that_fit(
            fwk, state, pod, snapshot, record=record, sample=sample, skip=skip
        )
        if not feasible:
            raise FitError(pod, len(nodes), diagnosis)
        evaluated = len(feasible) + len(diagnosis.node_to_status.statuses)
        if len(feasible) == 1 and record is None:
            return ScheduleResult(feasible[0].name, evaluated, 1)
        if record is None:
            st = fwk.run_pre_score(state, pod, feasible)
            if st is not None:
                raise ScheduleError(st)
            summed, st = fwk.run_score_totals(state, pod, feasible)
            if st is not None:
                raise ScheduleError(st)
            i = self.pick(summed.totals)
            return ScheduleResult(
                feasible[i].name,
                evaluated,
                len(feasible),
                names=summed.names,
                totals=summed.totals,
                index=i,
                columns=summed.columns,
                detail=summed.detail,
            )
        scores = self.prioritize(fwk, state, pod, feasible)
        totals = sum_scores(len(feasible), scores)
        result = ScheduleResult.scored(feasible, evaluated, scores, totals, self.pick(totals))
        record.scores = scores
        record.totals = result.totals or {}
        return result

    def _schedule_batching(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        snapshot: SharedLister,
        cycle: int,
        sample: bool,
    ) -> ScheduleResult:
        """schedule_pod with OpportunisticBatching: a hint from the previous cycle is
        tried alone first; the nodes not taken are kept, sorted, for the next cycle."""
        signature = fwk.sign_pod(pod)
        hint = ""

        def node_hint(st: CycleState) -> str:
            nonlocal hint
            hint = fwk.batch.node_hint(st, pod, signature, cycle)
            return hint

        feasible, diagnosis = self.find_nodes_that_fit(
            fwk, state, pod, snapshot, sample=sample, node_hint=node_hint
        )
        if not feasible:
            raise FitError(pod, len(snapshot.node_infos()), diagnosis)
        evaluated = len(feasible) + len(diagnosis.node_to_status.statuses)
        if len(feasible) == 1:
            fwk.batch.store(signature, hint, feasible[0].name, None, cycle)
            return ScheduleResult(feasible[0].name, evaluated, 1)
        st = fwk.run_pre_score(state, pod, feasible)
        if st is not None:
            raise ScheduleError(st)
        raw: dict[str, tuple[list[int], list[int]]] = {}
        scores, st = fwk.run_score(state, pod, feasible, keep_raw=raw)
        if st is not None:
            raise ScheduleError(st)
        totals = [0] * len(feasible)
        for weighted in scores.values():
            totals = list(map(add, totals, weighted))
        ranked = fwk.batch.sort(
            [
                fwk.batch.scored(ni.name, {p: r[0][i] for p, r in raw.items()}, totals[i])
                for i, ni in enumerate(feasible)
            ]
        )
        host = ranked[0].name
        fwk.batch.store(signature, hint, host, ranked[1:], cycle)
        index = next(i for i, ni in enumerate(feasible) if ni.name == host)
        return ScheduleResult.scored(feasible, evaluated, scores, totals, index)

    def find_nodes_that_fit(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        snapshot: SharedLister,
        *,
        record: FilterRecord | None = None,
        sample: bool = True,
        try_nominated: bool = True,
        node_hint: Callable[[CycleState], str] | None = None,
        skip: Callable[[CycleState], AbstractSet[str]] | None = None,
    ) -> tuple[list[NodeInfo], Diagnosis]:
        """The feasible nodes (the first of them from the rotating start index) and
        why the others were rejected.

        ``skip``, called with the cycle state after PreFilter: names of nodes the
        caller knows every filter rejects in this cycle (``explain --max`` proves it
        for copies of one template). They are not filtered and get no status in the
        diagnosis, but still count as visited where they lie, so the start index
        moves as it would have."""
        all_nodes = snapshot.node_infos()
        diagnosis = Diagnosis()
        result, status, involved = fwk.run_pre_filter(state, pod, all_nodes)
        if status is not None:
            if status.code == Code.ERROR:
                raise ScheduleError(status)
            diagnosis.node_to_status.absent = status
            diagnosis.pre_filter_msg = status.message
            diagnosis.unschedulable_plugins |= involved
            if status.code == Code.PENDING:
                diagnosis.pending_plugins |= involved
            return [], diagnosis

        nominated = pod.nominated_node_name
        if node_hint is not None:
            # the batch's hint (taken even with a nominated node, which goes first)
            hint = node_hint(state)
            nominated = nominated or hint
        if nominated and record is None and try_nominated:
            ni = snapshot.get(nominated)
            if ni is not None and (
                result is None or result.node_names is None or nominated in result.node_names
            ):
                st = fwk.run_filter_with_nominated_pods(state, pod, ni)
                if st is None:
                    return [ni], diagnosis
                if st.code == Code.ERROR:
                    raise ScheduleError(st)

        nodes: Sequence[NodeInfo] = all_nodes
        if result is not None and result.node_names is not None:
            names = result.node_names
            nodes = [n for n in all_nodes if n.name in names]
            # nodes the PreFilter result excluded are unresolvable for this pod
            diagnosis.node_to_status.absent = Status.unresolvable(
                "node(s) didn't satisfy plugin(s) " + go_list(sorted(involved))
            )
            diagnosis.unschedulable_plugins |= involved
        n = len(nodes)
        if n == 0:
            return [], diagnosis
        pct = fwk.spec.percentage_of_nodes_to_score
        if pct is None:
            pct = self.percentage_of_nodes_to_score
        to_find = num_feasible_nodes_to_find(pct, n) if sample else n
        feasible: list[NodeInfo] = []
        statuses = diagnosis.node_to_status.statuses
        start = self.next_start_node_index % n if sample else 0
        # Filters run plugin by plugin over chunks of nodes in rotation order (so that
        # batch filters apply), each chunk as large as the number of feasible nodes
        # still wanted. The outcome is the node-by-node one: the first ``to_find``
        # feasible nodes from ``start``; nodes after them in the last chunk count as
        # not visited, whatever their verdict.
        filters = fwk.filters_to_run(state)
        nominated_nodes = fwk.nodes_with_nominated_pods()
        # verdicts kept from earlier cycles, when every filter of this one is node-local
        memos = fwk.filter_memos(filters, state, pod) if record is None and skip is None else None
        memo, nominated_memo = memos if memos is not None else (None, None)
        order: Sequence[NodeInfo] = nodes  # rotation order: from ``start`` on, wrapping
        rotated = False
        in_order: list[str] | None = None  # with nodes skipped: the names in rotation order
        skipped = skip(state) if skip is not None else None
        if skipped:
            order = [*nodes[start:], *nodes[:start]]
            rotated = True
            in_order = list(map(_name, order))
            order = list(compress(order, map(not_, map(skipped.__contains__, in_order))))
        m = len(order)
        # chunks are consecutive in the snapshot's node list (the node memo reads its
        # kept verdicts as a slice then) unless PreFilter or ``skip`` left nodes out
        consecutive = memo is not None and not rotated and nodes is all_nodes
        consecutive = consecutive and snapshot is fwk.snapshot
        error = Code.ERROR
        visited = 0
        while visited < m and len(feasible) < to_find:
            size = max(to_find - len(feasible), MIN_FILTER_CHUNK)
            if rotated:
                chunk = order[visited : visited + size]
            else:
                chunk = rotation_slice(nodes, start, visited, min(visited + size, m))
            if memo is None:
                rejected = fwk.run_filters_on(filters, state, pod, chunk)
            else:
                first = (start + visited) % n if consecutive else None
                rejected = fwk.run_filters_memo(memo, filters, state, pod, chunk, first)
            if not nominated_nodes and record is None:
                if not rejected:
                    take = chunk[: to_find - len(feasible)]  # every node of the chunk fits
                    feasible.extend(take)
                    visited += len(take)
                    continue
                if len(rejected) == len(chunk):  # no node of the chunk fits
                    visited += len(chunk)
                    _reject_all(chunk, rejected, diagnosis)
                    continue
            for i, ni in enumerate(chunk):
                visited += 1
                if nominated_nodes and ni.name in nominated_nodes:
                    st = fwk.run_filter_with_nominated_pods(
                        state, pod, ni, plain=rejected.get(i), memo=nominated_memo
                    )
                else:
                    st = rejected.get(i)
                if record is not None:
                    record.statuses[ni.name] = st
                if st is None:
                    feasible.append(ni)
                    if record is not None:
                        record.feasible.append(ni.name)
                    if len(feasible) >= to_find:
                        break
                elif st.code == error:
                    raise ScheduleError(st)
                else:
                    statuses[ni.name] = st
                    if st.plugin:
                        diagnosis.unschedulable_plugins.add(st.plugin)
                        if st.code == Code.PENDING:
                            diagnosis.pending_plugins.add(st.plugin)
        if sample:
            if in_order is not None:
                # the skipped nodes up to the last one visited count; all of them when
                # the search ran out of nodes
                found = len(feasible) >= to_find
                visited = in_order.index(order[visited - 1].name) + 1 if found else n
            self.next_start_node_index = (start + visited) % n
        return feasible, diagnosis

    def prioritize(
        self, fwk: Framework, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[str, list[int]]:
        """Per score plugin, weighted scores in the order of ``nodes``."""
        st = fwk.run_pre_score(state, pod, nodes)
        if st is not None:
            raise ScheduleError(st)
        scores, st = fwk.run_score(state, pod, nodes)
        if st is not None:
            raise ScheduleError(st)
        return scores

    def pick(self, totals: list[int]) -> int:
        """The place of the highest total; ties are broken uniformly at random."""
        best = max(totals)
        ties = totals.count(best)
        if ties == 1:
            return totals.index(best)
        n = len(totals)
        if ties * 4 >= n:
            # many ties (identical nodes): a place drawn uniformly is one of them at
            # least one time in four, and the first such draw is uniform among them
            draw = self.rng.randrange
            while True:
                i = draw(n)
                if totals[i] == best:
                    return i
        # the k-th tie, found by C-speed searches rather than a list of all of them
        k = self.rng.randrange(ties)
        at = -1
        index = totals.index
        for _ in range(k + 1):
            at = index(best, at + 1)
        return at

    # ---- with extenders -------------------------------------------------------------------------
    async def schedule_pod_with_extenders(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        snapshot: SharedLister,
        extenders: Sequence[HTTPExtender],
        *,
        refresh: Callable[[], None] | None = None,
        record: FilterRecord | None = None,
        sample: bool = True,
    ) -> ScheduleResult:
        """schedule_pod with HTTP extenders: they filter the feasible nodes after the
        Filter plugins and add their scores to the plugins' (upstream's order).

        The extender calls are awaited, so the cache may change under the cycle; then
        ``refresh`` (the snapshot's update) is called and every feasible node that
        changed is filtered again before scoring, which runs without awaiting.
        """
        nodes = snapshot.node_infos()
        if not nodes:
            raise FitError(pod, 0, Diagnosis(pre_filter_msg=NO_NODES_MSG))
        feasible, diagnosis = self.find_nodes_that_fit(
            fwk, state, pod, snapshot, record=record, sample=sample
        )
        # find_nodes_that_fit returns the nominated node alone when it passes the filters
        nominated_only = (
            record is None
            and len(feasible) == 1
            and feasible[0].name == pod.nominated_node_name
            and not diagnosis.node_to_status.statuses
        )
        feasible = await self._pass_extenders(
            fwk, state, pod, snapshot, extenders, feasible, diagnosis, refresh, record
        )
        if not feasible and nominated_only:
            # the nominated node did not pass the extenders: search all nodes (upstream)
            feasible, diagnosis = self.find_nodes_that_fit(
                fwk, state, pod, snapshot, sample=sample, try_nominated=False
            )
            feasible = await self._pass_extenders(
                fwk, state, pod, snapshot, extenders, feasible, diagnosis, refresh, record
            )
        if not feasible:
            raise _extender_fit_error(pod, len(nodes), diagnosis)
        evaluated = len(feasible) + len(diagnosis.node_to_status.statuses)
        if len(feasible) == 1 and record is None:
            return ScheduleResult(feasible[0].name, evaluated, 1)
        generations = [ni.generation for ni in feasible]
        extender_scores = await prioritize_with_extenders(extenders, pod, feasible)
        by_node = {
            name: {ns.name: ns.score for ns in scores} for name, scores in extender_scores.items()
        }
        if extender_scores:
            feasible = self._recheck(
                fwk, state, pod, snapshot, feasible, generations, diagnosis, refresh
            )
            if not feasible:
                raise _extender_fit_error(pod, len(nodes), diagnosis)
        scores = self.prioritize(fwk, state, pod, feasible)
        for name, per_node in by_node.items():
            scores[name] = [per_node.get(ni.name, 0) for ni in feasible]
        totals = sum_scores(len(feasible), scores)
        result = ScheduleResult.scored(feasible, evaluated, scores, totals, self.pick(totals))
        if record is not None:
            record.scores = scores
            record.totals = result.totals or {}
        return result

    async def _pass_extenders(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        snapshot: SharedLister,
        extenders: Sequence[HTTPExtender],
        feasible: list[NodeInfo],
        diagnosis: Diagnosis,
        refresh: Callable[[], None] | None,
        record: FilterRecord | None,
    ) -> list[NodeInfo]:
        if not feasible or not any(e.filter_verb and e.is_interested(pod) for e in extenders):
            return feasible
        generations = [ni.generation for ni in feasible]
        statuses = diagnosis.node_to_status.statuses
        before = len(statuses)
        try:
            passed = await find_nodes_that_pass_extenders(
                extenders, pod, feasible, diagnosis.node_to_status
            )
        except ExtenderError as exc:
            raise ScheduleError(Status.as_error(str(exc), EXTENDER_NAME)) from exc
        if len(passed) != len(feasible):
            diagnosis.unschedulable_plugins.add(EXTENDER_NAME)
        if record is not None:
            kept = {ni.name for ni in passed}
            record.feasible = [n for n in record.feasible if n in kept]
            for name in list(statuses)[before:]:
                record.statuses[name] = statuses[name]
        kept_generations = dict(zip((ni.name for ni in feasible), generations, strict=True))
        return self._recheck(
            fwk,
            state,
            pod,
            snapshot,
            passed,
            [kept_generations[ni.name] for ni in passed],
            diagnosis,
            refresh,
        )

    def _recheck(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        snapshot: SharedLister,
        feasible: list[NodeInfo],
        generations: list[int],
        diagnosis: Diagnosis,
        refresh: Callable[[], None] | None,
    ) -> list[NodeInfo]:
        """After an await: filter again the nodes whose NodeInfo changed or went away."""
        if all(
            snapshot.get(ni.name) is ni and ni.generation == g
            for ni, g in zip(feasible, generations, strict=True)
        ):
            return feasible
        if refresh is not None:
            refresh()
        statuses = diagnosis.node_to_status.statuses
        out: list[NodeInfo] = []
        for ni, g in zip(feasible, generations, strict=True):
            current = snapshot.get(ni.name)
            if current is ni and ni.generation == g:
                out.append(ni)
                continue
            if current is None:
                statuses[ni.name] = Status.unresolvable(NODE_GONE_MSG)
                continue
            st = fwk.run_filter_with_nominated_pods(state, pod, current)
            if st is None:
                out.append(current)
            elif st.code == Code.ERROR:
                raise ScheduleError(st)
            else:
                statuses[ni.name] = st
                if st.plugin:
                    diagnosis.unschedulable_plugins.add(st.plugin)
        return out


def _extender_fit_error(pod: PodInfo, num_all_nodes: int, diagnosis: Diagnosis) -> FitError:
    """Extenders register for no cluster events: when one rejected nodes, any event
    may help, so the pod is left with no rejecting plugins (upstream registers every
    event for them)."""
    if EXTENDER_NAME in diagnosis.unschedulable_plugins:
        diagnosis.unschedulable_plugins.clear()
    return FitError(pod, num_all_nodes, diagnosis)
