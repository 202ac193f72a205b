"""Weak hooks: a hook that could never run is refused, and one that goes, goes whole."""

from __future__ import annotations

import functools
import gc
from typing import Any, Callable

import pytest

import hookbus
from hookbus import EventBus


class _Callable:
    def __call__(self, *args: Any) -> None:
        pass


def _takes(first: Any, *rest: Any) -> None:
    pass


@pytest.mark.xfail(
    strict=True,
    reason="weak=True on a fresh callable object or functools.partial is accepted and is "
    "dead before on() returns",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="subscribe(Temporary(), weak=True) registers hooks that die at once: a group "
    "with 0 active hooks, silently",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="subscribe(obj, weak=True): its static and class methods stay registered after "
    "obj is collected",
)
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
