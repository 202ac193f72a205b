"""Traces record every hook that ran, whatever its kind and wherever it ran."""

from __future__ import annotations

import asyncio
from typing import Generator, List, Tuple

import pytest

from hookbus import CallContext, EventBus


def _span(ctx: CallContext) -> Generator[None, None, None]:
    yield


@pytest.mark.xfail(strict=True, reason="bus.trace() never records around hooks")
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
