"""Handles and what they hold: the bus lets go of a removed hook, a kept handle does not.

Decided: a ``Handle`` is the bus's record of one registration, and a removed one that the
user keeps still holds its hook (torch's ``RemovableHandle`` holds nothing). A dispatch
that began before ``remove()`` runs the hook through its handle (the dispatch rule: a hook
removed meanwhile still runs in this emission, on every path), and error notes, reprs,
traces and ``collect_pairs`` name the hook after it ran, a ``once`` hook's included, which
is removed just before it runs. Everything else lets go: the registry, the plans, groups
and scopes (they drop their handles when they remove them). Each check runs with the
garbage collector off, so that reference counting alone must free the hook.
"""

from __future__ import annotations

import functools
import gc
import weakref
from typing import Any, Callable, Iterator, List

import pytest

from hookbus import EventBus, HandleGroup


class _Hook:
    """A hook with a weak reference to it, to see when it goes."""

    def __init__(self, calls: List[str], label: str) -> None:
        self.calls = calls
        self.label = label

    def __call__(self, *args: Any) -> None:
        self.calls.append(self.label)


@pytest.fixture(autouse=True)
def _no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_kept_handle_holds_its_removed_hook_and_only_it_does() -> None:
    bus = EventBus()
    hook = _Hook([], "hook")
    alive = weakref.ref(hook)
    handle = bus.on("saved", hook)
    bus.emit("saved")
    del hook
    handle.remove()
    assert alive() is not None
    assert handle.hook is alive()  # the record still reads it
    assert "_Hook" in repr(handle)
    del handle
    assert alive() is None


@pytest.mark.parametrize(
    "remove",
    [
        lambda bus, handles: HandleGroup(handles).remove(),
        lambda bus, handles: bus.clear(),
        lambda bus, handles: bus.clear("saved"),
    ],
    ids=["group", "clear", "clear one name"],
)
def test_a_removal_that_keeps_no_handle_frees_the_hook(
    remove: Callable[[EventBus, List[Any]], None],
) -> None:
    bus = EventBus()
    hook = _Hook([], "hook")
    alive = weakref.ref(hook)
    again = functools.partial(hook)  # a second callable: one with options, too
    handles = [bus.on("saved", hook), bus.on("saved", again, target="job-1", priority=1)]
    del again
    del hook
    bus.emit("saved", "job-1")  # plans built, and dropped again by the removal
    remove(bus, handles)
    handles.clear()
    assert alive() is None


def test_a_group_and_a_scope_kept_after_removal_hold_no_hook() -> None:
    bus = EventBus()
    hooks = [_Hook([], "group"), _Hook([], "scope")]
    alive = [weakref.ref(hook) for hook in hooks]
    group = HandleGroup([bus.on("saved", hooks[0])])
    with bus.scope() as scope:
        bus.on("saved", hooks[1])
    group.remove()
    del hooks
    assert [ref() for ref in alive] == [None, None]
    assert len(group) == 0
    assert len(scope) == 0


def test_a_hook_removed_during_a_traced_dispatch_still_runs_in_it_then_goes() -> None:
    """The reason a handle holds its hook: the full loop (a trace open, here) runs the
    handles it read when it began, and the handle is what holds the hook for it."""
    bus = EventBus()
    calls: List[str] = []
    second = _Hook(calls, "second")
    alive = weakref.ref(second)
    handles: List[Any] = []

    def first() -> None:
        calls.append("first")
        handles[1].remove()

    handles += [bus.on("saved", first), bus.on("saved", second)]
    del second
    with bus.trace() as trace:
        bus.emit("saved")
    assert calls == ["first", "second"]
    assert [record.handle.hook for record in trace.records] == [first, alive()]
    del handles[1], trace
    assert alive() is None


def test_a_once_hook_is_named_by_its_error_note_after_it_was_claimed() -> None:
    bus = EventBus()

    def fails_once() -> None:
        raise ValueError("boom")

    alive = weakref.ref(fails_once)
    bus.on("saved", fails_once, once=True)
    del fails_once
    with pytest.raises(ValueError, match="boom") as raised:
        bus.emit("saved")
    assert "fails_once" in raised.value.__notes__[0]
    del raised
    assert alive() is None  # nothing kept the claimed hook: no handle was
