"""The pytest plugin: fixtures, default-bus isolation, and the recorder's assertions."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
from typing import Any, List

import pytest

import hookbus
from hookbus.pytest_plugin import BusRecorder, isolate

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _no_leaks(default_bus: hookbus.EventBus) -> None:
    """Inner pytester runs happen in this process, on this process's default bus."""


def run_inner(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_inner=textwrap.dedent(source))
    return pytester.runpytest("-p", "no:cacheprovider", *args)


# --- the plugin is installed and its fixtures are there -----------------------------


def test_the_entry_point_loads_the_plugin_in_a_fresh_process(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_inner="""
        import hookbus

        def test_fixtures(event_bus, default_bus, bus_recorder):
            assert isinstance(event_bus, hookbus.EventBus)
            assert default_bus is hookbus.default_bus
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    disabled = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hookbus")
    disabled.assert_outcomes(errors=1)
    disabled.stdout.fnmatch_lines(["*fixture 'event_bus' not found*"])


def test_importing_the_plugin_never_imports_torch() -> None:
    code = "import sys, hookbus.pytest_plugin; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


# --- event_bus ----------------------------------------------------------------------


def test_each_test_gets_a_fresh_event_bus(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
        seen = []

        def test_first(event_bus):
            seen.append(event_bus)
            event_bus.on("saved", print)

        def test_second(event_bus):
            assert event_bus is not seen[0]
            assert event_bus.hooks() == []
            assert event_bus.name == "test_second"
        """,
    )
    result.assert_outcomes(passed=2)


# --- default_bus --------------------------------------------------------------------

LEAKY_TESTS = """
import hookbus

class Hooks:
    @hookbus.listens("leak.subscribed")
    def on_it(self):
        pass

def test_registers(FIXTURE):
    hookbus.on("leak.event", print)
    hookbus.pre("leak.point", lambda ctx: None)
    hookbus.subscribe(Hooks())

    @hookbus.post("leak.decorated")
    def post(ctx):
        pass

    assert len(hookbus.hooks()) == 4

def test_sees_nothing(FIXTURE):
    assert hookbus.hooks() == []
"""


def test_hooks_on_the_default_bus_leak_without_the_fixture(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, LEAKY_TESTS.replace("FIXTURE", ""))
    result.assert_outcomes(passed=1, failed=1)


def test_the_default_bus_fixture_stops_the_leak(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, LEAKY_TESTS.replace("FIXTURE", "default_bus"))
    result.assert_outcomes(passed=2)


def test_the_ini_option_isolates_every_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nhookbus_isolate_default_bus = true\n")
    result = run_inner(pytester, LEAKY_TESTS.replace("FIXTURE", ""))
    result.assert_outcomes(passed=2)


def test_hooks_registered_before_the_test_come_back_after_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import hookbus

        heard = []
        hookbus.on("app.started", heard.append)  # an application hook, set at import
        """
    )
    result = run_inner(
        pytester,
        """
        import hookbus
        from conftest import heard

        def test_clears_everything(default_bus):
            hookbus.emit("app.started", 1)
            hookbus.clear()
            hookbus.emit("app.started", 2)

        def test_the_app_hook_is_back(default_bus):
            hookbus.emit("app.started", 3)
            assert heard == [1, 3]
        """,
    )
    result.assert_outcomes(passed=2)


def test_isolate_restores_once_hooks_policy_and_pauses() -> None:
    bus = hookbus.EventBus()
    log: List[int] = []
    once = bus.on("e", log.append, once=True)
    with isolate(bus):
        bus.emit("e", 1)
        assert not once.active
        bus.errors = "log"
        pause = bus.paused("e")
        pause.__enter__()  # left open on purpose: the test "forgot" to close it
    assert once.active
    assert bus.errors == "raise"
    bus.emit("e", 2)
    assert log == [1, 2]


def test_isolate_does_not_bring_back_a_weak_hook_whose_object_died() -> None:
    class Listener:
        def __call__(self) -> None: ...

    bus = hookbus.EventBus()
    listener = Listener()
    handle = bus.on("e", listener, weak=True)
    with isolate(bus):
        del listener
        gc.collect()
    assert not handle.active
    assert bus.hooks() == []


def test_the_recorder_sees_the_applications_own_buses(pytester: pytest.Pytester) -> None:
    # An application keeps its buses in its own modules: conftest.py names them once.
    pytester.makepyfile(
        app_events="""
        import hookbus

        orders = hookbus.EventBus("orders")
        audit = hookbus.EventBus("audit")

        @orders.hookable("charge")
        def charge(amount):
            return amount * 100
        """
    )
    pytester.makeconftest(
        """
        import pytest
        import app_events

        @pytest.fixture
        def hookbus_buses():
            return [app_events.orders, app_events.audit]
        """
    )
    result = run_inner(
        pytester,
        """
        import app_events

        def test_records_them(bus_recorder):
            app_events.orders.emit("order.paid", 7)
            app_events.audit.emit("audit.logged")
            app_events.charge(3)
            bus_recorder.assert_emitted_with("order.paid", 7)
            bus_recorder.assert_emitted("audit.logged")
            bus_recorder.assert_returned("charge", 300)

        def test_and_stop_after_the_test():
            assert app_events.orders.hooks() == app_events.audit.hooks() == []
        """,
    )
    result.assert_outcomes(passed=2)


# --- the recorder: what it captures -------------------------------------------------


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
        hookbus.emit("test_pytest_plugin.default")
    recorder.assert_emitted("test_pytest_plugin.default", times=1)
    assert hookbus.hooks() == []


# --- the recorder: assertions and their messages ------------------------------------


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


def test_result_and_error_assertions() -> None:
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


def test_order_assertions() -> None:
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


# --- the fixtures, end to end ---------------------------------------------------------


def test_bus_recorder_failures_read_well_in_pytest_output(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
        import hookbus

        def test_loop(bus_recorder):
            for step in range(2):
                hookbus.emit("train.after_iter", step=step)
            bus_recorder.assert_emitted("train.after_iter", times=3)
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            ">*bus_recorder.assert_emitted(*",
            "E*AssertionError: expected `train.after_iter` emitted 3 times, got 2:",
            "E*emit train.after_iter(step=0)",
            "E*emit train.after_iter(step=1)",
        ]
    )
    # The failure points at the test's line, not into the plugin.
    assert "pytest_plugin.py" not in result.stdout.str()


def test_bus_recorder_records_event_bus_when_the_test_uses_it(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
        import hookbus

        def test_both(event_bus, bus_recorder):
            event_bus.emit("local", 1)
            hookbus.emit("global", 2)

            @event_bus.hookable("work")
            def work(x):
                return x + 1

            work(1)
            assert [r.name for r in bus_recorder.records] == ["local", "global", "work"]
            bus_recorder.assert_returned("work", 2)

        def test_recorder_hooks_are_gone(event_bus):
            assert hookbus.hooks() == []
        """,
    )
    result.assert_outcomes(passed=2)


def test_the_recorders_occurrence_is_still_importable_as_bus_record() -> None:
    from hookbus.pytest_plugin import BusRecord, Occurrence

    bus = hookbus.EventBus()
    with BusRecorder(bus) as recorder:
        bus.emit("saved", 1)
    assert BusRecord is Occurrence
    assert type(recorder.records[0]) is Occurrence
