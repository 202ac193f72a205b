"""Traces record every hook that ran, whatever its kind and wherever it ran."""

from __future__ import annotations

import asyncio
import time
from typing import AsyncGenerator, Generator, List, Tuple

import pytest

from hookbus import CallContext, EventBus


def _span(ctx: CallContext) -> Generator[None, None, None]:
    yield


def test_a_trace_records_around_hooks_on_points_and_on_events() -> None:
    """A trace is how a user finds what ran and what it cost; an around hook's set-up and
    teardown run user code like any other hook's, so a trace that leaves them out hides
    the slow ones."""
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        return 1

    bus.around("load", _span)
    bus.around("saved", _span)
    bus.on("saved", lambda: None)
    with bus.trace() as trace:
        load()
        bus.emit("saved")
    seen: List[Tuple[str, object]] = [(r.name, r.handle.hook) for r in trace.records]
    assert ("load", _span) in seen
    assert ("saved", _span) in seen


def test_a_trace_records_the_hooks_that_gather_runs() -> None:
    """gather is emit_async with the awaiting done together: a trace sees its hooks as it
    sees emit_async's."""
    bus = EventBus()

    async def fetch() -> int:
        return 1

    handle = bus.on("refresh", fetch)
    with bus.trace() as trace:
        assert asyncio.run(bus.gather("refresh")) == [1]
    assert [record.handle for record in trace.records] == [handle]


def test_a_trace_records_one_record_per_around_hook_and_call_with_set_up_and_teardown() -> None:
    """One record per hook and call, as for every other kind (``summary()`` counts calls),
    its duration the set-up's and the teardown's time together, not the call's."""
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        time.sleep(0.02)  # the call: not the around hook's time
        return 1

    def slow_span(ctx: CallContext) -> Generator[None, None, None]:
        time.sleep(0.002)
        yield
        time.sleep(0.002)

    handle = bus.around("load", slow_span)
    with bus.trace() as trace:
        load()
        load()
    records = [r for r in trace.records if r.handle is handle]
    assert [(r.name, r.kind) for r in records] == [("load", "around"), ("load", "around")]
    assert all(4_000_000 <= r.duration_ns < 20_000_000 for r in records), records


def test_a_trace_records_an_around_hook_whose_set_up_raised() -> None:
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        return 1

    def broken(ctx: CallContext) -> Generator[None, None, None]:
        raise ValueError("set-up failed")
        yield

    outer = bus.around("load", _span, priority=1)
    inner = bus.around("load", broken)
    with bus.trace() as trace, pytest.raises(ValueError, match="set-up failed"):
        load()
    assert sorted(id(r.handle) for r in trace.records) == sorted([id(outer), id(inner)])


@pytest.mark.parametrize("how", ["async point", "emit_async", "gather"])
def test_a_trace_records_around_hooks_on_async_dispatches(how: str) -> None:
    bus = EventBus()

    @bus.hookable("fetch")
    async def fetch() -> int:
        return 1

    async def async_span(ctx: CallContext) -> AsyncGenerator[None, None]:
        yield

    name = "fetch" if how == "async point" else "refresh"
    sync_handle = bus.around(name, _span)
    async_handle = bus.around(name, async_span)
    run = {
        "async point": fetch,
        "emit_async": lambda: bus.emit_async("refresh"),
        "gather": lambda: bus.gather("refresh"),
    }[how]
    with bus.trace() as trace:
        asyncio.run(run())
    assert {(r.handle, r.kind) for r in trace.records} == {
        (sync_handle, "around"),
        (async_handle, "around"),
    }
