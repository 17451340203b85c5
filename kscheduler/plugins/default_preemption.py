"""DefaultPreemption: when a pod fits nowhere, evict lower-priority pods to make room.

PostFilter runs after a failed Filter pass and, as kube-scheduler does:

1. Checks that the pod may preempt at all: not with ``preemptionPolicy: Never``, and
   not while a lower-priority pod on its nominated node is still terminating
   because of an earlier preemption (unless that node is now unresolvable).
2. Takes the nodes Filter rejected as plain Unschedulable (removing pods cannot
   help an UnschedulableAndUnresolvable node) and dry-runs them one by one from a
   random offset, until enough candidates are found (minCandidateNodesPercentage
   of them, at least minCandidateNodesAbsolute, at least one that violates no
   PodDisruptionBudget). A dry run removes every lower-priority pod from a copy of
   the node, checks that the pod fits, then puts victims back, PDB-violating ones
   first and each group most important first, keeping every one that still lets
   the pod fit.
3. Picks one candidate: fewest PDB violations, then the lowest priority of its
   most important victim, the lowest sum of victim priorities, the fewest victims,
   the latest start time of its most important victims, then the first.
4. Clears the nomination of lower-priority pods nominated to that node, evicts the
   victims (a pod held at Permit is rejected instead; one already terminating is
   left alone) and nominates the node for the pod.

As kube-scheduler 1.35 does (SchedulerAsyncPreemption), the evictions of step 4
run in a background task: PostFilter returns the nomination at once, and the
preemptor waits at PreEnqueue ("waiting for the preemption for this pod to be
finished") until the task is done; then the victims' deletion events bring it
back (at once, after a failed API call). A failed eviction is logged and the
nomination stands.

Before a node is picked, HTTP extenders with a preempt verb may narrow the
candidates and their victims (``Handle.preemption_extenders``), as upstream's
callExtenders does; an extender's error fails the attempt unless it is ignorable.

Pods without ``status.startTime`` (never started by a kubelet) count as started
"now", as upstream; among equally important victims the order then follows the
order Go's sort leaves them in for up to twelve pods.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, repeat
from operator import attrgetter, eq
from typing import Any

import structlog

from kscheduler.framework import (
    Code,
    CycleState,
    Handle,
    NodeInfo,
    NodeToStatus,
    PluginEntry,
    PodInfo,
    PostFilterResult,
    Status,
)
from kscheduler.framework.args import INT32_MAX, INT32_MIN, Fields
from kscheduler.framework.interface import PreemptionExtenders, Victims
from kscheduler.framework.node_memo import NodeMemos, nominated_pods_added, same_pods
from kscheduler.framework.selectors import LabelSelector, SelectorError

log = structlog.get_logger("kscheduler.plugins.default_preemption")
_code = attrgetter("code")

NAME = "DefaultPreemption"

MSG_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_TERMINATING = "not eligible due to a terminating pod on the nominated node."
MSG_NOT_HELPFUL = "Preemption is not helpful for scheduling"
MSG_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_NO_CANDIDATE = "no candidate node for preemption"
MSG_PREFIX = "preemption: "
MSG_WAITING = "waiting for the preemption for this pod to be finished"

#: Condition reason and event kube-scheduler gives victims.
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
EVENT_REASON = "Preempted"
EVENT_ACTION = "Preempting"

_PRIORITY_OFFSET = 2**31  # makes every int32 priority non-negative in the sum criterion
_GO_INSERTION_SORT_MAX = 12


@dataclass(frozen=True, slots=True)
class DefaultPreemptionArgs:
    #: Dry-run at least this share of the candidate nodes (a trade-off between the
    #: quality of the choice and the time spent on large clusters).
    min_candidate_nodes_percentage: int = 10
    #: ... and at least this many, so that small clusters look at every node.
    min_candidate_nodes_absolute: int = 100


def parse_args(raw: Mapping[str, Any]) -> DefaultPreemptionArgs:
    """DefaultPreemptionArgs; raises ConfigError with a path relative to the args."""
    f = Fields(raw)
    pct = f.integer("minCandidateNodesPercentage", 10, minimum=INT32_MIN, maximum=INT32_MAX)
    absolute = f.integer("minCandidateNodesAbsolute", 100, minimum=INT32_MIN, maximum=INT32_MAX)
    f.done()
    if not 0 <= pct <= 100:
        raise f.error("minCandidateNodesPercentage", f"not in valid range [0, 100], got {pct}")
    if absolute < 0:
        raise f.error("minCandidateNodesAbsolute", f"not in valid range [0, inf), got {absolute}")
    if pct == 0 and absolute == 0:
        raise f.error(
            "minCandidateNodesPercentage",
            "cannot be zero at the same time as minCandidateNodesAbsolute",
        )
    return DefaultPreemptionArgs(pct, absolute)


# ------------------------------------------------------------------------------ ordering


def _start_time(pod: PodInfo) -> float | None:
    """status.startTime as a POSIX timestamp; None when the pod has not started."""
    return _timestamp(pod.start_time) if pod.start_time else None


@functools.lru_cache(maxsize=4096)
def _timestamp(text: str) -> float | None:
    """An RFC 3339 time as a POSIX timestamp (many pods share a start second)."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def more_important(a: PodInfo, b: PodInfo) -> bool:
    """Higher priority first, then the earlier start.

    A missing start time reads as "now" at the moment it is looked at, ``a`` before
    ``b``: so it is later than any real start time, and of two missing ones ``a``'s
    is the earlier (upstream's comparator behaves exactly so).
    """
    if a.priority != b.priority:
        return a.priority > b.priority
    ta = _start_time(a)
    tb = _start_time(b)
    if ta is None:
        return tb is None
    if tb is None:
        return True
    return ta < tb


def sort_by_importance(pods: list[PodInfo]) -> None:
    """Sort in place, most important first.

    Up to twelve pods this is Go's insertion sort, so ties (and the "now" start
    times above) end in the same order as upstream; beyond that, a stable sort by
    (priority, start time), which may order exact ties differently.
    """
    n = len(pods)
    if n <= _GO_INSERTION_SORT_MAX:
        for i in range(1, n):
            j = i
            while j > 0 and more_important(pods[j], pods[j - 1]):
                pods[j], pods[j - 1] = pods[j - 1], pods[j]
                j -= 1
        return

    def key(p: PodInfo) -> tuple[int, float]:
        t = _start_time(p)
        return (-p.priority, t if t is not None else float("inf"))

    pods.sort(key=key)


# ------------------------------------------------------------------------------ PDBs


@dataclass(slots=True)
class _PDB:
    namespace: str
    selector: LabelSelector | None  # None: matches nothing
    disruptions_allowed: int
    disrupted_pods: frozenset[str]


def _parse_pdbs(raw_pdbs: Sequence[Mapping[str, Any]]) -> list[_PDB]:
    out = []
    for raw in raw_pdbs:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        sel_raw = spec.get("selector")
        selector: LabelSelector | None = None
        if isinstance(sel_raw, Mapping):
            try:
                selector = LabelSelector.parse(sel_raw)
            except SelectorError:
                selector = None  # an invalid selector matches no pod
            if selector is not None and selector.is_empty():
                selector = None  # nil or empty: no pod
        allowed = status.get("disruptionsAllowed") or 0
        disrupted = status.get("disruptedPods")
        out.append(
            _PDB(
                namespace=str(meta.get("namespace") or ""),
                selector=selector,
                disruptions_allowed=allowed if isinstance(allowed, int) else 0,
                disrupted_pods=frozenset(disrupted if isinstance(disrupted, Mapping) else ()),
            )
        )
    return out


def split_by_pdb_violation(
    pods: Sequence[PodInfo], pdbs: Sequence[_PDB]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """(violating, non-violating), each in the order of ``pods``.

    Evicting the pods in order uses up the budgets: a pod violates a PDB that
    selects it once that PDB's allowed disruptions are spent. Pods the PDB
    already lists as disrupted are not counted again.
    """
    allowed = [p.disruptions_allowed for p in pdbs]
    violating: list[PodInfo] = []
    non_violating: list[PodInfo] = []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, pdb in enumerate(pdbs):
                if pdb.namespace != pod.namespace or pdb.selector is None:
                    continue
                if not pdb.selector.matches(pod.labels):
                    continue
                if pod.name in pdb.disrupted_pods:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else non_violating).append(pod)
    return violating, non_violating


# ------------------------------------------------------------------------------ candidates


@dataclass(slots=True)
class Candidate:
    node_name: str
    #: Most important first.
    victims: list[PodInfo]
    num_pdb_violations: int


def _earliest_start_of_most_important(victims: Sequence[PodInfo], now: int) -> tuple[int, float]:
    """Sort key of the "latest start time" criterion (higher is preferred).

    The earliest start among the highest-priority victims; when none of them has
    started, "now" (``now`` grows with every call, as the clock would).
    """
    top = max(v.priority for v in victims)
    starts = [t for v in victims if v.priority == top and (t := _start_time(v)) is not None]
    if not starts:
        return (1, float(now))
    return (0, min(starts))


def pick_one_node(candidates: Sequence[Candidate]) -> Candidate:
    """Upstream's criteria, each breaking the ties of the one before; then the first."""
    clock = iter(range(1, 1 << 62))

    criteria: list[Callable[[Candidate], Any]] = [
        lambda c: -c.num_pdb_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(v.priority + _PRIORITY_OFFSET for v in c.victims),
        lambda c: -len(c.victims),
        lambda c: _earliest_start_of_most_important(c.victims, next(clock)),
    ]
    remaining = list(candidates)
    for score in criteria:
        scored = [(score(c), c) for c in remaining]
        best = max(s for s, _ in scored)
        remaining = [c for s, c in scored if s == best]
        if len(remaining) == 1:
            break
    return remaining[0]


def _go_aggregate(messages: Sequence[str]) -> str:
    """The text of Go's utilerrors aggregate: one message, or "[a, b]" deduplicated."""
    seen: list[str] = []
    for m in messages:
        if m not in seen:
            seen.append(m)
    if len(messages) == 1 or len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


def _terminating_by_preemption(pod: PodInfo) -> bool:
    if not pod.deleting:
        return False
    status = pod.raw.get("status")
    if not isinstance(status, Mapping):
        return False
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "DisruptionTarget":
            return cond.get("status") == "True" and cond.get("reason") == (
                REASON_PREEMPTION_BY_SCHEDULER
            )
    return False


#: a dry run kept for a node: the nominated pods added, the victims, how many of them
#: violate a PDB, the failure
_DryRun = tuple[tuple[PodInfo, ...], tuple[PodInfo, ...], int, Status | None]


class DefaultPreemption:
    name = NAME
    #: The informers the app must start for this plugin.
    required_kinds = ("poddisruptionbudgets",)

    def __init__(
        self, args: DefaultPreemptionArgs, handle: Handle, rng: random.Random | None = None
    ) -> None:
        self.args = args
        self._handle = handle
        #: Picks the dry run's starting node; seed it for reproducible runs.
        self.rng = rng or random.Random()
        #: Preemptor UID -> the task clearing nominations and evicting its victims.
        self._preempting: dict[str, asyncio.Task[None]] = {}
        #: Dry runs kept per node (see find_candidates).
        self._dry_runs: NodeMemos[_DryRun] = NodeMemos()

    # ---- PreEnqueue ----------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """Keeps a preemptor out of activeQ while its evictions are under way."""
        if pod.uid in self._preempting:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [MSG_WAITING])
        return None

    async def wait_idle(self) -> None:
        """Until every eviction started so far has finished (for shutdown and tests)."""
        while self._preempting:
            await asyncio.gather(*self._preempting.values(), return_exceptions=True)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> DefaultPreemption:
        return cls(args if isinstance(args, DefaultPreemptionArgs) else parse_args({}), handle)

    # ---- PostFilter ----------------------------------------------------------------------
    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status | None]:
        """Success with the nominated node (and, as kube-scheduler 1.37, a message that the
        pod's FailedScheduling text ends with); Unschedulable (with an empty nomination when
        no node can be made to fit, so that a stale one is cleared); Error."""
        result, status = await self._preempt(state, pod, statuses)
        if status is not None and status.message:
            return result, Status(status.code, [MSG_PREFIX + status.message])
        return result, status

    async def _preempt(
        self, state: CycleState, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status | None]:
        # Everything that reads the snapshot happens before the first await: the
        # cache changes under us once the evictions start.
        eligible, why = self.pod_eligible_to_preempt_others(pod, statuses)
        if not eligible:
            return None, Status.unschedulable(why)
        all_nodes = self._handle.snapshot.node_infos()
        if not all_nodes:
            return None, Status.as_error("no nodes available")
        candidates, node_statuses, errors = self.find_candidates(state, pod, statuses)
        if not candidates:
            if errors:
                return None, Status.as_error(_go_aggregate(errors))
            msg = _fit_error_message(len(all_nodes), node_statuses)
            return PostFilterResult(nominated_node_name=""), Status.unschedulable(msg)
        through_extenders = self._handle.preemption_extenders()
        if through_extenders is not None:
            try:
                candidates = await _ask_extenders(through_extenders, pod, candidates)
            except Exception as exc:
                return None, Status.as_error(str(exc))
            if not candidates:
                return None, Status.unschedulable(MSG_NO_CANDIDATE)
        best = candidates[0] if len(candidates) == 1 else pick_one_node(candidates)
        if not best.node_name:
            return None, Status.unschedulable(MSG_NO_CANDIDATE)
        nominated = [
            p
            for p in self._handle.nominated_pods_for_node(best.node_name)
            if p.priority < pod.priority
        ]
        if any(p.nominated_node_name for p in nominated) or any(
            not v.deleting for v in best.victims
        ):
            # As kube-scheduler: the evictions run in the background, the preemptor
            # waits at PreEnqueue until they are done.
            self._preempting[pod.uid] = asyncio.get_running_loop().create_task(
                self._prepare_in_background(best, pod, nominated),
                name=f"preemption for {pod.key}",
            )
        found = (
            f"found a potential placement for pod on node {best.node_name}, "
            f"preempting {len(best.victims)} victims"
        )
        return (
            PostFilterResult(nominated_node_name=best.node_name, victims=len(best.victims)),
            Status(Code.SUCCESS, [found]),
        )

    def pod_eligible_to_preempt_others(
        self, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[bool, str]:
        if pod.preemption_policy == "Never":
            return False, MSG_NEVER
        nominated = pod.nominated_node_name
        if nominated:
            st = statuses.get(nominated)
            # a node absent from the statuses counts as UnschedulableAndUnresolvable
            if st is None or st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            ni = self._handle.snapshot.get(nominated)
            if ni is not None:
                for p in ni.pods.values():
                    if p.priority < pod.priority and _terminating_by_preemption(p):
                        return False, MSG_TERMINATING
        return True, ""

    # ---- dry run -------------------------------------------------------------------------
    def calculate_num_candidates(self, num_nodes: int) -> int:
        n = num_nodes * self.args.min_candidate_nodes_percentage // 100
        n = max(n, self.args.min_candidate_nodes_absolute)
        return min(n, num_nodes)

    def potential_nodes(self, statuses: NodeToStatus) -> list[NodeInfo]:
        """Nodes Filter rejected as Unschedulable (those not visited count as unresolvable)."""
        snapshot = self._handle.snapshot
        absent = statuses.absent
        out: list[NodeInfo] = []
        if absent is not None and absent.code == Code.UNSCHEDULABLE:
            for ni in snapshot.node_infos():
                st = statuses.get(ni.name)
                if st is not None and st.code == Code.UNSCHEDULABLE:
                    out.append(ni)
            return out
        # (C-level passes: a pod that fits nowhere has thousands of verdicts, most of
        # them UnschedulableAndUnresolvable)
        rejected = statuses.statuses
        codes = map(_code, rejected.values())
        for name in compress(rejected, map(eq, codes, repeat(Code.UNSCHEDULABLE))):
            found = snapshot.get(name)
            if found is not None:
                out.append(found)
        return out

    def find_candidates(
        self, state: CycleState, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[list[Candidate], dict[str, Status], list[str]]:
        """Candidates (PDB-respecting ones first), the failed nodes' statuses, errors."""
        potential = self.potential_nodes(statuses)
        if not potential:
            return [], {}, []
        raw_pdbs = self._handle.objects.list("poddisruptionbudgets")
        pdbs = _parse_pdbs(raw_pdbs)
        memo = self._dry_run_memo(state, pod, raw_pdbs)
        n = len(potential)
        offset = self.rng.randrange(n)
        wanted = self.calculate_num_candidates(n)
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        failed: dict[str, Status] = {}
        errors: list[str] = []
        for i in range(n):
            node = potential[(offset + i) % n]
            victims, violations, st = self._dry_run(state, pod, node, pdbs, memo)
            if st is None and victims:
                group = non_violating if violations == 0 else violating
                if len(group) < wanted:
                    group.append(Candidate(node.name, victims, violations))
                if non_violating and len(non_violating) + len(violating) >= wanted:
                    break
                continue
            if st is None:
                st = Status.as_error(f'expected at least one victim pod on node "{node.name}"')
            if st.code == Code.ERROR:
                errors.append(st.message)
            failed[node.name] = st
        return non_violating + violating, failed, errors

    def _dry_run_memo(
        self, state: CycleState, pod: PodInfo, raw_pdbs: Sequence[Mapping[str, Any]]
    ) -> dict[str, _DryRun] | None:
        """The dry runs kept for this preemptor's kind, when the framework says its
        Filter verdicts read only a node's NodeInfo (a node-local key): a node's
        dry run then depends only on the node, that key, the preemptor's priority
        (which pods may be evicted), the nominated pods added and the PDBs."""
        key = self._handle.node_local_key(state, pod)
        if key is None:
            return None
        budgets = tuple(
            (meta.get("uid"), meta.get("resourceVersion"))
            for meta in (b.get("metadata") or {} for b in raw_pdbs)
        )
        return self._dry_runs.get((key, pod.priority, budgets), self._handle.snapshot)

    def _dry_run(
        self,
        state: CycleState,
        pod: PodInfo,
        node: NodeInfo,
        pdbs: Sequence[_PDB],
        memo: dict[str, _DryRun] | None,
    ) -> tuple[list[PodInfo], int, Status | None]:
        """select_victims_on_node on copies of ``node`` and ``state``, or the kept
        outcome of an unchanged node with the same nominated pods added."""
        if memo is None:
            return self.select_victims_on_node(state.clone(), pod, node.clone(), pdbs)
        added = nominated_pods_added(pod, self._handle.nominated_pods_for_node(node.name))
        kept = memo.get(node.name)
        if kept is not None and same_pods(kept[0], added):
            return list(kept[1]), kept[2], kept[3]
        victims, violations, st = self.select_victims_on_node(
            state.clone(), pod, node.clone(), pdbs
        )
        if st is None or st.code != Code.ERROR:
            memo[node.name] = (added, tuple(victims), violations, st)
        return victims, violations, st

    def select_victims_on_node(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo, pdbs: Sequence[_PDB]
    ) -> tuple[list[PodInfo], int, Status | None]:
        """The fewest pods to evict from ``node_info`` (a copy; ``state`` too) for ``pod``.

        Returns (victims most important first, how many of them violate a PDB, None), or
        a failure status: UnschedulableAndUnresolvable when nothing may be evicted, the
        Filter verdict when the pod does not fit even on the emptied node.
        """
        handle = self._handle

        def remove(p: PodInfo) -> Status | None:
            node_info.remove_pod(p.uid)
            return handle.run_pre_filter_remove_pod(state, pod, p, node_info)

        def add(p: PodInfo) -> Status | None:
            node_info.add_pod(p)
            return handle.run_pre_filter_add_pod(state, pod, p, node_info)

        potential: list[PodInfo] = []
        for p in list(node_info.pods.values()):
            if p.priority < pod.priority:
                potential.append(p)
                err = remove(p)
                if err is not None:
                    return [], 0, Status.as_error(err.message)
        if not potential:
            return [], 0, Status.unresolvable(MSG_NO_VICTIMS)
        st = handle.run_filter_with_nominated_pods(state, pod, node_info)
        if st is not None and st.code != Code.SUCCESS:
            return [], 0, st

        sort_by_importance(potential)
        violating, non_violating = split_by_pdb_violation(potential, pdbs)
        victims: list[PodInfo] = []

        def reprieve(p: PodInfo) -> tuple[bool, Status | None]:
            err = add(p)
            if err is not None:
                return False, err
            fits = handle.run_filter_with_nominated_pods(state, pod, node_info) is None
            if not fits:
                err = remove(p)
                if err is not None:
                    return False, err
                victims.append(p)
            return fits, None

        num_violating = 0
        for p in violating:
            fits, err = reprieve(p)
            if err is not None:
                return [], 0, Status.as_error(err.message)
            if not fits:
                num_violating += 1
        for p in non_violating:
            _, err = reprieve(p)
            if err is not None:
                return [], 0, Status.as_error(err.message)
        if violating and non_violating:
            sort_by_importance(victims)
        return victims, num_violating, None

    # ---- eviction ------------------------------------------------------------------------
    async def _prepare_in_background(
        self, candidate: Candidate, pod: PodInfo, lower_nominated: Sequence[PodInfo]
    ) -> None:
        """_prepare in the background. As kube-scheduler: afterwards the preemptor waits
        for the victims' deletion events, unless something failed (then it is retried
        at once); if it was held at PreEnqueue meanwhile, it is let go."""
        failed = True
        try:
            failed = await self._prepare(candidate, pod, lower_nominated)
        except Exception as exc:  # _prepare logs per victim; this is a last resort
            log.warning("preemption failed", preemptor=pod.key, error=str(exc))
        finally:
            self._preempting.pop(pod.uid, None)
            if failed:
                self._handle.activate_pods([pod.uid])
            else:
                self._handle.release_gated_pods([pod.uid])

    async def _prepare(
        self, candidate: Candidate, pod: PodInfo, lower_nominated: Sequence[PodInfo]
    ) -> bool:
        """Clear lower-priority nominations on the node, then evict the victims; True
        when an API call failed (the failures are logged)."""
        failed = False
        for p in lower_nominated:
            if not p.nominated_node_name:
                continue  # only in the scheduler's memory: nothing to clear on the server
            try:
                await self._handle.client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{p.namespace}/pods/{p.name}/status",
                    {"status": {"nominatedNodeName": None}},
                    content_type="application/strategic-merge-patch+json",
                )
            except Exception as exc:  # not critical: the pod is retried anyway
                log.warning("clearing nominatedNodeName failed", pod=p.key, error=str(exc))
                failed = True
        victims = [v for v in candidate.victims if not v.deleting]
        if not victims:
            return failed
        results = await asyncio.gather(
            *(self._preempt_one(candidate.node_name, pod, v) for v in victims),
            return_exceptions=True,
        )
        for victim, res in zip(victims, results, strict=True):
            if isinstance(res, BaseException):
                failed = True
                log.warning(
                    "preempting a victim failed",
                    preemptor=pod.key,
                    victim=victim.key,
                    node=candidate.node_name,
                    error=f"{type(res).__name__}: {res}",
                )
        return failed

    async def _preempt_one(self, node_name: str, preemptor: PodInfo, victim: PodInfo) -> None:
        waiting = self._handle.get_waiting_pod(victim.uid)
        if waiting is not None:
            waiting.reject(NAME, "preempted")
        else:
            try:
                await self._handle.client.delete_pod(
                    victim,
                    reason=REASON_PREEMPTION_BY_SCHEDULER,
                    message=(
                        f"{preemptor.scheduler_name}: preempting to accommodate a higher "
                        "priority pod"
                    ),
                )
            except Exception as exc:
                if getattr(exc, "not_found", False):
                    return  # already gone: nothing to report
                raise
        self._handle.recorder.event(
            victim.raw,
            "Normal",
            EVENT_REASON,
            EVENT_ACTION,
            f"Preempted by pod {preemptor.uid} on node {node_name}",
            # kube-scheduler 1.37 names no related object here: the preemptor it hands
            # its recorder is a wrapper the recorder cannot reference, and it drops it
        )


async def _ask_extenders(
    through_extenders: PreemptionExtenders, pod: PodInfo, candidates: Sequence[Candidate]
) -> list[Candidate]:
    """The candidates the extenders with a preempt verb accept, with the victims they
    chose (as returned: most important first), in the dry run's order."""
    victims = {c.node_name: Victims(list(c.victims), c.num_pdb_violations) for c in candidates}
    accepted = await through_extenders(pod, victims)
    return [
        Candidate(c.node_name, list(v.pods), v.num_pdb_violations)
        for c in candidates
        if (v := accepted.get(c.node_name)) is not None
    ]


def _fit_error_message(num_all_nodes: int, failed: Mapping[str, Status]) -> str:
    """kube-scheduler's FitError text over the dry run's verdicts; every node it did
    not dry-run counts as "Preemption is not helpful for scheduling"."""
    counts: Counter[str] = Counter()
    for st in failed.values():
        for r in st.reasons:
            counts[r] += 1
    absent = num_all_nodes - len(failed)
    if absent > 0:
        counts[MSG_NOT_HELPFUL] += absent
    msg = f"0/{num_all_nodes} nodes are available:"
    hist = sorted(f"{n} {r}" for r, n in counts.items())
    if hist:
        msg += f" {', '.join(hist)}."
    return msg


ENTRY = PluginEntry(NAME, DefaultPreemption, DefaultPreemption.new, parse_args)
