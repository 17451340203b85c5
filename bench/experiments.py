"""Proposed kscheduler changes, tried out as patches applied at start-up.

    python -m bench.experiments --patches pts-incremental -- --config F --kubeconfig K ...
    python -m bench.run --kscheduler-patches pts-incremental,ipa-incremental ...
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
* ``pts-incremental`` PodTopologySpread.pre_filter: domain counts kept up to date
                     from a cache change log instead of a scan of every pod;
* ``ipa-incremental`` InterPodAffinity.pre_filter: the same for topology-pair
                     counts, existing anti-affinity grouped by distinct term;
* ``cache-changelog`` the change log the two above read (applied with them);
* ``gc``             (for bench.cycle) the daemon's GC policy in this process: a
                     higher generation-0 threshold, gc.freeze() once synced.

Proposals that were measured here and then made in the source (a yield between
cycles, batch ``score_nodes`` scoring, O(log n) event-log trimming, the GC
policy in the daemon) are no longer patches: the code itself has them.
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


# --------------------------------------------------------------------------- incremental counts

_CHANGELOG_LIMIT = 200_000


@patch("cache-changelog")
def _cache_changelog() -> None:
    """Cache: append the name of every node whose pods or labels change to a log.

    The stand-in for what a real change would add to kscheduler.cache (a change
    sequence per node, as upstream's snapshot keeps nodes in generation order);
    the incremental patches below read it.
    """
    from kscheduler.cache import Cache

    if getattr(Cache, "_bench_changelog", False):
        return
    Cache._bench_changelog = True  # type: ignore[attr-defined]
    init, place, unplace = Cache.__init__, Cache._place, Cache._unplace
    add_node, remove_node = Cache.add_node, Cache.remove_node

    def log(self: Cache, name: str) -> None:
        changes: list[str] = self._bench_changes  # type: ignore[attr-defined]
        if len(changes) >= _CHANGELOG_LIMIT:
            changes.clear()
            self._bench_epoch += 1  # type: ignore[attr-defined]
        changes.append(name)

    def __init__(self: Cache, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._bench_changes = []  # type: ignore[attr-defined]
        self._bench_epoch = 0  # type: ignore[attr-defined]

    def _place(self: Cache, pod: Any) -> None:
        place(self, pod)
        log(self, pod.node_name)

    def _unplace(self: Cache, pod: Any) -> None:
        unplace(self, pod)
        log(self, pod.node_name)

    def _add_node(self: Cache, node: Any) -> Any:
        out = add_node(self, node)
        log(self, node.name)
        return out

    def _remove_node(self: Cache, name: str) -> None:
        remove_node(self, name)
        log(self, name)

    Cache.__init__ = __init__  # type: ignore[method-assign]
    Cache._place = _place  # type: ignore[method-assign]
    Cache._unplace = _unplace  # type: ignore[method-assign]
    Cache.add_node = _add_node  # type: ignore[method-assign]
    Cache.update_node = _add_node
    Cache.remove_node = _remove_node  # type: ignore[method-assign]


Contribution = dict[Any, dict[Any, int]]


class NodeAggregate:
    """Per-node contributions (group -> key -> count) and their sums over all nodes,
    brought up to date from the cache's change log: O(changed nodes) per cycle."""

    __slots__ = ("cursor", "epoch", "per_node", "totals")

    def __init__(self) -> None:
        self.epoch = -1
        self.cursor = 0
        self.per_node: dict[str, Contribution] = {}
        self.totals: dict[Any, dict[Any, int]] = {}

    def refresh(
        self, cache: Any, nodes: Sequence[Any], contribution: Callable[[Any], Contribution]
    ) -> None:
        changes: list[str] = cache._bench_changes
        if self.epoch != cache._bench_epoch:
            self.per_node.clear()
            self.totals.clear()
            for ni in nodes:
                self._add(ni.name, contribution(ni))
        else:
            for name in dict.fromkeys(changes[self.cursor :]):
                self._remove(name)
                ni = cache.nodes.get(name)
                if ni is not None and ni.node is not None:
                    self._add(name, contribution(ni))
        self.cursor = len(changes)
        self.epoch = cache._bench_epoch

    def _add(self, name: str, c: Contribution) -> None:
        if not c:
            return
        self.per_node[name] = c
        totals = self.totals
        for group, counts in c.items():
            t = totals.get(group)
            if t is None:
                t = totals[group] = {}
            for key, n in counts.items():
                t[key] = t.get(key, 0) + n

    def _remove(self, name: str) -> None:
        c = self.per_node.pop(name, None)
        if not c:
            return
        totals = self.totals
        for group, counts in c.items():
            t = totals[group]
            for key, n in counts.items():
                left = t[key] - n
                if left:
                    t[key] = left
                else:
                    del t[key]
            if not t:
                del totals[group]


def _aggregates(owner: Any) -> dict[Any, NodeAggregate]:
    aggs: dict[Any, NodeAggregate] | None = getattr(owner, "_bench_aggregates", None)
    if aggs is None:
        aggs = {}
        owner._bench_aggregates = aggs
    return aggs


def _aggregate(owner: Any, key: Any) -> NodeAggregate:
    aggs = _aggregates(owner)
    agg = aggs.get(key)
    if agg is None:
        if len(aggs) >= 256:  # a crude bound: forget them all
            aggs.clear()
        agg = aggs[key] = NodeAggregate()
    return agg


@patch("pts-incremental")
def _pts_incremental() -> None:
    """PodTopologySpread.pre_filter: per-domain counts kept up to date across cycles.

    Used when the node inclusion policies cannot exclude a node for this pod
    (nodeTaintsPolicy Ignore, and nodeAffinityPolicy Ignore or a pod without
    nodeSelector/required node affinity); otherwise the full scan runs. A domain
    key counts the nodes in it too, so that empty domains stay (as in the scan).
    """
    _cache_changelog()
    from kscheduler.framework.status import Status
    from kscheduler.plugins import pod_topology_spread as pts

    original = pts.PodTopologySpread.pre_filter
    nodes_key = "__nodes__"

    def pre_filter(
        self: pts.PodTopologySpread, state: Any, pod: Any, nodes: Sequence[Any]
    ) -> tuple[Any, Any]:
        snapshot = self._handle.snapshot
        cache = getattr(snapshot, "_cache", None)
        if cache is None or nodes is not snapshot.node_infos():
            return original(self, state, pod, nodes)
        try:
            constraints = self.constraints(pod, pts.DO_NOT_SCHEDULE)
        except pts._BadConstraints:
            return original(self, state, pod, nodes)
        if not constraints:
            return None, Status.skip()
        plain = not pod.node_selector and pod.required_node_affinity is None
        if any(c.honor_node_taints or (c.honor_node_affinity and not plain) for c in constraints):
            return original(self, state, pod, nodes)
        counter = pts._NodeCounter(pod, constraints)
        keys = [c.topology_key for c in constraints]

        def contribution(ni: Any) -> Contribution:
            node = ni.node
            if node is None:
                return {}
            labels = node.labels
            if not pts._has_all_keys(labels, constraints):
                return {}
            out: Contribution = {}
            for i, n in enumerate(counter.counts(ni, node)):
                if n is None:
                    continue
                out[i] = {labels[keys[i]]: n}
                out[(nodes_key, i)] = {labels[keys[i]]: 1}
            return out

        agg = _aggregate(
            self, (pod.namespace, tuple((c.topology_key, c.selector) for c in constraints))
        )
        agg.refresh(cache, nodes, contribution)
        counts: list[dict[str, int]] = []
        for i in range(len(constraints)):
            present = agg.totals.get((nodes_key, i), {})
            matched = agg.totals.get(i, {})
            counts.append({value: matched.get(value, 0) for value in present})
        paths: list[list[Any]] = []
        for per_domain in counts:
            p: list[Any] = ["", pts._NO_MATCH, "", pts._NO_MATCH]
            for value, num in per_domain.items():
                pts._update_paths(p, value, num)
            paths.append(p)
        self_match = tuple(1 if c.matches(pod.labels) else 0 for c in constraints)
        state.write(pts.PRE_FILTER_KEY, pts.FilterState(constraints, counts, paths, self_match))
        return None, None

    pts.PodTopologySpread.pre_filter = pre_filter  # type: ignore[method-assign]


@patch("ipa-incremental")
def _ipa_incremental() -> None:
    """InterPodAffinity.pre_filter: topology-pair counts kept up to date across cycles.

    Existing pods' required anti-affinity terms are grouped by term: each distinct
    term is matched against the incoming pod once, not once per pod holding it.
    """
    _cache_changelog()
    from kscheduler.framework.status import Status
    from kscheduler.plugins import inter_pod_affinity as ipa

    original = ipa.InterPodAffinity.pre_filter

    def existing_contribution(ni: Any) -> Contribution:
        node = ni.node
        if node is None or not ni.pods_with_required_anti_affinity:
            return {}
        labels = node.labels
        out: Contribution = {}
        for other in ni.pods_with_required_anti_affinity.values():
            for t in other.required_anti_affinity:
                value = labels.get(t.topology_key)
                if value is not None:
                    per = out.get(t)
                    if per is None:
                        per = out[t] = {}
                    pair = (t.topology_key, value)
                    per[pair] = per.get(pair, 0) + 1
        return out

    def pre_filter(
        self: ipa.InterPodAffinity, state: Any, pod: Any, nodes: Sequence[Any]
    ) -> tuple[Any, Any]:
        snapshot = self._handle.snapshot
        cache = getattr(snapshot, "_cache", None)
        if cache is None or nodes is not snapshot.node_infos():
            return original(self, state, pod, nodes)
        namespaces = ipa._Namespaces(self._handle)
        affinity = ipa._resolve(pod.required_affinity, namespaces)
        anti = ipa._resolve(pod.required_anti_affinity, namespaces)
        ns_labels = namespaces.labels_of(pod.namespace)

        ex = _aggregate(self, "existing-anti-affinity")
        ex.refresh(cache, nodes, existing_contribution)
        existing: dict[Any, int] = {}
        for term, pairs in ex.totals.items():
            if ipa._existing_term_matches(term, pod, ns_labels):
                if not existing:
                    existing = dict(pairs)
                else:
                    for pair, n in pairs.items():
                        existing[pair] = existing.get(pair, 0) + n

        affinity_counts: dict[Any, int] = {}
        anti_counts: dict[Any, int] = {}
        if affinity:

            def affinity_contribution(ni: Any) -> Contribution:
                labels = ni.node.labels
                per: dict[Any, int] = {}
                for other in ni.pods.values():
                    if ipa._matches_all(affinity, other):
                        for rt in affinity:
                            value = labels.get(rt.topology_key)
                            if value is not None:
                                pair = (rt.topology_key, value)
                                per[pair] = per.get(pair, 0) + 1
                return {0: per} if per else {}

            agg = _aggregate(self, ("affinity", affinity))
            agg.refresh(cache, nodes, affinity_contribution)
            affinity_counts = dict(agg.totals.get(0, {}))
        if anti:

            def anti_contribution(ni: Any) -> Contribution:
                labels = ni.node.labels
                per: dict[Any, int] = {}
                for other in ni.pods.values():
                    for rt in anti:
                        value = labels.get(rt.topology_key)
                        if value is not None and rt.matches(other):
                            pair = (rt.topology_key, value)
                            per[pair] = per.get(pair, 0) + 1
                return {0: per} if per else {}

            agg = _aggregate(self, ("anti", anti))
            agg.refresh(cache, nodes, anti_contribution)
            anti_counts = dict(agg.totals.get(0, {}))

        if not existing and not affinity and not anti:
            return None, Status.skip()
        state.write(
            ipa.PRE_FILTER_KEY,
            ipa.FilterState(
                affinity,
                anti,
                ns_labels,
                existing,
                affinity_counts,
                anti_counts,
                ipa._matches_all(affinity, pod),
            ),
        )
        return None, None

    ipa.InterPodAffinity.pre_filter = pre_filter  # type: ignore[method-assign]


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
