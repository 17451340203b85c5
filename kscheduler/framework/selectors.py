"""Label selectors and node selectors, compiled once from raw JSON."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    pass


_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def go_int(text: str) -> int | None:
    """An int64 as Go's strconv.ParseInt(text, 10, 64) reads it, or None.

    Stricter than int(): no underscores, spaces or non-ASCII digits.
    """
    if not _GO_INT.fullmatch(text):
        return None
    n = int(text)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: frozenset[str]
    #: Gt / Lt: the bound; None when the value is not an integer (matches nothing)
    number: int | None = 0

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            v = labels.get(self.key)
            return v is not None and v in self.values
        if op == "NotIn":
            v = labels.get(self.key)
            return v is None or v not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if self.number is None:
            return False  # the term's value is not an integer: it matches no node
        v = labels.get(self.key)
        if v is None:
            return False
        n = go_int(v)
        if n is None:
            return False
        return n > self.number if op == "Gt" else n < self.number


_LABEL_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_NODE_OPS = _LABEL_OPS | {"Gt", "Lt"}


def _requirement(
    raw: Mapping[str, Any], ops: frozenset[str], where: str, *, strict: bool = True
) -> Requirement:
    key = raw.get("key")
    op = raw.get("operator")
    values = raw.get("values") or []
    if not isinstance(key, str) or not key:
        raise SelectorError(f"{where}: key must be a non-empty string")
    if op not in ops:
        raise SelectorError(f"{where}: operator {op!r} is not one of {sorted(ops)}")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"{where}: values must be a list of strings")
    number: int | None = 0
    if op in ("In", "NotIn") and not values:
        raise SelectorError(f"{where}: values must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise SelectorError(f"{where}: values must be empty for operator {op}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise SelectorError(f"{where}: operator {op} takes exactly one value")
        number = go_int(values[0])
        if number is None and strict:
            raise SelectorError(f"{where}: {values[0]!r} is not an integer")
        # not strict (required node affinity): kube-scheduler lets such a term match
        # no node rather than failing the pod, so keep it, matching nothing
    return Requirement(key, op, frozenset(values), number)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector. ``None`` selectors match nothing; empty ones everything."""

    match_labels: tuple[tuple[str, str], ...]
    requirements: tuple[Requirement, ...]

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, where: str = "selector") -> LabelSelector:
        raw = raw or {}
        ml = raw.get("matchLabels") or {}
        if not isinstance(ml, dict):
            raise SelectorError(f"{where}.matchLabels must be a map")
        exprs = raw.get("matchExpressions") or []
        if not isinstance(exprs, list):
            raise SelectorError(f"{where}.matchExpressions must be a list")
        reqs = tuple(
            _requirement(e, _LABEL_OPS, f"{where}.matchExpressions[{i}]")
            for i, e in enumerate(exprs)
        )
        return cls(tuple(sorted((str(k), str(v)) for k, v in ml.items())), reqs)

    def is_empty(self) -> bool:
        return not self.match_labels and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        for r in self.requirements:  # noqa: SIM110 - a plain loop: this is the hot path
            if not r.matches(labels):
                return False
        return True


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]  # only metadata.name is supported upstream

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term matches no objects
        for r in self.expressions:
            if not r.matches(labels):
                return False
        if self.fields:
            fields = {"metadata.name": name}
            for r in self.fields:
                if not r.matches(fields):
                    return False
        return True


def parse_node_selector_term(
    raw: Mapping[str, Any], where: str, *, strict: bool = True
) -> NodeSelectorTerm:
    if not isinstance(raw, dict):
        raise SelectorError(f"{where} must be an object")
    exprs = raw.get("matchExpressions") or []
    fields = raw.get("matchFields") or []
    e = tuple(
        _requirement(x, _NODE_OPS, f"{where}.matchExpressions[{i}]", strict=strict)
        for i, x in enumerate(exprs)
    )
    f = tuple(
        _requirement(x, _LABEL_OPS, f"{where}.matchFields[{i}]") for i, x in enumerate(fields)
    )
    for i, r in enumerate(f):
        if r.key != "metadata.name":
            raise SelectorError(f"{where}.matchFields[{i}]: only metadata.name is supported")
    return NodeSelectorTerm(e, f)


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Required node affinity: the terms are ORed."""

    terms: tuple[NodeSelectorTerm, ...]

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> NodeSelector:
        terms = raw.get("nodeSelectorTerms") or []
        if not isinstance(terms, list):
            raise SelectorError(f"{where}.nodeSelectorTerms must be a list")
        return cls(
            tuple(
                parse_node_selector_term(t, f"{where}.nodeSelectorTerms[{i}]", strict=False)
                for i, t in enumerate(terms)
            )
        )

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        return any(t.matches(labels, name) for t in self.terms)

    def node_names(self) -> set[str] | None:
        """Node names the selector is limited to by matchFields, or None if unlimited."""
        names: set[str] = set()
        for t in self.terms:
            limited = None
            for r in t.fields:
                if r.key == "metadata.name" and r.operator == "In":
                    limited = set(r.values) if limited is None else limited & r.values
            if limited is None:
                return None
            names |= limited
        return names


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: NodeSelectorTerm


def parse_preferred_terms(raw: Sequence[Any], where: str) -> tuple[PreferredTerm, ...]:
    out = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            raise SelectorError(f"{where}[{i}] must be an object")
        weight = p.get("weight", 0)
        if not isinstance(weight, int):
            raise SelectorError(f"{where}[{i}].weight must be an integer")
        out.append(
            PreferredTerm(
                weight,
                parse_node_selector_term(p.get("preference") or {}, f"{where}[{i}].preference"),
            )
        )
    return tuple(out)
