"""Wrapping edge cases, each reproduced on the code before the fix (regression tests)."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any, Iterator, List

import pytest

import hookbus
from hookbus import EventBus

ROOT = Path(__file__).resolve().parent.parent


# --- hookable(hookable(f)) -----------------------------------------------------------


def test_hookable_twice_on_the_same_name_runs_hooks_once() -> None:
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("f")
    @bus.hookable("f")
    def f(x: int) -> int:
        return x

    bus.pre("f", lambda ctx: log.append("pre"))
    bus.post("f", lambda ctx: log.append("post"))
    assert f(1) == 1
    assert log == ["pre", "post"]


def test_wrap_of_a_hook_point_on_its_own_name_is_the_point_itself() -> None:
    bus = EventBus()
    log: List[int] = []
    once = bus.wrap(abs, "abs")
    twice = bus.wrap(once, "abs")
    assert twice is once
    bus.post("abs", lambda ctx: log.append(ctx.result))
    assert twice(-2) == 2
    assert log == [2]


def test_hookable_twice_under_two_names_runs_each_names_hooks() -> None:
    bus = EventBus()
    log: List[str] = []
    inner = bus.wrap(abs, "inner")
    outer = bus.wrap(inner, "outer")
    bus.pre("*", lambda ctx: log.append(ctx.name))
    assert outer(-1) == 1
    assert log == ["outer", "inner"]


def test_a_method_hooked_under_two_names_keeps_self_out_of_args_in_both() -> None:
    bus = EventBus()
    seen: List[Any] = []

    class Motor:
        @bus.hookable("outer")
        @bus.hookable("inner")
        def spin(self, rpm: int) -> int:
            return rpm

    bus.pre("*", lambda ctx: seen.append((ctx.name, ctx.target, ctx.args)))
    motor = Motor()
    assert motor.spin(5) == 5
    assert seen == [("outer", motor, (5,)), ("inner", motor, (5,))]


def test_hook_points_of_two_buses_both_run() -> None:
    first, second = EventBus(), EventBus()
    log: List[str] = []
    both = second.wrap(first.wrap(abs, "abs"), "abs")
    first.pre("abs", lambda ctx: log.append("first"))
    second.pre("abs", lambda ctx: log.append("second"))
    assert both(-3) == 3
    assert log == ["second", "first"]


# --- classes ---------------------------------------------------------------------------


def test_hookable_on_a_class_is_refused_saying_how_to_hook_construction() -> None:
    bus = EventBus()

    class Model:
        pass

    with pytest.raises(TypeError, match=r"class Model.*__init__"):
        bus.hookable(Model)
    with pytest.raises(TypeError, match=r"class Model.*__init__"):
        bus.hookable("model")(Model)
    with pytest.raises(TypeError, match=r"class Model"):
        bus.wrap(Model, "model")
    assert bus.hooks() == []
    assert isinstance(Model(), Model)  # untouched


def test_hooking_init_is_the_way_to_hook_construction() -> None:
    bus = EventBus()

    class Model:
        @bus.hookable("Model.__init__")
        def __init__(self, size: int) -> None:
            self.size = size

    built: List[Any] = []
    bus.post("Model.__init__", lambda ctx: built.append((ctx.target, ctx.arguments["size"])))
    model = Model(3)
    assert built == [(model, 3)]

    class Sub(Model):  # subclassing still works: Model is still a class
        pass

    assert isinstance(Sub(1), Model)


# --- callable objects with an async __call__ --------------------------------------


class AsyncFetcher:
    async def __call__(self, key: str) -> str:
        if key == "bad":
            raise KeyError(key)
        await asyncio.sleep(0)
        return key.upper()


def test_wrap_an_object_with_async_call_gives_an_async_hook_point() -> None:
    bus = EventBus()
    fetch = bus.wrap(AsyncFetcher(), "fetch")
    assert inspect.iscoroutinefunction(fetch)
    results: List[Any] = []
    bus.post("fetch", lambda ctx: results.append(ctx.result))
    bus.exception("fetch", lambda ctx: ctx.recover("recovered"))
    assert asyncio.run(fetch("a")) == "A"
    assert asyncio.run(fetch("bad")) == "recovered"
    assert results == ["A", "recovered"]


# --- builtins ------------------------------------------------------------------------


def test_target_of_a_wrapped_builtin_function_is_the_function() -> None:
    bus = EventBus()
    hooked_len = bus.wrap(len, "len")
    seen: List[Any] = []
    bus.post("len", lambda ctx: seen.append(ctx.target), target=len)
    assert hooked_len("abc") == 3
    assert seen == [len]


def test_target_of_a_wrapped_bound_builtin_method_is_its_object() -> None:
    bus = EventBus()
    items: List[int] = []
    append = bus.wrap(items.append, "append")
    seen: List[Any] = []
    bus.pre("append", lambda ctx: seen.append(ctx.target), target=items)
    append(1)
    assert items == [1]
    assert seen == [items]


# --- generator functions ----------------------------------------------------------


def test_generator_functions_are_documented_with_what_to_do_instead() -> None:
    doc = inspect.getdoc(EventBus.hookable) or ""
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    for text in (doc, concepts):
        assert "generator" in text
        assert "iteration" in text


def test_generator_function_as_documented_post_hooks_get_the_generator() -> None:
    bus = EventBus()
    seen: List[Any] = []

    @bus.hookable("count")
    def count(n: int) -> Iterator[int]:
        yield from range(n)
        raise ValueError("during iteration")

    bus.post("count", lambda ctx: seen.append(inspect.isgenerator(ctx.result)))
    bus.exception("count", lambda ctx: seen.append("exception hook"))
    numbers = count(2)
    assert seen == [True]
    with pytest.raises(ValueError, match="during iteration"):
        list(numbers)
    assert seen == [True]  # an error during iteration is after the call: no hook runs


# --- arguments do not outlive the call -------------------------------------------


class Big:
    """Stands for a large tensor: something a call must not keep alive."""


def test_default_bus_hookable_is_the_same_function() -> None:
    # hookbus.hookable is the default bus's method: the edge cases hold there too.
    with pytest.raises(TypeError, match="class"):
        hookbus.hookable(Big)
