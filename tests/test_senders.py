"""Senders (``target=``): matched by value or identity, never through a user's ``__eq__``,
and a receiver never runs twice for one emission."""

from __future__ import annotations

import enum
from typing import Any, ClassVar, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookbus import EventBus


class _RaisingEq(str):
    """A ``str`` subclass whose own ``__eq__`` fails: hookbus must never ask it."""

    asked: ClassVar[List[str]] = []

    def __eq__(self, other: object) -> bool:
        _RaisingEq.asked.append(str.__str__(self))
        raise RuntimeError("__eq__ of the sender was called")

    __hash__ = str.__hash__


@pytest.mark.parametrize("targeted_first", [True, False], ids=["target first", "any first"])
def test_a_receiver_for_one_sender_and_for_any_is_refused_at_the_second_registration(
    targeted_first: bool,
) -> None:
    """Decided: refused, as a second registration of one callable on one name is refused
    (the duplicate rule). blinker runs such a receiver once, but then one of the two
    registrations' options (priority, once, weak) would be ignored silently; a loud
    refusal at registration is the rule hookbus already keeps for duplicates."""
    bus = EventBus()
    seen: List[Any] = []

    def receiver(sender: Any) -> None:
        seen.append(sender)

    first, second = ({"target": 123}, {}) if targeted_first else ({}, {"target": 123})
    bus.on("ping", receiver, **first)
    with pytest.raises(ValueError, match="already registered"):
        bus.on("ping", receiver, **second)
    bus.emit("ping", 123)
    assert seen == [123]


def test_a_sender_s_own_eq_is_never_called() -> None:
    """The docs promise that target matching never asks a user's ``__eq__``: a sender with a
    raising (or slow, or side-effecting) ``__eq__`` must not break, or change, an emission."""
    bus = EventBus()
    ran: List[str] = []
    bus.on("ping", lambda sender: ran.append("for 'abc'"), target="abc")
    bus.on("ping", lambda sender: ran.append("for any"))
    _RaisingEq.asked.clear()
    bus.emit("ping", _RaisingEq("abc"))
    assert "for any" in ran
    assert _RaisingEq.asked == []


class _Mode(str, enum.Enum):
    TRAIN = "train"

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ of the enum was called")

    __hash__ = str.__hash__


class _Level(enum.IntEnum):
    HIGH = 3


def test_a_value_of_a_subclass_matches_as_the_built_in_value_it_holds() -> None:
    """A StrEnum or IntEnum member, a bool: compared as the built-in value they hold, by
    the built-in type's own code, whichever side holds the subclass."""
    bus = EventBus()
    heard: List[Any] = []
    for target in ("train", _Level.HIGH, 1):
        bus.on("ping", lambda sender, t=target: heard.append((t, type(sender))), target=target)
    _RaisingEq.asked.clear()
    bus.emit("ping", _Mode.TRAIN)
    bus.emit("ping", _RaisingEq("train"))
    bus.emit("ping", 3)
    bus.emit("ping", True)
    assert heard == [("train", _Mode), ("train", _RaisingEq), (_Level.HIGH, int), (1, bool)]
    assert _RaisingEq.asked == []


def test_handle_target_is_the_object_given_not_its_built_in_copy() -> None:
    bus = EventBus()
    handle = bus.on("ping", print, target=_Level.HIGH)
    assert handle.target is _Level.HIGH


class _Wrapped(str):
    """A ``str`` subclass whose ``__eq__`` and ``__hash__`` fail."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ called")

    def __hash__(self) -> int:
        raise RuntimeError("__hash__ called")


_values = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, 2.5, float("inf")]),
    st.sampled_from([1j, 1 + 0j]),
    st.text(alphabet="ab1", max_size=2),
    st.binary(max_size=2),
)


def _category(value: Any) -> str:
    if isinstance(value, str):
        return "text"
    if isinstance(value, bytes):
        return "bytes"
    return "number"


@settings(max_examples=200, deadline=None)
@given(target=_values, sender=_values, wrap=st.booleans())
def test_a_value_target_fires_exactly_for_senders_of_equal_built_in_value(
    target: Any, sender: Any, wrap: bool
) -> None:
    """For any two built-in values, ``target=a`` hears sender ``b`` exactly when they are
    of one kind (text, bytes or numbers) and equal as built-ins; a sender of a subclass
    whose ``__eq__`` and ``__hash__`` raise is heard as the built-in value it holds."""
    bus = EventBus()
    heard: List[Any] = []
    bus.on("ping", heard.append, target=target)
    sent = _Wrapped(sender) if wrap and isinstance(sender, str) else sender
    bus.emit("ping", sent)
    expected = _category(target) == _category(sender) and bool(target == sender)
    assert heard == ([sent] if expected else [])


_targets = st.sampled_from([None, 1, 2, "1"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_targets, min_size=1, max_size=5))
def test_no_emission_runs_one_receiver_twice(targets: List[Any]) -> None:
    """Whatever targets one receiver is registered with, in any order: a registration is
    refused exactly when an earlier accepted one can match a sender it matches (none is
    any sender), and no emission, of any sender, runs the receiver twice."""
    bus = EventBus()
    calls: List[Any] = []

    def receiver(sender: Any) -> None:
        calls.append(sender)

    accepted: List[Any] = []
    for target in targets:
        overlaps = any(
            t is None or target is None or (type(t) is type(target) and t == target)
            for t in accepted
        )
        if overlaps:
            with pytest.raises(ValueError, match="already registered"):
                bus.on("ping", receiver, target=target)
        else:
            bus.on("ping", receiver, target=target)
            accepted.append(target)
    for sender in (1, 2, "1", "other"):
        calls.clear()
        bus.emit("ping", sender)
        assert len(calls) <= 1
        heard = any(t is None or (type(t) is type(sender) and t == sender) for t in accepted)
        assert calls == ([sender] if heard else [])


def test_two_registrations_for_different_senders_are_both_kept() -> None:
    bus = EventBus()
    seen: List[Any] = []
    bus.on("ping", seen.append, target=1)
    bus.on("ping", seen.append, target=2)
    bus.emit("ping", 1)
    bus.emit("ping", 2)
    assert seen == [1, 2]


def test_the_duplicate_error_says_one_registration_is_for_any_sender() -> None:
    bus = EventBus()

    def receiver(sender: Any) -> None: ...

    bus.on("ping", receiver)
    with pytest.raises(ValueError, match="for any sender and the other for one sender"):
        bus.on("ping", receiver, target="job-7")
