"""The registry: one registration per hook and name, and no user code run under its lock.

The same callable registered twice on one name is refused (never silently run twice,
never silently dropped), as pluggy and torch users expect.

A hook, a ``target`` or a historic event's argument may have a finalizer
(``__del__``, ``weakref.finalize``) that uses the bus: it registers a hook,
lists them, or emits. If the last reference to such an object went while the
bus's (non-reentrant) lock was held, that finalizer would deadlock the bus. Each
test of the lock drops the last reference through one removal path, with the garbage
collector off (so reference counting frees the object at once, where it
happens), in a thread with a timeout: a deadlock fails the test instead of
hanging the suite. A refusal formats the hook for its message outside the lock too.
"""

from __future__ import annotations

import gc
import threading
from typing import Any, Callable, Dict, Iterator, List

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hookbus
from hookbus import EventBus
from hookbus.pytest_plugin import isolate

# --- the same callable twice on one name -------------------------------------------------


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


# --- no user object is let go of while the lock is held ----------------------------------


class UsesTheBusWhenFreed:
    """An object whose finalizer registers and removes a hook on ``bus``."""

    def __init__(self, bus: hookbus.EventBus, log: List[str]) -> None:
        self.bus = bus
        self.log = log

    def __call__(self, *args: Any) -> None:
        return None

    def __del__(self) -> None:
        self.bus.on("finalized", print).remove()  # takes the bus lock
        self.log.append("finalized")


@pytest.fixture(autouse=True)
def _no_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _finishes(action: Callable[[], None], timeout: float = 10.0) -> None:
    errors: List[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:  # reported in the test's own thread
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "deadlock: a finalizer ran under the bus lock"
    if errors:
        raise errors[0]


def test_clear_lets_go_of_hooks_after_releasing_the_lock() -> None:
    bus, log = hookbus.EventBus(), []
    bus.on("tick", UsesTheBusWhenFreed(bus, log))
    _finishes(bus.clear)
    assert log == ["finalized"]
    assert bus.hooks() == []


def test_clear_of_one_name_lets_go_of_its_hooks_after_releasing_the_lock() -> None:
    bus, log = hookbus.EventBus(), []
    bus.pre("load.*", UsesTheBusWhenFreed(bus, log))
    _finishes(lambda: bus.clear("load.*"))
    assert log == ["finalized"]


def test_a_removed_handles_target_goes_after_the_lock_is_released() -> None:
    bus, log = hookbus.EventBus(), []
    bus.on("tick", print, target=UsesTheBusWhenFreed(bus, log))
    _finishes(bus.clear)
    assert log == ["finalized"]


def test_forget_lets_go_of_past_arguments_after_releasing_the_lock() -> None:
    # forget() once dropped the history under the lock.
    bus, log = hookbus.EventBus(), []

    @bus.event(historic=True)
    def started(config: object) -> None: ...

    started.emit(UsesTheBusWhenFreed(bus, log))
    _finishes(lambda: bus.forget("started"))
    assert log == ["finalized"]


def test_isolate_lets_go_of_the_tests_hooks_after_releasing_the_lock() -> None:
    # isolate() (the default_bus fixture) once restored its snapshot under the lock.
    bus, log = hookbus.EventBus(), []

    def a_test() -> None:
        with isolate(bus):
            bus.on("tick", UsesTheBusWhenFreed(bus, log))

    _finishes(a_test)
    assert log == ["finalized"]
    assert bus.hooks() == []


def test_a_scope_lets_go_of_its_hooks_after_releasing_the_lock() -> None:
    bus, log = hookbus.EventBus(), []

    def scoped() -> None:
        with bus.scope():
            bus.post("load", UsesTheBusWhenFreed(bus, log))

    _finishes(scoped)
    assert log == ["finalized"]


def test_a_once_hook_goes_after_its_dispatch_released_the_lock() -> None:
    bus, log = hookbus.EventBus(), []
    bus.on("tick", UsesTheBusWhenFreed(bus, log), once=True)
    _finishes(lambda: bus.emit("tick"))
    assert log == ["finalized"]


def test_a_weak_hooks_sender_target_goes_after_the_lock_is_released() -> None:
    bus, log = hookbus.EventBus(), []

    class Listener:
        def on_tick(self, *args: Any) -> None:
            return None

    listener = Listener()
    bus.on("tick", listener.on_tick, weak=True, target=UsesTheBusWhenFreed(bus, log))

    def drop() -> None:
        nonlocal listener
        del listener  # the weakref callback unregisters the hook, dropping its target

    _finishes(drop)
    _finishes(lambda: bus.emit("tick"))  # and any sweep left for later
    assert log == ["finalized"]


def test_handle_remove_lets_go_of_the_hook_after_releasing_the_lock() -> None:
    bus, log = hookbus.EventBus(), []
    _finishes(lambda: bus.on("tick", UsesTheBusWhenFreed(bus, log)).remove())
    assert log == ["finalized"]


def test_a_restored_snapshot_lets_go_of_later_hooks_after_releasing_the_lock() -> None:
    bus, log = hookbus.EventBus(), []
    snapshot = bus.registry.snapshot()
    bus.exception("load", UsesTheBusWhenFreed(bus, log))
    _finishes(lambda: bus.registry.restore(snapshot))
    assert log == ["finalized"]


# --- a refusal's message reads the hook outside the lock ---------------------------------


class _AsyncHookThatUsesTheBus:
    """An async callable whose attribute lookups take the bus lock (bus.hooks())."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus

    async def __call__(self, ctx: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        self.bus.hooks()  # runs when hookbus reads __qualname__ / __name__ for a message
        raise AttributeError(name)


def _outcome_in_a_thread(call: Callable[[], Any]) -> Dict[str, Any]:
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "deadlocked: an error message read the hook under the lock"
    return outcome


def test_refusing_an_async_hook_on_a_sync_point_reads_the_hook_outside_the_lock() -> None:
    # The refusal's message formats the handle, which reads the user's callable;
    # formatted under the bus lock, that deadlocked.
    bus = EventBus()
    size = bus.wrap(len, "size")  # kept: the bus holds hook points weakly
    outcome = _outcome_in_a_thread(lambda: bus.pre("size", _AsyncHookThatUsesTheBus(bus)))
    assert isinstance(outcome.get("error"), TypeError)
    assert "async hook point" in str(outcome["error"])
    assert bus.hooks() == []
    assert size("abc") == 3


def test_refusing_a_sync_point_that_an_async_hook_matches_reads_the_hook_outside_the_lock() -> (
    None
):
    bus = EventBus()
    hook = _AsyncHookThatUsesTheBus(bus)
    bus.pre("size", hook)
    outcome = _outcome_in_a_thread(lambda: bus.wrap(len, "size"))
    assert isinstance(outcome.get("error"), TypeError)
    assert "matches the async hook" in str(outcome["error"])


class _HookThatUsesTheBus:
    """A sync callable whose attribute lookups take a bus's lock (bus.hooks())."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus

    def __call__(self, *args: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        self.bus.hooks()
        raise AttributeError(name)


def test_refusing_another_bus_s_handle_reads_the_hook_outside_the_lock() -> None:
    # The registry's remove() refuses a handle of another bus with a message that
    # formats the handle; formatted under the lock, a hook that uses the bus deadlocked.
    mine, other = EventBus(), EventBus()
    handle = other.on("saved", _HookThatUsesTheBus(mine))
    outcome = _outcome_in_a_thread(lambda: mine.registry.remove([handle]))
    assert isinstance(outcome.get("error"), ValueError)
    assert "belongs to the bus" in str(outcome["error"])
    assert handle.active
    assert mine.hooks() == []


@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove", "emit", "collect"]), st.integers(0, 3)),
        max_size=30,
    )
)
def test_emit_and_collect_see_every_registration_and_removal_before_them(
    steps: List[Any],
) -> None:
    bus = EventBus()
    emitted: List[int] = []

    def make(index: int) -> Callable[[], int]:
        def hook() -> int:
            emitted.append(index)
            return index

        return hook

    hooks = [make(index) for index in range(4)]
    handles: Dict[int, Any] = {}
    for step, index in steps:
        if step == "add" and index not in handles:
            handles[index] = bus.on("e", hooks[index])
        elif step == "remove" and index in handles:
            handles.pop(index).remove()
        elif step == "emit":
            del emitted[:]
            bus.emit("e")
            assert emitted == list(handles)  # registration order
        elif step == "collect":
            assert bus.collect("e") == list(handles)


def test_hooks_registered_and_removed_after_a_restore_reach_emit() -> None:
    # bus.on and its handle's remove() hold the registry's dict of event names: a
    # restore fills that same dict, so what they change is what emit then sees.
    bus = EventBus()
    seen: List[str] = []
    kept = bus.on("saved", lambda: seen.append("kept"))
    snapshot = bus.registry.snapshot()
    later = bus.on("saved", lambda: seen.append("later"))
    kept.remove()
    bus.registry.restore(snapshot)
    added = bus.on("saved", lambda: seen.append("added"))
    bus.emit("saved")
    assert seen == ["kept", "added"]
    assert not later.active
    kept.remove()
    added.remove()
    seen.clear()
    bus.emit("saved")
    assert seen == []
    assert bus.hooks() == []
