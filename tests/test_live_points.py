"""The live hook points of a registry, by name (``LivePoints``): held weakly, each once,
in the order they were added."""

from __future__ import annotations

import gc
from typing import List, Optional, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from hookbus import EventBus
from hookbus._live_points import LivePoints


class _Point:
    """The least a point needs here: a name, and weak references to it."""

    __slots__ = ("__weakref__", "name")

    def __init__(self, name: str) -> None:
        self.name = name


def test_a_point_added_twice_is_kept_once() -> None:
    points, point = LivePoints(), _Point("a")
    points.add(point)  # type: ignore[arg-type]
    points.add(point)  # type: ignore[arg-type]
    assert points.named("a") == [point]
    assert len(points.refs("a")) == 1


def test_points_of_a_name_are_listed_in_the_order_they_were_added() -> None:
    points = LivePoints()
    made = [_Point("a") for _ in range(5)]
    for point in made:
        points.add(point)  # type: ignore[arg-type]
    assert points.named("a") == made
    assert points.every() == made


def test_a_dead_point_is_not_listed_and_its_name_is_swept() -> None:
    points = LivePoints()
    point = _Point("gone")
    points.add(point)  # type: ignore[arg-type]
    assert points.has("gone")
    assert points.names() == ["gone"]
    del point
    gc.collect()
    assert not points.has("gone")
    assert points.named("gone") == []
    assert points.names() == []
    assert points.every() == []
    keep = [_Point(f"n{i}") for i in range(200)]  # new names: the dead one is swept
    for each in keep:
        points.add(each)  # type: ignore[arg-type]
    assert points.refs("gone") == ()
    assert len(points.names()) == 200


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "discard", "kill"]), st.integers(0, 5)), max_size=40
    )
)
def test_the_live_points_are_those_added_not_discarded_and_alive(
    steps: List[Tuple[str, int]],
) -> None:
    # A model: an ordered set of live points; any mix of adds, discards and deaths.
    names = ["a", "b"]
    made: List[Optional[_Point]] = [_Point(names[i % 2]) for i in range(6)]
    points, model = LivePoints(), []  # type: ignore[var-annotated]
    for action, i in steps:
        point = made[i]
        if point is None:
            continue
        if action == "add":
            points.add(point)  # type: ignore[arg-type]
            if point not in model:
                model.append(point)
        elif action == "discard":
            points.discard(point)  # type: ignore[arg-type]
            if point in model:
                model.remove(point)
        else:
            if point in model:
                model.remove(point)
            made[i] = point = None  # its last reference: freed at once (no cycle)
    for name in names:
        assert points.named(name) == [p for p in model if p.name == name]
        assert points.has(name) == any(p.name == name for p in model)
    assert sorted(points.names()) == sorted({p.name for p in model})
    assert points.matching(lambda name: name == "a") == [p for p in model if p.name == "a"]


def test_every_point_of_a_name_hears_of_a_hook_for_it() -> None:
    bus = EventBus()
    calls: List[str] = []
    first = bus.wrap(lambda x: x, "shared")
    second = bus.wrap(lambda x: x, "shared")
    for fn in (first, second):
        assert fn(1) == 1  # each works its plan out: no hooks
    handle = bus.pre("shared", lambda ctx: calls.append("pre"))
    first(1)
    second(1)
    assert calls == ["pre", "pre"]
    handle.remove()
    first(1)
    second(1)
    assert calls == ["pre", "pre"]
