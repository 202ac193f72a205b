"""``bus.gather``: coroutine hooks awaited together, as pyee and blinker's send_async do.

Results and errors come in hook order under every error policy, and the hooks' coroutines
are closed, never left half-started, whatever a sync hook raises.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import warnings
from typing import Any, Coroutine, List

import pytest

import hookbus
from hookbus import EventBus, HookError


def test_hooks_run_concurrently_where_emit_async_would_wait_forever() -> None:
    bus = hookbus.EventBus()

    async def scenario() -> List[str]:
        ping, pong = asyncio.Event(), asyncio.Event()

        async def first() -> str:
            ping.set()
            await pong.wait()  # needs the second hook to have started
            return "first"

        async def second() -> str:
            await ping.wait()
            pong.set()
            return "second"

        bus.on("sync", first)
        bus.on("sync", second)
        return await asyncio.wait_for(bus.gather("sync"), timeout=5)

    assert asyncio.run(scenario()) == ["first", "second"]  # in hook order


def test_sync_and_async_hooks_mix_and_results_keep_hook_order() -> None:
    bus = hookbus.EventBus()

    async def slow(x: int) -> int:
        await asyncio.sleep(0.01)
        return x * 10

    bus.on("calc", slow, priority=1)
    bus.on("calc", lambda x: x + 1)
    assert asyncio.run(bus.gather("calc", 2)) == [20, 3]


def _failing_bus(errors: Any, finished: List[str]) -> hookbus.EventBus:
    bus = hookbus.EventBus(errors=errors)

    async def broken() -> None:
        raise KeyError("first")

    async def slow_then_broken() -> None:
        await asyncio.sleep(0.01)
        finished.append("slow")
        raise ValueError("second")

    bus.on("go", broken)
    bus.on("go", slow_then_broken)
    return bus


def test_raise_policy_raises_the_first_error_in_hook_order_once_all_finished() -> None:
    finished: List[str] = []
    bus = _failing_bus("raise", finished)
    with pytest.raises(KeyError) as info:
        asyncio.run(bus.gather("go"))
    assert finished == ["slow"]  # not cancelled: its work is done
    assert "broken" in info.value.__notes__[0]


def test_collect_policy_raises_every_error_in_one_group() -> None:
    bus = _failing_bus("collect", [])
    with pytest.raises(hookbus.HookError) as info:
        asyncio.run(bus.gather("go"))
    assert [type(error) for error in info.value.exceptions] == [KeyError, ValueError]


def test_a_sync_hook_error_closes_the_coroutines_already_made() -> None:
    bus = hookbus.EventBus()
    ran: List[str] = []

    async def never_started() -> None:
        ran.append("started")

    def broken() -> None:
        raise RuntimeError("sync hook")

    bus.on("go", never_started, priority=1)
    bus.on("go", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would fail
        with pytest.raises(RuntimeError, match="sync hook"):
            asyncio.run(bus.gather("go"))
    assert ran == []


def test_an_around_hook_wraps_a_gather() -> None:
    bus = hookbus.EventBus()
    log: List[str] = []

    async def hook() -> str:
        log.append("hook")
        return "x"

    async def around(ctx: hookbus.CallContext) -> Any:
        log.append("before")
        yield
        log.append(f"after {ctx.result}")

    bus.on("go", hook)
    bus.around("go", around)
    assert asyncio.run(bus.gather("go")) == ["x"]
    assert log == ["before", "hook", "after ['x']"]


def test_the_module_level_gather_is_the_default_bus() -> None:
    assert hookbus.gather == hookbus.default_bus.gather


# --- the error policy and the coroutines, whatever a sync hook raises ---------------------


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


def test_gather_logs_a_sync_hook_s_error_that_came_before_an_interrupt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under ``"log"`` an error that came before a later hook's ``KeyboardInterrupt`` is
    logged, as ``emit`` and ``emit_async`` log it, not dropped with the emission."""
    bus = EventBus(errors="log")

    def fails() -> None:
        raise ValueError("sync hook failed first")

    def interrupts() -> None:
        raise KeyboardInterrupt

    bus.on("refresh", fails)
    bus.on("refresh", interrupts)
    with caplog.at_level(logging.ERROR, logger="hookbus"), pytest.raises(KeyboardInterrupt):
        asyncio.run(bus.gather("refresh"))
    logged = [record.exc_info[1] for record in caplog.records if record.exc_info]
    assert [str(error) for error in logged] == ["sync hook failed first"]


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
