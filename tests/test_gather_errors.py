"""``bus.gather``: the error policy and the hooks' coroutines, whatever a sync hook raises."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Coroutine, List

import pytest

from hookbus import EventBus, HookError


def _bus_with_a_failing_sync_hook(policy: str, ran: List[str]) -> EventBus:
    bus = EventBus(errors=policy)  # type: ignore[arg-type]

    def broken() -> None:
        raise ValueError("sync hook failed")

    async def later() -> str:
        ran.append("later")
        return "later"

    bus.on("refresh", broken)
    bus.on("refresh", later)
    return bus


def test_gather_collects_a_sync_hook_s_error_after_running_every_hook() -> None:
    """``collect_async`` runs every hook and raises one group under ``"collect"``; gather,
    its concurrent twin, keeps the same policy whether the failing hook is sync or async."""
    ran: List[str] = []
    bus = _bus_with_a_failing_sync_hook("collect", ran)
    with pytest.raises(HookError) as raised:
        asyncio.run(bus.gather("refresh"))
    assert [type(error) for error in raised.value.exceptions] == [ValueError]
    assert ran == ["later"]


def test_gather_logs_a_sync_hook_s_error_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """Under ``"log"`` an error is logged and dispatch goes on, on every dispatch path."""
    ran: List[str] = []
    bus = _bus_with_a_failing_sync_hook("log", ran)
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        results = asyncio.run(bus.gather("refresh"))
    assert results == ["later"]
    assert ran == ["later"]
    assert any("sync hook failed" in str(record.exc_info) for record in caplog.records)


@pytest.mark.parametrize("stop", [SystemExit, KeyboardInterrupt])
def test_gather_closes_the_started_coroutines_when_a_sync_hook_raises_a_base_exception(
    stop: type,
) -> None:
    """gather closes the coroutines already made when a sync hook raises an ``Exception``;
    a ``BaseException`` goes on unchanged, and must leave nothing half-started behind
    (no "coroutine was never awaited" warning, no work left pending)."""
    bus = EventBus()
    made: List[Coroutine[Any, Any, Any]] = []

    async def work() -> int:
        return 1

    def first() -> Coroutine[Any, Any, Any]:
        coroutine = work()
        made.append(coroutine)
        return coroutine

    def stops() -> None:
        raise stop()

    bus.on("refresh", first)
    bus.on("refresh", stops)
    try:
        with pytest.raises(stop):
            asyncio.run(bus.gather("refresh"))
        assert [inspect.getcoroutinestate(c) for c in made] == [inspect.CORO_CLOSED]
    finally:
        for coroutine in made:
            coroutine.close()  # whatever happened, no "never awaited" warning leaks out
