"""Small helpers shared by plugins."""

from __future__ import annotations

from kscheduler.framework.interface import MAX_NODE_SCORE, NodeScore


def default_normalize_score(
    scores: list[NodeScore], *, reverse: bool, max_score: int = MAX_NODE_SCORE
) -> None:
    """Scale scores to [0, max_score] by the highest score; ``reverse`` flips them.

    All-zero scores stay zero, or become ``max_score`` when reversed.
    """
    highest = 0
    for s in scores:
        if s.score > highest:
            highest = s.score
    if highest == 0:
        if reverse:
            for s in scores:
                s.score = max_score
        return
    for s in scores:
        v = max_score * s.score // highest
        s.score = max_score - v if reverse else v
