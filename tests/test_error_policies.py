"""Error policies: what ``collect`` and ``log`` keep, and what they let go of."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any, Callable, Iterator

import pytest

from hookbus import CallContext, EventBus, HookError


class _Argument:
    pass


@pytest.fixture
def no_collector() -> Iterator[None]:
    """A reference cycle must not be broken by a collection that happens to run."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _fails(*args: Any) -> None:
    raise ValueError("collected")


def _stops(*args: Any) -> None:
    raise KeyboardInterrupt


def _emit(bus: EventBus, argument: _Argument) -> None:
    bus.on("saved", _fails)
    bus.on("saved", _stops)
    bus.emit("saved", argument)


def _pre_phase(bus: EventBus, argument: _Argument) -> None:
    @bus.hookable("load")
    def load(argument: _Argument) -> None: ...

    bus.pre("load", lambda ctx: _fails(ctx))
    bus.pre("load", lambda ctx: _stops(ctx))
    load(argument)


@pytest.mark.usefixtures("no_collector")
@pytest.mark.parametrize("dispatch", [_emit, _pre_phase], ids=["emit", "pre hooks"])
def test_errors_collected_before_a_keyboard_interrupt_keep_nothing_of_the_arguments(
    dispatch: Callable[[EventBus, _Argument], None],
) -> None:
    """Under ``"collect"`` a hook's error waits for the end of the loop; a
    ``KeyboardInterrupt`` that ends the loop first goes on unchanged, and the errors
    collected so far must not keep the call's arguments (a batch, a request) alive."""
    bus = EventBus(errors="collect")
    argument = _Argument()
    alive = weakref.ref(argument)
    with pytest.raises(KeyboardInterrupt):
        dispatch(bus, argument)
    del argument
    assert alive() is None


def test_gather_under_collect_runs_every_hook_and_keeps_the_hook_order_of_errors() -> None:
    """gather awaits together; ``"collect"`` then reports every error, sync or async, in
    the order of the hooks, as ``collect_async`` does."""
    bus = EventBus(errors="collect")
    ran = []

    async def late() -> None:
        ran.append("late")
        raise LookupError("async")

    def early() -> None:
        ran.append("early")
        raise ValueError("sync")

    bus.on("refresh", late, priority=1)
    bus.on("refresh", early)
    bus.on("refresh", lambda: ran.append("last"))
    with pytest.raises(HookError) as raised:
        asyncio.run(bus.gather("refresh"))
    assert [type(e) for e in raised.value.exceptions] == [LookupError, ValueError]
    assert sorted(ran) == ["early", "last", "late"]


def test_every_post_hook_runs_after_a_recovery_under_log(caplog: pytest.LogCaptureFixture) -> None:
    """After a recovery the post hooks run on the value, all of them, each under the
    bus's policy."""
    bus = EventBus(errors="log")
    seen = []

    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    def broken(ctx: CallContext) -> None:
        raise ValueError("post")

    bus.exception("parse", lambda ctx: ctx.recover(0))
    bus.post("parse", broken)
    bus.post("parse", lambda ctx: seen.append(ctx.result))
    assert parse("x") == 0
    assert seen == [0]
