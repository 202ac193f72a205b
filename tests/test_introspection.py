"""Introspection (``hooks``, ``handles_of``): one odd hook never breaks it for the others."""

from __future__ import annotations

from typing import Any, List

import pytest

from hookbus import EventBus


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
