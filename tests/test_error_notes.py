"""A hook's error says which hook raised it and where, on every dispatch path."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Dict, Generator, List, Tuple

import pytest

from hookbus import CallContext, EventBus


def test_the_error_of_a_hook_taking_arguments_by_name_names_the_hook() -> None:
    """The note is how a user finds which of many hooks failed; a hook that takes part of
    the spec by name (pluggy's habit) is as much a hook as one that takes all of it."""
    bus = EventBus()

    @bus.event
    def moved(x: int, y: int) -> None: ...

    def only_y(y: int) -> None:
        raise ValueError("bad y")

    bus.on("moved", only_y)
    with pytest.raises(ValueError, match="bad y") as raised:
        moved.emit(1, 2)
    notes: List[str] = getattr(raised.value, "__notes__", [])
    assert any("only_y" in note for note in notes), notes


def _fails_at_set_up(ctx: CallContext) -> Generator[None, None, None]:
    raise ValueError("set-up failed")
    yield  # a generator function: an around hook


@pytest.mark.xfail(
    strict=True,
    reason="the error of an around hook's set-up gets no note naming the hook (its "
    "teardown's error does)",
)
@pytest.mark.parametrize("where", ["point", "async point", "event"])
def test_the_error_of_an_around_hook_s_set_up_names_the_hook(where: str) -> None:
    """Every other hook's error, an around hook's teardown included, carries a note naming
    the hook; its set-up is the same hook's code."""
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        return 1

    @bus.hookable("fetch")
    async def fetch() -> int:
        return 1

    calls: Dict[str, Tuple[str, Callable[[], Any]]] = {
        "point": ("load", load),
        "async point": ("fetch", lambda: asyncio.run(fetch())),
        "event": ("saved", lambda: bus.emit("saved")),
    }
    name, call = calls[where]
    bus.around(name, _fails_at_set_up)
    with pytest.raises(ValueError, match="set-up failed") as raised:
        call()
    notes: List[str] = getattr(raised.value, "__notes__", [])
    assert any("_fails_at_set_up" in note for note in notes), notes
