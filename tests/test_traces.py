"""Traces: what bus.trace() records, in its own window only, and what it costs once closed."""

from __future__ import annotations

import threading

import pytest

from hookbus import EventBus, Trace


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
