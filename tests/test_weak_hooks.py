"""Weak hooks: a hook that could never run is refused, and one that goes, goes whole."""

from __future__ import annotations

import functools
import gc
from typing import Any, Callable, List

import pytest

import hookbus
from hookbus import EventBus


class _Callable:
    def __call__(self, *args: Any) -> None:
        pass


def _takes(first: Any, *rest: Any) -> None:
    pass


@pytest.mark.parametrize(
    "make",
    [_Callable, lambda: functools.partial(_takes, 1)],
    ids=["callable object", "functools.partial"],
)
def test_weak_refuses_a_hook_that_nothing_else_holds(make: Callable[[], Any]) -> None:
    """A lambda, or ``Temp().method``, is already refused: nothing else refers to it, so it
    would be collected at once and never run. A fresh callable object or partial is the
    same silent miss, and is refused the same way."""
    bus = EventBus()
    with pytest.raises(TypeError, match="weak"):
        bus.on("saved", make(), weak=True)
    assert bus.hooks() == []


def test_subscribe_weak_refuses_an_object_that_nothing_else_holds() -> None:
    """``subscribe(Temporary(), weak=True)`` is ``on(Temp().method, weak=True)`` for each
    method, which is refused; a group whose hooks are all dead on return is the same
    silent miss."""

    class Temporary:
        @hookbus.listens("saved")
        def saved(self) -> None:
            pass

    bus = EventBus()
    with pytest.raises(TypeError, match="weak"):
        bus.subscribe(Temporary(), weak=True)
    assert bus.hooks() == []


def test_subscribe_weak_removes_every_hook_of_the_object_when_it_is_collected() -> None:
    """``weak=True`` on ``subscribe`` means the object's hooks go with the object, all of
    them: a static or class method is a hook of that object as much as a plain one."""

    class Listener:
        @hookbus.listens("plain")
        def plain(self) -> None:
            pass

        @hookbus.listens("static")
        @staticmethod
        def static() -> None:
            pass

        @hookbus.listens("per_class")
        @classmethod
        def per_class(cls) -> None:
            pass

    bus = EventBus()
    listener = Listener()
    group = bus.subscribe(listener, weak=True)
    assert len(group) == 3
    del listener
    gc.collect()
    assert bus.hooks() == []
    assert not group.active


@pytest.mark.parametrize(
    "register",
    [
        lambda bus: bus.on("saved", _Callable(), weak=True),
        lambda bus: bus.pre("saved", _Callable(), weak=True),
        lambda bus: bus.registry.register("event", "saved", _Callable(), {"weak": True}),
        lambda bus: hookbus.EventBus.on(bus, "saved", _Callable(), weak=True),
        lambda bus: bus.on("saved", weak=True)(_Callable()),
    ],
    ids=["on", "pre", "registry", "unbound method", "decorator"],
)
def test_weak_refuses_a_fresh_callable_object_through_every_way_in(
    register: Callable[[EventBus], Any],
) -> None:
    """The refusal counts the references of the registration's own frames, however many
    there are on the way in."""
    bus = EventBus()
    with pytest.raises(TypeError, match="nothing else refers"):
        register(bus)
    assert bus.hooks() == []


def test_weak_refuses_a_fresh_callable_object_in_a_scope_and_leaves_the_scope_empty() -> None:
    bus = EventBus()
    with bus.scope() as scope:
        with pytest.raises(TypeError, match="nothing else refers"):
            scope.on("saved", functools.partial(_takes, 1), weak=True)
        assert len(scope) == 0
    assert bus.hooks() == []


class _Holder:
    def __init__(self) -> None:
        self.hook = _Callable()


def _register_from_a_local(bus: EventBus) -> Any:
    local = functools.partial(_takes, 1)
    bus.on("local", local, weak=True)
    return local


def test_weak_takes_a_callable_object_or_partial_held_anywhere_and_lets_it_go() -> None:
    """Held by a variable, an attribute or a list, the hook is accepted, runs while held,
    and goes with its last holder (reference counting alone: the collector is off)."""
    bus = EventBus()
    calls: List[str] = []
    held = _Callable()
    holder = _Holder()
    in_list = [functools.partial(calls.append, "from the list")]
    handles = [
        bus.on("saved", held, weak=True),
        bus.on("saved", holder.hook, weak=True),
        bus.on("saved", in_list[0], weak=True),
    ]
    kept = _register_from_a_local(bus)
    bus.emit("saved")
    assert calls == ["from the list"]
    gc.disable()
    try:
        del held, holder, in_list, kept
        assert not any(handle.active for handle in handles)
        assert bus.hooks() == []
    finally:
        gc.enable()


def test_subscribe_weak_takes_an_object_held_elsewhere() -> None:
    class Listener:
        @hookbus.listens("saved")
        def saved(self) -> None:
            pass

    bus = EventBus()
    listener = Listener()
    group = bus.subscribe(listener, weak=True)
    assert group.active
    bus.subscribe(Listener())  # held strongly: a fresh object is fine
    assert len(bus.hooks()) == 2


def test_subscribe_weak_runs_static_and_class_methods_while_the_object_lives() -> None:
    ran: List[str] = []

    class Listener:
        @hookbus.listens("saved")
        @staticmethod
        def static() -> None:
            ran.append("static")

        @hookbus.listens("saved")
        @classmethod
        def per_class(cls) -> None:
            ran.append(cls.__name__)

    bus = EventBus()
    listener = Listener()
    group = bus.subscribe(listener, weak=True)
    bus.emit("saved")
    assert ran == ["static", "Listener"]
    assert [handle.hook for handle in group] == [Listener.static, Listener.per_class]
    gc.disable()
    try:
        del listener  # reference counting alone: the hooks go at once
        assert not group.active
        bus.emit("saved")
        assert ran == ["static", "Listener"]
    finally:
        gc.enable()
