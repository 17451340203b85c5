"""Proposed kscheduler changes, tried out as patches applied at start-up.

    python -m bench.experiments --patches fit-filter -- --config F --kubeconfig K ...
    python -m bench.run --kscheduler-patches filter-loop,fit-filter ...
    python -m bench.cycle --patches select-host,filter-loop --check

Each patch replaces functions of kscheduler in this process only, so that a
proposal can be measured with bench.run or bench.cycle before it is made in the
source (where it belongs: these copies do not follow later edits of the code
they replace). ``bench.cycle --check`` compares every placement with an
unpatched run. Nothing here is imported by kscheduler itself.

Patches (``ALL`` applies every one of them but score-ints):

* ``filter-loop``    Algorithm.find_nodes_that_fit: filters minus the skipped ones
                     resolved once per cycle and run inline; the nominated-pods
                     check per node becomes a set lookup, done only when the queue
                     holds nominated pods;
* ``fit-filter``     NodeResourcesFit.filter: a fast "fits" path that builds no
                     InsufficientResource list;
* ``select-host``    Algorithm.select_host: totals summed per plugin list, ties
                     collected and one picked with a single randrange (the same
                     uniform choice, fewer random draws);
* ``score-ints``     (bench.cycle only) run_score returns int lists, select_host
                     sums them: no NodeScore object per plugin and node;
* ``gc``             (for bench.cycle) the daemon's GC policy in this process: a
                     higher generation-0 threshold, gc.freeze() once synced.

Proposals that were measured here and then made in the source (a yield between
cycles, batch ``score_nodes`` scoring, O(log n) event-log trimming, the GC
policy in the daemon, the cache's change log with PodTopologySpread and
InterPodAffinity PreFilter counts kept per node across cycles) are no longer
patches: the code itself has them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Callable, Sequence
from typing import Any

PATCHES: dict[str, Callable[[], None]] = {}
APPLIED: list[str] = []


def patch(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        PATCHES[name] = fn
        return fn

    return register


#: Patches that only hold in process (bench.cycle): left out of ALL.
IN_PROCESS_ONLY = frozenset({"score-ints"})


def apply(names: Sequence[str]) -> None:
    if "ALL" in names:
        names = [n for n in PATCHES if n not in APPLIED and n not in IN_PROCESS_ONLY]
    for name in names:
        if name not in PATCHES:
            raise SystemExit(f"unknown patch {name!r}; known: {', '.join(sorted(PATCHES))}")
        if name in APPLIED:
            continue
        PATCHES[name]()
        APPLIED.append(name)


# --------------------------------------------------------------------------- scheduler loop


# --------------------------------------------------------------------------- scoring


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


@patch("score-ints")
def _score_ints() -> None:
    """run_score hands select_host plain int lists (no NodeScore per plugin and node).

    In-process only (bench.cycle): the daemon's explain/annotation code still
    reads NodeScore objects from ScheduleResult.scores.
    """
    from kscheduler import algorithm as alg
    from kscheduler.framework.interface import NodeScore, ScoreNormalizer
    from kscheduler.framework.runtime import Framework
    from kscheduler.framework.status import Code, Status

    def run_score_ints(
        self: Framework, state: Any, pod: Any, nodes: Sequence[Any]
    ) -> tuple[dict[str, list[int]], Any]:
        out: dict[str, list[int]] = {}
        skip = state.skip_score_plugins
        for p in self.score_plugins:
            if skip and p.name in skip:
                continue
            batch = getattr(p, "score_nodes", None)
            if batch is not None:
                ints, st = batch(state, pod, nodes)
            else:
                ints = []
                st = None
                for ni in nodes:
                    s, st = p.score(state, pod, ni)
                    if st is not None and st.code != Code.SUCCESS:
                        break
                    ints.append(s)
            if st is not None and st.code != Code.SUCCESS:
                return out, st.with_plugin(p.name)
            if isinstance(p, ScoreNormalizer):
                scores = [NodeScore(ni.name, s) for ni, s in zip(nodes, ints, strict=True)]
                p.normalize_score(state, pod, scores)
                ints = [ns.score for ns in scores]
            if ints and (min(ints) < 0 or max(ints) > 100):
                return out, Status.as_error(f"plugin {p.name}: invalid score", p.name)
            w = self.score_weights[p.name]
            out[p.name] = [s * w for s in ints] if w != 1 else ints
        return out, None

    def select_host(
        self: alg.Algorithm, nodes: Sequence[Any], scores: dict[str, list[int]]
    ) -> tuple[str, dict[str, int]]:
        lists = list(scores.values())
        totals = [sum(t) for t in zip(*lists, strict=True)] if lists else [0] * len(nodes)
        best = max(totals)
        ties = [i for i, t in enumerate(totals) if t == best]
        pick = ties[0] if len(ties) == 1 else ties[self.rng.randrange(len(ties))]
        return nodes[pick].name, {ni.name: totals[i] for i, ni in enumerate(nodes)}

    Framework.run_score = run_score_ints  # type: ignore[method-assign,assignment]
    alg.Algorithm.select_host = select_host  # type: ignore[method-assign,assignment]


# --------------------------------------------------------------------------- queue


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
