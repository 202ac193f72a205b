"""The recorder behind ``bus_recorder``: what it captures from the buses it watches, and its
assertions, whose failures say what was wanted and what was recorded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import hookbus
from hookbus.pytest_plugin import BusRecorder


@pytest.fixture(autouse=True)
def _clean_default_bus(default_bus: hookbus.EventBus) -> None:
    """A recorder without buses records the default bus: each test gets it clean."""


# --- what it captures ---------------------------------------------------------------------


def test_the_recorder_captures_events_with_their_arguments() -> None:
    bus = hookbus.EventBus()
    with BusRecorder(bus) as recorder:
        bus.emit("train.after_iter", 0, loss=0.5)
        bus.emit("train.after_iter", 1, loss=0.25)
        bus.emit("eval.done")
    bus.emit("not.recorded")
    assert [(r.kind, r.name, r.args, r.kwargs) for r in recorder.events()] == [
        ("event", "train.after_iter", (0,), {"loss": 0.5}),
        ("event", "train.after_iter", (1,), {"loss": 0.25}),
        ("event", "eval.done", (), {}),
    ]
    assert [r.args for r in recorder.events("train.*")] == [(0,), (1,)]
    assert bus.hooks() == []


def test_the_recorder_does_not_change_what_collect_returns() -> None:
    bus = hookbus.EventBus()
    bus.on("formats", lambda: "csv")
    bus.on("formats", lambda: "json", priority="HIGH")
    with BusRecorder(bus) as recorder:
        assert bus.collect("formats") == ["json", "csv"]
        assert asyncio.run(bus.collect_async("formats")) == ["json", "csv"]
    assert recorder.names() == ["formats", "formats"]


def test_the_recorder_names_events_on_every_dispatch_path() -> None:
    bus = hookbus.EventBus(errors="collect")  # keeps emit off its fast path
    fast = hookbus.EventBus()

    async def emit_async() -> None:
        await bus.emit_async("async.emit", 1)

    with BusRecorder(bus, fast) as recorder:
        fast.emit("fast", 1)
        fast.emit("fast.kw", x=1)
        bus.emit("slow", 2)
        asyncio.run(emit_async())
    assert [(r.name, r.bus) for r in recorder.records] == [
        ("fast", fast),
        ("fast.kw", fast),
        ("slow", bus),
        ("async.emit", bus),
    ]


def test_the_recorder_captures_calls_results_and_errors() -> None:
    bus = hookbus.EventBus()

    @bus.hookable("double")
    def double(x: int) -> int:
        return 2 * x

    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    bus.post("double", lambda ctx: setattr(ctx, "result", ctx.result + 1))
    with BusRecorder(bus) as recorder:
        assert double(4) == 9
        with pytest.raises(ValueError, match="x"):
            parse("x")
        with bus.exception("parse", lambda ctx: ctx.recover(0)):
            assert parse("y") == 0
    calls = recorder.calls()
    assert [(c.name, c.args, c.done) for c in calls] == [
        ("double", (4,), True),
        ("parse", ("x",), True),
        ("parse", ("y",), True),
    ]
    assert calls[0].result == 9  # after every post hook
    assert calls[1].raised
    assert isinstance(calls[1].exception, ValueError)
    assert calls[2].recovered
    assert not calls[2].raised
    assert calls[2].result == 0


def test_the_recorder_sees_arguments_as_the_caller_passed_them() -> None:
    bus = hookbus.EventBus()

    @bus.hookable("greet")
    def greet(name: str) -> str:
        return f"hi {name}"

    @bus.pre("greet", priority="HIGHEST")
    def shout(ctx: hookbus.CallContext) -> None:
        ctx.args = (ctx.args[0].upper(),)

    with BusRecorder(bus) as recorder:
        assert greet("ada") == "hi ADA"
    recorder.assert_called_with("greet", "ada")
    recorder.assert_returned("greet", "hi ADA")


def test_watching_a_bus_twice_records_it_once() -> None:
    bus = hookbus.EventBus()
    with BusRecorder(bus, bus) as recorder:
        recorder.watch(bus)
        bus.emit("once")
    assert recorder.names() == ["once"]


def test_a_recorder_without_buses_records_the_default_bus() -> None:
    with BusRecorder() as recorder:
        hookbus.emit("recorder.default")
    recorder.assert_emitted("recorder.default", times=1)
    assert hookbus.hooks() == []


# --- assertions and their messages --------------------------------------------------------


def failure(check: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(AssertionError) as info:
        check(*args, **kwargs)
    return str(info.value)


def test_count_failures_list_what_was_emitted() -> None:
    bus = hookbus.EventBus()
    with BusRecorder(bus) as recorder:
        bus.emit("train.after_iter", step=0)
        bus.emit("train.after_iter", step=1)
    recorder.assert_emitted("train.after_iter")
    recorder.assert_emitted("train.after_iter", times=2)
    assert failure(recorder.assert_emitted, "train.after_iter", times=3) == (
        "expected `train.after_iter` emitted 3 times, got 2:\n"
        "  emit train.after_iter(step=0)\n"
        "  emit train.after_iter(step=1)"
    )
    assert failure(recorder.assert_not_emitted, "train.after_iter").startswith(
        "expected `train.after_iter` emitted 0 times, got 2:"
    )


def test_a_missing_name_suggests_the_close_one() -> None:
    bus = hookbus.EventBus()
    with BusRecorder(bus) as recorder:
        bus.emit("train.after_iter")
        bus.emit("train.after_iter")
        bus.emit("before_run")
    assert failure(recorder.assert_emitted, "train.after_itr") == (
        "expected `train.after_itr` emitted at least once, got 0 (did you mean "
        "`train.after_iter`?); emitted instead: `train.after_iter` x2, `before_run`"
    )
    assert failure(recorder.assert_called, "forward") == (
        "expected `forward` called at least once, got 0; nothing was called"
    )


def test_argument_failures_show_the_wanted_and_the_recorded_arguments() -> None:
    bus = hookbus.EventBus()
    with BusRecorder(bus) as recorder:
        bus.emit("saved", "a.txt", size=3)
    recorder.assert_emitted_with("saved", "a.txt", size=3)
    assert failure(recorder.assert_emitted_with, "saved", "b.txt") == (
        "expected `saved` emitted with ('b.txt'), but no emission matched:\n"
        "  emit saved('a.txt', size=3)"
    )


def test_result_and_error_assertions_list_each_call_s_outcome() -> None:
    bus = hookbus.EventBus()

    @bus.hookable("div")
    def div(a: int, b: int) -> float:
        return a / b

    with BusRecorder(bus) as recorder:
        div(1, 2)
        with pytest.raises(ZeroDivisionError):
            div(1, 0)
    recorder.assert_called("div", times=2)
    recorder.assert_returned("div", 0.5)
    recorder.assert_raised("div", ZeroDivisionError, match="division")
    recorder.assert_raised("div", (KeyError, ArithmeticError))
    assert failure(recorder.assert_returned, "div", 3) == (
        "expected `div` to return 3, but it didn't:\n"
        "  call div(1, 2) -> 0.5\n"
        "  call div(1, 0) raised ZeroDivisionError('division by zero')"
    )
    assert failure(recorder.assert_raised, "div", KeyError).startswith(
        "expected `div` to raise KeyError, but it didn't:\n"
    )
    assert "raise ValueError or KeyError" in failure(
        recorder.assert_raised, "div", (ValueError, KeyError)
    )


def test_order_assertions_accept_patterns_and_say_what_was_recorded() -> None:
    bus = hookbus.EventBus()

    @bus.hookable("step")
    def step() -> None: ...

    with BusRecorder(bus) as recorder:
        bus.emit("before_run")
        step()
        bus.emit("after_iter")
        step()
        bus.emit("after_run")
    recorder.assert_order("before_run", "step", "after_iter", "after_run")
    recorder.assert_order("before_run", "after_*")
    message = failure(recorder.assert_order, "after_run", "before_run")
    assert message.startswith(
        "expected in order: `after_run`, `before_run`; found no `before_run` after "
        "`after_run`. Recorded:\n  emit before_run()\n  call step() -> None\n"
    )


def test_arguments_that_compare_ambiguously_are_not_a_match() -> None:
    class Ambiguous:
        def __eq__(self, other: object) -> bool:
            raise ValueError("truth value is ambiguous")

        __hash__ = object.__hash__

    bus = hookbus.EventBus()
    value = Ambiguous()
    with BusRecorder(bus) as recorder:
        bus.emit("tensor", value)
    recorder.assert_emitted_with("tensor", value)  # the same object matches
    assert "no emission matched" in failure(recorder.assert_emitted_with, "tensor", Ambiguous())


def test_long_arguments_are_shortened_in_messages() -> None:
    bus = hookbus.EventBus()
    with BusRecorder(bus) as recorder:
        bus.emit("big", list(range(1000)), "x" * 500)
    line = recorder.records[0].describe()
    assert len(line) < 200
    assert line.startswith("emit big([0, 1, 2, 3, 4, 5, ...], 'xxx")


def test_the_recorders_occurrence_is_still_importable_as_bus_record() -> None:
    from hookbus.pytest_plugin import BusRecord, Occurrence

    bus = hookbus.EventBus()
    with BusRecorder(bus) as recorder:
        bus.emit("saved", 1)
    assert BusRecord is Occurrence
    assert type(recorder.records[0]) is Occurrence
