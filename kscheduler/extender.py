"""HTTP scheduler extenders, speaking kube-scheduler's extender protocol.

An extender is a web service the scheduler consults for every pod it is
interested in (``extenders:`` in the KubeSchedulerConfiguration, shared by all
profiles). Each verb is a JSON ``POST {urlPrefix}/{verb}``; the bodies are the Go
structs of ``k8s.io/kube-scheduler/extender/v1``, which carry no json tags, so
their fields are spelled as in Go (``Pod``, ``NodeNames``, ``FailedNodes``...)
while the Pod and Node objects inside are ordinary API JSON:

* ``filter``: ``{"Pod", "Nodes": {"items": [...]}, "NodeNames": null}`` (with
  ``nodeCacheCapable``: ``"Nodes": null`` and the names in ``NodeNames``) ->
  ``{"Nodes" | "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}``;
* ``prioritize``: the same request -> ``[{"Host", "Score"}]``, scores in 0..10;
* ``bind``: ``{"PodName", "PodNamespace", "PodUID", "Node"}`` -> ``{"Error"}``;
* ``preempt``: ``{"Pod", "NodeNameToVictims" | "NodeNameToMetaVictims"}`` ->
  ``{"NodeNameToMetaVictims"}`` (pods named by ``UID``).

Replies are decoded like Go's encoding/json does: field names match regardless
of case. Where the cycle uses them:

* after the Filter plugins, each interested extender with a filter verb narrows
  the feasible nodes in turn (:func:`find_nodes_that_pass_extenders`); its
  ``FailedNodes`` become Unschedulable statuses, ``FailedAndUnresolvableNodes``
  UnschedulableAndUnresolvable ones (preemption will not try those nodes);
* each interested extender with a prioritize verb scores the feasible nodes,
  concurrently; a score counts ``score * weight * (100 / 10)`` towards the
  node's total (:func:`prioritize_with_extenders`); prioritize failures are
  logged and ignored, as upstream;
* the first interested extender with a bind verb binds the pod instead of the
  bind plugins (:func:`bind_with_extenders`);
* a preemption plugin hands its candidates to :func:`process_preemption`.

A failing (unreachable, timed out, non-200, ``Error`` set) extender fails the
scheduling attempt unless it is ``ignorable``, in which case it is skipped. An
extender with ``managedResources`` is only consulted for pods that request or
limit one of them (in containers or init containers).

The calls are awaited, so the scheduling cycle of a pod gives the event loop
away while an extender answers; :mod:`kscheduler.algorithm` re-checks the nodes
whose state changed meanwhile (only when extenders are configured).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import aiohttp
import orjson
import structlog

from kscheduler.config import Extender, ExtenderTLSConfig, KubeSchedulerConfiguration
from kscheduler.framework.interface import (
    MAX_NODE_SCORE,
    NodeScore,
    NodeToStatus,
    SharedLister,
    Victims,
)
from kscheduler.framework.status import Code, Status
from kscheduler.framework.types import NodeInfo, PodInfo

log = structlog.get_logger("kscheduler.extender")

#: Name under which extender verdicts appear in diagnoses (upstream's ExtenderName).
EXTENDER_NAME = "Extender"
MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10
#: An extender score of 10 is worth a plugin score of 100 (times the weight).
EXTENDER_SCORE_SCALE = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY


class ExtenderError(Exception):
    """An extender call failed: unreachable, timed out, a non-200 reply, a reply that
    does not decode, or an ``Error`` the extender reported."""


class HTTPExtender:
    """One ``extenders[]`` entry: an HTTP client for its verbs."""

    def __init__(self, config: Extender) -> None:
        self.config = config
        self.url_prefix = config.url_prefix
        self.filter_verb = config.filter_verb
        self.prioritize_verb = config.prioritize_verb
        self.bind_verb = config.bind_verb
        self.preempt_verb = config.preempt_verb
        self.weight = config.weight
        self.node_cache_capable = config.node_cache_capable
        self.ignorable = config.ignorable
        self.http_timeout = config.http_timeout
        self.managed_resources = frozenset(r.name for r in config.managed_resources)
        #: Built now so that bad certificates or CA files fail at startup.
        self._ssl = ssl_context(config)
        tls = config.tls_config
        self._server_name = tls.server_name if tls is not None and tls.server_name else None
        self._session: aiohttp.ClientSession | None = None

    @property
    def name(self) -> str:
        """The URL prefix identifies an extender, as upstream."""
        return self.url_prefix

    def __repr__(self) -> str:
        return f"HTTPExtender({self.url_prefix})"

    @property
    def is_binder(self) -> bool:
        return bool(self.bind_verb)

    @property
    def supports_preemption(self) -> bool:
        return bool(self.preempt_verb)

    def is_interested(self, pod: PodInfo) -> bool:
        """True without managedResources; else whether the pod requests or limits one
        of them in a container or an init container."""
        if not self.managed_resources:
            return True
        spec = pod.spec
        for key in ("containers", "initContainers"):
            for c in spec.get(key) or ():
                if not isinstance(c, dict):
                    continue
                res = c.get("resources")
                if not isinstance(res, dict):
                    continue
                for part in ("requests", "limits"):
                    amounts = res.get(part)
                    if isinstance(amounts, dict) and not self.managed_resources.isdisjoint(amounts):
                        return True
        return False

    # ---- verbs -------------------------------------------------------------------------------
    async def filter(
        self, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[NodeInfo], dict[str, str], dict[str, str]]:
        """(nodes that pass, failed node -> message, unresolvable node -> message).

        The nodes that pass must be among ``nodes``; an extender without a filter
        verb passes them all.
        """
        if not self.filter_verb:
            return list(nodes), {}, {}
        reply = await self._send(self.filter_verb, self._extender_args(pod, nodes))
        if not isinstance(reply, dict):
            raise self._bad_reply(self.filter_verb, "an ExtenderFilterResult object", reply)
        err = _field(reply, "Error")
        if err:
            raise ExtenderError(f"extender {self.url_prefix}: {err}")
        by_name = {ni.name: ni for ni in nodes}
        names = _field(reply, "NodeNames")
        node_list = _field(reply, "Nodes")
        passed: list[str] = []
        # nodeCacheCapable extenders answer with names, the others with Node objects;
        # whichever one the reply carries is used.
        if names is not None and (self.node_cache_capable or node_list is None):
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise self._bad_reply(self.filter_verb, "NodeNames to be a list of strings", names)
            passed = names
        elif node_list is not None:
            passed = _node_list_names(node_list, self.url_prefix)
        out: list[NodeInfo] = []
        for name in passed:
            ni = by_name.get(name)
            if ni is None:
                raise ExtenderError(
                    f'extender "{self.url_prefix}" claims a filtered node "{name}" which is '
                    "not found in the input node list"
                )
            out.append(ni)
        failed = _failed_map(reply, "FailedNodes", self.url_prefix)
        unresolvable = _failed_map(reply, "FailedAndUnresolvableNodes", self.url_prefix)
        return out, failed, unresolvable

    async def prioritize(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[tuple[str, int]]:
        """(host, score) as the extender returned them, scores in 0..10 unscaled."""
        if not self.prioritize_verb:
            return [(ni.name, 0) for ni in nodes]
        reply = await self._send(self.prioritize_verb, self._extender_args(pod, nodes))
        if reply is None:
            return []
        if not isinstance(reply, list):
            raise self._bad_reply(self.prioritize_verb, "a HostPriorityList (a list)", reply)
        out: list[tuple[str, int]] = []
        for item in reply:
            host = _field(item, "Host") if isinstance(item, dict) else None
            score = _field(item, "Score") if isinstance(item, dict) else None
            if (
                not isinstance(host, str)
                or isinstance(score, bool)
                or not isinstance(score, int | None)
            ):
                raise self._bad_reply(
                    self.prioritize_verb, 'HostPriority {"Host": string, "Score": integer}', item
                )
            out.append((host, score or 0))
        return out

    async def bind(self, pod: PodInfo, node_name: str) -> None:
        """Ask the extender to bind; raises ExtenderError on failure."""
        if not self.bind_verb:
            raise ExtenderError(f"extender {self.url_prefix} has no bind verb")
        args = {
            "PodName": pod.name,
            "PodNamespace": pod.namespace,
            "PodUID": pod.uid,
            "Node": node_name,
        }
        reply = await self._send(self.bind_verb, args)
        if reply is None:
            return
        if not isinstance(reply, dict):
            raise self._bad_reply(self.bind_verb, "an ExtenderBindingResult object", reply)
        err = _field(reply, "Error")
        if err:
            raise ExtenderError(f"extender {self.url_prefix}: {err}")

    async def process_preemption(
        self, pod: PodInfo, victims: Mapping[str, Victims], snapshot: SharedLister
    ) -> dict[str, Victims]:
        """The extender's choice of nodes and victims among ``victims``.

        nodeCacheCapable extenders get and return pod UIDs (``MetaVictims``), the
        others get whole pods; the reply is always UIDs, resolved against the
        pods ``snapshot`` has on each node.
        """
        if not self.preempt_verb:
            raise ExtenderError(
                f"preempt verb is not defined for extender {self.url_prefix} "
                "but run into ProcessPreemption"
            )
        if self.node_cache_capable:
            args: dict[str, Any] = {
                "Pod": pod.raw,
                "NodeNameToVictims": None,
                "NodeNameToMetaVictims": {
                    node: {
                        "Pods": [{"UID": p.uid} for p in v.pods],
                        "NumPDBViolations": v.num_pdb_violations,
                    }
                    for node, v in victims.items()
                },
            }
        else:
            args = {
                "Pod": pod.raw,
                "NodeNameToVictims": {
                    node: {
                        "Pods": [p.raw for p in v.pods],
                        "NumPDBViolations": v.num_pdb_violations,
                    }
                    for node, v in victims.items()
                },
                "NodeNameToMetaVictims": None,
            }
        reply = await self._send(self.preempt_verb, args)
        if reply is not None and not isinstance(reply, dict):
            raise self._bad_reply(self.preempt_verb, "an ExtenderPreemptionResult object", reply)
        meta = _field(reply, "NodeNameToMetaVictims") if reply else None
        if meta is None:
            return {}
        if not isinstance(meta, dict):
            raise self._bad_reply(self.preempt_verb, "NodeNameToMetaVictims to be an object", meta)
        out: dict[str, Victims] = {}
        for node_name, mv in meta.items():
            ni = snapshot.get(node_name)
            if ni is None:
                raise ExtenderError(
                    f"extender {self.url_prefix} names node {node_name!r} for preemption, "
                    "which the scheduler does not know"
                )
            if mv is None:
                out[node_name] = Victims()
                continue
            if not isinstance(mv, dict):
                raise self._bad_reply(self.preempt_verb, "MetaVictims objects", mv)
            pods: list[PodInfo] = []
            for mp in _field(mv, "Pods") or ():
                uid = _field(mp, "UID") if isinstance(mp, dict) else None
                found = ni.pods.get(uid) if isinstance(uid, str) else None
                if found is None:
                    raise ExtenderError(
                        f"extender: {self.url_prefix} claims to preempt pod (UID: {uid}) on "
                        f"node: {node_name}, but the pod is not found on that node"
                    )
                pods.append(found)
            violations = _field(mv, "NumPDBViolations") or 0
            if isinstance(violations, bool) or not isinstance(violations, int):
                raise self._bad_reply(self.preempt_verb, "NumPDBViolations to be an integer", mv)
            out[node_name] = Victims(pods, violations)
        return out

    # ---- transport ---------------------------------------------------------------------------
    def _extender_args(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, Any]:
        if self.node_cache_capable:
            return {"Pod": pod.raw, "Nodes": None, "NodeNames": [ni.name for ni in nodes]}
        items = [ni.node.raw for ni in nodes if ni.node is not None]
        return {"Pod": pod.raw, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.http_timeout),
            )
        return self._session

    async def _send(self, verb: str, args: Any) -> Any:
        url = self.url_prefix.rstrip("/") + "/" + verb
        body = orjson.dumps(args)
        try:
            async with self._client().post(
                url,
                data=body,
                headers={"Content-Type": "application/json"},
                server_hostname=self._server_name,
            ) as resp:
                if resp.status != 200:
                    raise ExtenderError(
                        f"failed {verb} with extender at URL {url}, code {resp.status}"
                    )
                data = await resp.read()
        except TimeoutError as exc:
            raise ExtenderError(
                f"{verb} with extender at URL {url}: no reply within {self.http_timeout:g}s"
            ) from exc
        except aiohttp.ClientError as exc:
            raise ExtenderError(
                f"{verb} with extender at URL {url}: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            return orjson.loads(data) if data.strip() else None
        except orjson.JSONDecodeError as exc:
            raise ExtenderError(
                f"{verb} with extender at URL {url}: reply is not JSON: {exc}"
            ) from exc

    def _bad_reply(self, verb: str, expected: str, got: object) -> ExtenderError:
        text = repr(got)
        if len(text) > 200:
            text = text[:197] + "..."
        return ExtenderError(
            f"extender {self.url_prefix} {verb}: expected {expected} in the reply, got {text}"
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# ---- the scheduling cycle's steps -------------------------------------------------------------


async def find_nodes_that_pass_extenders(
    extenders: Sequence[HTTPExtender],
    pod: PodInfo,
    feasible: list[NodeInfo],
    statuses: NodeToStatus,
) -> list[NodeInfo]:
    """Run the interested filtering extenders in order over the feasible nodes.

    Rejected nodes get a status in ``statuses`` (an unresolvable verdict wins over a
    plain one). Raises ExtenderError when a non-ignorable extender fails.
    """
    for ext in extenders:
        if not feasible:
            break
        if not ext.filter_verb or not ext.is_interested(pod):
            continue
        try:
            passed, failed, unresolvable = await ext.filter(pod, feasible)
        except ExtenderError as exc:
            if ext.ignorable:
                log.info(
                    "skipping ignorable extender that failed", extender=ext.name, error=str(exc)
                )
                continue
            raise
        sent = {ni.name for ni in feasible}
        for name, msg in unresolvable.items():
            if name in sent:
                statuses.statuses[name] = Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [msg], EXTENDER_NAME
                )
        for name, msg in failed.items():
            if name in sent and name not in unresolvable:
                statuses.statuses[name] = Status(Code.UNSCHEDULABLE, [msg], EXTENDER_NAME)
        feasible = passed
    return feasible


async def prioritize_with_extenders(
    extenders: Sequence[HTTPExtender], pod: PodInfo, nodes: Sequence[NodeInfo]
) -> dict[str, list[NodeScore]]:
    """Extender name -> its scaled, weighted scores in the order of ``nodes``.

    The interested extenders are called concurrently; one that fails gives no
    scores (logged), as upstream.
    """
    interested = [e for e in extenders if e.prioritize_verb and e.is_interested(pod)]
    if not interested:
        return {}
    results = await asyncio.gather(
        *(e.prioritize(pod, nodes) for e in interested), return_exceptions=True
    )
    index = {ni.name: i for i, ni in enumerate(nodes)}
    out: dict[str, list[NodeScore]] = {}
    for ext, res in zip(interested, results, strict=True):
        if isinstance(res, BaseException):
            if not isinstance(res, Exception):
                raise res
            log.info(
                "extender prioritize failed; no score from it", extender=ext.name, error=str(res)
            )
            continue
        scores = [NodeScore(ni.name, 0) for ni in nodes]
        factor = ext.weight * EXTENDER_SCORE_SCALE
        for host, score in res:
            i = index.get(host)
            if i is not None:
                scores[i].score += score * factor
        key = ext.name
        n = 1
        while key in out:
            n += 1
            key = f"{ext.name}#{n}"
        out[key] = scores
    return out


async def bind_with_extenders(
    extenders: Sequence[HTTPExtender], pod: PodInfo, node_name: str
) -> tuple[bool, Status | None]:
    """(whether an extender took the bind, its failure). Ignorable failures fall
    through to the next binder, then to the bind plugins."""
    for ext in extenders:
        if not ext.is_binder or not ext.is_interested(pod):
            continue
        try:
            await ext.bind(pod, node_name)
        except ExtenderError as exc:
            if ext.ignorable:
                log.info("skipping ignorable extender in bind", extender=ext.name, error=str(exc))
                continue
            return True, Status.as_error(str(exc), EXTENDER_NAME)
        return True, None
    return False, None


async def process_preemption(
    extenders: Sequence[HTTPExtender],
    pod: PodInfo,
    victims: Mapping[str, Victims],
    snapshot: SharedLister,
) -> dict[str, Victims]:
    """Let the interested preempting extenders narrow a preemption's candidates.

    ``victims`` maps each candidate node to the pods preemption would evict there;
    each extender returns the subset of nodes (and victims) it accepts, which the
    next extender gets. Raises ExtenderError when a non-ignorable extender fails or
    names a node without victims.
    """
    current = dict(victims)
    if not current:
        return current
    for ext in extenders:
        if not ext.supports_preemption or not ext.is_interested(pod):
            continue
        try:
            result = await ext.process_preemption(pod, current, snapshot)
        except ExtenderError as exc:
            if ext.ignorable:
                log.info(
                    "skipping ignorable extender in preemption", extender=ext.name, error=str(exc)
                )
                continue
            raise
        for node_name in list(result):
            if not result[node_name].pods:
                if ext.ignorable:
                    del result[node_name]
                    continue
                raise ExtenderError(f'expected at least one victim pod on node "{node_name}"')
        current = result
        if not current:
            break
    return current


def build_extenders(configs: Sequence[Extender]) -> list[HTTPExtender]:
    """One HTTPExtender per ``extenders[]`` entry; raises ExtenderError on bad TLS files."""
    return [HTTPExtender(c) for c in configs]


async def close_extenders(extenders: Sequence[HTTPExtender]) -> None:
    for ext in extenders:
        with contextlib.suppress(Exception):
            await ext.close()


def with_extender_ignored_resources(cfg: KubeSchedulerConfiguration) -> KubeSchedulerConfiguration:
    """``cfg`` with the extenders' ``ignoredByScheduler`` resources added to every
    profile's NodeResourcesFit ``ignoredResources`` (the extender checks them, the
    scheduler does not). Upstream replaces the plugin's list; kscheduler adds to it."""
    ignored = frozenset(
        r.name for e in cfg.extenders for r in e.managed_resources if r.ignored_by_scheduler
    )
    if not ignored:
        return cfg
    from kscheduler.plugins.node_resources_fit import NAME as FIT
    from kscheduler.plugins.node_resources_fit import NodeResourcesFitArgs

    profiles = []
    for p in cfg.profiles:
        args = p.plugin_args.get(FIT)
        if isinstance(args, NodeResourcesFitArgs):
            new_args = dataclasses.replace(args, ignored_resources=args.ignored_resources | ignored)
            p = dataclasses.replace(
                p, plugin_args=MappingProxyType({**p.plugin_args, FIT: new_args})
            )
        profiles.append(p)
    return dataclasses.replace(cfg, profiles=tuple(profiles))


# ---- TLS ----------------------------------------------------------------------------------------


def ssl_context(config: Extender) -> ssl.SSLContext | None:
    """The TLS settings of an extender, as upstream builds its transport.

    None when neither enableHTTPS nor tlsConfig is set (an https URL then gets the
    default verification). enableHTTPS without a CA skips server verification, as
    upstream does; a CA, when given, is the only one trusted.
    """
    tls = config.tls_config
    if tls is None and not config.enable_https:
        return None
    tls = tls or ExtenderTLSConfig()
    has_ca = bool(tls.ca_data or tls.ca_file)
    insecure = tls.insecure or (config.enable_https and not has_ca)
    where = f"extender {config.url_prefix}: tlsConfig"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if tls.ca_data:
            ctx.load_verify_locations(cadata=tls.ca_data.decode("ascii", "replace"))
        elif tls.ca_file:
            ctx.load_verify_locations(cafile=tls.ca_file)
        else:
            ctx.load_default_certs()
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ExtenderError(f"{where}: cannot load the CA: {exc}") from exc
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert_data or tls.cert_file:
        try:
            _load_client_cert(ctx, tls)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ExtenderError(f"{where}: cannot load the client certificate: {exc}") from exc
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, tls: ExtenderTLSConfig) -> None:
    # The ssl module loads certificates from files only: inline data goes through
    # private temporary files that are removed right after.
    temps: list[str] = []
    try:

        def path_of(data: bytes, path: str) -> str | None:
            if data:
                fd, tmp = tempfile.mkstemp(prefix="kscheduler-extender-", suffix=".pem")
                temps.append(tmp)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                return tmp
            return path or None

        cert = path_of(tls.cert_data, tls.cert_file)
        key = path_of(tls.key_data, tls.key_file)
        if cert is None:
            raise ValueError("a client key needs a client certificate")
        ctx.load_cert_chain(cert, key)
    finally:
        for t in temps:
            with contextlib.suppress(OSError):
                os.unlink(t)


# ---- decoding ----------------------------------------------------------------------------------


def _field(obj: Any, name: str) -> Any:
    """A field of a decoded Go struct: exact name first, then any case (as Go decodes)."""
    if not isinstance(obj, dict):
        return None
    if name in obj:
        return obj[name]
    low = name.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def _failed_map(reply: dict[str, Any], name: str, url: str) -> dict[str, str]:
    value = _field(reply, name)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ExtenderError(f"extender {url}: {name} must map node names to messages")
    return dict(value)


def _node_list_names(node_list: Any, url: str) -> list[str]:
    items = _field(node_list, "items") if isinstance(node_list, dict) else None
    if items is None:
        if isinstance(node_list, dict):
            return []
        raise ExtenderError(f"extender {url}: Nodes must be a NodeList object")
    if not isinstance(items, list):
        raise ExtenderError(f"extender {url}: Nodes.items must be a list")
    names = []
    for item in items:
        meta = _field(item, "metadata")
        name = _field(meta, "name")
        if not isinstance(name, str):
            raise ExtenderError(f"extender {url}: a node in Nodes.items has no metadata.name")
        names.append(name)
    return names


__all__ = [
    "EXTENDER_NAME",
    "EXTENDER_SCORE_SCALE",
    "MAX_EXTENDER_PRIORITY",
    "MIN_EXTENDER_PRIORITY",
    "ExtenderError",
    "HTTPExtender",
    "Victims",
    "bind_with_extenders",
    "build_extenders",
    "close_extenders",
    "find_nodes_that_pass_extenders",
    "prioritize_with_extenders",
    "process_preemption",
    "ssl_context",
    "with_extender_ignored_resources",
]
