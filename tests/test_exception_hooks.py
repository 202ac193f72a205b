"""Exception hooks: observe, replace the error by raising, or recover; never two at once."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any, Callable, List, Optional

import pytest

from hookbus import CallContext, EventBus


def test_an_exception_hook_that_recovers_and_then_raises_replaces_the_error() -> None:
    """Raising is how an exception hook replaces the error; a recovery it made before
    raising did not complete, so the call raises the hook's error, and the later hooks see
    that error, not a recovered call."""
    bus = EventBus()
    later: List[Optional[str]] = []

    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    @bus.exception("parse", priority=1)
    def half_done(ctx: CallContext) -> None:
        ctx.recover(0)
        raise LookupError("the fallback table is missing")

    @bus.exception("parse")
    def watch(ctx: CallContext) -> None:
        later.append(type(ctx.exception).__name__ if not ctx.recovered else None)

    with pytest.raises(LookupError):
        parse("oops")
    assert later == ["LookupError"]


def _call_sync(bus: EventBus) -> Callable[[str], Any]:
    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    return parse


def _call_async(bus: EventBus) -> Callable[[str], Any]:
    @bus.hookable("parse")
    async def parse(text: str) -> int:
        return int(text)

    return lambda text: asyncio.run(parse(text))


@pytest.mark.parametrize("make", [_call_sync, _call_async], ids=["sync point", "async point"])
def test_every_post_hook_runs_on_a_recovered_value(
    make: Callable[[EventBus], Callable[[str], Any]],
) -> None:
    """The docs: after a recovery "the post hooks then run on value as if the call had
    returned it": all of them, as after a call that returned."""
    bus = EventBus()
    log: List[str] = []
    parse = make(bus)
    bus.exception("parse", lambda ctx: ctx.recover(0))
    bus.post("parse", lambda ctx: log.append("first post"))
    bus.post("parse", lambda ctx: log.append("second post"))
    assert parse("oops") == 0
    assert log == ["first post", "second post"]


class _Argument:
    pass


def test_a_recovered_call_keeps_nothing_of_its_arguments_when_a_hook_raised_first() -> None:
    """After a call nothing references its arguments (a batch of tensors, a request): the
    dispatch lets go of every error it handled, whichever hook raised it."""
    bus = EventBus()

    @bus.hookable("load")
    def load(argument: _Argument) -> int:
        raise KeyError("missing")

    @bus.exception("load", priority=1)
    def translate(ctx: CallContext) -> None:
        raise LookupError("translated")

    bus.exception("load", lambda ctx: ctx.recover(0))
    argument = _Argument()
    argument_alive = weakref.ref(argument)
    was_enabled = gc.isenabled()
    gc.disable()  # a cycle must not be broken by a collection that happens to run
    try:
        assert load(argument) == 0
        del argument
        assert argument_alive() is None
    finally:
        if was_enabled:
            gc.enable()
