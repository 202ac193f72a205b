"""What blinker, pyee, pluggy and torch users rely on about senders and registrations.

``target=`` matches hashable built-in values by value and other objects by identity, and
holds the sender weakly; the same callable registered twice on one name is refused (never
silently run twice, never silently dropped); ``weak=True`` on a lambda is refused; a module
subscribes as a plugin.
"""

from __future__ import annotations

import collections
import gc
import sys
import types
import weakref
from typing import Any, List

import pytest

import hookbus
from hookbus import EventBus

# --- target=: by value for built-in values, by identity for the rest ----------------------


def test_a_built_in_value_sender_matches_by_value() -> None:
    bus = EventBus()
    seen: List[Any] = []
    bus.on("sig", lambda sender: seen.append(sender), target=123456789)
    bus.on("sig", lambda sender: seen.append(("s", sender)), target="a-long-key" * 3)
    bus.emit("sig", int("123456789"))
    bus.emit("sig", "".join(["a-long-key"] * 3))
    bus.emit("sig", 987654321)
    assert seen == [123456789, ("s", "a-long-key" * 3)]


def test_other_senders_match_by_identity_even_when_equal() -> None:
    class Same:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    bus = EventBus()
    sender = Same()
    seen: List[Any] = []
    bus.on("sig", lambda s: seen.append(s), target=sender)
    bus.emit("sig", Same())
    bus.emit("sig", 1)
    assert seen == []
    bus.emit("sig", sender)
    assert seen == [sender]


def test_a_value_target_does_not_compare_an_object_sender_by_value() -> None:
    class Loud:
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared")

        __hash__ = object.__hash__

    bus = EventBus()
    bus.on("sig", lambda s: None, target="key")
    bus.emit("sig", Loud())  # not compared, so no error


# --- target=: held weakly, the hook goes with its sender ---------------------------------


class Sender:
    pass


def test_a_target_is_held_weakly_and_its_hook_goes_with_it() -> None:
    bus = EventBus()
    sender = Sender()
    alive = weakref.ref(sender)
    handle = bus.on("sig", lambda s: None, target=sender)
    assert handle.target is sender
    del sender
    gc.collect()
    assert alive() is None
    assert not handle.active
    assert bus.hooks() == []
    assert handle.target is None


def test_a_weak_target_still_matches_while_alive_in_every_loop() -> None:
    bus = EventBus(errors="collect")
    sender = Sender()
    bus.on("sig", lambda s: "mine", target=sender)
    bus.on("sig", lambda s: "any")
    assert bus.collect("sig", sender) == ["mine", "any"]
    assert bus.collect("sig", Sender()) == ["any"]


def test_a_target_that_cannot_be_held_weakly_is_held_strongly() -> None:
    bus = EventBus()
    key = ("a", 1)
    seen: List[Any] = []
    bus.on("sig", lambda s: seen.append(s), target=key)
    bus.emit("sig", key)
    assert seen == [key]


# --- the same callable twice --------------------------------------------------------------


def test_the_same_callable_twice_on_one_name_is_refused() -> None:
    bus = EventBus()

    def hook(x: Any) -> None: ...

    first = bus.on("tick", hook)
    with pytest.raises(ValueError, match="already registered") as raised:
        bus.on("tick", hook, priority=5)
    assert "partial" in str(raised.value)  # how to run it twice on purpose
    assert bus.hooks() == [first]
    bus.on("tock", hook)  # another name is another registration
    first.remove()
    bus.on("tick", hook)  # once the first is gone, it may come back


def test_the_same_bound_method_twice_is_refused_and_two_objects_are_not() -> None:
    class Plugin:
        def tick(self) -> None: ...

    bus = EventBus()
    plugin = Plugin()
    bus.on("tick", plugin.tick)
    with pytest.raises(ValueError, match="already registered"):
        bus.on("tick", plugin.tick)
    bus.on("tick", Plugin().tick)


def test_the_same_callable_for_two_targets_is_two_registrations() -> None:
    bus = EventBus()
    seen: List[Any] = []

    def hook(sender: Any) -> None:
        seen.append(sender)

    bus.on("sig", hook, target="a")
    bus.on("sig", hook, target="b")
    with pytest.raises(ValueError, match="already registered"):
        bus.on("sig", hook, target="a")
    bus.emit("sig", "a")
    bus.emit("sig", "b")
    assert seen == ["a", "b"]


def test_the_same_hook_twice_on_a_pattern_or_a_point_is_refused() -> None:
    bus = EventBus()

    @bus.hookable("load")
    def load() -> None: ...

    def hook(ctx: Any) -> None: ...

    bus.pre("load", hook)
    with pytest.raises(ValueError, match="already registered"):
        bus.pre("load", hook)
    bus.on("a.*", print)
    with pytest.raises(ValueError, match="already registered"):
        bus.on("a.*", print)


def test_subscribing_the_same_object_twice_is_refused() -> None:
    class Plugin:
        @hookbus.listens("tick")
        def tick(self) -> None: ...

    bus = EventBus()
    plugin = Plugin()
    bus.subscribe(plugin)
    with pytest.raises(ValueError, match="already registered"):
        bus.subscribe(plugin)
    assert len(bus.hooks()) == 1


# --- weak=True on something with no other reference --------------------------------------


def test_weak_true_on_a_lambda_is_refused() -> None:
    bus = EventBus()
    with pytest.raises(TypeError, match="lambda"):
        bus.on("tick", lambda: None, weak=True)
    assert bus.hooks() == []


# --- a module as a plugin -----------------------------------------------------------------


def test_a_module_subscribes_its_marked_functions() -> None:
    plugin = types.ModuleType("my_plugin")
    seen: List[Any] = []

    @hookbus.listens("tick")
    def on_tick(n: int) -> None:
        seen.append(n)

    def helper() -> None: ...

    plugin.on_tick = on_tick  # type: ignore[attr-defined]
    plugin.helper = helper  # type: ignore[attr-defined]
    sys.modules["my_plugin"] = plugin
    try:
        bus = EventBus()
        group = bus.subscribe(plugin)
        bus.emit("tick", 3)
        assert seen == [3]
        assert [h.name for h in group] == ["tick"]
        group.remove()
        with pytest.raises(ValueError, match="no hook functions"):
            bus.subscribe(types.ModuleType("empty"))
    finally:
        del sys.modules["my_plugin"]


@pytest.mark.torch
def test_a_torch_users_second_registration_is_refused_not_dropped() -> None:
    torch = pytest.importorskip("torch")
    import hookbus.torch

    bus = EventBus()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    hookbus.torch.attach(model, bus)
    calls: List[str] = []

    def hook(ctx: Any) -> None:
        calls.append(ctx.name)

    bus.post("0", hook)
    with pytest.raises(ValueError, match="torch would run the hook twice"):
        bus.post("0", hook)  # torch's register_forward_hook would run it twice
    model(torch.zeros(1, 2))
    assert calls == ["0"]


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


class Table(dict):  # type: ignore[type-arg]
    """A dict that supports weak references."""
