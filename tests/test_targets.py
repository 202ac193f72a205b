"""Targets (``target=``): a hook that runs only for one sender.

``target=`` matches hashable built-in values by value (a subclass of one, such as a
StrEnum member, as the built-in value it holds), a bound method by its object and
function, and other objects by identity, as blinker's senders do, never through a user's
``__eq__``. It holds the sender weakly: the
hook goes with its sender. One receiver registered both for a sender and for any sender
is refused, so no emission runs it twice.
"""

from __future__ import annotations

import enum
import gc
import weakref
from typing import Any, ClassVar, List

import pytest
from hook_helpers import labels, recorder
from hypothesis import given, settings
from hypothesis import strategies as st

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


class _Job:
    __slots__ = ("__weakref__",)

    def run(self) -> None: ...


class _Pinned:  # no weak reference to it can be made
    __slots__ = ()

    def run(self) -> None: ...


def test_a_bound_method_target_matches_that_method_of_that_object_as_blinker_does() -> None:
    """Each ``job.run`` makes a new method object: a method target is compared by its
    object and function (blinker's key for a method sender), and held as ``WeakMethod``
    holds one, so it is not dropped when the method object given dies at once."""
    bus = EventBus()
    job, other = _Job(), _Job()
    seen: List[str] = []
    handle = bus.on("sig", lambda s: seen.append("run"), target=job.run)
    assert handle.active
    assert handle.target == job.run
    bus.emit("sig", job.run)
    bus.emit("sig", other.run)  # the same function of another object: not heard
    bus.emit("sig", job)  # the object itself: not heard
    assert seen == ["run"]
    assert handle.fires_for(job.run)
    assert not handle.fires_for(other.run)
    with pytest.raises(ValueError, match="already registered"):  # the same sender twice
        bus.on("sig", handle.hook, target=job.run)
    alive = weakref.ref(job)
    del job
    gc.collect()
    assert alive() is None, "the method target kept its object alive"
    assert not handle.active
    assert bus.hooks() == []


def test_a_bound_method_target_of_an_object_without_weak_references_is_held_strongly() -> None:
    bus = EventBus()
    pinned = _Pinned()
    seen: List[str] = []
    handle = bus.on("sig", lambda s: seen.append("run"), target=pinned.run)
    bus.emit("sig", pinned.run)
    bus.emit("sig", _Pinned().run)
    assert seen == ["run"]
    assert handle.active
    assert handle.target == pinned.run


# --- target=: never through a user's __eq__, and one receiver runs once -------------------


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


# --- the sender of a declared event, however it is passed --------------------------------


def test_a_declared_event_s_sender_passed_by_keyword_is_still_its_sender() -> None:
    """``saved.emit(doc=d)`` binds to the spec ``saved(doc, path="")`` as ``saved.emit(d)``
    does, and type checkers accept both: a ``target=d`` hook hears both, on every path
    (emit, collect, first, the async twins, gather, around hooks), not only the positional
    one."""
    import asyncio

    bus = EventBus()

    @bus.event
    def saved(doc: object, path: str = "") -> None: ...

    @bus.event
    def closed(*, doc: object) -> None: ...

    mine, other = object(), object()
    log: List[Any] = []
    bus.on("saved", recorder(log, "saved"), target=mine)
    bus.on("closed", recorder(log, "closed"), target=mine)

    def spans(ctx: Any) -> Any:
        log.append(("around", ctx.kwargs))
        yield

    bus.around("saved", spans, target=mine)
    saved.emit(doc=mine, path="p")
    saved.emit(doc=other, path="p")
    assert labels(log) == ["around", "saved"]
    del log[:]
    assert saved.collect(doc=mine) == ["saved"]
    assert saved.first(doc=other) is None
    asyncio.run(saved.emit_async(doc=mine))
    asyncio.run(bus.gather("saved", doc=mine))
    closed.emit(doc=mine)
    closed.emit(doc=other)
    assert labels(log) == ["around", "saved"] * 3 + ["closed"]

    @bus.event(historic=True)
    def configured(doc: object) -> None: ...

    configured.emit(doc=other)
    configured.emit(doc=mine)
    del log[:]
    bus.on("configured", recorder(log, "replayed"), target=mine)  # replays the history
    assert log == [("replayed", (), {"doc": mine})]
