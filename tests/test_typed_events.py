"""Typed events: ``@bus.event`` on a stub function declares an event and returns its
``Event``, whose methods go through the bus; what a stub may be, checked where it is written."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, List

import pytest
from hook_helpers import declare_user_created

import hookbus
from hookbus import Event, EventBus


def test_the_stub_gives_the_name_the_spec_and_the_docs() -> None:
    bus = EventBus()

    @bus.event
    def user_created(user: str, *, admin: bool = False) -> None:
        """Emitted after a user row is committed."""

    assert isinstance(user_created, Event)
    assert user_created.name == "user_created"
    assert user_created.bus is bus
    assert str(user_created.signature) == "(user: 'str', *, admin: 'bool' = False) -> 'None'"
    assert user_created.__doc__ == "Emitted after a user row is committed."
    assert repr(user_created) == "<Event user_created(user: str, *, admin: bool = False)>"
    assert bus.event("user.created")(lambda user: None).name == "user.created"


def test_the_module_level_event_declares_on_the_default_bus(default_bus: EventBus) -> None:
    @hookbus.event("test.module.level")
    def ping(n: int, /) -> None: ...

    assert ping.bus is hookbus.default_bus
    seen: List[int] = []
    hookbus.on("test.module.level", seen.append)
    hookbus.emit("test.module.level", 1)
    ping.emit(2)
    assert seen == [1, 2]


def test_every_event_method_goes_through_the_bus() -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    seen: List[Any] = []
    hook = ev.on(lambda user, admin=False: seen.append((user, admin)) or user.upper())
    (handle,) = bus.handles_of(hook)
    ev.emit("ada", admin=True)
    assert ev.collect("bob") == ["BOB"]
    assert ev.first("cy") == "CY"
    assert asyncio.run(ev.collect_async("di")) == ["DI"]
    asyncio.run(ev.emit_async("ed", admin=True))
    assert seen == [("ada", True), ("bob", False), ("cy", False), ("di", False), ("ed", True)]
    assert ev.hooks() == [handle] == bus.hooks("user.created")


def test_on_takes_every_option_and_works_as_a_decorator() -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    seen: List[Any] = []

    @ev.on(priority=5, once=True)
    def first(user: str, *, admin: bool = False) -> None:
        seen.append(("first", user))

    ev.on(lambda event, user, admin=False: seen.append((event, user)), with_name=True)
    sender = "ada"
    ev.on(lambda user, **kwargs: seen.append(("target", user)), target=sender)
    ev.emit(sender)
    ev.emit("bob")
    assert seen == [
        ("first", "ada"),
        ("user.created", "ada"),
        ("target", "ada"),
        ("user.created", "bob"),
    ]
    assert [h.priority for h in bus.handles_of(first)] == []  # once: removed after its call


@pytest.mark.parametrize(
    ("stub", "message"),
    [
        (print, "needs a function as its stub, got builtin_function_or_method"),
        (42, "needs a function as its stub, got int"),
        (functools.partial(print), "got partial"),
    ],
)
def test_a_stub_that_is_not_a_function_is_refused(stub: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        EventBus().event(stub)


def test_a_bad_event_name_or_option_is_refused_where_it_is_written() -> None:
    bus = EventBus()
    assert bus.event("user.*")(lambda: None).name == "user.*"  # any string is a name
    with pytest.raises(TypeError, match="needs a function as its stub, got int"):
        bus.event(3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="historic= takes True or False"):
        bus.event("x", historic="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name it explicitly"):
        bus.event(lambda x: None)
    assert bus.hooks() == []


def test_a_positional_parameter_that_a_hook_takes_by_position_only_gets_a_hint() -> None:
    bus = EventBus()

    @bus.event
    def ping(n: int) -> None: ...

    seen: List[int] = []
    with pytest.raises(TypeError, match=r"make it positional-only in the stub: 'n, /'"):
        ping.on(seen.append)  # list.append(object, /): emit(n=1) would fail


def test_a_stub_with_only_star_args_is_a_spec_like_any_other() -> None:
    bus = EventBus()

    @bus.event
    def values(*numbers: int) -> None: ...

    seen: List[Any] = []
    values.on(lambda *numbers: seen.append(numbers))
    values.emit(1, 2, 3)
    assert seen == [(1, 2, 3)]
    with pytest.raises(TypeError, match="does not accept"):
        values.on(lambda a, b: None)


def test_a_bare_event_on_leaves_the_decorated_name_the_function() -> None:
    # blinker's and psygnal's habit: @signal.connect, @signal.connect with no call.
    bus = EventBus()
    ev = declare_user_created(bus)
    seen: List[Any] = []

    @ev.on
    def welcome(user: str, *, admin: bool = False) -> str:
        seen.append(user)
        return user.upper()

    @ev.on(priority=5)
    def audit(user: str, *, admin: bool = False) -> None:
        seen.append(("audit", user))

    def named(event: str, user: str, *, admin: bool = False) -> None:
        seen.append((event, user))

    assert ev.on(named, with_name=True) is named
    ev.emit("ada")
    assert welcome("bob") == "BOB"  # 'Handle' object is not callable, before
    assert seen == [("audit", "ada"), "ada", ("user.created", "ada"), "bob"]
    assert [h.hook for h in bus.handles_of(welcome)] == [welcome]
    assert [h.priority for h in bus.handles_of(audit)] == [5]


def test_event_emit_runs_the_emit_of_a_bus_subclass() -> None:
    seen: List[Any] = []

    class CountingBus(EventBus):
        def emit(self, event: str, /, *args: Any, **kwargs: Any) -> None:
            seen.append((event, args, kwargs))
            super().emit(event, *args, **kwargs)

    bus = CountingBus()

    @bus.event
    def saved(path: str, *, size: int = 0) -> None: ...

    got: List[Any] = []
    saved.on(lambda path, size=0: got.append((path, size)))
    saved.emit("a.txt", size=3)
    assert seen == [("saved", ("a.txt",), {"size": 3})]
    assert got == [("a.txt", 3)]


def test_event_emit_runs_an_emit_set_on_the_bus_itself() -> None:
    bus = EventBus()
    seen: List[Any] = []
    bus.emit = lambda event, *args, **kwargs: seen.append((event, args))  # type: ignore[method-assign]

    @bus.event
    def tick(n: int) -> None: ...

    tick.emit(1)
    assert seen == [("tick", (1,))]
