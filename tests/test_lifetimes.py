"""Lifetimes: what hookbus keeps alive, and for how long.

After remove() nothing in hookbus references the hook; after a call nothing references
its arguments, whatever the hooks did with its error; a wrapped callable is not kept
alive by its point; and long runs of registrations and calls do not grow memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
import weakref
from typing import Any, Callable, List

import pytest
from hook_helpers import Listener, collect_garbage, declare_user_created

from hookbus import CallContext, EventBus, Handle, HandleGroup, HookError

CYCLES = 100_000
# Growth allowed after warm-up, across 100,000 cycles: a leak of even one small
# object per cycle would be several megabytes.
GROWTH_LIMIT = 64 * 1024


class Counter:
    """A listener that keeps nothing per call, for the memory-growth tests."""

    def __init__(self) -> None:
        self.calls = 0

    def on_event(self, *args: Any) -> None:
        self.calls += 1

    def on_call(self, ctx: CallContext) -> None:
        self.calls += 1


def remove_each(handles: List[Handle]) -> None:
    for handle in handles:
        handle.remove()


# --- after remove(), nothing keeps the hook ------------------------------------------------


@pytest.mark.parametrize("how", ["remove", "clear", "scope", "once", "group"])
def test_removed_strong_bound_method_is_not_kept_alive_by_the_bus(how: str) -> None:
    bus = EventBus()
    log: List[str] = []
    listener = Listener(log)

    @bus.hookable("step")
    def step() -> None:
        pass

    alive = weakref.ref(listener)
    if how == "scope":
        with bus.scope():
            bus.on("e", listener.on_event)
            bus.post("step", listener.on_call)
            bus.emit("e")
            step()
    else:
        handles = [
            bus.on("e", listener.on_event, once=how == "once"),
            bus.post("step", listener.on_call, once=how == "once"),
            bus.on("e.*", listener.on_event, target=listener, once=how == "once"),
        ]
        bus.emit("e")
        bus.emit("e.x", listener)
        step()
        if how == "remove":
            remove_each(handles)  # (a loop here would leave its variable holding one)
        elif how == "clear":
            bus.clear()
        elif how == "group":
            HandleGroup(handles).remove()
        del handles
    bus.emit("e")  # dispatch again, so no stale plan can hold the hooks
    bus.emit("e.x", None)
    step()
    del listener
    collect_garbage()
    assert alive() is None
    assert bus.hooks() == []


@pytest.mark.parametrize("removed", ["the hook added last", "the hook under it", "both"])
def test_a_hook_removed_from_a_followed_plan_is_let_go_at_once(removed: str) -> None:
    # A plain hook added at a point whose plan is worked out takes the plan that follows,
    # which keeps the one before it (given back when that hook goes): neither may keep a
    # removed hook, not even until the garbage collector runs.
    bus = EventBus()
    step = bus.wrap(lambda: None, "step")
    first, second = Counter(), Counter()
    under = bus.post("step", first.on_call)
    step()
    step()  # compiled: the plan kept under the next one
    added = bus.pre("step", second.on_call)
    step()
    alive = {"the hook added last": weakref.ref(second), "the hook under it": weakref.ref(first)}
    gc.disable()
    try:
        if removed in ("the hook under it", "both"):
            under.remove()
        if removed in ("the hook added last", "both"):
            added.remove()
        del first, second, under, added
        for what, ref in alive.items():
            if what == removed or removed == "both":
                assert ref() is None, what
            else:
                assert ref() is not None, what
        step()
    finally:
        gc.enable()


def test_the_bus_does_not_keep_wrapped_callables_alive() -> None:
    bus = EventBus()
    bus.pre("point", lambda ctx: None)

    def fn() -> int:
        return 1

    wrapped = bus.wrap(fn, "point")
    assert wrapped() == 1
    alive = weakref.ref(wrapped)
    del wrapped
    collect_garbage()
    assert alive() is None


# --- memory does not grow over long runs ---------------------------------------------------


def measure_growth(step: Callable[[int], None], cycles: int = CYCLES) -> int:
    """Bytes still allocated after ``cycles`` calls of ``step``, past a warm-up."""
    for i in range(1_000):  # warm-up: caches, interned names, free lists
        step(i)
    collect_garbage()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(cycles):
            step(i)
        collect_garbage()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    growth = after - before
    print(f"\nmemory growth over {cycles:,} cycles: {growth} bytes")
    return growth


def test_no_growth_over_100k_register_remove_cycles() -> None:
    bus = EventBus()
    listener = Counter()
    target = object()
    names = ("train.step", "train.*", "eval", "e*")

    def step(i: int) -> None:
        name = names[i % len(names)]
        kind = i % 5
        if kind == 0:
            with bus.on(name, listener.on_event, priority=i % 7):
                bus.emit("train.step", target)
        elif kind == 1:
            bus.on(name, listener.on_event, once=True, target=target)
            bus.emit("train.step", target)
            bus.emit("eval", target)
            bus.clear(name)
        elif kind == 2:
            with bus.scope():
                bus.on(name, listener.on_event, weak=True)
                bus.pre("point", listener.on_call)
        elif kind == 3:
            handle = bus.post("point", listener.on_call)
            handle.remove()
            handle.remove()
        else:
            bus.collect("eval", target)

    growth = measure_growth(step)
    assert bus.hooks() == []
    assert listener.calls > CYCLES // 10  # the hooks really ran
    assert growth < GROWTH_LIMIT


def test_no_growth_over_100k_wrapped_calls_with_hooks() -> None:
    bus = EventBus()

    class Sink:
        def on_call(self, ctx: CallContext) -> None:
            ctx.data["seen"] = ctx.phase

    @bus.hookable("work")
    def work(x: int) -> int:
        if x % 10 == 0:
            raise ValueError(x)
        return x

    @bus.hookable("awork")
    def other(x: int) -> int:
        return -x

    sink = Sink()
    bus.pre("work", sink.on_call)
    bus.pre("w*", lambda ctx: setattr(ctx, "args", (ctx.args[0],)))
    bus.post("work", lambda ctx: setattr(ctx, "result", ctx.result + 1))
    bus.exception("work", lambda ctx: ctx.recover(0))
    bus.post("awork", sink.on_call, priority=5)

    def step(i: int) -> None:
        work(i)
        other(i)

    growth = measure_growth(step)
    assert growth < GROWTH_LIMIT


def test_no_growth_wrapping_and_dropping_callables_under_ever_new_names() -> None:
    # e.g. a hook point per request or per object: the bus forgets names whose
    # wrappers are gone (it once kept an empty WeakSet per name, about 1 KB each).
    bus = EventBus()

    def fn() -> int:
        return 1

    def step(i: int) -> None:
        assert bus.wrap(fn, f"request.{i}")() == 1

    growth = measure_growth(step, cycles=20_000)
    assert growth < GROWTH_LIMIT


# --- arguments do not outlive the call -----------------------------------------------------


class Big:
    """Stands for a large tensor: something a call must not keep alive."""


def _survives(run: Callable[[Any], None]) -> bool:
    """Whether an argument passed to ``run`` is still alive after it, with gc off."""
    gc.collect()
    gc.disable()
    try:
        big = Big()
        ref = weakref.ref(big)
        run(big)
        del big
        return ref() is not None
    finally:
        gc.enable()


def _failing(bus: EventBus) -> Callable[..., Any]:
    @bus.hookable("work")
    def work(x: Any) -> None:
        raise ValueError("boom")

    return work


def test_arguments_freed_after_a_plain_hooked_call() -> None:
    bus = EventBus()
    work = bus.wrap(lambda x: None, "work")
    bus.pre("work", lambda ctx: None)
    bus.post("work", lambda ctx: None)
    assert not _survives(work)


def test_arguments_freed_after_an_exception_hook_recovered() -> None:
    bus = EventBus()
    work = _failing(bus)
    bus.exception("work", lambda ctx: ctx.recover(None))
    bus.post("work", lambda ctx: None)
    assert not _survives(work)


def test_arguments_freed_after_an_exception_hook_only_observed() -> None:
    bus = EventBus()
    work = _failing(bus)
    bus.exception("work", lambda ctx: None)

    def run(big: Any) -> None:
        with contextlib.suppress(ValueError):
            work(big)

    assert not _survives(run)


def test_arguments_freed_after_an_exception_hook_replaced_the_error() -> None:
    bus = EventBus()
    work = _failing(bus)

    def replace(ctx: CallContext) -> None:
        raise RuntimeError("replaced")

    bus.exception("work", replace)

    def run(big: Any) -> None:
        with contextlib.suppress(RuntimeError):
            work(big)

    assert not _survives(run)


@pytest.mark.parametrize("kind", ["pre", "post"])
def test_arguments_freed_after_a_collected_hook_error_is_dropped(kind: str) -> None:
    bus = EventBus(errors="collect")
    work = bus.wrap(lambda x: None, "work")

    def broken(ctx: CallContext) -> None:
        raise ValueError("hook failed")

    getattr(bus, kind)("work", broken)

    def run(big: Any) -> None:
        with contextlib.suppress(HookError):
            work(big)

    assert not _survives(run)


def test_arguments_freed_after_a_collected_event_hook_error_is_dropped() -> None:
    bus = EventBus(errors="collect")

    def broken(x: Any) -> None:
        raise ValueError("hook failed")

    bus.on("e", broken)

    def run(big: Any) -> None:
        with contextlib.suppress(HookError):
            bus.emit("e", big)

    assert not _survives(run)


def test_async_arguments_freed_after_recovered_and_observed_errors() -> None:
    bus = EventBus()

    @bus.hookable("work")
    async def work(x: Any) -> None:
        raise ValueError("boom")

    handle = bus.exception("work", lambda ctx: ctx.recover(None))
    assert not _survives(lambda big: asyncio.run(work(big)))
    handle.remove()
    bus.exception("work", lambda ctx: None)

    async def observe(big: Any) -> None:
        with contextlib.suppress(ValueError):
            await work(big)

    assert not _survives(lambda big: asyncio.run(observe(big)))


@pytest.mark.parametrize("shape", ["the spec's", "another"])
def test_after_remove_and_after_emit_nothing_holds_the_hook_or_the_arguments(shape: str) -> None:
    class Payload:
        pass

    def make_hook() -> Callable[..., Any]:
        if shape == "the spec's":

            def hook(user: Any, *, admin: bool = False) -> None: ...

        else:

            def hook(*args: Any, **kwargs: Any) -> None: ...  # type: ignore[misc]

        return hook

    bus = EventBus()
    ev = declare_user_created(bus)
    hook = make_hook()
    ev.on(hook)
    (handle,) = bus.handles_of(hook)
    payload = Payload()
    hook_ref, payload_ref = weakref.ref(hook), weakref.ref(payload)
    gc.disable()
    try:
        ev.emit(payload, admin=True)
        try:
            ev.emit(payload, 1)
        except TypeError as error:
            assert "don't match its spec" in str(error)  # noqa: PT017
        del payload
        assert payload_ref() is None
        handle.remove()
        del hook, handle  # the user's handle holds its hook, as any handle does
        assert hook_ref() is None
    finally:
        gc.enable()
