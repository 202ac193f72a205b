"""What is valid where: which hook kinds each kind of name takes, decided alike everywhere.

Registration, a strict bus, ``check_pending()``, ``@listens`` and ``subscribe`` must
agree with dispatch on which hook kinds apply to which names: what one accepts and
runs, no other may refuse or report, and what can never run is refused when it is
registered.
"""

from __future__ import annotations

from typing import Any, Generator, Iterator, List

import pytest

import hookbus
from hookbus import CallContext, EventBus


def _span(ctx: CallContext) -> Generator[None, None, None]:
    yield


def test_check_pending_accepts_around_hooks_on_declared_events() -> None:
    """The docs say an around hook wraps an event's emission, and emit runs it: the
    start-up check must not call it a typo."""
    bus = EventBus()

    @bus.event
    def saved(path: str) -> None: ...

    bus.around("saved", _span)
    bus.check_pending()


def test_check_pending_accepts_around_hooks_on_emitted_events() -> None:
    """An emitted name is known to ``check_pending()`` for event hooks; an around hook on
    it runs at each emission, so it is known for around hooks too."""
    bus = EventBus()
    ran: List[str] = []

    def span(ctx: CallContext) -> Generator[None, None, None]:
        ran.append(ctx.name)
        yield

    bus.around("saved", span)
    bus.emit("saved")
    assert ran == ["saved"]
    bus.check_pending()


def test_a_strict_bus_accepts_around_hooks_on_declared_events() -> None:
    """Strict mode refuses unknown names, not known names with a hook kind they run."""
    bus = EventBus(strict=True)
    ran: List[str] = []

    @bus.event
    def saved(path: str) -> None: ...

    def span(ctx: CallContext) -> Generator[None, None, None]:
        ran.append(ctx.name)
        yield

    bus.around("saved", span)
    saved.emit("a.txt")
    assert ran == ["saved"]


def test_listens_marks_an_around_hook_that_subscribe_registers() -> None:
    """pluggy's ``wrapper=True`` lives in the plugin class beside the plain hooks; a hook
    class here must be able to hold its around hook too."""
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("load")
    def load() -> str:
        log.append("call")
        return "data"

    class Tracing:
        @hookbus.listens("load", kind="around")
        def span(self, ctx: CallContext) -> Iterator[None]:
            log.append("enter")
            yield
            log.append("exit")

    group = bus.subscribe(Tracing())
    assert load() == "data"
    assert log == ["enter", "call", "exit"]
    assert [handle.kind for handle in group] == ["around"]


def test_on_refuses_a_generator_function_and_points_to_around() -> None:
    """Calling a generator function runs none of its body: as an event hook it can never
    do anything, so registering it is refused, saying to use ``around``."""
    bus = EventBus()

    def span(*args: Any) -> Generator[None, None, None]:
        yield

    with pytest.raises(TypeError, match="around"):
        bus.on("saved", span)
    assert bus.hooks() == []
