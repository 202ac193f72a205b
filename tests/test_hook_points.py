"""Hook points: any callable made a hook point (``hookable``, ``wrap``), its name, the hooks
that reach it by name and pattern, and the hooks registered through the point itself."""

from __future__ import annotations

import asyncio
import functools
import inspect
import types
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import hookbus
from hookbus import CallContext, EventBus

ROOT = Path(__file__).resolve().parent.parent

# --- a point runs the hooks of its name ----------------------------------------------------


def test_hook_points_share_hooks_by_name_and_pattern() -> None:
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("model.encoder")
    def encoder() -> None:
        pass

    @bus.hookable("model.decoder")
    def decoder() -> None:
        pass

    bus.pre("model.*", lambda ctx: log.append(ctx.name))
    encoder()
    decoder()
    assert log == ["model.encoder", "model.decoder"]


def test_hooks_registered_before_the_point_exists_apply() -> None:
    bus = EventBus()
    bus.post("later", lambda ctx: setattr(ctx, "result", "hooked"))

    @bus.hookable("later")
    def later() -> str:
        return "plain"

    assert later() == "hooked"


def test_removing_the_last_hook_restores_the_plain_call() -> None:
    bus = EventBus()

    @bus.hookable("f")
    def f() -> int:
        return 1

    with bus.post("f", lambda ctx: setattr(ctx, "result", 2)):
        assert f() == 2
    assert f() == 1
    point = f.__hookbus_point__  # type: ignore[attr-defined]
    assert point.plan is None  # back on the no-hook fast path


# --- wrapping every kind of callable -------------------------------------------------


class Widget:
    instances = 0

    def __init__(self, size: int) -> None:
        self.size = size

    def area(self, factor: int = 1) -> int:
        """The area."""
        return self.size * self.size * factor

    @classmethod
    def make(cls, size: int) -> Widget:
        return cls(size)

    @staticmethod
    def unit() -> int:
        return 1


def make_bus_and_class() -> Any:
    bus = EventBus()

    class Shape:
        def __init__(self, size: int) -> None:
            self.size = size

        @bus.hookable("Shape.area")
        def area(self, factor: int = 1) -> int:
            """The area."""
            return self.size * self.size * factor

        @bus.hookable("Shape.make")
        @classmethod
        def make(cls, size: int) -> Shape:
            return cls(size)

        @classmethod
        @bus.hookable("Shape.make_below")
        def make_below(cls, size: int) -> Shape:
            return cls(size)

        @bus.hookable("Shape.unit")
        @staticmethod
        def unit() -> int:
            return 1

        @staticmethod
        @bus.hookable("Shape.unit_below")
        def unit_below(x: int) -> int:
            return x

    return bus, Shape


def test_instance_methods_bind_self() -> None:
    # self is ctx.target, and not in ctx.args (the one rule for methods).
    bus, shape_cls = make_bus_and_class()
    seen: List[Any] = []
    bus.post("Shape.area", lambda ctx: seen.append((ctx.target, ctx.args, ctx.result)))
    shape = shape_cls(3)
    assert shape.area(2) == 18
    assert seen == [(shape, (2,), 18)]
    assert shape_cls.area.__doc__ == "The area."
    assert list(inspect.signature(shape_cls.area).parameters) == ["self", "factor"]


@pytest.mark.parametrize("name", ["Shape.make", "Shape.make_below"])
def test_classmethods_bind_cls_either_way_round(name: str) -> None:
    bus, shape_cls = make_bus_and_class()
    seen: List[Any] = []
    bus.post(name, lambda ctx: seen.append(ctx.target))
    method = getattr(shape_cls, name.split(".")[1])
    made = method(4)
    assert isinstance(made, shape_cls)
    assert made.size == 4
    made_from_instance = getattr(made, name.split(".")[1])(5)
    assert made_from_instance.size == 5
    assert seen == [shape_cls, shape_cls]


@pytest.mark.parametrize("name", ["Shape.unit", "Shape.unit_below"])
def test_staticmethods_get_no_self_either_way_round(name: str) -> None:
    bus, shape_cls = make_bus_and_class()
    seen: List[Any] = []
    bus.pre(name, lambda ctx: seen.append(ctx.args))
    method_name = name.split(".")[1]
    args = () if method_name == "unit" else (7,)
    expected = 1 if method_name == "unit" else 7
    assert getattr(shape_cls, method_name)(*args) == expected
    assert getattr(shape_cls(1), method_name)(*args) == expected
    assert seen == [args, args]


def test_wrap_a_bound_method_targets_its_object() -> None:
    bus = EventBus()
    widget = Widget(2)
    area = bus.wrap(widget.area, "area")
    seen: List[Any] = []
    bus.post("area", lambda ctx: seen.append(ctx.target))
    assert area(3) == 12
    assert seen == [widget]


def test_wrap_leaves_the_original_unchanged() -> None:
    bus = EventBus()
    original = Widget.unit
    wrapped = bus.wrap(Widget.unit, "unit")
    bus.post("unit", lambda ctx: setattr(ctx, "result", 99))
    assert wrapped() == 99
    assert Widget.unit is original
    assert Widget.unit() == 1


def test_a_wrapped_callable_object_is_the_target_and_keeps_its_signature() -> None:
    bus = EventBus()

    class Adder:
        def __call__(self, a: int, b: int) -> int:
            return a + b

    adder = Adder()
    wrapped = bus.wrap(adder, "add")
    seen: List[Any] = []
    bus.post("add", lambda ctx: seen.append(ctx.target))
    assert wrapped(1, 2) == 3
    assert seen == [adder]
    assert wrapped.__name__ == "Adder"
    assert wrapped.__wrapped__ is adder  # type: ignore[attr-defined]
    assert list(inspect.signature(wrapped).parameters) == ["a", "b"]


def test_wrapped_builtins_run_their_hooks_and_keep_their_name() -> None:
    bus = EventBus()
    hooked_len = bus.wrap(len, "len")
    hooked_sorted = bus.wrap(sorted, "sorted")
    bus.post("len", lambda ctx: setattr(ctx, "result", ctx.result * 10))
    bus.pre("sorted", lambda ctx: setattr(ctx, "kwargs", {"reverse": True}))
    assert hooked_len("abc") == 30
    assert hooked_sorted([1, 3, 2]) == [3, 2, 1]
    assert hooked_len.__name__ == "len"


def test_a_wrapped_partial_runs_its_hooks() -> None:
    bus = EventBus()
    double = bus.wrap(functools.partial(pow, exp=2), "square")
    bus.post("square", lambda ctx: setattr(ctx, "result", -ctx.result))
    assert double(3) == -9


def test_default_point_name_is_the_qualname() -> None:
    bus = EventBus()

    @bus.hookable
    def compute() -> int:
        return 1

    bus.post(compute.__qualname__, lambda ctx: setattr(ctx, "result", 2))
    assert compute() == 2
    assert "test_default_point_name_is_the_qualname" in compute.__qualname__


def test_metadata_and_signature_are_kept() -> None:
    bus = EventBus()

    def documented(a: int, b: str = "x", *args: int, c: bool, **kw: float) -> str:
        """Docs."""
        return b

    wrapped = bus.wrap(documented, "doc")
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__", "__annotations__"):
        assert getattr(wrapped, attribute) == getattr(documented, attribute)
    assert wrapped.__wrapped__ is documented  # type: ignore[attr-defined]
    assert inspect.signature(wrapped) == inspect.signature(documented)


# --- a point wrapped again: hookable(hookable(f)) -----------------------------------------


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


# --- classes are refused: construction is hooked at __init__ ------------------------------


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


def test_default_bus_hookable_is_the_same_function() -> None:
    # hookbus.hookable is the default bus's method: the edge cases hold there too.
    with pytest.raises(TypeError, match="class"):
        hookbus.hookable(Widget)


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


# --- targets of wrapped builtins ----------------------------------------------------------


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


# --- generator functions: the hooks see the call, not the iteration -----------------------


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


# --- a default name shared by accident warns -----------------------------------------------


def _function_in_module(module_name: str, qualname: str) -> Any:
    module = types.ModuleType(module_name)
    exec(f"def {qualname}(x):\n    return x\n", module.__dict__)
    fn = module.__dict__[qualname]
    fn.__module__ = module_name
    return fn


def test_a_default_name_taken_by_another_modules_function_warns_naming_both() -> None:
    bus = EventBus()
    first = bus.hookable(_function_in_module("pkg.a", "forward"))
    with pytest.warns(hookbus.SharedNameWarning) as caught:
        second = bus.hookable(_function_in_module("pkg.b", "forward"))
    message = str(caught[0].message)
    assert "pkg.a" in message
    assert "pkg.b" in message
    assert "@hookable('forward')" in message  # the way to say sharing is meant
    assert first(1) == second(1) == 1


def test_no_warning_for_the_same_module_or_an_explicit_name() -> None:
    bus = EventBus()
    keep = [bus.hookable(_function_in_module("pkg.a", "forward"))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        keep.append(bus.hookable(_function_in_module("pkg.a", "forward")))  # a reload
        keep.append(bus.hookable("forward")(_function_in_module("pkg.c", "forward")))
    assert len(keep) == 3


def test_the_shared_name_warning_as_an_error_leaves_nothing_half_registered() -> None:
    bus = EventBus()
    keep = bus.hookable(_function_in_module("pkg.a", "forward"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(hookbus.SharedNameWarning):
            bus.hookable(_function_in_module("pkg.b", "forward"))
    assert [p.where for p in bus.points()] == [p.where for p in bus.points()[:1]]
    assert len(bus.points()) == 1
    assert keep(2) == 2


# --- async ----------------------------------------------------------------------------


def test_async_function_wrapper_is_a_coroutine_function_with_sync_and_async_hooks() -> None:
    bus = EventBus()
    log: List[Any] = []

    @bus.hookable("fetch")
    async def fetch(url: str) -> Dict[str, str]:
        await asyncio.sleep(0)
        return {"url": url}

    async def async_pre(ctx: CallContext) -> None:
        await asyncio.sleep(0)
        ctx.args = (ctx.args[0].upper(),)

    def sync_post(ctx: CallContext) -> None:
        log.append(ctx.result)

    bus.pre("fetch", async_pre)
    bus.post("fetch", sync_post)
    assert inspect.iscoroutinefunction(fetch)
    assert asyncio.run(fetch("a")) == {"url": "A"}
    assert log == [{"url": "A"}]


def test_async_exception_hook_recovers() -> None:
    bus = EventBus()

    @bus.hookable("fail")
    async def fail() -> int:
        raise TimeoutError

    async def retry(ctx: CallContext) -> None:
        ctx.recover(42)

    bus.exception("fail", retry)
    assert asyncio.run(fail()) == 42


def test_async_method_binds_self() -> None:
    bus = EventBus()
    seen: List[Any] = []

    class Client:
        @bus.hookable("Client.get")
        async def get(self, key: str) -> str:
            return key * 2

    bus.post("Client.get", lambda ctx: seen.append(ctx.target))
    client = Client()
    assert asyncio.run(client.get("ab")) == "abab"
    assert seen == [client]


# --- registering through the point: f.pre, f.post, f.exception ---------------------------


def test_a_point_registers_its_own_hooks_and_returns_them() -> None:
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    @parse.pre
    def strip(ctx: CallContext[int]) -> None:
        ctx.args = (ctx.args[0].strip(),)

    @parse.post(priority="HIGH")
    def double(ctx: CallContext[int]) -> None:
        ctx.result = ctx.result * 2

    def zero(ctx: CallContext[int]) -> None:
        log.append(type(ctx.exception).__name__)
        ctx.recover(0)

    assert parse.exception(zero, once=True) is zero
    assert parse(" 21 ") == 42
    assert parse("oops") == 0
    assert log == ["ValueError"]
    # Every form returned the hook itself: the decorated names are still functions.
    assert callable(strip)
    assert callable(double)
    assert [(h.kind, h.priority) for h in bus.handles_of(double)] == [("post", 20)]
    assert {h.kind for h in bus.hooks("parse")} == {"pre", "post"}  # the once hook went


def test_hooks_through_a_method_point_run_for_every_instance_or_the_target() -> None:
    bus = EventBus()
    seen: List[Any] = []

    class Motor:
        @bus.hookable("spin")
        def spin(self, rpm: int) -> int:
            return rpm

    first, second = Motor(), Motor()
    Motor.spin.post(lambda ctx: seen.append(("all", ctx.target)))
    Motor.spin.pre(lambda ctx: seen.append(("first", ctx.target)), target=first)
    first.spin(1)
    second.spin(2)
    assert seen == [("first", first), ("all", first), ("all", second)]


def test_classmethods_and_async_points_register_through_the_point() -> None:
    bus = EventBus()
    seen: List[Any] = []

    class Model:
        @bus.hookable("make")
        @classmethod
        def make(cls, size: int) -> Model:
            return cls()

    @bus.hookable("fetch")
    async def fetch(url: str) -> bytes:
        return b"page"

    async def measure(ctx: CallContext[bytes]) -> None:
        seen.append(len(ctx.result))

    Model.make.post(lambda ctx: seen.append(type(ctx.result).__name__))
    fetch.post(measure)
    Model.make(3)
    assert asyncio.run(fetch("u")) == b"page"
    assert seen == ["Model", 4]


def test_a_point_checks_its_registrations_as_the_bus_does() -> None:
    bus = EventBus()

    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    with pytest.raises(TypeError, match="priorty"):
        parse.post(lambda ctx: None, priorty=1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="priorty"):
        parse.post(priorty=1)  # type: ignore[call-overload]
    assert bus.hooks() == []


def test_a_wrapped_callable_is_a_point_too() -> None:
    bus = EventBus()
    hooked_len = bus.wrap(len, "len")
    hooked_len.post(lambda ctx: setattr(ctx, "result", ctx.result + 1))
    assert hooked_len("abc") == 4
    assert len("abc") == 3
