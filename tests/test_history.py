"""Historic events: a hook registered late gets every past emission, in order, once; the
history follows the error policy, and forget() lets go of it, whether the event is named by
a string or an enum member."""

from __future__ import annotations

import enum
import gc
import threading
import weakref
from typing import Any, List

import pytest

import hookbus
from hookbus import EventBus


def test_a_historic_hook_registered_late_gets_every_past_emission_in_order() -> None:
    bus = EventBus()

    @bus.event(historic=True)
    def configured(config: str, *, verbose: bool = False) -> None: ...

    configured.emit("a")
    configured.emit("b", verbose=True)
    seen: List[Any] = []
    configured.on(lambda config, verbose=False: seen.append((config, verbose)))
    assert seen == [("a", False), ("b", True)]
    configured.emit("c")
    assert seen == [("a", False), ("b", True), ("c", False)]
    late: List[Any] = []
    bus.on("configured", lambda config, **kwargs: late.append(config), once=True)
    assert late == ["a"]  # once: the first past emission, and then it is gone


def test_a_replay_error_follows_the_policy_and_the_hook_stays_registered() -> None:
    bus = EventBus()
    bus.event("configured", historic=True)(lambda n, /: None)
    bus.emit("configured", 0)
    bus.emit("configured", 1)

    def hook(n: int, /) -> None:
        seen.append(1 / n)

    seen: List[float] = []
    with pytest.raises(ZeroDivisionError) as caught:
        bus.on("configured", hook)
    assert any("raised by" in note for note in getattr(caught.value, "__notes__", []))
    assert bus.handles_of(hook)  # registered; the replay stopped at the error
    bus.emit("configured", 2)
    assert seen == [0.5]
    collecting = EventBus(errors="collect")
    collecting.event("configured", historic=True)(lambda n, /: None)
    collecting.emit("configured", 0)
    collecting.emit("configured", 4)
    seen.clear()
    with pytest.raises(hookbus.HookError):
        collecting.on("configured", hook)
    assert seen == [0.25]  # the collect policy went on to the next emission


def test_forget_drops_the_history_and_the_event_stays_historic() -> None:
    bus = EventBus()

    @bus.event(historic=True)
    def configured(config: str, /) -> None: ...

    configured.emit("a")
    bus.forget("configured")
    configured.emit("b")
    seen: List[str] = []
    configured.on(seen.append)
    assert seen == ["b"]
    with pytest.raises(ValueError, match="not a historic event"):
        bus.forget("nothing")


def test_history_releases_its_arguments_when_forgotten() -> None:
    class Config:
        pass

    bus = EventBus()

    @bus.event(historic=True)
    def configured(config: Config) -> None: ...

    config = Config()
    ref = weakref.ref(config)
    configured.emit(config)
    del config
    gc.collect()
    assert ref() is not None  # history holds it: that is what historic means
    bus.forget("configured")
    gc.collect()
    assert ref() is None


def test_historic_events_refuse_async_hooks_which_the_replay_could_not_await() -> None:
    bus = EventBus()
    bus.event("configured", historic=True)(lambda config: None)

    async def hook(config: str) -> None: ...

    with pytest.raises(TypeError, match="historic"):
        bus.on("configured", hook)


def test_historic_replay_and_live_emissions_reach_each_hook_exactly_once() -> None:
    bus = EventBus()
    bus.event("tick", historic=True)(lambda n, /: None)
    hooks: List[List[int]] = []
    stop = threading.Event()

    def emitter() -> None:
        n = 0
        while not stop.is_set() and n < 2000:
            bus.emit("tick", n)
            n += 1

    thread = threading.Thread(target=emitter)
    thread.start()
    try:
        for _ in range(20):
            seen: List[int] = []
            hooks.append(seen)
            bus.on("tick", seen.append)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    for seen in hooks:
        assert sorted(seen) == list(range(len(seen))), "each emission exactly once"


def test_a_historic_emission_gives_every_result_to_its_callback_late_hooks_included() -> None:
    bus = EventBus()

    @bus.event(historic=True)
    def register_formats(registry: str) -> None: ...

    bus.on("register_formats", lambda registry: f"csv for {registry}")
    results: List[Any] = []
    register_formats.emit_with_results(results.append, "main")
    assert results == ["csv for main"]
    bus.on("register_formats", lambda registry: f"json for {registry}")
    bus.on("register_formats", lambda registry: None)  # None is no result, as in pluggy
    assert results == ["csv for main", "json for main"]


# --- names given as enum members ----------------------------------------------------------


class Topic(enum.Enum):
    CONFIGURED = "app.configured"


def test_forget_accepts_an_enum_member_as_the_event_name() -> None:
    """An application that names its events by an Enum uses the member everywhere; forget
    must take it as emit, on and event do, and drop the history."""
    bus = EventBus()

    @bus.event(Topic.CONFIGURED, historic=True)
    def configured(config: str, /) -> None: ...

    bus.emit(Topic.CONFIGURED, "first")
    bus.forget(Topic.CONFIGURED)
    late: List[str] = []
    bus.on(Topic.CONFIGURED, late.append)
    assert late == []
