"""Async: emit_async / collect_async, async hook points, sync/async mismatches, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import sys
import warnings
from typing import Any, Callable, Iterator, List, Optional

import pytest
from async_helpers import LazyEvent, run

from hookbus import CallContext, EventBus, HookError


@contextlib.contextmanager
def no_unawaited_coroutines() -> Iterator[None]:
    """Fail if anything inside leaves a coroutine that is never awaited.

    Python reports such a coroutine with a RuntimeWarning when it is collected,
    or, with warnings as errors, through sys.unraisablehook: catch both.
    """
    unraisable: List[Any] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
            gc.collect()
    finally:
        sys.unraisablehook = old_hook
    messages = [str(w.message) for w in caught] + [repr(u.exc_value) for u in unraisable]
    assert not [m for m in messages if "never awaited" in m], messages


async def double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


# --- emit_async / collect_async ------------------------------------------------------


def test_emit_async_mixes_sync_and_async_hooks_in_priority_order() -> None:
    bus = EventBus()
    log: List[str] = []

    async def slow(tag: str) -> None:
        log.append(f"slow start {tag}")
        await asyncio.sleep(0.01)  # a hook that yields must still finish before the next
        log.append(f"slow end {tag}")

    bus.on("e", lambda tag: log.append(f"sync low {tag}"), priority=-5)
    bus.on("e", slow, priority=5)
    bus.on("e", lambda tag: log.append(f"sync high {tag}"), priority=10)
    run(bus.emit_async("e", "x"))
    assert log == ["sync high x", "slow start x", "slow end x", "sync low x"]


def test_collect_async_awaits_results_in_call_order() -> None:
    bus = EventBus()
    bus.on("calc", double)
    bus.on("calc", lambda x: x + 1, priority=1)
    bus.on("calc", functools.partial(double), priority=-1)
    assert run(bus.collect_async("calc", 10)) == [11, 20, 20]


def test_collect_pairs_async_pairs_awaited_results_with_their_hooks() -> None:
    """blinker's send_async: (receiver, result) pairs, each receiver awaited in turn."""
    bus = EventBus()
    order: List[str] = []

    async def slow(sender: str) -> str:
        order.append("slow starts")
        await asyncio.sleep(0.01)
        order.append("slow ends")
        return "slow"

    def fast(sender: str) -> str:
        order.append("fast")
        return "fast"

    bus.on("fetched", slow)
    bus.on("fetched", fast)
    bus.on("fetched", lambda sender: "for other", target="other")
    pairs = asyncio.run(bus.collect_pairs_async("fetched", "page"))
    assert [(handle.hook, result) for handle, result in pairs] == [(slow, "slow"), (fast, "fast")]
    assert order == ["slow starts", "slow ends", "fast"]


def test_emit_async_awaits_a_sync_hook_that_returns_an_awaitable() -> None:
    bus = EventBus()
    bus.on("calc", lambda x: double(x))  # a plain lambda handing back a coroutine
    with no_unawaited_coroutines():
        assert run(bus.collect_async("calc", 4)) == [8]


def test_emit_async_with_no_hooks_and_with_only_sync_hooks() -> None:
    bus = EventBus()
    assert run(bus.collect_async("nothing")) == []
    bus.on("e", lambda: "sync")
    assert run(bus.collect_async("e")) == ["sync"]


def test_emit_async_honours_once_target_and_patterns() -> None:
    bus = EventBus()
    sender, other = object(), object()
    log: List[str] = []

    async def record(tag: str, who: object) -> None:
        log.append(tag)

    bus.on("job.*", functools.partial(record, "pattern"))
    bus.on("job.done", functools.partial(record, "once"), once=True)
    bus.on("job.done", lambda who: log.append("targeted"), target=sender)
    run(bus.emit_async("job.done", other))
    run(bus.emit_async("job.done", sender))
    assert log == ["pattern", "once", "pattern", "targeted"]


def test_once_async_hook_runs_once_across_concurrent_tasks() -> None:
    bus = EventBus()
    calls: List[int] = []

    async def hook(i: int) -> None:
        await asyncio.sleep(0)
        calls.append(i)

    handle = bus.on("e", hook, once=True)

    async def main() -> None:
        await asyncio.gather(*(bus.emit_async("e", i) for i in range(20)))

    run(main())
    assert len(calls) == 1
    assert not handle.active


@pytest.mark.parametrize("policy", ["raise", "collect", "log"])
def test_emit_async_error_policies_match_emit(
    policy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus(errors=policy)
    log: List[str] = []

    async def fails(x: int) -> None:
        await asyncio.sleep(0)
        raise ValueError("async boom")

    def also_fails(x: int) -> None:
        raise KeyError("sync boom")

    bus.on("e", fails, priority=3)
    bus.on("e", lambda x: log.append("middle"), priority=2)
    bus.on("e", also_fails, priority=1)
    bus.on("e", lambda x: log.append("last"))
    caplog.set_level(logging.ERROR, logger="hookbus")
    if policy == "raise":
        with pytest.raises(ValueError, match="async boom") as info:
            run(bus.emit_async("e", 1))
        assert log == []
        assert any("fails" in note and "'e'" in note for note in info.value.__notes__)
    elif policy == "collect":
        with pytest.raises(HookError) as group:
            run(bus.emit_async("e", 1))
        assert [type(error) for error in group.value.exceptions] == [ValueError, KeyError]
        assert log == ["middle", "last"]
    else:
        run(bus.emit_async("e", 1))
        assert log == ["middle", "last"]
        assert len([r for r in caplog.records if r.name == "hookbus"]) == 2


# --- async hook points ----------------------------------------------------------------


def test_async_point_runs_sync_and_async_pre_post_hooks_in_order() -> None:
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("fetch")
    async def fetch(url: str, retries: int = 0) -> str:
        await asyncio.sleep(0)
        log.append(f"call {url} {retries}")
        return f"page {url}"

    async def async_pre(ctx: CallContext) -> None:
        await asyncio.sleep(0)
        ctx.args = (ctx.args[0].upper(),)
        log.append("async pre")

    def sync_pre(ctx: CallContext) -> None:
        ctx.kwargs = {"retries": 3}
        log.append("sync pre")

    async def async_post(ctx: CallContext) -> None:
        await asyncio.sleep(0)
        ctx.result = ctx.result + " (checked)"
        log.append("async post")

    bus.pre("fetch", async_pre, priority=1)
    bus.pre("fetch", sync_pre)
    bus.post("fetch", async_post)
    bus.post("fetch", lambda ctx: log.append(f"sync post {ctx.result}"), priority=-1)
    assert asyncio.iscoroutinefunction(fetch)
    assert run(fetch("a")) == "page A (checked)"
    assert log == [
        "async pre",
        "sync pre",
        "call A 3",
        "async post",
        "sync post page A (checked)",
    ]


def test_async_point_exception_hooks_observe_and_recover() -> None:
    bus = EventBus()
    seen: List[str] = []

    @bus.hookable("load")
    async def load(key: str) -> str:
        await asyncio.sleep(0)
        raise LookupError(key)

    bus.exception("load", lambda ctx: seen.append(type(ctx.exception).__name__), priority=1)

    async def fallback(ctx: CallContext) -> None:
        await asyncio.sleep(0)
        if ctx.args[0] == "soft":
            ctx.recover("default")

    bus.exception("load", fallback)
    assert run(load("soft")) == "default"
    with pytest.raises(LookupError):
        run(load("hard"))
    assert seen == ["LookupError", "LookupError"]


def test_async_point_hook_returning_a_value_is_refused() -> None:
    bus = EventBus()

    @bus.hookable("f")
    async def f() -> int:
        return 1

    async def returns(ctx: CallContext) -> int:
        return 5

    bus.post("f", returns)
    with pytest.raises(TypeError, match="returned int, not None"):
        run(f())


def test_async_point_error_policies_apply_to_async_hooks(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus(errors="collect")

    @bus.hookable("f")
    async def f() -> str:
        return "ok"

    async def bad(ctx: CallContext) -> None:
        raise RuntimeError("pre failed")

    bus.pre("f", bad)
    bus.pre("f", lambda ctx: None)
    with pytest.raises(HookError) as group:
        run(f())
    assert [type(e) for e in group.value.exceptions] == [RuntimeError]
    bus.errors = "log"
    caplog.set_level(logging.ERROR, logger="hookbus")
    assert run(f()) == "ok"
    assert any(r.name == "hookbus" for r in caplog.records)


# --- async hooks reached from sync code -------------------------------------------------


def test_async_hook_from_sync_emit_is_a_type_error_before_any_hook_runs() -> None:
    bus = EventBus()
    log: List[str] = []
    bus.on("e", lambda *args: log.append("sync first"), priority=1)
    bus.on("e", double)
    with no_unawaited_coroutines():
        with pytest.raises(TypeError, match=r"emit_async") as info:
            bus.emit("e")
        with pytest.raises(TypeError, match=r"emit_async"):
            bus.collect("e")
    assert "double" in str(info.value)
    assert log == []  # refused up front, not half-dispatched
    assert run(bus.collect_async("e", 2)) == [None, 4]  # and still usable the async way


@pytest.mark.parametrize("async_around", [True, False], ids=["async around", "async hook"])
def test_sync_emit_of_an_event_with_around_hooks_and_async_ones_is_refused_up_front(
    async_around: bool,
) -> None:
    # With an async around hook the refusal once spoke of an "async hook point (an
    # 'async def' function)", which an event can't be; with a sync around hook and an
    # async event hook, the around hook's set-up ran before the refusal.
    bus = EventBus()
    log: List[str] = []

    async def async_span(ctx: CallContext) -> Any:
        log.append("async span")
        yield

    def span(ctx: CallContext) -> Any:
        log.append("span")
        yield

    bus.around("e", async_span if async_around else span)
    bus.on("e", double if not async_around else (lambda x: log.append("hook")))
    for dispatch in (bus.emit, bus.collect, bus.first):
        refusal = pytest.raises(TypeError, match=r"event 'e' has async hooks")
        with no_unawaited_coroutines(), refusal as info:
            dispatch("e", 1)
        assert "emit_async" in str(info.value)
        assert ("async_span" if async_around else "double") in str(info.value)
    assert log == []  # refused up front, not half-dispatched


@pytest.mark.parametrize(
    "hook_factory",
    [
        pytest.param(lambda: functools.partial(double), id="partial"),
        pytest.param(lambda: AsyncCallable(), id="async __call__"),
    ],
)
def test_wrapped_async_hooks_are_recognised_as_async(hook_factory: Callable[[], Any]) -> None:
    bus = EventBus()
    bus.on("e", hook_factory())
    with no_unawaited_coroutines(), pytest.raises(TypeError, match="emit_async"):
        bus.emit("e", 1)
    assert run(bus.collect_async("e", 1)) == [2]


class AsyncCallable:
    async def __call__(self, x: int) -> int:
        return 2 * x


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="fast path"),
        pytest.param({"once": True}, id="slow path"),
        pytest.param({"priority": 1}, id="collect"),
    ],
)
def test_sync_hook_returning_a_coroutine_to_sync_emit_is_refused(options: Any) -> None:
    # A plain function that starts a coroutine and hands it back would otherwise
    # leave it un-awaited, silently: refuse it, and close the coroutine.
    bus = EventBus()
    bus.on("e", lambda x: double(x), **options)
    dispatch = bus.collect if options.get("priority") else bus.emit
    with no_unawaited_coroutines(), pytest.raises(TypeError, match="coroutine") as info:
        dispatch("e", 1)
    assert "emit_async" in str(info.value)


def test_sync_hook_returning_a_coroutine_follows_the_error_policy() -> None:
    bus = EventBus(errors="collect")
    log: List[str] = []
    bus.on("e", lambda: double(1))
    bus.on("e", lambda: log.append("next"))
    with no_unawaited_coroutines(), pytest.raises(HookError) as group:
        bus.emit("e")
    assert [type(e) for e in group.value.exceptions] == [TypeError]
    assert log == ["next"]


def test_async_hook_on_a_sync_point_is_refused_at_registration_both_ways_round() -> None:
    bus = EventBus()

    @bus.hookable("sync.point")
    def point() -> int:
        return 1

    async def async_pre(ctx: CallContext) -> None:
        pass

    with no_unawaited_coroutines():
        with pytest.raises(TypeError, match=r"async.*sync hook point 'sync.point'"):
            bus.pre("sync.*", async_pre)
        bus.pre("other.*", async_pre)
        with pytest.raises(TypeError, match=r"sync hook point 'other.x'"):
            bus.wrap(lambda: None, "other.x")
    assert point() == 1
    assert [h.name for h in bus.hooks()] == ["other.*"]


def test_sync_pre_hook_that_returns_a_coroutine_on_a_sync_point_is_refused() -> None:
    bus = EventBus()

    @bus.hookable("p")
    def p() -> int:
        return 1

    async def later(ctx: CallContext) -> None:
        pass

    bus.pre("p", lambda ctx: later(ctx))
    with no_unawaited_coroutines(), pytest.raises(TypeError, match="returned a coroutine"):
        p()


# --- cancellation -----------------------------------------------------------------------


def test_cancelled_emit_async_propagates_and_leaves_the_bus_consistent() -> None:
    bus = EventBus(errors="collect")  # cancellation must not be collected as a hook error
    log: List[str] = []
    started = LazyEvent()

    async def blocks() -> None:
        log.append("blocks")
        started.set()
        await asyncio.Event().wait()  # until cancelled

    first = bus.on("e", lambda: log.append("once"), once=True, priority=2)
    blocker = bus.on("e", blocks, priority=1)
    after = bus.on("e", lambda: log.append("after"))

    async def main() -> Optional[BaseException]:
        task = asyncio.ensure_future(bus.emit_async("e"))
        await started.wait()
        task.cancel()
        try:
            await task
        except BaseException as error:  # the caller asserts on its type
            return error
        return None

    assert isinstance(run(main()), asyncio.CancelledError)
    assert log == ["once", "blocks"]  # "after" never ran
    assert not first.active  # the once hook was claimed when it ran, and stays gone
    assert blocker.active
    assert after.active
    blocker.remove()
    run(bus.emit_async("e"))
    assert log == ["once", "blocks", "after"]
    assert [h.name for h in bus.hooks()] == ["e"]


def test_cancelled_async_point_skips_exception_and_post_hooks() -> None:
    bus = EventBus()
    log: List[str] = []
    started = LazyEvent()
    release: List[bool] = [False]

    @bus.hookable("work")
    async def work() -> str:
        started.set()
        if not release[0]:
            await asyncio.Event().wait()
        return "done"

    bus.pre("work", lambda ctx: log.append("pre"))
    bus.exception("work", lambda ctx: log.append("exception"))
    bus.post("work", lambda ctx: log.append("post"))

    async def main() -> None:
        task = asyncio.ensure_future(work())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert log == ["pre"]  # cancellation is not an error of the call
    release[0] = True
    assert run(work()) == "done"
    assert log == ["pre", "pre", "post"]


def test_timeout_in_an_async_hook_propagates() -> None:
    bus = EventBus()

    async def forever() -> None:
        await asyncio.Event().wait()

    bus.on("e", forever)

    async def main() -> None:
        await asyncio.wait_for(bus.emit_async("e"), timeout=0.01)

    with pytest.raises(asyncio.TimeoutError):
        run(main())
    assert len(bus.hooks()) == 1
