"""Introspection: what bus.hooks(), bus.events(), bus.points() and bus.handles_of() list,
in dispatch order, with each hook's priority and the file and line it was written at; one
odd hook (a raising ``__eq__``) never breaks it for the others."""

from __future__ import annotations

from typing import Any, List

import pytest
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


# --- one odd hook never breaks introspection for the others -------------------------------


class _RaisingEq:
    """A callable object whose ``__eq__`` fails (a mock, a proxy, a numpy-like object)."""

    def __call__(self, *args: Any) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ of a hook was called")

    __hash__ = object.__hash__


def test_handles_of_finds_a_hook_beside_one_whose_eq_raises() -> None:
    """``handles_of`` finds the registrations of one callable; another user's hook with an
    unusual ``__eq__`` must not make it fail for everyone."""
    bus = EventBus()

    def plain() -> None:
        pass

    bus.on("saved", _RaisingEq())
    handle = bus.on("saved", plain)
    assert bus.handles_of(plain) == [handle]


def test_handles_of_finds_the_same_method_of_the_same_object() -> None:
    """Each attribute access makes a new method object (``log.append``, ``obj.method``):
    ``handles_of`` finds the registrations of the method, as the duplicate rule does."""

    class Listener:
        def react(self, *args: Any) -> None:
            pass

    bus = EventBus()
    log: List[Any] = []
    listener = Listener()
    by_c_method = bus.on("saved", log.append)
    by_method = bus.on("saved", listener.react)
    bus.on("saved", [].append)
    bus.on("saved", Listener().react)
    assert bus.handles_of(log.append) == [by_c_method]
    assert bus.handles_of(listener.react) == [by_method]


def test_a_c_method_registered_twice_on_one_name_is_refused() -> None:
    """``log.append`` twice is one callable twice, as ``obj.method`` twice is."""
    bus = EventBus()
    log: List[Any] = []
    bus.on("saved", log.append)
    with pytest.raises(ValueError, match="already registered"):
        bus.on("saved", log.append)
    bus.emit("saved", 1)
    assert log == [1]


def test_hooks_refuses_an_unknown_kind_naming_the_kinds() -> None:
    """A misspelt kind (``"psot"``) must not read as "no hooks of that kind"."""
    bus = EventBus()
    bus.post("p", print)
    with pytest.raises(ValueError, match=r"unknown hook kind 'psot'; accepted: 'event', 'pre'"):
        bus.hooks("p", kind="psot")
    assert [handle.kind for handle in bus.hooks("p", kind="post")] == ["post"]
