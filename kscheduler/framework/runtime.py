"""The framework runtime: one instance per profile, running plugins per extension point."""

from __future__ import annotations

import asyncio
import enum
import functools
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import add, attrgetter, is_, is_not, itemgetter, mul
from typing import Any, Final, Protocol, cast

from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.interface import (
    BindPlugin,
    ClusterClient,
    ClusterEventWithHint,
    EnqueueExtensions,
    EventRecorder,
    FilterPlugin,
    NodeScore,
    NodeToStatus,
    ObjectLister,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreBindPreFlightResult,
    PreemptionExtenders,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScoreNormalizer,
    ScorePlugin,
    SharedLister,
    WaitingPod,
)
from kscheduler.framework.node_memo import (
    NodeMemo,
    NodeMemos,
    consecutive_place,
    nominated_pods_added,
    same_pods,
)
from kscheduler.framework.registry import Registry
from kscheduler.framework.signing import (
    OpportunisticBatch,
    ProfileSignRefusal,
    SignPlugin,
    sign,
)
from kscheduler.framework.status import Code, Status
from kscheduler.framework.types import NodeInfo, PodInfo, QueuedPodInfo

#: A bound Filter method: (state, pod, node) -> None or a Status.
FilterFn = Callable[[CycleState, PodInfo, NodeInfo], Status | None]
#: A bound BatchFilter.filter_nodes: (state, pod, nodes) -> rejections by position.
BatchFilterFn = Callable[[CycleState, PodInfo, Sequence[NodeInfo]], dict[int, Status]]

#: A plugin's filter_key or score_key (see kscheduler.framework.node_memo).
NodeKeyFn = Callable[[CycleState, PodInfo], Hashable | None]

#: A bound BatchScorer.score_nodes: (state, pod, nodes) -> (scores, failure).
BatchScoreFn = Callable[[CycleState, PodInfo, Sequence[NodeInfo]], tuple[list[int], Status | None]]
#: A bound normalize_scores over plain ints.
IntNormalizeFn = Callable[[CycleState, PodInfo, list[int]], tuple[list[int], Status | None]]
#: (plugin, its batch scorer or None, normalizes?, its int normalizer or None, weight)
ScorePlanEntry = tuple[ScorePlugin, BatchScoreFn | None, bool, IntNormalizeFn | None, int]

_name = attrgetter("name")
#: A verdict not kept (never a real verdict: compared by identity).
_UNKNOWN: Final = Status(Code.ERROR, ["no verdict kept"])
#: Distinct kept verdicts shared before the table starts again (reasons naming
#: objects could otherwise grow it without bound).
_MAX_KEPT_VERDICTS: Final = 4096


class _NotGiven(enum.Enum):
    NOT_GIVEN = enum.auto()


#: the nominated pods a verdict was made with, and the verdict
NominatedVerdict = tuple[tuple[PodInfo, ...], Status | None]

#: Permit may hold a pod for at most this long.
MAX_PERMIT_WAIT = 15 * 60.0


class Nominator(Protocol):
    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]: ...

    def nodes_with_nominated_pods(self) -> Collection[str]:
        """The names of the nodes that have nominated pods (a live view is fine)."""
        ...


@dataclass(slots=True)
class ScoreTotals:
    """The Score extension point summed per node (:meth:`Framework.run_score_totals`)."""

    #: the scored nodes
    nodes: Sequence[NodeInfo]
    #: each node's weighted total, in the order of ``nodes``
    totals: list[int]
    #: plugin -> weighted scores in the order of ``nodes`` (built when called)
    columns: Callable[[], dict[str, list[int]]]
    #: plugin -> weighted score of the node at a place of ``nodes``
    detail: Callable[[int], dict[str, int]]

    def names(self) -> list[str]:
        """The scored nodes' names (read when asked: a cycle seldom needs them)."""
        return list(map(_name, self.nodes))

    @classmethod
    def failed(cls, nodes: Sequence[NodeInfo]) -> ScoreTotals:
        return cls(nodes, [], dict, lambda _: {})


class FrameworkObserver(Protocol):
    """Metrics hook: the framework reports durations, plugins hold no metrics code."""

    def extension_point(self, point: str, status: Status | None, seconds: float) -> None: ...


@dataclass(slots=True)
class ProfileSpec:
    """A resolved profile: plugin names per extension point, weights and args."""

    scheduler_name: str
    points: Mapping[str, Sequence[str]]
    score_weights: Mapping[str, int] = field(default_factory=dict)
    args: Mapping[str, Any] = field(default_factory=dict)
    percentage_of_nodes_to_score: int | None = None


class WaitingPodEntry:
    """A pod held by Permit; the binding cycle awaits its verdict."""

    def __init__(self, pod: PodInfo, plugins: dict[str, float]) -> None:
        self._pod = pod
        self._pending = dict(plugins)
        self._future: asyncio.Future[Status | None] = asyncio.get_running_loop().create_future()
        self._timers = [
            asyncio.get_running_loop().call_later(
                t,
                self.reject,
                name,
                f"rejected due to timeout after waiting {t:g}s at plugin {name}",
            )
            for name, t in plugins.items()
        ]

    @property
    def pod(self) -> PodInfo:
        return self._pod

    def pending_plugins(self) -> list[str]:
        return list(self._pending)

    def allow(self, plugin: str) -> None:
        self._pending.pop(plugin, None)
        if not self._pending and not self._future.done():
            self._cancel_timers()
            self._future.set_result(None)

    def reject(self, plugin: str, message: str) -> None:
        if not self._future.done():
            self._cancel_timers()
            self._future.set_result(Status(Code.UNSCHEDULABLE, [message], plugin))

    def _cancel_timers(self) -> None:
        for t in self._timers:
            t.cancel()

    async def wait(self) -> Status | None:
        return await self._future


class Framework:
    """Runs the plugins of one profile. Implements the plugins' Handle."""

    #: Keep the verdicts and raw scores of node-local plugins across cycles (see
    #: kscheduler.framework.node_memo); off, every plugin runs on every node.
    node_memo = True

    def __init__(
        self,
        spec: ProfileSpec,
        registry: Registry,
        *,
        snapshot: SharedLister,
        objects: ObjectLister,
        client: ClusterClient,
        recorder: EventRecorder,
        nominator: Nominator | None = None,
        observer: FrameworkObserver | None = None,
    ) -> None:
        self.spec = spec
        self.profile_name = spec.scheduler_name
        self._snapshot = snapshot
        self._objects = objects
        self._client = client
        self._recorder = recorder
        self._nominator = nominator
        self._preemption_extenders: PreemptionExtenders | None = None
        self._activate: Callable[[Iterable[str]], None] | None = None
        self._release_gated: Callable[[Iterable[str]], None] | None = None
        self.observer = observer
        self.waiting_pods: dict[str, WaitingPodEntry] = {}
        self.plugins: dict[str, Plugin] = {}
        needed: list[str] = []
        for names in spec.points.values():
            for n in names:
                if n not in needed:
                    needed.append(n)
        for name in needed:
            entry = registry[name]
            args = spec.args.get(name)
            if args is None and entry.parse_args is not None:
                args = entry.parse_args({})
            self.plugins[name] = entry.factory(args, self)

        def pick(point: str, proto: type) -> list[Any]:
            out = []
            for n in spec.points.get(point, ()):
                p = self.plugins[n]
                if not isinstance(p, proto):
                    raise ValueError(f"plugin {n!r} does not implement extension point {point}")
                out.append(p)
            return out

        self.pre_enqueue_plugins: list[PreEnqueuePlugin] = pick("preEnqueue", PreEnqueuePlugin)
        qs = pick("queueSort", QueueSortPlugin)
        if len(qs) != 1:
            raise ValueError(
                f"profile {spec.scheduler_name}: exactly one queueSort plugin is required"
            )
        self.queue_sort: QueueSortPlugin = qs[0]
        self.pre_filter_plugins: list[PreFilterPlugin] = pick("preFilter", PreFilterPlugin)
        self.filter_plugins: list[FilterPlugin] = pick("filter", FilterPlugin)
        self.post_filter_plugins: list[PostFilterPlugin] = pick("postFilter", PostFilterPlugin)
        self.pre_score_plugins: list[PreScorePlugin] = pick("preScore", PreScorePlugin)
        self.score_plugins: list[ScorePlugin] = pick("score", ScorePlugin)
        self.reserve_plugins: list[ReservePlugin] = pick("reserve", ReservePlugin)
        self.permit_plugins: list[PermitPlugin] = pick("permit", PermitPlugin)
        self.pre_bind_plugins: list[PreBindPlugin] = pick("preBind", PreBindPlugin)
        self.bind_plugins: list[BindPlugin] = pick("bind", BindPlugin)
        self.post_bind_plugins: list[PostBindPlugin] = pick("postBind", PostBindPlugin)
        if not self.bind_plugins:
            raise ValueError(f"profile {spec.scheduler_name}: at least one bind plugin is required")
        self.score_weights = {p.name: spec.score_weights.get(p.name, 1) for p in self.score_plugins}
        for name, w in self.score_weights.items():
            if w <= 0:
                raise ValueError(
                    f"profile {spec.scheduler_name}: score plugin {name} weight must be > 0"
                )
        self.refresh_plans()
        # OpportunisticBatching: signatures only when every PreFilter, Filter, PreScore
        # and Score plugin can sign (see kscheduler.framework.signing)
        self.sign_plugins: list[SignPlugin] = []
        self.unsignable_plugins: list[str] = []
        for p in [
            *self.pre_filter_plugins,
            *self.filter_plugins,
            *self.pre_score_plugins,
            *self.score_plugins,
        ]:
            if p in self.sign_plugins or p.name in self.unsignable_plugins:
                continue
            if isinstance(p, SignPlugin):
                self.sign_plugins.append(p)
            else:
                self.unsignable_plugins.append(p.name)
        self.signatures_enabled = not self.unsignable_plugins
        #: sign plugins that refuse every pod of this profile (see ProfileSignRefusal)
        self.refusing_plugins = [
            p.name
            for p in self.sign_plugins
            if isinstance(p, ProfileSignRefusal) and p.refuses_every_pod()
        ]
        #: whether a pod of this profile can be signed at all: when not, the cycle
        #: neither signs nor keeps results for the next one (nothing could use them)
        self.batching_possible = self.signatures_enabled and not self.refusing_plugins
        self.batch = OpportunisticBatch(self)

    def sign_pod(self, pod: PodInfo) -> bytes | None:
        """The pod's signature in this profile, or None (it cannot be signed)."""
        if not self.batching_possible:
            return None
        signature, _ = sign(self.profile_name, self.sign_plugins, pod)
        return signature

    def node_info(self, name: str) -> NodeInfo | None:
        return self._snapshot.get(name)

    def rescore(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        cached: Sequence[Mapping[str, int]],
    ) -> tuple[list[tuple[dict[str, int], int]], Status | None]:
        """For the batch: PreScore over ``nodes``, the raw scores of the last node, and
        every plugin's raw scores (``cached`` for the other nodes) normalised together
        and weighted. Per node: (raw scores, weighted total), in the order of ``nodes``."""
        st = self.run_pre_score(state, pod, nodes)
        if st is not None:
            return [], st
        last = nodes[-1]
        raws: list[dict[str, int]] = [dict(c) for c in cached] + [{}]
        totals = [0] * len(nodes)
        names = [ni.name for ni in nodes]
        for p, _, normalizes, fast_normalize, w in self._score_plan:
            if p.name in state.skip_score_plugins:
                continue
            try:
                s, st = p.score(state, pod, last)
                if st is not None and st.code != Code.SUCCESS:
                    return [], st.with_plugin(p.name)
                raws[-1][p.name] = s
                ints = [r.get(p.name, 0) for r in raws]
                if fast_normalize is not None:
                    ints, st = fast_normalize(state, pod, ints)
                    if st is not None and st.code != Code.SUCCESS:
                        return [], st.with_plugin(p.name)
                elif normalizes:
                    scores = [NodeScore(n, v) for n, v in zip(names, ints, strict=True)]
                    st = p.normalize_score(state, pod, scores)  # type: ignore[attr-defined]
                    if st is not None and st.code != Code.SUCCESS:
                        return [], st.with_plugin(p.name)
                    ints = [ns.score for ns in scores]
            except Exception as exc:
                return [], Status.as_error(exc, p.name)
            totals = [t + v * w for t, v in zip(totals, ints, strict=True)]
        return list(zip(raws, totals, strict=True)), None

    def refresh_plans(self) -> None:
        """Work out once the bound methods the hot loops call (again after replacing
        plugin methods, as a profiler does)."""
        # (plugin, filter as a bound method, its batch filter or None)
        self._filters: list[tuple[str, FilterFn, BatchFilterFn | None]] = [
            (p.name, p.filter, getattr(p, "filter_nodes", None)) for p in self.filter_plugins
        ]
        self._filters_wrapped = False
        # NodeLocalFilter / NodeLocalScore keys (None: the plugin keeps nothing); the
        # verdicts and scores kept so far were made by the methods replaced
        self._filter_keys: dict[str, NodeKeyFn | None] = {
            p.name: getattr(p, "filter_key", None) for p in self.filter_plugins
        }
        self._score_keys: dict[str, NodeKeyFn | None] = {
            p.name: getattr(p, "score_key", None) for p in self.score_plugins
        }
        self._filter_memos: NodeMemos[Status | None] = NodeMemos(missing=_UNKNOWN)
        #: (plugin, code, reasons) -> the one Status kept for that verdict
        self._kept_verdicts: dict[tuple[str, Code, tuple[str, ...]], Status] = {}
        #: per node: the nominated pods added and the verdict with them added
        self._nominated_memos: NodeMemos[NominatedVerdict] = NodeMemos()
        self._score_memos: NodeMemos[int] = NodeMemos()
        #: per node: the weighted sum of the fused plugins' scores, then their raw scores
        self._sum_memos: NodeMemos[tuple[int, ...]] = NodeMemos()
        # (plugin, its batch scorer or None, normalizes?, its int normalizer or None,
        # weight): isinstance on a Protocol is slow
        self._score_plan: list[ScorePlanEntry] = [
            (
                p,
                getattr(p, "score_nodes", None),
                isinstance(p, ScoreNormalizer),
                getattr(p, "normalize_scores", None),
                self.score_weights[p.name],
            )
            for p in self.score_plugins
        ]

    def set_nominator(self, nominator: Nominator) -> None:
        self._nominator = nominator

    def set_activator(
        self,
        activate: Callable[[Iterable[str]], None],
        release_gated: Callable[[Iterable[str]], None],
    ) -> None:
        self._activate = activate
        self._release_gated = release_gated

    def activate_pods(self, uids: Iterable[str]) -> None:
        if self._activate is not None:
            self._activate(uids)

    def release_gated_pods(self, uids: Iterable[str]) -> None:
        if self._release_gated is not None:
            self._release_gated(uids)

    async def wait_background(self) -> None:
        """Until the background work plugins started (``wait_idle()``) is done."""
        for p in self.plugins.values():
            wait = getattr(p, "wait_idle", None)
            if wait is not None:
                await wait()

    def set_preemption_extenders(self, extenders: PreemptionExtenders | None) -> None:
        self._preemption_extenders = extenders

    def preemption_extenders(self) -> PreemptionExtenders | None:
        return self._preemption_extenders

    # ---- Handle -------------------------------------------------------------------------
    @property
    def snapshot(self) -> SharedLister:
        return self._snapshot

    @property
    def objects(self) -> ObjectLister:
        return self._objects

    @property
    def client(self) -> ClusterClient:
        return self._client

    @property
    def recorder(self) -> EventRecorder:
        return self._recorder

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return self._nominator.nominated_pods_for_node(node_name) if self._nominator else []

    def nodes_with_nominated_pods(self) -> Collection[str]:
        return self._nominator.nodes_with_nominated_pods() if self._nominator else ()

    def filters_to_run(self, state: CycleState) -> list[tuple[str, FilterFn, BatchFilterFn | None]]:
        """(plugin name, filter, batch filter or None) of this cycle, in order: the
        plugins PreFilter skipped left out."""
        skip = state.skip_filter_plugins
        plan = self._filters
        return [f for f in plan if f[0] not in skip] if skip else plan

    def wrap_filters(
        self,
        wrap: Callable[
            [str, FilterFn, BatchFilterFn | None], tuple[FilterFn, BatchFilterFn | None]
        ],
    ) -> Callable[[], None]:
        """Each filter plugin's filter and batch filter replaced by what ``wrap`` makes
        of them, for the cycles until the returned function is called, which puts the
        plugins' own back (``explain --max`` keeps verdicts that cannot change)."""
        saved = self._filters
        self._filters = [(name, *wrap(name, f, b)) for name, f, b in saved]
        self._filters_wrapped = True

        def restore() -> None:
            self._filters = saved
            self._filters_wrapped = False

        return restore

    def run_filters_on(
        self,
        filters: Sequence[tuple[str, FilterFn, BatchFilterFn | None]],
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
    ) -> dict[int, Status]:
        """run_filter for each of ``nodes``, plugin by plugin over the nodes still passing:
        the first rejection of each node by position (no entry: it passes)."""
        rejected: dict[int, Status] = {}
        alive: list[int] | None = None  # positions still passing; None: all of them
        todo: Sequence[NodeInfo] = nodes
        success = Code.SUCCESS
        for name, single, batch in filters:
            found: dict[int, Status] = {}
            if batch is not None:
                try:
                    found = {
                        j: _filter_error(name, st) if st.code == Code.ERROR else st
                        for j, st in batch(state, pod, todo).items()
                    }
                except Exception:
                    batch = None  # node by node, to pin the error on the right node
            if batch is None:
                for j, ni in enumerate(todo):
                    try:
                        st = single(state, pod, ni)
                    except Exception as exc:
                        st = Status.as_error(exc, name)
                    else:
                        if st is not None and st.code == Code.ERROR:
                            st = _filter_error(name, st)
                    if st is not None and st.code != success:
                        found[j] = st
            if not found:
                continue
            for j, st in found.items():
                if not st.plugin:
                    st.plugin = name
                rejected[alive[j] if alive is not None else j] = st
            if len(found) == len(todo):
                break
            keep = [j for j in range(len(todo)) if j not in found]
            alive = [alive[j] for j in keep] if alive is not None else keep
            todo = [todo[j] for j in keep]
        return rejected

    def filter_memos(
        self,
        filters: Sequence[tuple[str, FilterFn, BatchFilterFn | None]],
        state: CycleState,
        pod: PodInfo,
    ) -> tuple[NodeMemo[Status | None], dict[str, NominatedVerdict] | None] | None:
        """After PreFilter, when every one of this cycle's ``filters`` (from
        :meth:`filters_to_run`) is node-local this cycle: the verdicts kept for them
        (for :meth:`run_filters_memo`) and, under the same key, the verdicts with
        nominated pods added (for :meth:`run_filter_with_nominated_pods`); else None."""
        key = self._filter_memo_key(filters, state, pod)
        if key is None:
            return None
        plain = self._filter_memos.memo(key, self._snapshot)
        if plain is None:
            return None
        return plain, self._nominated_memos.get(key, self._snapshot)

    def node_local_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        return self._filter_memo_key(self.filters_to_run(state), state, pod)

    def _filter_memo_key(
        self,
        filters: Sequence[tuple[str, FilterFn, BatchFilterFn | None]],
        state: CycleState,
        pod: PodInfo,
    ) -> Hashable | None:
        if not self.node_memo or self._filters_wrapped:
            return None
        keys = self._filter_keys
        parts: list[Hashable] = []
        for name, _, _ in filters:
            fn = keys.get(name)
            if fn is None:
                return None
            try:
                key = fn(state, pod)
            except Exception:
                return None  # a failing key keeps nothing; filtering reports any failure
            if key is None:
                return None
            parts.append((name, key))
        return tuple(parts)

    def run_filters_memo(
        self,
        memo: NodeMemo[Status | None],
        filters: Sequence[tuple[str, FilterFn, BatchFilterFn | None]],
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        first: int | None = None,
    ) -> dict[int, Status]:
        """:meth:`run_filters_on` with the verdicts kept in ``memo`` (from
        :meth:`filter_memos`): only the nodes without one are filtered, and their
        verdicts kept (errors excepted). ``first``: the place of ``nodes[0]`` in the
        snapshot's node list when ``nodes`` are consecutive there (in rotation)."""
        verdicts = memo.kept(nodes, first)
        positions = range(len(verdicts))
        # (identity tests only: comparing a Status with == runs Python code per node)
        not_passed = list(compress(positions, map(is_not, verdicts, repeat(None))))
        if not not_passed:
            return {}  # every node passed before and has not changed since
        rejected = cast(
            dict[int, Status],
            dict(zip(not_passed, map(verdicts.__getitem__, not_passed), strict=True)),
        )
        todo = list(compress(positions, map(is_, verdicts, repeat(_UNKNOWN))))
        for i in todo:
            del rejected[i]
        if todo:
            found = self.run_filters_on(filters, state, pod, [nodes[i] for i in todo])
            shared = self._kept_verdicts
            if len(shared) > _MAX_KEPT_VERDICTS:
                shared.clear()
            for j, i in enumerate(todo):
                st = found.get(j)
                if st is None:
                    memo.keep(nodes, first, i, None)
                elif st.code == Code.ERROR:
                    rejected[i] = st
                else:
                    # one object per distinct verdict: a diagnosis groups them by identity
                    st = shared.setdefault((st.plugin, st.code, tuple(st.reasons)), st)
                    rejected[i] = st
                    memo.keep(nodes, first, i, st)
        return rejected

    def iterate_waiting_pods(self) -> list[WaitingPod]:
        return list(self.waiting_pods.values())

    def get_waiting_pod(self, uid: str) -> WaitingPodEntry | None:
        return self.waiting_pods.get(uid)

    # ---- queue side ---------------------------------------------------------------------
    def queue_sort_key(self) -> Callable[[QueuedPodInfo], Any]:
        fast = getattr(self.queue_sort, "sort_key", None)
        if callable(fast):
            return fast  # type: ignore[no-any-return]
        less = self.queue_sort.less

        def cmp(a: QueuedPodInfo, b: QueuedPodInfo) -> int:
            return -1 if less(a, b) else (1 if less(b, a) else 0)

        key = functools.cmp_to_key(cmp)
        return key

    def run_pre_enqueue(self, pod: PodInfo) -> Status | None:
        for p in self.pre_enqueue_plugins:
            st: Status | None = _call(p.name, p.pre_enqueue, pod)
            if st is not None and st.code != Code.SUCCESS:
                return st.with_plugin(p.name)
        return None

    def events_to_register(self) -> dict[str, list[ClusterEventWithHint]]:
        out: dict[str, list[ClusterEventWithHint]] = {}
        for name, p in self.plugins.items():
            if isinstance(p, EnqueueExtensions):
                out[name] = p.events_to_register()
        return out

    # ---- scheduling cycle ---------------------------------------------------------------
    def run_pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None, set[str]]:
        """The merged node restriction, the first failure, and the plugins involved.

        The plugins are the rejecting ones on failure, or those that narrowed the
        node set on success.
        """
        t0 = time.perf_counter()
        result: PreFilterResult | None = None
        rejecting: set[str] = set()
        status: Status | None = None
        narrowing: list[str] = []
        for p in self.pre_filter_plugins:
            try:
                r, st = p.pre_filter(state, pod, nodes)
            except Exception as exc:  # a plugin bug must not take the loop down
                status = Status.as_error(f'running PreFilter plugin "{p.name}": {exc}', p.name)
                status.error = exc
                break
            if st is not None and st.code == Code.SKIP:
                state.skip_filter_plugins.add(p.name)
                continue
            if st is not None and st.code != Code.SUCCESS:
                st.with_plugin(p.name)
                if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    # preemption cannot help: no need to run the other PreFilters
                    rejecting.add(p.name)
                    status = st
                    break
                if st.code in (Code.UNSCHEDULABLE, Code.PENDING):
                    # preemption may help later in this cycle: every PreFilter must run
                    rejecting.add(p.name)
                    if status is None:
                        status = st
                    continue
                status = Status.as_error(
                    f'running PreFilter plugin "{p.name}": {st.message}', p.name
                )
                break
            if r is not None and r.node_names is not None:
                narrowing.append(p.name)
                result = r if result is None else result.merge(r)
                if not result.node_names:
                    if len(narrowing) == 1:
                        msg = f"node(s) didn't satisfy plugin {narrowing[0]}"
                    else:
                        msg = (
                            f"node(s) didn't satisfy plugin(s) {go_list(narrowing)} simultaneously"
                        )
                    status = Status.unresolvable(msg)
                    rejecting.update(narrowing)
                    break
        self._observe("PreFilter", status, t0)
        return result, status, (rejecting if status is not None else set(narrowing))

    def run_filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        skip = state.skip_filter_plugins
        for name, f, _ in self._filters:
            if skip and name in skip:
                continue
            try:
                st = f(state, pod, node_info)
            except Exception as exc:
                return Status.as_error(exc, name)
            if st is not None and st.code != Code.SUCCESS:
                if st.code == Code.ERROR:
                    return _filter_error(name, st)
                if not st.plugin:
                    st.plugin = name
                return st
        return None

    def run_pre_filter_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        for p in self.pre_filter_plugins:
            if p.name in state.skip_filter_plugins:
                continue
            ext = getattr(p, "pre_filter_extensions", None)
            ex = ext() if callable(ext) else None
            if ex is None:
                continue
            st: Status | None = _call(p.name, ex.add_pod, state, pod, pod_to_add, node_info)
            if st is not None and st.code != Code.SUCCESS:
                return st.with_plugin(p.name)
        return None

    def run_pre_filter_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        for p in self.pre_filter_plugins:
            if p.name in state.skip_filter_plugins:
                continue
            ext = getattr(p, "pre_filter_extensions", None)
            ex = ext() if callable(ext) else None
            if ex is None:
                continue
            st: Status | None = _call(p.name, ex.remove_pod, state, pod, pod_to_remove, node_info)
            if st is not None and st.code != Code.SUCCESS:
                return st.with_plugin(p.name)
        return None

    def run_filter_with_nominated_pods(
        self,
        state: CycleState,
        pod: PodInfo,
        node_info: NodeInfo,
        *,
        plain: Status | _NotGiven | None = _NotGiven.NOT_GIVEN,
        memo: dict[str, NominatedVerdict] | None = None,
    ) -> Status | None:
        """Filter twice when pods of equal or higher priority are nominated to the node:
        once with them added (they will be there), once without (they may not come).

        ``plain``: the verdict without them, when the caller has it already. ``memo``
        (from :meth:`filter_memos`): verdicts with nominated pods added, kept per node
        with the pods added (the same objects make the same verdict on an unchanged
        node)."""
        nominated = (
            self._nominator.nominated_pods_for_node(node_info.name) if self._nominator else []
        )
        if nominated:
            added = nominated_pods_added(pod, nominated)
            if added:
                kept = memo.get(node_info.name) if memo is not None else None
                if kept is not None and same_pods(kept[0], added):
                    st = kept[1]
                else:
                    st = self._filter_with_pods_added(state, pod, node_info, added)
                    if memo is not None and (st is None or st.code != Code.ERROR):
                        memo[node_info.name] = (added, st)
                if st is not None:
                    return st
        if plain is _NotGiven.NOT_GIVEN:
            return self.run_filter(state, pod, node_info)
        return plain

    def _filter_with_pods_added(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo, added: Sequence[PodInfo]
    ) -> Status | None:
        ni = node_info.clone()
        st2 = state.clone()
        for p in added:
            ni.add_pod(p)
            err = self.run_pre_filter_add_pod(st2, pod, p, ni)
            if err is not None:
                return err
        return self.run_filter(st2, pod, ni)

    async def run_post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status | None]:
        t0 = time.perf_counter()
        reasons: list[str] = []
        result: PostFilterResult | None = None
        rejector = ""
        final: Status | None = None
        for p in self.post_filter_plugins:
            try:
                r, st = await p.post_filter(state, pod, statuses)
            except Exception as exc:
                final = Status.as_error(exc, p.name)
                break
            if st is None or st.code == Code.SUCCESS:
                # a success may carry a message (preemption's), which the pod's
                # FailedScheduling text then ends with
                result, final = r, st
                break
            if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                result, final = r, st.with_plugin(p.name)
                break
            if not st.is_rejection():
                result, final = None, Status(Code.ERROR, list(st.reasons), p.name, st.error)
                break
            if r is not None:
                result = r
            reasons.extend(st.reasons)
            rejector = rejector or p.name
        else:
            final = Status(Code.UNSCHEDULABLE, reasons, rejector)
        self._observe("PostFilter", final, t0)
        return result, final

    def run_pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        t0 = time.perf_counter()
        status = None
        for p in self.pre_score_plugins:
            st: Status | None = _call(p.name, p.pre_score, state, pod, nodes)
            if st is None or st.code == Code.SUCCESS:
                continue
            if st.code == Code.SKIP:
                state.skip_score_plugins.add(p.name)
                continue
            status = st.with_plugin(p.name)
            break
        self._observe("PreScore", status, t0)
        return status

    def run_score(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        *,
        keep_raw: dict[str, tuple[list[int], list[int]]] | None = None,
    ) -> tuple[dict[str, list[int]], Status | None]:
        """Per plugin: normalised, weighted scores, plain ints in the order of ``nodes``.

        NodeScore objects are built only for the plugins that normalise. When
        ``state.record`` is set it also writes, under the state key
        ``"RecordScores"``, plugin -> (raw scores, normalized scores) in that order;
        ``keep_raw``, when given, receives the same.
        """
        t0 = time.perf_counter()
        out: dict[str, list[int]] = {}
        record: dict[str, tuple[list[int], list[int]]] | None = keep_raw
        if state.record:
            record = {}
            state.write("RecordScores", record)
        skip = state.skip_score_plugins
        plan = [e for e in self._score_plan if e[0].name not in skip] if skip else self._score_plan
        st = self._score_plugins(plan, state, pod, nodes, None, record, out)
        if st is not None:
            return out, st
        self._observe("Score", None, t0)
        return out, None

    def run_score_totals(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[ScoreTotals, Status | None]:
        """:meth:`run_score`'s scores summed per node (after PreScore).

        With the node memo on, the plugins that give a score key and do not
        normalise are summed once per node and the sum is kept with their raw
        scores (kscheduler.framework.node_memo): an unchanged node costs one lookup
        for all of them. The others run as in run_score. Which plugin fails, and
        how, is as in run_score.
        """
        skip = state.skip_score_plugins
        plan = [e for e in self._score_plan if e[0].name not in skip] if skip else self._score_plan
        if not self.node_memo or state.record:
            return self._plain_totals(state, pod, nodes, plan)
        t0 = time.perf_counter()
        first = consecutive_place(self._snapshot, nodes)
        fused: list[ScorePlanEntry] = []
        fused_keys: list[Hashable] = []
        rest: list[ScorePlanEntry] = []
        for e in plan:
            p, _, normalizes, _, w = e
            key_fn = self._score_keys[p.name]
            try:
                key = key_fn(state, pod) if key_fn is not None and not normalizes else None
            except Exception:
                key = None  # a failing key keeps nothing; scoring reports any failure
            if key is None:
                rest.append(e)
            else:
                fused.append(e)
                fused_keys.append((p.name, key, w))
        kept: list[tuple[int, ...]] = []
        totals: list[int] | None = None
        if fused:
            memo = self._sum_memos.memo(tuple(fused_keys), self._snapshot)
            if memo is None:
                return self._plain_totals(state, pod, nodes, plan)
            found = memo.kept(nodes, first)
            if None in found:
                todo = _positions_of_none(found)
                sub = [nodes[i] for i in todo]
                columns: list[list[int]] = []
                for p, batch, _, _, _ in fused:
                    try:
                        ints, st = self._raw_scores(
                            p, batch if len(todo) > 8 else None, state, pod, sub
                        )
                    except Exception:
                        return self._plain_totals(state, pod, nodes, plan)
                    if st is not None or (ints and (min(ints) < 0 or max(ints) > 100)):
                        # a failure: reported as run_score reports it
                        return self._plain_totals(state, pod, nodes, plan)
                    columns.append(ints)
                weights = [e[4] for e in fused]
                for j, i in enumerate(todo):
                    raws = [c[j] for c in columns]
                    v = (sum(map(mul, raws, weights)), *raws)
                    found[i] = v
                    memo.keep(nodes, first, i, v)
            kept = cast(list[tuple[int, ...]], found)
            totals = list(map(itemgetter(0), kept))
        others: dict[str, list[int]] = {}
        if rest:
            st = self._score_plugins(rest, state, pod, nodes, None, None, others, first)
            if st is not None:
                return ScoreTotals.failed(nodes), st
            for ints in others.values():
                totals = ints if totals is None else list(map(add, totals, ints))
        if totals is None:
            totals = [0] * len(nodes)
        self._observe("Score", None, t0)
        order = [e[0].name for e in plan]
        place = {e[0].name: (k, e[4]) for k, e in enumerate(fused)}

        def columns_of() -> dict[str, list[int]]:
            out: dict[str, list[int]] = {}
            for name in order:
                at = place.get(name)
                if at is None:
                    out[name] = others[name]
                else:
                    k, w = at
                    out[name] = [v[k + 1] * w for v in kept]
            return out

        def detail(i: int) -> dict[str, int]:
            out: dict[str, int] = {}
            for name in order:
                at = place.get(name)
                out[name] = others[name][i] if at is None else kept[i][at[0] + 1] * at[1]
            return out

        return ScoreTotals(nodes, totals, columns_of, detail), None

    def _plain_totals(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        plan: Sequence[ScorePlanEntry],
    ) -> tuple[ScoreTotals, Status | None]:
        """run_score_totals from run_score's per-plugin lists."""
        scores, st = self.run_score(state, pod, nodes)
        if st is not None:
            return ScoreTotals.failed(nodes), st
        totals: list[int] | None = None
        for ints in scores.values():
            totals = ints if totals is None else list(map(add, totals, ints))

        def detail(i: int) -> dict[str, int]:
            return {plugin: s[i] for plugin, s in scores.items()}

        return ScoreTotals(nodes, totals or [0] * len(nodes), lambda: scores, detail), None

    def _score_plugins(
        self,
        plan: Sequence[ScorePlanEntry],
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        names: list[str] | None,
        record: dict[str, tuple[list[int], list[int]]] | None,
        out: dict[str, list[int]],
        first: int | None = None,
    ) -> Status | None:
        """Score, normalise, check and weight for each plugin of ``plan`` into ``out``;
        the first failure. Raw scores come from the node memo unless ``record``;
        ``first``: the place of ``nodes[0]`` in the snapshot's node list when ``nodes``
        are consecutive there (see NodeMemo.kept)."""
        memo_ok = self.node_memo and record is None
        for p, batch, normalizes, fast_normalize, w in plan:
            ints: list[int]
            try:
                memo: NodeMemo[int] | None = None
                if memo_ok:
                    key_fn = self._score_keys[p.name]
                    key = key_fn(state, pod) if key_fn is not None else None
                    if key is not None:
                        memo = self._score_memos.memo((p.name, key), self._snapshot)
                checked = False  # every score known to be in [0, 100]
                if memo is None:
                    ints, st = self._raw_scores(p, batch, state, pod, nodes)
                else:
                    ints, st, checked = self._raw_scores_memo(
                        memo, p, batch, state, pod, nodes, first, check=not normalizes
                    )
                if st is not None:
                    return st.with_plugin(p.name)
                raw = ints
                if fast_normalize is not None:
                    ints, st = fast_normalize(state, pod, ints)
                    if st is not None and st.code != Code.SUCCESS:
                        return st.with_plugin(p.name)
                elif normalizes:
                    if names is None:
                        names = [ni.name for ni in nodes]
                    scores = [NodeScore(n, v) for n, v in zip(names, ints, strict=True)]
                    normalized: Status | None = p.normalize_score(  # type: ignore[attr-defined]
                        state, pod, scores
                    )
                    if normalized is not None and normalized.code != Code.SUCCESS:
                        return normalized.with_plugin(p.name)
                    ints = [ns.score for ns in scores]
            except Exception as exc:
                return Status.as_error(exc, p.name)
            if record is not None:
                record[p.name] = (list(raw), list(ints))
            if ints and not checked and (min(ints) < 0 or max(ints) > 100):
                bad = next(v for v in ints if not 0 <= v <= 100)
                return Status.as_error(
                    f"plugin {p.name} returns an invalid score {bad}, it should be in the "
                    "range of [0, 100] after normalizing",
                    p.name,
                )
            out[p.name] = [v * w for v in ints] if w != 1 else ints
        return None

    @staticmethod
    def _raw_scores(
        p: ScorePlugin,
        batch: BatchScoreFn | None,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
    ) -> tuple[list[int], Status | None]:
        """One plugin's scores of ``nodes`` before normalising; a failure status."""
        if batch is not None:
            ints, st = batch(state, pod, nodes)
            if st is not None and st.code != Code.SUCCESS:
                return ints, st
            return ints, None
        fn = p.score
        ints = []
        append = ints.append
        for ni in nodes:
            s, st = fn(state, pod, ni)
            if st is not None and st.code != Code.SUCCESS:
                return ints, st
            append(s)
        return ints, None

    def _raw_scores_memo(
        self,
        memo: NodeMemo[int],
        p: ScorePlugin,
        batch: BatchScoreFn | None,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        first: int | None,
        *,
        check: bool,
    ) -> tuple[list[int], Status | None, bool]:
        """:meth:`_raw_scores` with the scores kept in ``memo``: only the nodes without
        one are scored, and their scores kept. ``check``: keep only scores in
        [0, 100]; the third value then says whether every score is in that range
        (the kept ones were checked before)."""
        kept = memo.kept(nodes, first)
        if None not in kept:
            return kept, None, check  # type: ignore[return-value]
        todo = _positions_of_none(kept)
        # a few nodes (one per placement since the last visit, typically) one by one
        fresh, st = self._raw_scores(
            p, batch if len(todo) > 8 else None, state, pod, [nodes[i] for i in todo]
        )
        if st is not None:
            return [], st, False
        for i, v in zip(todo, fresh, strict=True):
            kept[i] = v
        if check and fresh and (min(fresh) < 0 or max(fresh) > 100):
            return kept, None, False  # type: ignore[return-value]
        for i, v in zip(todo, fresh, strict=True):
            memo.keep(nodes, first, i, v)
        return kept, None, check  # type: ignore[return-value]

    def run_reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        t0 = time.perf_counter()
        status = None
        for p in self.reserve_plugins:
            st: Status | None = _call(p.name, p.reserve, state, pod, node_name)
            if st is not None and st.code != Code.SUCCESS:
                status = st.with_plugin(p.name)
                break
        self._observe("Reserve", status, t0)
        return status

    def run_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        for p in reversed(self.reserve_plugins):
            _call(p.name, p.unreserve, state, pod, node_name)

    def run_permit(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        t0 = time.perf_counter()
        status = self._run_permit(state, pod, node_name)
        self._observe("Permit", status, t0)
        return status

    def _run_permit(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        waits: dict[str, float] = {}
        for p in self.permit_plugins:
            try:
                st, timeout = p.permit(state, pod, node_name)
            except Exception as exc:
                return Status.as_error(exc, p.name)
            if st is None or st.code == Code.SUCCESS:
                continue
            if st.code == Code.WAIT:
                waits[p.name] = min(max(timeout, 0.0), MAX_PERMIT_WAIT)
                continue
            return st.with_plugin(p.name)
        if waits:
            self.waiting_pods[pod.uid] = WaitingPodEntry(pod, waits)
            return Status.wait("waiting on permit")
        return None

    async def wait_on_permit(self, pod: PodInfo) -> Status | None:
        entry = self.waiting_pods.get(pod.uid)
        if entry is None:
            return None
        try:
            return await entry.wait()
        finally:
            self.waiting_pods.pop(pod.uid, None)

    def will_wait_on_permit(self, pod: PodInfo) -> bool:
        """Whether a Permit plugin made the pod wait (it is among the waiting pods)."""
        return pod.uid in self.waiting_pods

    def run_pre_bind_pre_flights(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> Status | None:
        """Each PreBind plugin's pre-flight. None (Success) when at least one will work
        on the pod, Skip when none will, an Error status when one fails or answers
        anything but Success, Skip or Error. Records for PreBind which plugins
        skipped (their PreBind is not run) and which may run concurrently."""
        t0 = time.perf_counter()
        status = self._run_pre_bind_pre_flights(state, pod, node_name)
        self._observe("PreBindPreFlight", status, t0)
        return status

    def _run_pre_bind_pre_flights(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> Status | None:
        skipped: set[str] = set()
        parallel: set[str] = set()
        result: Status | None = Status.skip()
        for p in self.pre_bind_plugins:
            pre_flight = getattr(p, "pre_bind_pre_flight", None)
            if pre_flight is None:
                continue  # PreBind runs, but the plugin does not claim the pod
            try:
                res, st = pre_flight(state, pod, node_name)
            except Exception as exc:
                return Status.as_error(f'running PreBindPreFlight "{p.name}": {exc}')
            if isinstance(res, PreBindPreFlightResult) and res.allow_parallel:
                parallel.add(p.name)
            if st is None or st.code == Code.SUCCESS:
                result = None
            elif st.code == Code.SKIP:
                skipped.add(p.name)
            elif st.code == Code.ERROR:
                return Status.as_error(f'running PreBindPreFlight "{p.name}": {st.message}')
            else:
                return Status.as_error(
                    f'PreBindPreFlight {p.name} returned "{st.code.label}", which is '
                    "unsupported. It is supposed to return Success, Skip, or Error status"
                )
        state.write(SKIP_PRE_BIND_KEY, skipped)
        state.write(PARALLEL_PRE_BIND_KEY, parallel)
        return result

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        t0 = time.perf_counter()
        status = await self._run_pre_bind(state, pod, node_name)
        self._observe("PreBind", status, t0)
        return status

    def pre_bind_groups(self, state: CycleState) -> list[list[PreBindPlugin]]:
        """The PreBind plugins to run, in order, grouped: consecutive plugins whose
        pre-flight allowed it share a concurrent group; skipped plugins are left out
        (but one that does not allow concurrency still closes a group)."""
        skipped: set[str] = state.get(SKIP_PRE_BIND_KEY) or set()
        parallel: set[str] = state.get(PARALLEL_PRE_BIND_KEY) or set()
        groups: list[list[PreBindPlugin]] = []
        group: list[PreBindPlugin] = []
        for p in self.pre_bind_plugins:
            if p.name in parallel:
                if p.name not in skipped:
                    group.append(p)
                continue
            if group:
                groups.append(group)
                group = []
            if p.name not in skipped:
                groups.append([p])
        if group:
            groups.append(group)
        return groups

    async def _run_pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        for group in self.pre_bind_groups(state):
            if len(group) == 1:
                statuses = [await _pre_bind_one(group[0], state, pod, node_name)]
            else:
                statuses = list(
                    await asyncio.gather(*(_pre_bind_one(p, state, pod, node_name) for p in group))
                )
            for st in statuses:
                if st is not None:
                    return st
        return None

    async def run_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        t0 = time.perf_counter()
        status: Status | None = Status.skip()
        for p in self.bind_plugins:
            try:
                st = await p.bind(state, pod, node_name)
            except Exception as exc:
                status = Status.as_error(exc, p.name)
                break
            if st is not None and st.code == Code.SKIP:
                continue
            status = st.with_plugin(p.name) if st is not None else None
            break
        if status is not None and status.code == Code.SKIP:
            status = Status.as_error("no bind plugin bound the pod")
        self._observe("Bind", status, t0)
        return status

    def run_post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        t0 = time.perf_counter()
        for p in self.post_bind_plugins:
            _call(p.name, p.post_bind, state, pod, node_name)
        self._observe("PostBind", None, t0)

    def _observe(self, point: str, status: Status | None, t0: float) -> None:
        if self.observer is not None:
            self.observer.extension_point(point, status, time.perf_counter() - t0)


#: CycleState keys the pre-flights leave for PreBind.
SKIP_PRE_BIND_KEY = "kscheduler.io/skip-pre-bind-plugins"
PARALLEL_PRE_BIND_KEY = "kscheduler.io/parallel-pre-bind-plugins"


async def _pre_bind_one(
    p: PreBindPlugin, state: CycleState, pod: PodInfo, node_name: str
) -> Status | None:
    """One plugin's PreBind: None on Success or Skip, else its status with its name (an
    Error wrapped as upstream's framework wraps it: ``running PreBind plugin "NAME": ...``)."""
    try:
        st = await p.pre_bind(state, pod, node_name)
    except Exception as exc:
        return Status.as_error(f'running PreBind plugin "{p.name}": {exc}', p.name)
    if st is not None and st.code not in (Code.SUCCESS, Code.SKIP):
        if st.code == Code.ERROR:
            return Status.as_error(f'running PreBind plugin "{p.name}": {st.message}', p.name)
        return st.with_plugin(p.name)
    return None


def _positions_of_none(values: list[Any]) -> list[int]:
    """Where ``values`` holds None (a few places, typically: found at C speed)."""
    out: list[int] = []
    i = -1
    index = values.index
    try:
        while True:
            i = index(None, i + 1)
            out.append(i)
    except ValueError:
        return out


def go_list(items: Sequence[str]) -> str:
    """A list formatted as Go's %v prints a slice of strings: [a b]."""
    return "[" + " ".join(items) + "]"


def _call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        return Status.as_error(exc, name)


def _filter_error(plugin: str, st: Status) -> Status:
    """A Filter's Error status as upstream's framework wraps it (the pod's message)."""
    return Status.as_error(f'running "{plugin}" filter plugin: {st.message}', plugin)
