"""Targets (``target=``): a hook that runs only for one sender.

``target=`` matches hashable built-in values by value and other objects by identity, as
blinker's senders do, and holds the sender weakly: the hook goes with its sender.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any, List

from hook_helpers import labels, recorder

from hookbus import EventBus

# --- target= on events and on hook points ------------------------------------------------


def test_target_filters_on_the_sender() -> None:
    bus = EventBus()
    log: List[Any] = []
    sender, other = object(), object()
    bus.on("changed", recorder(log, "targeted"), target=sender)
    bus.on("changed", recorder(log, "any"))
    bus.emit("changed", other)
    bus.emit("changed", sender, value=1)
    bus.emit("changed")  # no sender at all
    assert labels(log) == ["any", "targeted", "any", "any"]


def test_target_filter_on_instances() -> None:
    bus = EventBus()
    log: List[Any] = []

    class Model:
        def __init__(self, name: str) -> None:
            self.name = name

        @bus.hookable("forward")
        def forward(self, x: int) -> int:
            return x

    a, b = Model("a"), Model("b")
    bus.post("forward", lambda ctx: log.append(ctx.target.name), target=a)
    a.forward(1)
    b.forward(1)
    assert log == ["a"]


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
