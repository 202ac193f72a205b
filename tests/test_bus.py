"""The bus: emit, collect, collect_pairs, first, without and clear; the decorator form; the
module-level API on the default bus; a bus's name and repr."""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
from typing import Any, Callable, List

import pytest
from hook_helpers import recorder

import hookbus
from hookbus import EventBus

# --- emit, collect, first, without, clear --------------------------------------------------


def test_emit_passes_exactly_what_was_emitted() -> None:
    bus = EventBus()
    log: List[Any] = []
    bus.on("saved", recorder(log, "a"))
    assert bus.emit("saved", 1, "two", three=3) is None
    assert log == [("a", (1, "two"), {"three": 3})]


def test_any_existing_callback_works_as_an_observer() -> None:
    bus = EventBus()
    seen: List[int] = []
    bus.on("n", seen.append)  # a builtin bound method
    bus.emit("n", 5)
    assert seen == [5]


def test_emit_with_no_hooks_does_nothing() -> None:
    bus = EventBus()
    bus.emit("nobody.listens", 1, x=2)
    assert bus.collect("nobody.listens") == []


def test_collect_returns_results_in_call_order() -> None:
    bus = EventBus()
    bus.on("q", lambda: "low", priority=-1)
    bus.on("q", lambda: "high", priority=10)
    bus.on("q", lambda: "normal")
    assert bus.collect("q") == ["high", "normal", "low"]


def test_collect_pairs_pairs_each_result_with_the_hook_that_returned_it() -> None:
    """blinker's send(): (receiver, result) pairs, right where bus.hooks() can't line up.

    A hook skipped for its target, a once hook used up, and a hook that failed under
    errors="log" each leave bus.hooks() and collect()'s results misaligned.
    """
    bus = EventBus(errors="log")

    def database(sender: str, key: str) -> str:
        return f"stored {key}"

    def broken(sender: str, key: str) -> str:
        raise KeyError(key)

    def cache(sender: str, key: str) -> None:
        return None

    def once(sender: str, key: str) -> str:
        return "first time"

    bus.on("lookup", database, target="db")
    bus.on("lookup", broken)
    bus.on("lookup", cache)
    bus.on("lookup", once, once=True)
    pairs = bus.collect_pairs("lookup", "web", key="a")
    assert [(handle.hook, result) for handle, result in pairs] == [
        (cache, None),
        (once, "first time"),
    ]
    assert all(isinstance(handle, hookbus.Handle) for handle, _ in pairs)
    assert [(h.hook, r) for h, r in bus.collect_pairs("lookup", "db", key="b")] == [
        (database, "stored b"),
        (cache, None),
    ]
    assert bus.collect_pairs("nothing", "web") == []
    assert hookbus.collect_pairs.__self__ is hookbus.default_bus  # type: ignore[attr-defined]


def test_collect_pairs_of_a_declared_event_with_an_around_hook() -> None:
    bus = EventBus()

    @bus.event
    def formats(kind: str) -> None: ...

    def csv(kind: str) -> str:
        return f"csv {kind}"

    def around(ctx: Any) -> Any:
        yield
        ctx.result = [(handle.hook.__name__, result.upper()) for handle, result in ctx.result]

    formats.on(csv)
    bus.around("formats", around)
    assert bus.collect_pairs("formats", "export") == [("csv", "CSV EXPORT")]
    with pytest.raises(TypeError, match="don't match its spec"):
        bus.collect_pairs("formats", "export", "extra")


def test_without_dispatches_to_every_hook_but_those_left_out() -> None:
    """pluggy's subset_hook_caller: call all plugins but some; every other call is unchanged."""
    bus = EventBus()
    seen: List[str] = []

    class Csv:
        @hookbus.listens("formats")
        def formats(self) -> str:
            seen.append("csv")
            return "csv"

    class Json:
        @hookbus.listens("formats")
        def formats(self) -> str:
            seen.append("json")
            return "json"

        @hookbus.listens("formats", kind="around")
        def upper(self, ctx: Any) -> Any:
            yield
            ctx.result = [name.upper() for name in ctx.result]

    csv, json = bus.subscribe(Csv()), bus.subscribe(Json())
    assert bus.collect("formats") == ["CSV", "JSON"]
    assert bus.without(json).collect("formats") == ["csv"]  # its around hook too
    assert bus.without(json).first("formats") == "csv"
    assert bus.without(csv, json).collect("formats") == []
    (csv_hook,) = csv
    assert bus.without(csv_hook).collect("formats") == ["JSON"]  # a single handle
    del seen[:]
    bus.without(json).emit("formats")
    assert seen == ["csv"]
    assert asyncio.run(bus.without(json).collect_async("formats")) == ["csv"]
    assert bus.collect("formats") == ["CSV", "JSON"]  # the bus itself is unchanged
    left_out = bus.without(json)
    assert "1 hook" in repr(left_out) or "2 hooks" in repr(left_out)
    with pytest.raises(TypeError, match=r"without\(\) takes handles.*got str 'json'"):
        bus.without("json")


def test_without_takes_the_list_that_handles_of_returns() -> None:
    """``bus.without(bus.handles_of(hook))``, as the docs and the refusal message put it:
    the list is the handles of one hook, left out like a group; anything else in it is
    refused."""
    bus = EventBus()

    def csv() -> str:
        return "csv"

    bus.on("formats", csv)
    bus.on("formats", lambda: "json")
    assert bus.without(bus.handles_of(csv)).collect("formats") == ["json"]
    assert bus.without(tuple(bus.handles_of(csv)), []).collect("formats") == ["json"]
    with pytest.raises(TypeError, match=r"without\(\) takes handles.*got list holding str"):
        bus.without(["csv"])


def test_first_returns_the_first_result_that_is_not_none_and_stops() -> None:
    bus = EventBus()
    ran: List[str] = []

    def hook(label: str, result: Any) -> Callable[[], Any]:
        def run() -> Any:
            ran.append(label)
            return result

        return run

    bus.on("find", hook("a", None), priority=3)
    bus.on("find", hook("b", 0), priority=2)
    bus.on("find", hook("c", "never"), priority=1)
    assert bus.first("find") == 0
    assert ran == ["a", "b"]
    assert bus.first("nobody") is None


def test_first_works_with_once_and_the_error_policies() -> None:
    bus = EventBus(errors="collect")
    bus.on("find", lambda: 1 / 0, priority=5)
    bus.on("find", lambda: "found", once=True)
    with pytest.raises(hookbus.HookError):
        bus.first("find")
    assert bus.hooks("find")[0].priority == 5  # the once hook ran, and is gone
    assert len(bus.hooks("find")) == 1


def test_first_refuses_async_hooks_like_emit() -> None:
    bus = EventBus()

    async def hook() -> str:
        return "x"

    bus.on("find", hook)
    with pytest.raises(TypeError, match="emit_async"):
        bus.first("find")


def test_clear_removes_everything_or_one_name() -> None:
    bus = EventBus()
    a = bus.on("a", print)
    b = bus.on("b", print)
    bus.clear("a")
    assert (a.active, b.active) == (False, True)
    bus.clear()
    assert not b.active
    assert bus.hooks() == []
    bus.emit("b", "nothing printed")


# --- the decorator form, and the module-level API on the default bus -----------------------


def test_decorator_form_returns_the_function_and_its_handle_is_reachable() -> None:
    bus = EventBus()

    @bus.on("e", priority=3)
    def react(x: int) -> int:
        return x * 2

    assert react(4) == 8  # still usable
    (handle,) = bus.handles_of(react)
    assert handle.priority == 3
    assert bus.collect("e", 5) == [10]
    handle.remove()
    assert bus.collect("e", 5) == []


def test_on_keeps_its_name_docs_and_signature_for_help_and_tools() -> None:
    # bus.on runs its registration's code as its own: what help() and editors read is
    # still the bus method's.
    on: Any = EventBus.on
    assert (on.__name__, on.__qualname__, on.__module__) == ("on", "EventBus.on", "hookbus._bus")
    assert on.__doc__.startswith("Register ``hook`` for ``event``; with no hook")
    parameters = inspect.signature(on).parameters
    assert list(parameters)[:3] == ["self", "event", "hook"]
    assert parameters["hook"].kind is inspect.Parameter.POSITIONAL_ONLY
    assert {"priority", "once", "target", "weak", "with_name", "optional"} <= set(parameters)
    assert "on" in repr(EventBus().on)


def test_the_module_level_functions_act_on_the_default_bus() -> None:
    log: List[Any] = []
    with hookbus.scope():
        hookbus.on("tests.default", recorder(log, "x"))
        hookbus.emit("tests.default", 1)
        assert hookbus.collect("tests.default", 2) == ["x"]
        assert [h.name for h in hookbus.hooks("tests.default")] == ["tests.default"]
    hookbus.emit("tests.default", 3)
    assert [entry[1] for entry in log] == [(1,), (2,)]
    assert hookbus.default_bus.hooks("tests.default") == []


def test_module_level_api_is_complete() -> None:
    for name in [
        "on",
        "emit",
        "pre",
        "post",
        "exception",
        "hookable",
        "wrap",
        "scope",
        "paused",
        "clear",
    ]:
        assert getattr(hookbus, name).__self__ is hookbus.default_bus
        assert callable(getattr(EventBus, name))


def test_every_public_bus_method_is_a_module_level_function_on_the_default_bus() -> None:
    methods = [
        name
        for name, value in inspect.getmembers(EventBus)
        if not name.startswith("_") and callable(value)
    ]
    assert {"collect_async", "handles_of", "events", "trace", "event", "first"} <= set(methods)
    for name in methods:
        function = getattr(hookbus, name)
        assert function == getattr(hookbus.default_bus, name), name
        assert name in hookbus.__all__, name
        assert inspect.signature(function) == inspect.signature(getattr(hookbus.default_bus, name))


def test_import_hookbus_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, hookbus, hookbus.pytest_plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- a bus's name and repr -----------------------------------------------------------------


def test_unnamed_buses_get_names_that_tell_them_apart() -> None:
    first, second = EventBus(), EventBus()
    assert first.name != second.name
    assert re.fullmatch(r"bus-\d+", first.name)
    assert repr(first) != repr(second)
    first.on("a", print)
    assert f"<EventBus {first.name!r} 1 hook" in repr(first)
    assert f"<EventBus {second.name!r} 0 hooks" in repr(second)
    assert EventBus("orders").name == "orders"
    assert hookbus.default_bus.name == "default"


def test_the_bus_repr_counts_hooks_and_names_in_words() -> None:
    bus = EventBus("orders")
    assert repr(bus) == "<EventBus 'orders' 0 hooks on 0 names, errors='raise'>"
    bus.on("paid", print)
    assert repr(bus) == "<EventBus 'orders' 1 hook on 1 name, errors='raise'>"
    bus.on("paid", repr)
    bus.on("shipped", print)
    assert repr(bus) == "<EventBus 'orders' 3 hooks on 2 names, errors='raise'>"


def test_unnamed_buses_made_in_threads_are_numbered_once_each() -> None:
    names: List[str] = []

    def make() -> None:
        for _ in range(200):
            names.append(EventBus().name)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(names) == len(set(names)) == 800


def test_a_bus_name_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="EventBus\\(name=\\) takes a str, got int 3"):
        EventBus(3)  # type: ignore[arg-type]
