"""Proposed kscheduler changes, tried out as patches applied at start-up.

    python -m bench.experiments --patches yield,score-batch -- --config F --kubeconfig K ...
    python -m bench.run --kscheduler-patches yield,score-batch ...
    python -m bench.cycle --patches score-batch,score-plugins --check

Each patch replaces functions of kscheduler in this process only, so that a
proposal can be measured with bench.run or bench.cycle before it is made in the
source (where it belongs: these copies do not follow later edits of the code
they replace). ``bench.cycle --check`` compares every placement with an
unpatched run. Nothing here is imported by kscheduler itself.

Patches (``ALL`` applies every one of them):

* ``yield``          Scheduler: give the event loop a turn after every cycle;
* ``score-batch``    Framework.run_score: ask a plugin for all nodes' scores in one
                     call (``score_nodes``) when it offers that, and check/weight
                     plain ints; normalizer detection done once;
* ``score-plugins``  ``score_nodes`` for NodeResourcesFit, NodeResourcesBalanced-
                     Allocation, ImageLocality and TaintToleration;
* ``filter-loop``    Algorithm.find_nodes_that_fit: filters minus the skipped ones
                     resolved once per cycle and run inline; the nominated-pods
                     check per node becomes a set lookup, done only when the queue
                     holds nominated pods;
* ``fit-filter``     NodeResourcesFit.filter: a fast "fits" path that builds no
                     InsufficientResource list;
* ``select-host``    Algorithm.select_host: totals summed per plugin list, ties
                     collected and one picked with a single randrange (the same
                     uniform choice, fewer random draws);
* ``trim-events``    SchedulingQueue._trim_events: O(log n) instead of a min() over
                     every in-flight pod plus a copy of the event log per pod;
* ``gc``             gc.freeze() once the informers have synced, and a higher
                     generation-0 threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gc
import sys
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

PATCHES: dict[str, Callable[[], None]] = {}
APPLIED: list[str] = []


def patch(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        PATCHES[name] = fn
        return fn

    return register


def apply(names: Sequence[str]) -> None:
    if "ALL" in names:
        names = [n for n in PATCHES if n not in APPLIED]
    for name in names:
        if name not in PATCHES:
            raise SystemExit(f"unknown patch {name!r}; known: {', '.join(sorted(PATCHES))}")
        if name in APPLIED:
            continue
        PATCHES[name]()
        APPLIED.append(name)


# --------------------------------------------------------------------------- scheduler loop


@patch("yield")
def _yield() -> None:
    from kscheduler.scheduler import Scheduler

    original = Scheduler.schedule_one

    async def schedule_one(self: Scheduler, qp: Any) -> None:
        await original(self, qp)
        # one turn of the loop: bind tasks, informer events and timers run between cycles
        await asyncio.sleep(0)

    Scheduler.schedule_one = schedule_one  # type: ignore[method-assign]


# --------------------------------------------------------------------------- scoring


@patch("score-batch")
def _score_batch() -> None:
    from kscheduler.framework.cycle_state import CycleState
    from kscheduler.framework.interface import NodeScore, ScoreNormalizer
    from kscheduler.framework.runtime import Framework
    from kscheduler.framework.status import Code, Status
    from kscheduler.framework.types import NodeInfo, PodInfo

    original = Framework.run_score

    def plan(self: Framework) -> list[tuple[Any, Callable[..., Any] | None, bool, int]]:
        cached: list[tuple[Any, Callable[..., Any] | None, bool, int]] | None = getattr(
            self, "_bench_score_plan", None
        )
        if cached is None:
            cached = [
                (
                    p,
                    getattr(p, "score_nodes", None),
                    isinstance(p, ScoreNormalizer),
                    self.score_weights[p.name],
                )
                for p in self.score_plugins
            ]
            self._bench_score_plan = cached  # type: ignore[attr-defined]
        return cached

    def run_score(
        self: Framework, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[dict[str, list[NodeScore]], Status | None]:
        if state.record:
            return original(self, state, pod, nodes)
        t0 = time.perf_counter()
        out: dict[str, list[NodeScore]] = {}
        skip = state.skip_score_plugins
        names = [ni.name for ni in nodes]
        for p, batch, normalizer, w in plan(self):
            if skip and p.name in skip:
                continue
            try:
                if batch is not None:
                    ints, st = batch(state, pod, nodes)
                    if st is not None and st.code != Code.SUCCESS:
                        return out, st.with_plugin(p.name)
                else:
                    fn = p.score
                    ints = []
                    append = ints.append
                    for ni in nodes:
                        s, st = fn(state, pod, ni)
                        if st is not None and st.code != Code.SUCCESS:
                            return out, st.with_plugin(p.name)
                        append(s)
                if normalizer:
                    scores = [NodeScore(n, s) for n, s in zip(names, ints, strict=True)]
                    st = p.normalize_score(state, pod, scores)
                    if st is not None and st.code != Code.SUCCESS:
                        return out, st.with_plugin(p.name)
                    ints = [ns.score for ns in scores]
            except Exception as exc:
                return out, Status.as_error(exc, p.name)
            if ints and (min(ints) < 0 or max(ints) > 100):
                bad = next(s for s in ints if not 0 <= s <= 100)
                return out, Status.as_error(
                    f"plugin {p.name} returns an invalid score {bad}, it should be in the "
                    "range of [0, 100] after normalizing",
                    p.name,
                )
            out[p.name] = [NodeScore(n, s * w) for n, s in zip(names, ints, strict=True)]
        self._observe("Score", None, t0)
        return out, None

    Framework.run_score = run_score  # type: ignore[method-assign]


@patch("score-plugins")
def _score_plugins() -> None:
    from kscheduler.framework.cycle_state import CycleState
    from kscheduler.framework.interface import MAX_NODE_SCORE
    from kscheduler.framework.status import Status
    from kscheduler.framework.types import NodeInfo, PodInfo
    from kscheduler.plugins import balanced_allocation as ba
    from kscheduler.plugins import image_locality as il
    from kscheduler.plugins import node_resources_fit as nrf
    from kscheduler.plugins import taint_toleration as tt

    # NodeResourcesFit: LeastAllocated over cpu and memory (the default) inline,
    # anything else through score() per node.
    def fit_score_nodes(
        self: nrf.NodeResourcesFit, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        strategy = self.args.scoring_strategy
        if self._names != ("cpu", "memory") or strategy.type != nrf.LEAST_ALLOCATED:
            return [self.score(state, pod, ni)[0] for ni in nodes], None
        reqs = state.get(nrf.PRE_SCORE_KEY)
        if reqs is None:
            reqs = nrf.pod_score_requests(pod, self._names)
        rc, rm = reqs
        wc, wm = (r.weight for r in strategy.resources)
        out: list[int] = []
        append = out.append
        for ni in nodes:
            node = ni.node
            if node is None:
                append(0)
                continue
            alloc = node.allocatable
            ac = alloc.milli_cpu
            am = alloc.memory
            total = wsum = 0
            if ac:
                r = ni.non_zero_cpu + rc
                if r <= ac:
                    total += (ac - r) * 100 // ac * wc
                wsum += wc
            if am:
                r = ni.non_zero_memory + rm
                if r <= am:
                    total += (am - r) * 100 // am * wm
                wsum += wm
            append(total // wsum if wsum else 0)
        return out, None

    nrf.NodeResourcesFit.score_nodes = fit_score_nodes  # type: ignore[attr-defined]

    # BalancedAllocation over cpu and memory (the default): the same float arithmetic
    # as balanced_score() (two fractions: std = |f0 - f1| / 2), inline.
    def balanced_score_nodes(
        self: ba.NodeResourcesBalancedAllocation,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
    ) -> tuple[list[int], Status | None]:
        reqs = state.get(ba.PRE_SCORE_KEY)
        if self._names != ("cpu", "memory") or reqs is None:
            return [self.score(state, pod, ni)[0] for ni in nodes], None
        rc, rm = reqs
        out: list[int] = []
        append = out.append
        for ni in nodes:
            node = ni.node
            if node is None:
                append(100)
                continue
            alloc = node.allocatable
            ac = alloc.milli_cpu
            am = alloc.memory
            if ac and am:
                used = ni.requested
                f0 = (used.milli_cpu + rc) / ac
                if f0 > 1:
                    f0 = 1.0
                f1 = (used.memory + rm) / am
                if f1 > 1:
                    f1 = 1.0
                append(int((1 - abs((f0 - f1) / 2)) * MAX_NODE_SCORE))
            else:  # one fraction or none: no spread
                append(100)
        return out, None

    ba.NodeResourcesBalancedAllocation.score_nodes = balanced_score_nodes  # type: ignore[attr-defined]

    # ImageLocality: a node reporting no images scores 0 (sum below the threshold).
    def image_score_nodes(
        self: il.ImageLocality, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        out = [0] * len(nodes)
        score = self.score
        for i, ni in enumerate(nodes):
            node = ni.node
            if node is not None and node.images:
                out[i] = score(state, pod, ni)[0]
        return out, None

    il.ImageLocality.score_nodes = image_score_nodes  # type: ignore[attr-defined]

    # TaintToleration: a node without taints counts 0 PreferNoSchedule taints.
    def taint_score_nodes(
        self: tt.TaintToleration, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        out = [0] * len(nodes)
        score = self.score
        for i, ni in enumerate(nodes):
            node = ni.node
            if node is None or node.taints:
                s, st = score(state, pod, ni)
                if st is not None:
                    return out, st
                out[i] = s
        if state.get(tt.PRE_SCORE_KEY) is None:
            return out, Status.as_error(
                f'failed to read "{tt.PRE_SCORE_KEY}" from cycleState: not found', tt.NAME
            )
        return out, None

    tt.TaintToleration.score_nodes = taint_score_nodes  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- filtering


@patch("filter-loop")
def _filter_loop() -> None:
    from kscheduler import algorithm as alg
    from kscheduler.framework.runtime import go_list
    from kscheduler.framework.status import Code, Status

    def find_nodes_that_fit(
        self: alg.Algorithm,
        fwk: Any,
        state: Any,
        pod: Any,
        snapshot: Any,
        *,
        record: Any = None,
        sample: bool = True,
        try_nominated: bool = True,
    ) -> tuple[list[Any], alg.Diagnosis]:
        all_nodes = snapshot.node_infos()
        diagnosis = alg.Diagnosis()
        result, status, involved = fwk.run_pre_filter(state, pod, all_nodes)
        if status is not None:
            if status.code == Code.ERROR:
                raise alg.ScheduleError(status)
            diagnosis.node_to_status.absent = status
            diagnosis.pre_filter_msg = status.message
            diagnosis.unschedulable_plugins |= involved
            if status.code == Code.PENDING:
                diagnosis.pending_plugins |= involved
            return [], diagnosis

        nominated = pod.nominated_node_name
        if nominated and record is None and try_nominated:
            ni = snapshot.get(nominated)
            if ni is not None and (
                result is None or result.node_names is None or nominated in result.node_names
            ):
                st = fwk.run_filter_with_nominated_pods(state, pod, ni)
                if st is None:
                    return [ni], diagnosis
                if st.code == Code.ERROR:
                    raise alg.ScheduleError(st)

        nodes = all_nodes
        if result is not None and result.node_names is not None:
            names = result.node_names
            nodes = [n for n in all_nodes if n.name in names]
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
        to_find = alg.num_feasible_nodes_to_find(pct, n) if sample else n
        feasible: list[Any] = []
        statuses = diagnosis.node_to_status.statuses
        start = self.next_start_node_index % n if sample else 0
        # resolved once per cycle instead of once per node
        skip = state.skip_filter_plugins
        filters = [(name, f) for name, f in fwk._filters if name not in skip]
        nominator = getattr(fwk, "_nominator", None)
        # node -> {uid: pod} of the queue's nominated pods (None: ask per node)
        nominated_map = getattr(nominator, "_nominated", None)
        success = Code.SUCCESS
        error = Code.ERROR
        order = nodes[start:] + nodes[:start] if start else nodes
        visited = 0
        for ni in order:
            visited += 1
            if nominated_map is None:
                with_nominated = bool(fwk.nominated_pods_for_node(ni.name))
            else:
                with_nominated = bool(nominated_map) and bool(nominated_map.get(ni.name))
            if with_nominated:
                st = fwk.run_filter_with_nominated_pods(state, pod, ni)
            else:
                st = None
                for name, f in filters:
                    try:
                        st = f(state, pod, ni)
                    except Exception as exc:
                        st = Status.as_error(exc, name)
                        break
                    if st is not None:
                        if st.code != success:
                            if not st.plugin:
                                st.plugin = name
                            break
                        st = None
            if record is not None:
                record.statuses[ni.name] = st
            if st is None:
                feasible.append(ni)
                if record is not None:
                    record.feasible.append(ni.name)
                if len(feasible) >= to_find:
                    break
            elif st.code == error:
                raise alg.ScheduleError(st)
            else:
                statuses[ni.name] = st
                if st.plugin:
                    diagnosis.unschedulable_plugins.add(st.plugin)
                    if st.code == Code.PENDING:
                        diagnosis.pending_plugins.add(st.plugin)
        if sample:
            self.next_start_node_index = (start + visited) % n
        return feasible, diagnosis

    alg.Algorithm.find_nodes_that_fit = find_nodes_that_fit  # type: ignore[method-assign]


@patch("fit-filter")
def _fit_filter() -> None:
    from kscheduler.framework.cycle_state import CycleState
    from kscheduler.framework.status import Status
    from kscheduler.framework.types import NodeInfo, PodInfo
    from kscheduler.plugins import node_resources_fit as nrf

    original = nrf.NodeResourcesFit.filter

    def filter(
        self: nrf.NodeResourcesFit, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        req = state.get(nrf.PRE_FILTER_KEY)
        node = node_info.node
        if req is not None and node is not None and not req.scalar:
            alloc = node.allocatable
            used = node_info.requested
            if (
                len(node_info.pods) < alloc.allowed_pods
                and (req.milli_cpu <= 0 or req.milli_cpu <= alloc.milli_cpu - used.milli_cpu)
                and (req.memory <= 0 or req.memory <= alloc.memory - used.memory)
                and (
                    req.ephemeral_storage <= 0
                    or req.ephemeral_storage <= alloc.ephemeral_storage - used.ephemeral_storage
                )
            ):
                return None
        return original(self, state, pod, node_info)

    nrf.NodeResourcesFit.filter = filter  # type: ignore[method-assign]


# --------------------------------------------------------------------------- select host


@patch("select-host")
def _select_host() -> None:
    from kscheduler import algorithm as alg

    def select_host(
        self: alg.Algorithm, nodes: Sequence[Any], scores: dict[str, list[Any]]
    ) -> tuple[str, dict[str, int]]:
        lists = [[s.score for s in per_plugin] for per_plugin in scores.values()]
        totals = [sum(t) for t in zip(*lists, strict=True)] if lists else [0] * len(nodes)
        best = max(totals)
        ties = [i for i, t in enumerate(totals) if t == best]
        pick = ties[0] if len(ties) == 1 else ties[self.rng.randrange(len(ties))]
        return nodes[pick].name, {ni.name: totals[i] for i, ni in enumerate(nodes)}

    alg.Algorithm.select_host = select_host  # type: ignore[method-assign]


# --------------------------------------------------------------------------- queue


@patch("trim-events")
def _trim_events() -> None:
    from kscheduler.queue import SchedulingQueue

    first = itemgetter(0)
    original_pop = SchedulingQueue.pop

    async def pop(self: SchedulingQueue) -> Any:
        qp = await original_pop(self)
        if qp is not None:
            # re-insert at the end: insertion order == since_seq order, so the
            # first in-flight entry is always the oldest
            uid = qp.pod.uid
            entry = self._in_flight.pop(uid, None)
            if entry is not None:
                self._in_flight[uid] = entry
        return qp

    def trim(self: SchedulingQueue) -> None:
        log = self._event_log
        if not self._in_flight:
            log.clear()
            return
        if not log:
            return
        oldest = next(iter(self._in_flight.values())).since_seq
        if log[0][0] <= oldest:
            del log[: bisect.bisect_right(log, oldest, key=first)]

    SchedulingQueue.pop = pop  # type: ignore[method-assign]
    SchedulingQueue._trim_events = trim  # type: ignore[method-assign]


# --------------------------------------------------------------------------- gc


@patch("gc")
def _gc() -> None:
    from kscheduler.app import SchedulerApp

    gc.set_threshold(50_000, 20, 100)
    original = SchedulerApp._wait_synced

    async def wait_synced(self: SchedulerApp, stop: asyncio.Event) -> None:
        await original(self, stop)
        gc.collect()
        gc.freeze()  # the synced cache is long-lived: keep it out of every collection

    SchedulerApp._wait_synced = wait_synced  # type: ignore[method-assign]


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(prog="python -m bench.experiments")
    p.add_argument("--patches", default="", help=f"comma-separated, of: {', '.join(PATCHES)}")
    args = p.parse_args(argv)
    apply([n for n in args.patches.split(",") if n])
    from kscheduler.cli import main as kscheduler_main

    return kscheduler_main(rest)


if __name__ == "__main__":
    sys.exit(main())
