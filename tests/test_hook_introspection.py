"""Introspection: what bus.hooks(), bus.events() and bus.points() list, in dispatch order,
with each hook's priority and the file and line it was written at."""

from __future__ import annotations

from hook_helpers import line_of

from hookbus import EventBus

HERE = __file__


def test_introspection_lists_hooks_with_priority_and_location() -> None:
    bus = EventBus()

    def first() -> None:
        pass

    bus.on("e", first, priority=2)
    bus.on("e.*", print)
    bus.on("other", print)
    (top, *_rest) = bus.hooks("e")
    assert top.hook is first
    assert top.priority == 2
    assert top.where.endswith(f"test_hook_introspection.py:{first.__code__.co_firstlineno}")
    assert bus.events() == ["e", "e.*", "other"]
    assert [h.name for h in bus.hooks("e.x")] == ["e.*"]
    assert len(bus.hooks()) == 3
    assert "3 hooks" in repr(bus)


def test_hooks_of_a_pattern_lists_the_hooks_registered_under_that_pattern() -> None:
    # docs/concepts.md: bus.hooks("train.*") lists the hooks registered under that pattern.
    bus = EventBus()
    low = bus.on("train.*", print)
    high = bus.on("train.*", repr, priority=5)
    bus.on("train.step", print)
    bus.on("eval.*", print)
    point_hook = bus.pre("train.*", lambda ctx: None)
    assert bus.hooks("train.*") == [high, low, point_hook]  # kind by kind, dispatch order
    assert bus.hooks("train.*", kind="event") == [high, low]
    assert bus.hooks("nothing.*") == []


def test_points_lists_name_kind_and_source() -> None:
    bus = EventBus()

    @bus.hookable
    def load(path: str) -> str:
        return path

    class Model:
        @bus.hookable("Model.forward")
        def forward(self, x: int) -> int:
            return x

    listed = {point.name: point for point in bus.points()}
    assert listed[load.__qualname__].kind == "function"
    assert listed[load.__qualname__].where == line_of(load.__wrapped__)  # type: ignore[attr-defined]
    assert listed["Model.forward"].kind == "method"
    assert listed["Model.forward"].where.startswith(HERE)
    assert [p.name for p in bus.points()] == sorted(listed)
    assert Model
