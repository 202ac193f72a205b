"""Weak references (``weak=True``): a weak hook lives exactly as long as its object, and one
that could not live is refused."""

from __future__ import annotations

import collections
import gc
import weakref
from typing import Any, Callable, List

import pytest
from hook_helpers import Listener, collect_garbage

from hookbus import EventBus


def test_weak_bound_method_goes_when_its_object_is_collected() -> None:
    bus = EventBus()
    log: List[str] = []
    listener = Listener(log)
    handle = bus.on("e", listener.on_event, weak=True)
    bus.emit("e")
    assert log == ["listener"]
    assert handle.active
    assert handle.hook == listener.on_event
    alive = weakref.ref(listener)
    del listener
    collect_garbage()
    assert alive() is None  # the bus held it weakly: it did not keep the object alive
    assert not handle.active
    assert handle.hook is None
    assert bus.hooks() == []
    assert bus.events() == []
    bus.emit("e")
    assert log == ["listener"]
    handle.remove()  # still harmless


def test_weak_function_goes_when_collected_and_stays_while_referenced() -> None:
    bus = EventBus()
    log: List[str] = []

    def make() -> Callable[[], None]:
        def local() -> None:
            log.append("local")

        return local

    hook = make()
    handle = bus.on("e", hook, weak=True)
    collect_garbage()
    bus.emit("e")
    assert handle.active  # alive as long as someone holds it
    del hook
    collect_garbage()
    assert not handle.active
    bus.emit("e")
    assert log == ["local"]
    assert bus.hooks() == []


def test_weak_lambda_is_refused_and_a_function_held_by_no_one_is_gone_at_once() -> None:
    # A lambda written in the call would die at once: refused, saying so.
    bus = EventBus()
    with pytest.raises(TypeError, match="weak=True on a lambda"):
        bus.on("e", lambda: None, weak=True)

    def make() -> Callable[[], None]:
        def hook() -> None: ...

        return hook

    # The documented price of opting in: weak=True holds nothing alive.
    handle = bus.on("e", make(), weak=True)
    collect_garbage()
    assert not handle.active
    assert bus.hooks() == []


def test_weak_pre_and_post_hooks_on_a_hook_point() -> None:
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("step")
    def step() -> str:
        return "ok"

    listener = Listener(log)
    pre = bus.pre("step", listener.on_call, weak=True)
    post = bus.post("step", listener.on_call, weak=True)
    assert step() == "ok"
    assert log == ["listener pre", "listener post"]
    del listener
    collect_garbage()
    assert not pre.active
    assert not post.active
    assert step() == "ok"
    assert log == ["listener pre", "listener post"]
    assert bus.hooks() == []


def test_weak_hook_collected_during_an_emission_is_skipped_not_called() -> None:
    bus = EventBus()
    log: List[str] = []
    holder: List[Any] = [Listener(log)]

    def drop_the_listener(*args: Any) -> None:
        log.append("dropper")
        holder.clear()
        collect_garbage()

    bus.on("e", drop_the_listener, priority=1)
    handle = bus.on("e", holder[0].on_event, weak=True)
    bus.emit("e")
    assert log == ["dropper"]
    assert not handle.active


def test_weak_hook_collected_while_the_bus_lock_is_held_does_not_deadlock() -> None:
    # A collection can start anywhere, even inside the bus's own locked section:
    # the weakref callback must not wait for the lock (it is not reentrant).
    bus = EventBus()
    listener = Listener([])
    handle = bus.on("e", listener.on_event, weak=True)
    with bus.registry._lock:  # the registry's own lock, held as a collection starts
        del listener
        collect_garbage()
        assert not handle.active  # already, although not yet swept
    assert bus.hooks() == []  # swept by the next locked operation
    bus.emit("e")


def test_weak_and_strong_registrations_of_one_method_are_independent() -> None:
    bus = EventBus()
    log: List[str] = []
    listener = Listener(log)
    weak = bus.on("e", listener.on_event, weak=True)
    strong = bus.on("f", listener.on_event)  # the same name twice would be refused
    alive = weakref.ref(listener)
    del listener
    collect_garbage()
    assert alive() is not None  # the strong registration keeps it, as documented
    assert weak.active
    strong.remove()
    del strong
    collect_garbage()
    assert alive() is None
    assert not weak.active


class Table(dict):  # type: ignore[type-arg]
    """A dict that supports weak references (a plain dict does not)."""


# A method of a C type: the object (weakly referable), the method, what to emit, the effect.
C_METHODS = {
    "deque.append": (collections.deque, "append", (1,), lambda obj: list(obj) == [1]),
    "set.add": (set, "add", (1,), lambda obj: obj == {1}),
    "dict.__setitem__": (Table, "__setitem__", ("k", 1), lambda obj: obj == {"k": 1}),
}


@pytest.mark.parametrize("kind", list(C_METHODS))
def test_weak_method_of_a_c_type_lives_exactly_as_long_as_its_object(kind: str) -> None:
    make, name, args, received = C_METHODS[kind]
    bus = EventBus()
    obj = make()
    handle = bus.on("e", getattr(obj, name), weak=True)
    collect_garbage()
    assert handle.active, "dropped while its object is alive"
    assert handle.hook == getattr(obj, name)
    assert bus.handles_of(getattr(obj, name)) == [handle]
    bus.emit("e", *args)
    assert received(obj)
    alive = weakref.ref(obj)
    del obj
    collect_garbage()
    assert alive() is None, "the bus kept the object alive"
    assert not handle.active
    assert handle.hook is None
    assert bus.hooks() == []
    bus.emit("e", *args)


def test_weak_method_of_an_object_without_weak_references_is_refused() -> None:
    bus = EventBus()
    items: List[int] = []
    refused = r"weak=True .*bound to a list, which does not support weak references"
    with pytest.raises(TypeError, match=refused) as info:
        bus.on("e", items.append, weak=True)
    assert "register it strongly" in str(info.value)
    assert bus.hooks() == []


def test_weak_method_found_under_another_name_is_refused() -> None:
    class Queue(collections.deque):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:  # an override hides deque.append
            super().append(item)

    bus = EventBus()
    queue = Queue()
    hidden = collections.deque.append.__get__(queue)  # the C method, not the override
    with pytest.raises(TypeError, match="weak=True"):
        bus.on("e", hidden, weak=True)
    assert bus.hooks() == []
    handle = bus.on("e", queue.append, weak=True)  # the override: a plain bound method
    assert handle.active


def test_weak_true_on_a_lambda_is_refused() -> None:
    bus = EventBus()
    with pytest.raises(TypeError, match="lambda"):
        bus.on("tick", lambda: None, weak=True)
    assert bus.hooks() == []


def test_weak_true_on_a_method_of_an_object_made_in_the_call_is_refused() -> None:
    class Display:
        def update(self, value: Any) -> None: ...

    bus = EventBus()
    with pytest.raises(TypeError, match="nothing else refers"):
        bus.on("tick", Display().update, weak=True)
    with pytest.raises(TypeError, match="nothing else refers"):
        bus.on("tick", collections.deque().append, weak=True)
    assert bus.hooks() == []
    display = Display()  # held here: the weak hook lives as long as it does
    handle = bus.on("tick", display.update, weak=True)
    table = Table()
    bus.on("tock", table.__setitem__, weak=True)
    assert handle.active
    del display
    gc.collect()
    assert not handle.active
