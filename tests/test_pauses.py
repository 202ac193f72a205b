"""Pausing: a paused name, pattern or whole bus runs no hook, pauses nest, and a paused point runs
the plain callable."""

from __future__ import annotations

import warnings
from typing import Any, List

import pytest
from hook_helpers import labels, recorder

from hookbus import EventBus


def test_paused_name_pattern_and_whole_bus() -> None:
    bus = EventBus()
    log: List[Any] = []
    bus.on("a.x", recorder(log, "a.x"))
    bus.on("b.x", recorder(log, "b.x"))
    with bus.paused("a.x"):
        bus.emit("a.x")
        bus.emit("b.x")
    with bus.paused("b.*"):
        bus.emit("a.x")
        bus.emit("b.x")
    with bus.paused():
        bus.emit("a.x")
        bus.emit("b.x")
    bus.emit("a.x")
    assert labels(log) == ["b.x", "a.x", "a.x"]


def test_a_pause_never_entered_warns_that_it_paused_nothing() -> None:
    """bus.paused("tick") without ``with`` silently paused nothing: it warns."""
    bus = EventBus()
    seen: List[Any] = []
    bus.on("tick", seen.append)
    with pytest.warns(RuntimeWarning, match=r"never entered.*paused nothing.*with bus\.paused"):
        bus.paused("tick")  # the mistake: no with
    bus.emit("tick", 1)
    assert seen == [1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an entered pause warns nothing
        with bus.paused("tick"):
            bus.emit("tick", 2)
        pause = bus.paused()
        with pause:
            pass
        del pause
    assert seen == [1]


def test_pauses_nest() -> None:
    bus = EventBus()
    log: List[Any] = []
    bus.on("e", recorder(log, "e"))
    with bus.paused("e"):
        with bus.paused("e"):
            pass
        bus.emit("e")  # still paused by the outer block
    bus.emit("e")
    assert labels(log) == ["e"]


def test_paused_point_runs_the_callable_without_hooks() -> None:
    bus = EventBus()

    @bus.hookable("f")
    def f() -> str:
        return "plain"

    bus.post("f", lambda ctx: setattr(ctx, "result", "hooked"))
    with bus.paused("f"):
        assert f() == "plain"
    assert f() == "hooked"
