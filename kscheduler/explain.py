"""``kscheduler explain NAMESPACE/POD``: why a pod would go where, or why it cannot.

Read-only against the live cluster. It builds what the daemon builds (the
:class:`~kscheduler.app.SchedulerApp` with its informers, cache and one framework
per profile), lists the cluster once through those informers, stops them, and
runs the profile's PreFilter and Filter over every node, then PreScore and Score
over every feasible node, keeping each score plugin's raw, normalized and
weighted score. A pod already bound is taken out of the cache and evaluated as
if it were pending.

Nothing is written: the API client answers every request other than GET locally
(and keeps it, so that a dry-run PostFilter can say whom preemption would
evict). Nothing is bound.

Where the daemon differs, the output says so: the daemon filters only until it
has found a sample of feasible nodes (percentageOfNodesToScore) starting where
its previous attempt stopped, so on large clusters it scores a subset; it breaks
ties at random; it tries a nominated node alone first. Explain reports the best
total over all feasible nodes, and every node that shares it.

Output: a table (``-o table``, the default, at most ``--limit`` nodes plus a
histogram of the rest), or every node's verdict as JSON/YAML (``-o json|yaml``)
with machine-readable fields: plugin, Status code, reasons, scores.

``kscheduler explain -f FILE [-f FILE ...] [--max]`` asks the same of pods that do
not exist yet: the pods the manifests' controllers would create, placed one after
another (see :mod:`kscheduler.whatif`); a bad manifest exits 2 with its file,
document and field.

Exit status: 0 when the pod was evaluated (whether or not it fits), 1 when the
pod does not exist, the cluster cannot be read or a plugin fails, 2 for bad flags
or a bad config file.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from kscheduler.algorithm import (
    NO_NODES_MSG,
    Algorithm,
    Diagnosis,
    FilterRecord,
    FitError,
    ScheduleError,
    num_feasible_nodes_to_find,
)
from kscheduler.annotations import recorded_scores
from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.dra import DEVICE_REPORT_KEY, ClaimDevices
from kscheduler.framework.interface import SharedLister
from kscheduler.framework.runtime import Framework
from kscheduler.framework.status import Code, Status
from kscheduler.framework.types import PodInfo
from kscheduler.kube import ApiError, KubeClient, Params

if TYPE_CHECKING:
    from kscheduler.app import SchedulerApp
    from kscheduler.config import KubeSchedulerConfiguration
    from kscheduler.framework.registry import Registry

DEFAULT_LIMIT = 20
#: Prose is wrapped at this width; tables and the FailedScheduling message are not.
WIDTH = 100

#: Short column headers for the in-tree score plugins (the legend names them in full).
SHORT_NAMES = {
    "TaintToleration": "Taint",
    "NodeAffinity": "NodeAffinity",
    "PodTopologySpread": "Spread",
    "InterPodAffinity": "PodAffinity",
    "NodeResourcesFit": "Fit",
    "NodeResourcesBalancedAllocation": "Balanced",
    "ImageLocality": "Image",
    "VolumeBinding": "Volume",
}


class ExplainError(Exception):
    """Explain could not evaluate the pod; ``exit_code`` is the CLI's exit status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --------------------------------------------------------------------------- the client


class DryRunKubeClient(KubeClient):
    """A KubeClient that sends only reads: any other request is kept in ``writes``
    and answered locally with an empty object."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[str, str]] = []

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Params = None,
        content_type: str | None = None,
        retry: bool | None = None,
    ) -> Any:
        if method.upper() not in ("GET", "HEAD"):
            self.writes.append((method.upper(), path))
            return {}
        return await super().request(
            method, path, body, params=params, content_type=content_type, retry=retry
        )


# --------------------------------------------------------------------------- the result


@dataclass(slots=True)
class PluginScore:
    raw: int
    normalized: int
    weighted: int

    def cell(self) -> str:
        return f"{self.raw}/{self.normalized}/{self.weighted}"


@dataclass(slots=True)
class NodeVerdict:
    node: str
    #: None when the node passes; else the rejecting Status
    status: Status | None = None
    #: "Filter", or "PreFilter" for nodes PreFilter ruled out before Filter
    stage: str = "Filter"
    #: the plugin(s) to name when status.plugin is empty (PreFilter narrowing)
    plugin: str = ""
    scores: dict[str, PluginScore] = field(default_factory=dict)
    total: int | None = None
    #: what DynamicResources would give each of the pod's claims here (None: not asked)
    devices: list[ClaimDevices] | None = None

    @property
    def feasible(self) -> bool:
        return self.status is None

    @property
    def rejecting_plugin(self) -> str:
        if self.status is None:
            return ""
        return self.status.plugin or self.plugin

    def group_key(self) -> tuple[str, str, str, str]:
        st = self.status
        assert st is not None
        return (self.stage, self.rejecting_plugin, st.code.label, st.message)


@dataclass(slots=True)
class Explanation:
    pod: str
    uid: str
    profile: str
    scheduler_name: str
    bound_node: str = ""
    nominated_node: str = ""
    deleting: bool = False
    #: a PreEnqueue rejection: the daemon does not attempt the pod while it holds
    pre_enqueue: Status | None = None
    #: an Error status (parse error, plugin error): the daemon reports SchedulerError
    error: Status | None = None
    num_nodes: int = 0
    verdicts: list[NodeVerdict] = field(default_factory=list)
    #: the PreFilter rejection that ruled out every node
    pre_filter_rejection: Status | None = None
    pre_filter_narrowed_by: list[str] = field(default_factory=list)
    skipped_filter_plugins: list[str] = field(default_factory=list)
    #: (plugin, weight) of the score plugins that scored, in profile order
    score_plugins: list[tuple[str, int]] = field(default_factory=list)
    skipped_score_plugins: list[str] = field(default_factory=list)
    would_choose: str = ""
    #: "best-score", "only-feasible", "nominated", "tie" or "" (nothing fits / error)
    why: str = ""
    best_total: int | None = None
    best_nodes: list[str] = field(default_factory=list)
    #: nodes Filter saw (after PreFilter narrowing) and how many feasible ones
    #: the daemon looks for among them before scoring
    candidates: int = 0
    feasible_to_find: int = 0
    post_filter: Status | None = None
    post_filter_nominated: str = ""
    post_filter_writes: list[tuple[str, str]] = field(default_factory=list)
    post_filter_plugins: list[str] = field(default_factory=list)
    fit_error: str = ""
    #: HTTP extenders in the configuration, which explain does not call
    extenders: int = 0

    @property
    def feasible(self) -> list[NodeVerdict]:
        return [v for v in self.verdicts if v.status is None]

    @property
    def sampled(self) -> bool:
        """True when the daemon would score only part of the feasible nodes."""
        return len(self.feasible) > self.feasible_to_find

    @property
    def evictions(self) -> list[str]:
        """Pods a dry-run preemption would delete, as namespace/name."""
        out = []
        for method, path in self.post_filter_writes:
            m = _POD_PATH.fullmatch(path)
            if method == "DELETE" and m is not None:
                out.append(f"{m.group(1)}/{m.group(2)}")
        return out


_POD_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)")


# --------------------------------------------------------------------------- evaluation


async def evaluate(
    fwk: Framework,
    algorithm: Algorithm,
    snapshot: SharedLister,
    pod: PodInfo,
    *,
    bound_node: str = "",
    writes: list[tuple[str, str]] | None = None,
) -> Explanation:
    """One attempt for ``pod`` as the daemon's scheduling cycle would run it, over all nodes.

    ``pod`` must not be in the snapshot (a bound pod is taken out of the cache
    first). PostFilter runs only when nothing fits, and only against a client
    that writes nothing: ``writes`` is where that client keeps what it was asked
    to write.
    """
    ex = Explanation(
        pod=pod.key,
        uid=pod.uid,
        profile=fwk.profile_name,
        scheduler_name=pod.scheduler_name,
        bound_node=bound_node,
        nominated_node=pod.nominated_node_name,
        deleting=pod.deleting,
        post_filter_plugins=[p.name for p in fwk.post_filter_plugins],
    )
    if pod.parse_error is not None:
        ex.error = Status(Code.ERROR, [f"failed to parse pod: {pod.parse_error}"])
        return ex
    ex.pre_enqueue = fwk.run_pre_enqueue(pod)
    nodes = snapshot.node_infos()
    ex.num_nodes = len(nodes)
    if not nodes:
        ex.fit_error = str(FitError(pod, 0, Diagnosis(pre_filter_msg=NO_NODES_MSG)))
        return ex

    # Which PreFilter plugins narrowed the node set (the algorithm keeps only the merge).
    _, _, involved = fwk.run_pre_filter(CycleState(), pod, nodes)
    state = CycleState()
    state.record = True
    record = FilterRecord()
    try:
        feasible, diagnosis = algorithm.find_nodes_that_fit(
            fwk, state, pod, snapshot, record=record, sample=False
        )
    except ScheduleError as se:
        ex.error = se.status
        return ex
    ex.skipped_filter_plugins = sorted(state.skip_filter_plugins)
    absent = diagnosis.node_to_status.absent
    if diagnosis.pre_filter_msg:
        ex.pre_filter_rejection = absent
    elif absent is not None:
        ex.pre_filter_narrowed_by = sorted(involved)
    involved_names = ",".join(sorted(involved))
    for ni in nodes:
        if ni.name in record.statuses:
            ex.verdicts.append(NodeVerdict(ni.name, record.statuses[ni.name]))
        else:
            st = absent or Status.unresolvable("not evaluated")
            ex.verdicts.append(NodeVerdict(ni.name, st, "PreFilter", involved_names))
    ex.candidates = len(record.statuses)
    report = state.get(DEVICE_REPORT_KEY) or {}
    for v in ex.verdicts:
        v.devices = report.get(v.node)
    pct = fwk.spec.percentage_of_nodes_to_score
    if pct is None:
        pct = algorithm.percentage_of_nodes_to_score
    ex.feasible_to_find = num_feasible_nodes_to_find(pct, ex.candidates) if ex.candidates else 0

    if not feasible:
        fe = FitError(pod, len(nodes), diagnosis)
        if fwk.post_filter_plugins:
            # as the daemon's failure handler does, over a client that writes nothing
            start = len(writes) if writes is not None else 0
            res, pf = await fwk.run_post_filter(state, pod, diagnosis.node_to_status)
            await fwk.wait_background()  # what PostFilter started (evictions) writes too
            ex.post_filter = pf
            if pf is not None and pf.message:
                fe.diagnosis.post_filter_msg = pf.message
            if res is not None and res.nominated_node_name:
                ex.post_filter_nominated = res.nominated_node_name
            if writes is not None:
                ex.post_filter_writes = list(writes[start:])
        ex.fit_error = str(fe)
        return ex

    try:
        scores = algorithm.prioritize(fwk, state, pod, feasible)
    except ScheduleError as se:
        ex.error = se.status
        return ex
    raw = recorded_scores(state)
    by_name = {v.node: v for v in ex.verdicts}
    ex.score_plugins = [
        (p.name, fwk.score_weights[p.name]) for p in fwk.score_plugins if p.name in scores
    ]
    ex.skipped_score_plugins = sorted(
        p.name for p in fwk.score_plugins if p.name in state.skip_score_plugins
    )
    for plugin, weighted in scores.items():
        raw_scores, normalized = raw.get(plugin, ([], []))
        for i, (ni, w) in enumerate(zip(feasible, weighted, strict=True)):
            r = raw_scores[i] if i < len(raw_scores) else w
            n = normalized[i] if i < len(normalized) else w
            by_name[ni.name].scores[plugin] = PluginScore(r, n, w)
    for ni in feasible:
        v = by_name[ni.name]
        v.total = sum(s.weighted for s in v.scores.values())
    best = max(by_name[ni.name].total or 0 for ni in feasible)
    ex.best_total = best
    ex.best_nodes = sorted(ni.name for ni in feasible if by_name[ni.name].total == best)
    nominated = pod.nominated_node_name
    if nominated and nominated in by_name and by_name[nominated].feasible:
        ex.would_choose, ex.why = nominated, "nominated"
    elif len(feasible) == 1:
        ex.would_choose, ex.why = feasible[0].name, "only-feasible"
    elif len(ex.best_nodes) == 1:
        ex.would_choose, ex.why = ex.best_nodes[0], "best-score"
    else:
        ex.why = "tie"
    return ex


async def read_cluster(
    kube: KubeClient,
    cfg: KubeSchedulerConfiguration,
    registry: Registry,
    *,
    sync_timeout: float = 60.0,
) -> SchedulerApp:
    """The daemon's app (informers, cache, frameworks) with the cluster listed once
    through ``kube`` and the informers stopped again: a still picture to evaluate in.

    Raises ExplainError when the cluster cannot be listed.
    """
    from kscheduler.app import Options, SchedulerApp

    app = SchedulerApp(cfg, registry, kube, Options(leader_elect=False))
    informers = asyncio.create_task(app.informers.run(), name="explain-informers")
    try:
        waiter = asyncio.create_task(app.informers.wait_synced(sync_timeout))
        done, _ = await asyncio.wait({waiter, informers}, return_when=asyncio.FIRST_COMPLETED)
        if informers in done:
            waiter.cancel()
            failure = informers.exception()
            raise ExplainError(f"cannot list the cluster: {failure}")
        try:
            waiter.result()
        except TimeoutError as exc:
            raise ExplainError(f"the cluster was not listed within {sync_timeout:g}s") from exc
    finally:
        informers.cancel()
        await asyncio.gather(informers, return_exceptions=True)
    await app.events_kube.close()
    app.snapshot.update()
    return app


async def explain_pod(
    kube: DryRunKubeClient,
    cfg: KubeSchedulerConfiguration,
    registry: Registry,
    namespace: str,
    name: str,
    *,
    profile: str | None = None,
    sync_timeout: float = 60.0,
) -> Explanation:
    """Read the cluster through ``kube`` and evaluate ``namespace/name``.

    Raises ExplainError (pod missing, profile unknown, the cluster unreadable).
    """
    from kscheduler.framework.parse import parse_pod

    try:
        raw = await kube.get_json(f"/api/v1/namespaces/{namespace}/pods/{name}")
    except ApiError as exc:
        if exc.is_not_found:
            raise ExplainError(f"pod {namespace}/{name} not found") from exc
        raise ExplainError(f"cannot read pod {namespace}/{name}: {exc}") from exc
    except Exception as exc:  # connection refused, TLS, DNS ...
        raise ExplainError(f"cannot reach the cluster: {type(exc).__name__}: {exc}") from exc
    pod = parse_pod(raw)
    app = await read_cluster(kube, cfg, registry, sync_timeout=sync_timeout)
    profile = profile or pod.scheduler_name
    fwk = app.frameworks.get(profile)
    if fwk is None:
        raise ExplainError(
            f"pod {pod.key} has schedulerName {pod.scheduler_name!r}, which no profile of "
            f"the configuration handles (profiles: {', '.join(app.frameworks)}); "
            "pass --profile NAME to evaluate it with one",
            exit_code=2,
        )
    bound = pod.node_name
    app.cache.remove_pod(pod.uid)
    app.queue.delete(pod.uid)
    if bound:
        # as if unscheduled: the pod as it was before binding (spec.nodeName unset)
        raw = copy.deepcopy(raw)
        raw["spec"].pop("nodeName", None)
        pod = parse_pod(raw)
    app.snapshot.update()
    ex = await evaluate(fwk, app.algorithm, app.snapshot, pod, bound_node=bound, writes=kube.writes)
    ex.extenders = len(cfg.extenders)
    return ex


# --------------------------------------------------------------------------- output


def _status_dict(st: Status | None, plugin: str = "") -> dict[str, Any] | None:
    if st is None:
        return None
    return {"plugin": st.plugin or plugin or None, "code": st.code.label, "reasons": st.reasons}


def ordered(ex: Explanation) -> list[NodeVerdict]:
    """Feasible nodes by total (best first), then rejected nodes grouped by reason
    (largest group first)."""
    feasible = sorted(ex.feasible, key=lambda v: (-(v.total or 0), v.node))
    return feasible + [v for _, group in rejection_groups(ex) for v in group]


def rejection_groups(
    ex: Explanation,
) -> list[tuple[tuple[str, str, str, str], list[NodeVerdict]]]:
    groups: dict[tuple[str, str, str, str], list[NodeVerdict]] = {}
    for v in ex.verdicts:
        if v.status is not None:
            groups.setdefault(v.group_key(), []).append(v)
    out = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    for _, vs in out:
        vs.sort(key=lambda v: v.node)
    return out


def shown(ex: Explanation, limit: int | None) -> list[NodeVerdict]:
    """The rows to show: all feasible nodes first, up to ``limit``; the rows left go
    to the rejected groups, at least one per group while rows remain."""
    rows = ordered(ex)
    if limit is None or len(rows) <= limit:
        return rows
    feasible = [v for v in rows if v.feasible][:limit]
    left = limit - len(feasible)
    groups = [g for _, g in rejection_groups(ex)]
    quota = [0] * len(groups)
    while left > 0:
        gave = False
        for i, g in enumerate(groups):
            if left > 0 and quota[i] < len(g):
                quota[i] += 1
                left -= 1
                gave = True
        if not gave:
            break
    return feasible + [v for i, g in enumerate(groups) for v in g[: quota[i]]]


def to_dict(ex: Explanation, limit: int | None = None) -> dict[str, Any]:
    """The machine-readable form (JSON/YAML): every node unless ``limit`` is given."""
    rows = shown(ex, limit)
    ranks = {v.node: i + 1 for i, v in enumerate(ordered(ex)) if v.feasible}
    verdicts = []
    for v in rows:
        verdicts.append(
            {
                "node": v.node,
                "feasible": v.feasible,
                "rank": ranks.get(v.node),
                "stage": v.stage,
                "plugin": v.rejecting_plugin or None,
                "code": v.status.code.label if v.status is not None else Code.SUCCESS.label,
                "reasons": v.status.reasons if v.status is not None else [],
                "scores": {
                    p: {"raw": s.raw, "normalized": s.normalized, "weighted": s.weighted}
                    for p, s in v.scores.items()
                },
                "total": v.total,
                "devices": None
                if v.devices is None
                else [
                    {
                        "claim": c.claim,
                        "podClaim": c.pod_claim,
                        "allocated": c.allocated,
                        "devices": c.devices,
                        "reason": c.reason or None,
                    }
                    for c in v.devices
                ],
            }
        )
    rejections = [
        {"stage": stage, "plugin": plugin or None, "code": code, "reasons": g[0].status.reasons}
        | {"nodes": len(g)}
        for (stage, plugin, code, _), g in rejection_groups(ex)
        if g[0].status is not None
    ]
    feasible = len(ex.feasible)
    return {
        "pod": ex.pod,
        "uid": ex.uid,
        "profile": ex.profile,
        "schedulerName": ex.scheduler_name,
        "boundNode": ex.bound_node or None,
        "nominatedNode": ex.nominated_node or None,
        "deleting": ex.deleting,
        "dryRun": True,
        "preEnqueue": _status_dict(ex.pre_enqueue),
        "error": _status_dict(ex.error),
        "nodes": {
            "total": ex.num_nodes,
            "feasible": feasible,
            "rejected": ex.num_nodes - feasible,
            "shown": len(rows),
        },
        "preFilter": {
            "rejection": _status_dict(ex.pre_filter_rejection),
            "narrowedBy": ex.pre_filter_narrowed_by,
            "skippedFilterPlugins": ex.skipped_filter_plugins,
        },
        "scorePlugins": [{"plugin": p, "weight": w} for p, w in ex.score_plugins],
        "skippedScorePlugins": ex.skipped_score_plugins,
        "selection": {
            "wouldChoose": ex.would_choose or None,
            "why": ex.why or None,
            "bestTotal": ex.best_total,
            "bestNodes": ex.best_nodes,
            "tie": ex.why == "tie",
            "candidates": ex.candidates,
            "feasibleToFind": ex.feasible_to_find,
            "sampled": ex.sampled,
        },
        "postFilter": None
        if not ex.post_filter_plugins or not ex.fit_error
        else {
            "plugins": ex.post_filter_plugins,
            "status": _status_dict(ex.post_filter),
            "evictions": ex.evictions,
        },
        "fitError": ex.fit_error or None,
        "extendersNotConsulted": ex.extenders,
        "rejections": rejections,
        "verdicts": verdicts,
    }


def render_json(ex: Explanation, limit: int | None = None) -> str:
    return orjson.dumps(to_dict(ex, limit), option=orjson.OPT_INDENT_2).decode() + "\n"


def render_yaml(ex: Explanation, limit: int | None = None) -> str:
    import yaml

    return str(yaml.safe_dump(to_dict(ex, limit), sort_keys=False, width=1000))


def _short(plugin: str) -> str:
    return SHORT_NAMES.get(plugin, plugin)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            out.append(c.rjust(widths[i]) if i in right else c.ljust(widths[i]))
        return "  " + "  ".join(out).rstrip()

    return [line(header)] + [line(r) for r in rows]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _wrap(text: str, indent: str = "") -> list[str]:
    """Prose wrapped at WIDTH columns; continuation lines indented two more."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def render_table(ex: Explanation, limit: int | None = DEFAULT_LIMIT) -> str:
    """The person-readable form: summary, answer, feasible and rejected nodes."""
    out: list[str] = []
    state = f"bound to {ex.bound_node}" if ex.bound_node else "pending"
    out.append(f"Pod {ex.pod} (profile {ex.profile}): {state}")
    if ex.bound_node:
        out += _wrap(
            f"Evaluated as if unscheduled, without the pod itself on {ex.bound_node}.", "  "
        )
    if ex.deleting:
        out.append("  The pod is being deleted: the daemon skips it.")
    if ex.pre_enqueue is not None:
        pe = ex.pre_enqueue
        out += _wrap(
            f"PreEnqueue {pe.plugin}: {pe.message or pe} -- the daemon does not attempt the "
            "pod until that changes.",
            "  ",
        )
    if ex.error is not None:
        who = f" (plugin {ex.error.plugin})" if ex.error.plugin else ""
        out += _wrap(f"Error{who}: {ex.error.message}")
        out.append("  The daemon reports this as SchedulerError and retries after a backoff.")
        return "\n".join(out) + "\n"
    feasible = ex.feasible
    out.append(
        f"{_plural(ex.num_nodes, 'node')}: {len(feasible)} feasible, "
        f"{ex.num_nodes - len(feasible)} rejected (dry run: nothing was written)."
    )
    out.append("")
    out += _answer(ex)
    rows = shown(ex, limit)
    shown_feasible = [v for v in rows if v.feasible]
    if shown_feasible:
        out.append("")
        out.append(
            f"Feasible nodes, best first ({len(feasible)}); "
            "score cells are raw/normalized/weighted:"
        )
        header = ["#", "NODE", "TOTAL"] + [_short(p) for p, _ in ex.score_plugins]
        body = []
        for i, v in enumerate(shown_feasible):
            cells = [str(i + 1), v.node, str(v.total if v.total is not None else "")]
            for p, _ in ex.score_plugins:
                s = v.scores.get(p)
                cells.append(s.cell() if s is not None else "-")
            body.append(cells)
        out += _table(header, body, right={0, 2})
    shown_rejected = [v for v in rows if not v.feasible]
    if shown_rejected:
        out.append("")
        out.append(f"Rejected nodes, grouped by reason ({ex.num_nodes - len(feasible)}):")
        body = []
        for v in shown_rejected:
            st = v.status
            assert st is not None
            plugin = v.rejecting_plugin or "-"
            if v.stage != "Filter":
                plugin += f" ({v.stage})"
            body.append([v.node, plugin, st.code.label, st.message])
        out += _table(["NODE", "PLUGIN", "CODE", "REASON"], body, right=set())
    out += _device_lines(rows)
    hidden = len(ex.verdicts) - len(rows)
    if hidden > 0:
        out.append("")
        out += _hidden_summary(ex, rows, hidden)
    if ex.score_plugins and shown_feasible:
        out.append("")
        out.append("Score plugins:")
        width = max(len(_short(p)) for p, _ in ex.score_plugins)
        out += [f"  {_short(p).ljust(width)}  {p}, weight {w}" for p, w in ex.score_plugins]
    notes: list[str] = []
    if ex.skipped_score_plugins and shown_feasible:
        notes.append(
            "Skipped at PreScore (nothing to score for this pod): "
            + ", ".join(ex.skipped_score_plugins)
            + "."
        )
    if ex.extenders:
        notes.append(
            f"The configuration has {_plural(ex.extenders, 'extender')}, which explain does "
            "not call: their filtering and scores are not included."
        )
    if ex.pre_filter_narrowed_by:
        notes.append(
            "PreFilter limited the nodes to evaluate: " + ", ".join(ex.pre_filter_narrowed_by) + "."
        )
    if notes:
        out.append("")
        for n in notes:
            out += _wrap(n)
    return "\n".join(out) + "\n"


def _device_lines(rows: Sequence[NodeVerdict]) -> list[str]:
    """Per shown node, the devices each of the pod's claims would get or why none."""
    asked = [v for v in rows if v.devices is not None]
    if not asked:
        return []
    out = ["", "DRA devices per node (DynamicResources), for each of the pod's claims:"]
    for v in asked:
        out.append(f"  {v.node}:")
        for c in v.devices or []:
            head = f"{c.pod_claim} ({c.claim}{', allocated' if c.allocated else ''}): "
            if c.reason:
                text = head + "none -- " + c.reason
                if c.devices:
                    text += "; its devices: " + ", ".join(c.devices)
            else:
                text = head + (", ".join(c.devices) or "no devices")
            out += _wrap(text, "    ")
    return out


def _answer(ex: Explanation) -> list[str]:
    out: list[str] = []
    if ex.fit_error:
        out.append("No node fits. The daemon reports (FailedScheduling event, PodScheduled=False):")
        out.append(f"  {ex.fit_error}")  # one line, as on the pod
        if ex.post_filter_plugins:
            out += _post_filter_lines(ex)
        return out
    by_name = {v.node: v for v in ex.verdicts}
    if ex.why == "nominated":
        out += _wrap(
            f"Would choose: {ex.would_choose} -- the pod's nominated node passes Filter, and "
            "the daemon places a pod on its nominated node without scoring."
        )
    elif ex.why == "only-feasible":
        out.append(f"Would choose: {ex.would_choose} -- the only feasible node.")
    elif ex.why == "best-score":
        others = sorted(
            (v for v in ex.feasible if v.node != ex.would_choose),
            key=lambda v: (-(v.total or 0), v.node),
        )
        line = f"Would choose: {ex.would_choose} -- best total {ex.best_total}"
        if others:
            line += f", ahead of {others[0].node} ({others[0].total})"
        out += _wrap(line + ".")
    elif ex.why == "tie":
        names = ex.best_nodes
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        out += _wrap(
            f"Tie: {len(names)} nodes share the best total {ex.best_total} ({listed}); "
            "the daemon picks one of them at random."
        )
    if ex.sampled and ex.why != "nominated":
        out += _wrap(
            f"On this cluster the daemon stops filtering once it has found "
            f"{ex.feasible_to_find} feasible nodes of the {ex.candidates} it filters, "
            "starting where its previous attempt stopped, and scores only those: it may "
            "choose a lower-ranked node than the best shown here.",
            "  ",
        )
    if ex.nominated_node and ex.why != "nominated":
        v = by_name.get(ex.nominated_node)
        why = (
            "is not a node of the cluster"
            if v is None
            else f"fails Filter ({v.rejecting_plugin}: {v.status.message})"
            if v.status is not None
            else "passes"
        )
        out += _wrap(f"The pod is nominated to {ex.nominated_node}, which {why}.", "  ")
    return out


def _post_filter_lines(ex: Explanation) -> list[str]:
    names = ", ".join(ex.post_filter_plugins)
    st = ex.post_filter
    if st is None or st.code == Code.SUCCESS:
        line = f"PostFilter ({names}, dry run) would make room"
        if ex.post_filter_nominated:
            line += f" on {ex.post_filter_nominated}"
        if ex.evictions:
            line += f" by evicting {', '.join(ex.evictions)}"
        return _wrap(line + " (nothing was evicted); the daemon then retries the pod.", "  ")
    if st.code == Code.ERROR:
        who = f" {st.plugin}" if st.plugin else ""
        return _wrap(f"PostFilter{who} failed (dry run): {st.message}", "  ")
    return []  # its verdict is the end of the message above


def _hidden_summary(ex: Explanation, rows: Sequence[NodeVerdict], hidden: int) -> list[str]:
    seen = {v.node for v in rows}
    out = [f"{_plural(hidden, 'more node')} not shown (--all-nodes or --limit N shows them):"]
    hidden_feasible = [v for v in ex.feasible if v.node not in seen]
    lines: list[tuple[int, str]] = []
    if hidden_feasible:
        totals = [v.total or 0 for v in hidden_feasible]
        lines.append((len(hidden_feasible), f"feasible, totals {min(totals)}..{max(totals)}"))
    for (stage, plugin, code, message), group in rejection_groups(ex):
        n = sum(1 for v in group if v.node not in seen)
        if n:
            where = plugin or "-"
            if stage != "Filter":
                where += f" ({stage})"
            lines.append((n, f"{where}: {message} [{code}]"))
    width = max(len(str(n)) for n, _ in lines)
    out.extend(f"  {str(n).rjust(width)}  {text}" for n, text in lines)
    return out


def render(ex: Explanation, output: str, limit: int | None) -> str:
    if output == "json":
        return render_json(ex, limit)
    if output == "yaml":
        return render_yaml(ex, limit)
    return render_table(ex, limit)


# --------------------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kscheduler explain",
        description="Why would this pod go to that node, or why does it fit nowhere? "
        "Runs the profile's plugins over every node of the live cluster, read-only.",
    )
    p.add_argument(
        "pod",
        metavar="NAMESPACE/POD",
        nargs="?",
        help="the pod (namespace 'default' if omitted); or -f FILE",
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        metavar="FILE",
        help="what if: place the pods of these manifests (Pod, Deployment, ReplicaSet, "
        "StatefulSet, Job, DaemonSet; PodDisruptionBudget, Service, PersistentVolumeClaim), "
        "file by file in order, read-only; '-' reads stdin",
    )
    p.add_argument(
        "--max",
        action="store_true",
        help="with -f: how many copies of the last manifest's pod fit, and what stops the next",
    )
    p.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="with -f: namespace of manifests that name none (default: default)",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file; default: in-cluster, then $KUBECONFIG")
    p.add_argument("--config", type=Path, help="the daemon's KubeSchedulerConfiguration file")
    p.add_argument("--profile", help="the profile to evaluate with (default: the pod's)")
    p.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table", help="format"
    )
    p.add_argument("--all-nodes", action="store_true", help="show every node")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help=f"nodes to show (table default {DEFAULT_LIMIT}; json/yaml default: all)",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="for listing the cluster"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.limit is not None and args.limit < 0:
        p.error("--limit: must not be negative")
    if args.filename:
        if args.pod is not None:
            p.error("give NAMESPACE/POD or -f FILE, not both")
        if args.filename.count("-") > 1:
            p.error("-f -: stdin can be read once")
        return _main_what_if(p, args)
    if args.max:
        p.error("--max: needs -f FILE")
    if args.pod is None:
        p.error("expected NAMESPACE/POD or -f FILE")
    ns, _, name = args.pod.rpartition("/")
    ns = ns or "default"
    if not name or "/" in ns:
        p.error(f"expected NAMESPACE/POD, got {args.pod!r}")

    loaded = _load(args)
    if isinstance(loaded, int):
        return loaded
    registry, cfg = loaded
    limit: int | None
    if args.all_nodes:
        limit = None
    elif args.limit is not None:
        limit = args.limit
    else:
        limit = DEFAULT_LIMIT if args.output == "table" else None

    async def run() -> Explanation:
        kube = await _connect(args, cfg)
        try:
            return await explain_pod(
                kube, cfg, registry, ns, name, profile=args.profile, sync_timeout=args.timeout
            )
        finally:
            await kube.close()

    try:
        ex = asyncio.run(run())
    except ExplainError as exc:
        print(f"kscheduler explain: {exc}", file=sys.stderr)
        return exc.exit_code
    sys.stdout.write(render(ex, args.output, limit))
    return 1 if ex.error is not None else 0


async def _connect(args: argparse.Namespace, cfg: KubeSchedulerConfiguration) -> DryRunKubeClient:
    """A client that writes nothing, from --kubeconfig or the configuration's."""
    cc = cfg.client_connection
    kubeconfig = args.kubeconfig or cc.kubeconfig or None
    try:
        kube = await DryRunKubeClient.from_kubeconfig(kubeconfig, qps=cc.qps, burst=cc.burst)
    except Exception as exc:
        raise ExplainError(f"cannot reach the cluster: {exc}") from exc
    assert isinstance(kube, DryRunKubeClient)
    return kube


def _load(args: argparse.Namespace) -> tuple[Registry, KubeSchedulerConfiguration] | int:
    """The plugin registry and the configuration, or the exit status (2) after a message."""
    from kscheduler.config import ConfigError, load_config
    from kscheduler.logs import configure
    from kscheduler.plugins import PluginDiscoveryError, full_registry

    try:
        registry = full_registry()
    except PluginDiscoveryError as exc:
        print(f"kscheduler explain: {exc}", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.config if args.config else "", registry=registry)
    except ConfigError as exc:
        where = f"{args.config}: " if args.config else ""
        print(f"kscheduler explain: invalid configuration: {where}{exc}", file=sys.stderr)
        return 2
    configure(0, json=False)
    return registry, cfg


def _main_what_if(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``explain -f FILE [--max]``: see :mod:`kscheduler.whatif`."""
    from kscheduler.manifests import ManifestError
    from kscheduler.whatif import WhatIf, read_files, render, what_if

    try:
        docs = read_files(args.filename, args.namespace)
    except ManifestError as exc:
        print(f"kscheduler explain: {exc}", file=sys.stderr)
        return 2
    loaded = _load(args)
    if isinstance(loaded, int):
        return loaded
    registry, cfg = loaded

    async def run() -> WhatIf:
        kube = await _connect(args, cfg)
        try:
            return await what_if(
                kube,
                cfg,
                registry,
                docs,
                profile=args.profile,
                max_mode=args.max,
                sync_timeout=args.timeout,
            )
        finally:
            await kube.close()

    try:
        result = asyncio.run(run())
    except (ExplainError, ManifestError) as exc:
        print(f"kscheduler explain: {exc}", file=sys.stderr)
        return exc.exit_code
    sys.stdout.write(render(result, args.output))
    return 0
