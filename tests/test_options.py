"""Registration options: priority (higher first, ties in registration order), once, with_name."""

from __future__ import annotations

from typing import Any, List

import pytest
from hook_helpers import labels, recorder

from hookbus import EventBus, Priority


def test_higher_priority_first_and_ties_in_registration_order() -> None:
    bus = EventBus()
    log: List[Any] = []
    for label, priority in [("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -3)]:
        bus.on("e", recorder(log, label), priority=priority)
    bus.emit("e")
    assert labels(log) == ["b", "d", "a", "c", "e"]


def test_priority_names_map_consistently_with_higher_first() -> None:
    bus = EventBus()
    log: List[Any] = []
    names = [
        "LOWEST",
        "VERY_LOW",
        "LOW",
        "BELOW_NORMAL",
        "NORMAL",
        "ABOVE_NORMAL",
        "HIGH",
        "VERY_HIGH",
        "HIGHEST",
    ]
    for name in names:
        bus.on("e", recorder(log, name), priority=name)
    bus.emit("e")
    assert labels(log) == list(reversed(names))
    assert Priority.NORMAL == 0
    assert Priority.HIGH > 10 > Priority.NORMAL  # an int and a name mix as expected


def test_priority_accepts_enum_and_lowercase_name() -> None:
    bus = EventBus()
    assert bus.on("e", print, priority=Priority.LOW).priority == -20
    assert bus.on("f", print, priority="very_high").priority == 40


def test_once_hook_runs_exactly_once_and_is_removed() -> None:
    bus = EventBus()
    log: List[Any] = []
    handle = bus.on("e", recorder(log, "once"), once=True)
    bus.on("e", recorder(log, "always"))
    bus.emit("e")
    bus.emit("e")
    assert labels(log) == ["once", "always", "always"]
    assert not handle.active
    assert [h.name for h in bus.hooks("e")] == ["e"]


def test_a_once_pre_hook_runs_at_the_first_call_only() -> None:
    bus = EventBus()
    log: List[int] = []

    @bus.hookable("f")
    def f(x: int) -> int:
        return x

    bus.pre("f", lambda ctx: log.append(ctx.args[0]), once=True)
    f(1)
    f(2)
    assert log == [1]


def test_with_name_passes_the_event_name_first() -> None:
    bus = EventBus()
    log: List[Any] = []
    bus.on("user.*", recorder(log, "named"), with_name=True)
    bus.on("user.*", recorder(log, "plain"))
    bus.emit("user.created", "ada", admin=True)
    assert log == [
        ("named", ("user.created", "ada"), {"admin": True}),
        ("plain", ("ada",), {"admin": True}),
    ]
    assert bus.collect("user.deleted", "bob") == ["named", "plain"]
    assert "with_name" in repr(bus.hooks("user.x")[0])


def test_with_name_is_for_event_hooks_only() -> None:
    bus = EventBus()
    with pytest.raises(TypeError, match="with_name= is for event hooks"):
        bus.pre("f", print, with_name=True)
    assert bus.hooks() == []


@pytest.mark.parametrize(
    ("register", "accepted"),
    [
        (
            lambda bus: bus.on("e", print, onse=True),
            "priority, once, target, weak, optional, with_name",
        ),
        (lambda bus: bus.pre("f", print, onse=True), "priority, once, target, weak, optional$"),
        (
            lambda bus: bus.post("f", print, with_nme=True),
            "priority, once, target, weak, optional$",
        ),
    ],
    ids=["on", "pre", "post"],
)
def test_an_unknown_option_lists_the_options_of_that_hook_kind(
    register: Any, accepted: str
) -> None:
    """A misspelt option is answered with the options its method takes: ``with_name``
    is an event hook's alone, so a pre or post hook is neither offered nor hinted it."""
    bus = EventBus()
    with pytest.raises(TypeError, match=f"; accepted: {accepted}") as refused:
        register(bus)
    assert ("with_name" in str(refused.value)) == accepted.endswith("with_name")
    assert bus.hooks() == []
