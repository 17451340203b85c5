"""Cache change log: which nodes changed since a cursor, resets, the snapshot's view."""

from __future__ import annotations

from kscheduler.cache import Cache, Snapshot
from kscheduler.framework.interface import NodeChanges
from tests.unit.builders import node, pod


def names_since(c: Cache, cursor: int | None) -> list[str] | None:
    changes = c.changes_since(cursor)
    return None if changes.names is None else list(changes.names)


def test_each_changed_node_is_reported_once_in_order_of_first_change() -> None:
    c = Cache()
    start = c.change_cursor()
    c.add_node(node("n1").record())
    c.add_node(node("n2").record())
    c.add_pod(pod("p").on("n2").build())
    c.add_pod(pod("q").on("n1").build())
    changes = c.changes_since(start)
    assert list(changes.names or ()) == ["n1", "n2"]
    assert changes.cursor == c.change_cursor() == start + 4
    assert names_since(c, changes.cursor) == []


def test_every_kind_of_change_is_logged() -> None:
    now = [100.0]
    c = Cache(assumed_ttl=1, clock=lambda: now[0])
    c.add_node(node("n1").record())
    c.add_node(node("n2").record())
    cursor = c.change_cursor()

    def changed() -> list[str] | None:
        """The nodes changed since the last call."""
        nonlocal cursor
        out = names_since(c, cursor)
        cursor = c.change_cursor()
        return out

    c.update_node(node("n1").labels(zone="a").record())
    assert changed() == ["n1"]
    p = pod("p").build()
    c.assume(p.with_node("n1"))
    assert changed() == ["n1"]
    c.forget(p.uid)
    assert changed() == ["n1"]
    c.assume(p.with_node("n1"))
    c.add_pod(p.with_node("n2"))  # the informer reports it on another node: it moves
    assert changed() == ["n1", "n2"]
    c.update_pod(pod("p").labels(app="x").on("n2").build())
    assert changed() == ["n2"]
    c.remove_pod(p.uid)
    assert changed() == ["n2"]
    c.remove_pod(p.uid)
    c.remove_node("unknown")
    assert changed() == []

    # a pod before its node, the node, the node deleted before the pod
    q = pod("q").on("n3").build()
    c.add_pod(q)
    assert changed() == ["n3"]
    c.add_node(node("n3").record())
    assert changed() == ["n3"]
    c.remove_node("n3")
    assert changed() == ["n3"]
    c.remove_pod(q.uid)
    assert changed() == ["n3"]

    # an assumed pod whose binding finished expires
    r = pod("r").build()
    c.assume(r.with_node("n2"))
    c.finish_binding(r.uid)
    assert changed() == ["n2"]
    c.expire_assumed()
    assert changed() == []  # not due yet
    now[0] = 200.0
    assert [x.uid for x in c.expire_assumed()] == [r.uid]
    assert changed() == ["n2"]


def test_unknown_cursors_start_over() -> None:
    c = Cache()
    c.add_node(node("n1").record())
    end = c.change_cursor()
    assert c.changes_since(None) == NodeChanges(None, end)
    assert c.changes_since(-1) == NodeChanges(None, end)
    assert c.changes_since(end + 1) == NodeChanges(None, end)
    assert names_since(c, 0) == ["n1"]


def test_log_reset_keeps_readers_at_its_end_and_drops_the_others() -> None:
    c = Cache(change_log_limit=3)
    for name in ("a", "b", "c"):
        c.add_node(node(name).record())
    behind = 1
    caught_up = c.change_cursor()
    assert names_since(c, behind) == ["b", "c"]
    c.add_node(node("d").record())  # the log was full: dropped, then "d" logged
    assert len(c._changes) == 1
    assert names_since(c, behind) is None
    assert names_since(c, caught_up) == ["d"]
    assert c.change_cursor() == 4
    # cursors stay monotonic across resets
    for name in ("e", "f", "g"):
        c.add_node(node(name).record())
    assert c.change_cursor() == 7
    assert names_since(c, 4) is None
    assert names_since(c, 6) == ["g"]


def test_snapshot_answers_only_while_up_to_date() -> None:
    c = Cache()
    s = Snapshot(c)
    assert s.changes_since(None) is None  # never updated
    c.add_node(node("n1").record())
    s.update()
    first = s.changes_since(None)
    assert first is not None and first.names is None
    c.add_pod(pod("p").on("n1").build())
    assert s.changes_since(first.cursor) is None  # the node list may be stale
    s.update()
    changes = s.changes_since(first.cursor)
    assert changes is not None and list(changes.names or ()) == ["n1"]
    assert changes.cursor == c.change_cursor()
