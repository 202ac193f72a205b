"""Traces: what bus.trace() records, in its own window only, and what it costs once closed.

Every hook that ran is recorded, whatever its kind and wherever it ran: an around hook's
set-up and teardown (one record per hook and call, a failed set-up included), on points,
events, async dispatches and gather.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import AsyncGenerator, Generator, List, Tuple

import pytest

from hookbus import CallContext, EventBus, Trace


def test_trace_records_each_hook_and_costs_nothing_after() -> None:
    bus = EventBus()
    first = bus.on("e", lambda: None)
    bus.on("e", lambda: None, priority=-1)

    @bus.hookable("p")
    def p() -> int:
        return 1

    bus.post("p", lambda ctx: None)
    with bus.trace() as trace:
        bus.emit("e")
        p()
    assert [(r.name, r.kind) for r in trace.records] == [
        ("e", "event"),
        ("e", "event"),
        ("p", "post"),
    ]
    assert trace.records[0].handle is first
    assert all(r.duration_ns >= 0 for r in trace.records)
    assert "call(s)" in trace.summary()
    bus.emit("e")
    assert len(trace.records) == 3  # closed: nothing more recorded
    assert bus.registry.event_plans["e"].__class__ is tuple  # back on the fast path


# --- traces that overlap ------------------------------------------------------------------


def _open_in_thread(trace: Trace) -> None:
    thread = threading.Thread(target=trace.__enter__)
    thread.start()
    thread.join(timeout=10)


def _close_in_thread(trace: Trace) -> None:
    thread = threading.Thread(target=trace.__exit__, args=(None, None, None))
    thread.start()
    thread.join(timeout=10)


@pytest.mark.parametrize("first_closed", ["a", "b"])
def test_overlapping_traces_in_two_threads_each_record_their_own_window(
    first_closed: str,
) -> None:
    """A opens, B opens, then either closes first: each records its own window only."""
    bus = EventBus()
    bus.on("step.*", lambda: None)
    traces = {"a": bus.trace(), "b": bus.trace()}
    _open_in_thread(traces["a"])
    bus.emit("step.1")
    _open_in_thread(traces["b"])
    bus.emit("step.2")
    _close_in_thread(traces[first_closed])
    bus.emit("step.3")
    _close_in_thread(traces["b" if first_closed == "a" else "a"])
    bus.emit("step.4")

    windows = {"a": ["step.1", "step.2", "step.3"], "b": ["step.2", "step.3"]}
    windows[first_closed].remove("step.3")  # closed before it
    assert {key: [r.name for r in trace.records] for key, trace in traces.items()} == windows
    # Nothing stays installed: the emit after the last close ran on the fast path.
    assert bus.registry.event_plans["step.4"].__class__ is tuple


def test_nested_traces_both_record_while_both_are_open() -> None:
    bus = EventBus()
    bus.on("step.*", lambda: None)
    with bus.trace() as outer:
        bus.emit("step.1")
        with bus.trace() as inner:
            bus.emit("step.2")
        bus.emit("step.3")
    bus.emit("step.4")
    assert [r.name for r in outer.records] == ["step.1", "step.2", "step.3"]
    assert [r.name for r in inner.records] == ["step.2"]
    assert bus.registry.event_plans["step.4"].__class__ is tuple


def test_a_trace_records_hook_points_in_its_own_window_only() -> None:
    bus = EventBus()

    @bus.hookable("p")
    def p() -> int:
        return 1

    bus.post("p", lambda ctx: None)
    first, second = bus.trace(), bus.trace()
    first.__enter__()
    p()
    second.__enter__()
    p()
    first.__exit__(None, None, None)  # not the last opened: closes all the same
    p()
    second.__exit__(None, None, None)
    p()
    assert [len(first.records), len(second.records)] == [2, 2]


def test_a_trace_cannot_be_open_twice_at_once() -> None:
    bus = EventBus()
    with bus.trace() as trace, pytest.raises(RuntimeError, match="already open"):
        trace.__enter__()
    trace.__exit__(None, None, None)  # closing a closed trace does nothing
    with trace:  # and a closed one may be opened again
        bus.emit("e")


# --- every hook that ran is recorded, whatever its kind and path --------------------------


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
