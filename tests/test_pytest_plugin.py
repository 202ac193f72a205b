"""The pytest plugin: its fixtures (event_bus, default_bus, bus_recorder), isolation of the
default bus, and isolate()."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from typing import List

import pytest

import hookbus
from hookbus.pytest_plugin import isolate

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
