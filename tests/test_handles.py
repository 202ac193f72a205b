"""Handles and groups: every registration can be undone, once, by its handle or its group."""

from __future__ import annotations

from typing import Any, List

import pytest

from hookbus import EventBus, HandleGroup


def test_handle_remove_is_idempotent_and_reports_active() -> None:
    bus = EventBus()
    handle = bus.on("e", print)
    assert handle.active
    handle.remove()
    handle.remove()
    assert not handle.active
    assert bus.hooks() == []


def test_handle_is_a_context_manager_even_on_error() -> None:
    bus = EventBus()
    log: List[int] = []
    handle = bus.on("e", log.append)

    def fail_inside() -> None:
        with handle:
            bus.emit("e", 1)
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        fail_inside()
    assert not handle.active
    bus.emit("e", 2)
    assert log == [1]


def test_handle_repr_names_kind_name_hook_and_state() -> None:
    bus = EventBus()

    def on_save() -> None:
        pass

    handle = bus.on("save", on_save, priority=3, once=True)
    text = repr(handle)
    assert "event" in text
    assert "'save'" in text
    assert "on_save" in text
    assert "priority=3" in text
    assert "once" in text
    assert "active" in text
    handle.remove()
    assert "removed" in repr(handle)


def test_clear_makes_handles_inactive_and_their_remove_harmless() -> None:
    bus = EventBus()
    handle = bus.on("e", print)
    bus.clear()
    handle.remove()
    assert not handle.active


def test_group_removes_together_across_buses() -> None:
    one, two = EventBus(), EventBus()
    group = HandleGroup([one.on("a", print), two.pre("p", print)])
    group.add(one.on("b", print))
    assert len(group) == 3
    assert group.active
    group.remove()
    assert not group.active
    assert one.hooks() == []
    assert two.hooks() == []
    group.remove()  # idempotent


def test_a_group_used_as_a_context_manager_removes_its_handles_on_exit() -> None:
    bus = EventBus()
    with HandleGroup() as group:
        group.add(bus.on("a", print))
        group.add(bus.on("b", print))
        assert len(bus.hooks()) == 2
    assert bus.hooks() == []


def test_a_group_repr_counts_handles_in_words() -> None:
    bus = EventBus()
    group = HandleGroup([bus.on("e", print)])
    assert repr(group) == "<HandleGroup 1 handle, 1 active>"
    group.add(bus.on("f", print))
    group.remove()
    assert repr(group) == "<HandleGroup 0 handles, 0 active>"
    assert repr(HandleGroup([bus.on("e", print), bus.on("f", repr)])).startswith(
        "<HandleGroup 2 handles,"
    )


def test_handles_of_a_hook_for_a_name_are_those_that_run_for_that_name() -> None:
    """pyee's remove_listener(event, f): f's handles for one name, not for every name."""
    bus = EventBus()
    seen: List[Any] = []
    got = seen.append
    data = bus.on("data", got)
    bus.on("end", got)
    pattern = bus.on("data.*", got)
    other = bus.on("data", print)
    assert bus.handles_of(got, "data") == [data]
    assert bus.handles_of(got, "data.raw") == [pattern]  # the hooks that run for it
    assert bus.handles_of(got, "data.*") == [pattern]  # the pattern itself
    assert bus.handles_of(got, "nothing") == []
    assert {h.name for h in bus.handles_of(got)} == {"data", "end", "data.*"}
    for handle in bus.handles_of(got, "data"):
        handle.remove()
    bus.emit("data", 1)
    bus.emit("end", 2)
    assert seen == [2]
    assert other.active
    with pytest.raises(ValueError, match="without its closing"):
        bus.handles_of(got, "data[")


def test_handles_of_a_bound_method() -> None:
    bus = EventBus()

    class Listener:
        def update(self, value: Any) -> None:
            pass

    listener = Listener()
    bus.on("e", listener.update)
    (handle,) = bus.handles_of(listener.update)  # a fresh bound method compares equal
    handle.remove()
    assert bus.hooks() == []


@pytest.mark.parametrize("not_a_handle", [None, 3, print, HandleGroup()])
def test_a_group_refuses_what_is_not_a_handle_and_keeps_its_handles(not_a_handle: Any) -> None:
    """Something else in a group would make ``remove()`` fail after it had emptied the
    group, leaving every hook registered: it is refused when it is added."""
    bus = EventBus()
    handle = bus.on("a", print)
    with pytest.raises(TypeError, match=r"HandleGroup holds Handles, got "):
        HandleGroup([handle, not_a_handle])
    group = HandleGroup([handle])
    with pytest.raises(TypeError, match=r"HandleGroup holds Handles, got "):
        group.add(not_a_handle)
    group.remove()
    assert not handle.active
    assert bus.hooks() == []


def test_options_found_at_registration_belong_to_that_handle_alone() -> None:
    bus = EventBus()

    def returns(ctx: Any) -> Any:
        yield
        return 1

    def yields(ctx: Any) -> Any:
        yield

    @bus.event("grown")
    def grown(x: Any, tag: str = "") -> None: ...

    def takes_x(x: Any) -> None: ...

    def takes_both(x: Any, tag: str = "") -> None: ...

    plain = bus.on("e", print)
    returning, yielding = bus.around("e", returns), bus.around("e", yields)
    subset, whole = bus.on("grown", takes_x), bus.on("grown", takes_both)
    assert (returning.may_return_value, yielding.may_return_value) == (True, False)
    assert subset.by_name is not None
    assert whole.by_name is None
    assert (plain.may_return_value, plain.by_name, plain.priority) == (False, None, 0)
    assert not any((plain.once, plain.weak, plain.with_name, plain.optional, plain.targeted))
    calls: List[Any] = []

    def first(x: Any) -> None:
        calls.append(x)

    bus.on("grown", first, priority=5)
    grown.emit(1, tag="t")
    assert calls == [1]
    assert bus.hooks("grown")[0].priority == 5
