"""Weak references (``weak=True``): a weak hook lives exactly as long as its object, one
that could never run is refused, and one that goes, goes whole.

Bound methods, functions and methods of C types; pre and post hooks; a hook collected
during an emission or under the bus lock; the refusal of a lambda, a fresh object's method,
callable object or partial, through every way in; and ``subscribe(..., weak=True)``, whose
hooks (static and class methods included) all go with the object.
"""

from __future__ import annotations

import collections
import functools
import gc
import weakref
from typing import Any, Callable, List

import pytest
from hook_helpers import Listener, collect_garbage

import hookbus
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


def test_weak_python_method_of_an_object_without_weak_references_is_refused_clearly() -> None:
    class Slotted:  # __slots__ without __weakref__: no weak reference to it can be made
        __slots__ = ()

        def update(self, value: Any) -> None: ...

    bus = EventBus()
    owner = Slotted()
    refused = (
        r"weak=True .*Slotted.update is bound to a Slotted, which does not support weak "
        r"references; accepted: .*__weakref__"
    )
    with pytest.raises(TypeError, match=refused) as info:
        bus.on("e", owner.update, weak=True)
    assert "register it strongly" in str(info.value)
    with pytest.raises(TypeError, match=refused):
        bus.pre("e", owner.update, weak=True)
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


# --- a hook nothing else holds is refused; subscribe(weak=True) ---------------------------


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
