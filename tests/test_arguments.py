"""``ctx.arguments``: the call's arguments by parameter name, and one rule for self/cls.

The rule these tests pin down: ``ctx.args`` / ``ctx.kwargs`` / ``ctx.arguments`` are
the arguments the caller passed to the callable, never the instance or class a
method is bound to; that one is ``ctx.target``. It holds alike for a method
decorated in a class body, a wrapped bound method and (in the torch tests) a module.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookbus import CallContext, EventBus


def scale(x: int, rate: int = 2, *, offset: int = 0) -> int:
    return x * rate + offset


def test_arguments_read_a_parameter_by_name_however_it_was_passed() -> None:
    bus = EventBus()
    hooked = bus.wrap(scale, "scale")
    seen: List[int] = []
    bus.pre("scale", lambda ctx: seen.append(ctx.arguments["rate"]))
    assert hooked(1, 3) == 3
    assert hooked(1, rate=4) == 4
    assert hooked(x=1, rate=5) == 5
    assert seen == [3, 4, 5]


def test_omitted_defaults_are_read_but_not_passed() -> None:
    # The decision: reading a parameter the caller omitted gives its default, and
    # the call still omits it (so a callable that tells "omitted" from "default"
    # through a sentinel sees no difference); keys are every parameter, in order.
    bus = EventBus()
    hooked = bus.wrap(scale, "scale")
    seen: List[Any] = []

    def look(ctx: CallContext) -> None:
        seen.append((dict(ctx.arguments), ctx.args, ctx.kwargs))

    bus.pre("scale", look)
    assert hooked(7) == 14
    assert seen == [({"x": 7, "rate": 2, "offset": 0}, (7,), {})]


def test_writing_an_argument_changes_the_call_and_keeps_its_form() -> None:
    bus = EventBus()
    hooked = bus.wrap(scale, "scale")
    forms: List[Any] = []

    def rewrite(ctx: CallContext) -> None:
        ctx.arguments["rate"] = 10
        ctx.arguments["offset"] = 1
        forms.append((ctx.args, ctx.kwargs))

    bus.pre("scale", rewrite)
    assert hooked(2, 3) == 21  # rate was positional: it stays positional
    assert hooked(2, rate=3) == 21  # by keyword: stays a keyword
    assert hooked(2) == 21  # omitted: passed by keyword
    assert forms == [
        ((2, 10), {"offset": 1}),
        ((2,), {"rate": 10, "offset": 1}),
        ((2,), {"rate": 10, "offset": 1}),
    ]


def test_arguments_follow_args_and_kwargs_assigned_by_an_earlier_hook() -> None:
    bus = EventBus()
    hooked = bus.wrap(scale, "scale")
    seen: List[int] = []
    bus.pre("scale", lambda ctx: setattr(ctx, "args", (1, 6)), priority=10)
    bus.pre("scale", lambda ctx: seen.append(ctx.arguments["rate"]))
    bus.post("scale", lambda ctx: seen.append(ctx.arguments["rate"]))
    assert hooked(1, 2) == 6
    assert seen == [6, 6]


def test_var_positional_and_var_keyword_parameters() -> None:
    bus = EventBus()

    @bus.hookable("log")
    def log(level: str, *parts: str, sep: str = " ", **extra: Any) -> str:
        return f"{level}:{sep.join(parts)}:{sorted(extra)}"

    seen: List[Any] = []

    def hook(ctx: CallContext) -> None:
        seen.append((ctx.arguments["parts"], ctx.arguments["extra"], ctx.arguments["sep"]))
        ctx.arguments["parts"] = ("x", "y")
        ctx.arguments["extra"] = {"b": 2}

    bus.pre("log", hook)
    assert log("info", "a", "b", a=1) == "info:x y:['b']"
    assert seen == [(("a", "b"), {"a": 1}, " ")]


def test_positional_only_parameter_omitted_then_written() -> None:
    bus = EventBus()

    @bus.hookable("f")
    def f(a: int, b: int = 2, c: int = 3, /) -> int:
        return a * 100 + b * 10 + c

    bus.pre("f", lambda ctx: ctx.arguments.__setitem__("c", 9))
    assert f(1) == 129  # b, passed nowhere, had to be filled in with its default


def test_unknown_names_and_removal_are_clear_errors() -> None:
    bus = EventBus()
    hooked = bus.wrap(scale, "scale")
    errors: List[str] = []

    def hook(ctx: CallContext) -> None:
        for action in (
            lambda: ctx.arguments["speed"],
            lambda: ctx.arguments.__setitem__("speed", 1),
            lambda: ctx.arguments.__delitem__("rate"),
        ):
            try:
                action()
            except (KeyError, TypeError) as error:
                errors.append(str(error))

    bus.pre("scale", hook)
    hooked(1)
    assert len(errors) == 3
    assert "'speed'" in errors[0]
    assert "x, rate, offset" in errors[0]
    assert "'speed'" in errors[1]
    assert "x, rate, offset" in errors[1]
    assert "rate" in errors[2]
    assert "assign" in errors[2]


def test_a_callable_without_a_signature_is_a_clear_error() -> None:
    bus = EventBus()
    hooked_max = bus.wrap(max, "max")
    errors: List[str] = []

    def hook(ctx: CallContext) -> None:
        try:
            ctx.arguments["x"]
        except TypeError as error:
            errors.append(str(error))

    bus.pre("max", hook)
    assert hooked_max(1, 2) == 2
    assert len(errors) == 1
    assert "'max'" in errors[0]
    assert "signature" in errors[0]
    assert "ctx.args" in errors[0]


def test_a_builtin_with_a_signature_binds() -> None:
    bus = EventBus()
    hooked_len = bus.wrap(len, "len")
    seen: List[Any] = []
    bus.pre("len", lambda ctx: seen.append(dict(ctx.arguments)))
    assert hooked_len("abc") == 3
    assert seen == [{"obj": "abc"}]


def test_arguments_cost_nothing_unless_read() -> None:
    # Bound lazily: a call whose hooks never read ctx.arguments never inspects the
    # signature, so a callable whose signature cannot be found works as before.
    bus = EventBus()
    hooked_max = bus.wrap(max, "max")
    bus.post("max", lambda ctx: setattr(ctx, "result", ctx.result + 1))
    assert hooked_max(3, 4) == 5


def test_a_context_built_by_hand_has_no_signature() -> None:
    ctx = CallContext("n", None, (1,), {})
    with pytest.raises(TypeError, match=r"ctx\.args"):
        ctx.arguments["x"]


# --- one rule for self and cls -------------------------------------------------------


class Engine:
    bus = EventBus()

    def __init__(self, rpm: int) -> None:
        self.rpm = rpm

    @bus.hookable("Engine.rev")
    def rev(self, rpm: int, *, hold: bool = False) -> int:
        self.rpm = rpm
        return rpm

    @bus.hookable("Engine.make")
    @classmethod
    def make(cls, rpm: int) -> Engine:
        return cls(rpm)

    @staticmethod
    @bus.hookable("Engine.limit")
    def limit(rpm: int) -> int:
        return min(rpm, 7000)


def test_method_in_a_class_body_args_leave_out_self() -> None:
    seen: List[Any] = []

    def hook(ctx: CallContext) -> None:
        (rpm,) = ctx.args  # what a new user writes: no self in the way
        seen.append((ctx.target, rpm, dict(ctx.arguments)))

    engine = Engine(0)
    with Engine.bus.pre("Engine.rev", hook):
        assert engine.rev(3000) == 3000
        assert Engine.rev(engine, 4000) == 4000  # called through the class: the same
    assert seen == [
        (engine, 3000, {"rpm": 3000, "hold": False}),
        (engine, 4000, {"rpm": 4000, "hold": False}),
    ]


def test_bound_method_and_class_body_method_see_the_same_context() -> None:
    bus = Engine.bus
    engine = Engine(0)
    wrapped = bus.wrap(engine.rev.__wrapped__.__get__(engine), "bound.rev")  # type: ignore[attr-defined]
    seen: Dict[str, Any] = {}

    def hook(ctx: CallContext) -> None:
        seen[ctx.name] = (ctx.target, ctx.args, ctx.kwargs, dict(ctx.arguments))

    with bus.pre("Engine.rev", hook), bus.pre("bound.rev", hook):
        engine.rev(1, hold=True)
        wrapped(1, hold=True)
    assert seen["Engine.rev"] == seen["bound.rev"]
    assert seen["bound.rev"] == (engine, (1,), {"hold": True}, {"rpm": 1, "hold": True})


def test_pre_hook_rewrites_a_method_argument_and_self_is_kept() -> None:
    engine = Engine(0)

    def halve(ctx: CallContext) -> None:
        ctx.args = (ctx.args[0] // 2,)

    with Engine.bus.pre("Engine.rev", halve):
        assert engine.rev(3000) == 1500
    assert engine.rpm == 1500


def test_classmethod_args_leave_out_cls() -> None:
    seen: List[Any] = []
    with Engine.bus.pre("Engine.make", lambda ctx: seen.append((ctx.target, ctx.args))):
        made = Engine.make(10)
    assert made.rpm == 10
    assert seen == [(Engine, (10,))]


def test_staticmethod_args_are_all_arguments() -> None:
    seen: List[Any] = []
    with Engine.bus.pre("Engine.limit", lambda ctx: seen.append(ctx.args)):
        assert Engine.limit(9000) == 7000
        assert Engine(0).limit(10) == 10
    assert seen == [(9000,), (10,)]


def test_async_method_args_leave_out_self() -> None:
    bus = EventBus()

    class Client:
        @bus.hookable("Client.get")
        async def get(self, key: str) -> str:
            return key * 2

    seen: List[Any] = []
    bus.pre("Client.get", lambda ctx: seen.append((ctx.target, ctx.args, ctx.arguments["key"])))
    client = Client()
    assert asyncio.run(client.get("ab")) == "abab"
    assert seen == [(client, ("ab",), "ab")]


@given(
    x=st.integers(),
    rate=st.one_of(st.none(), st.integers()),
    offset=st.one_of(st.none(), st.integers()),
    rate_by_keyword=st.booleans(),
)
def test_arguments_agree_with_the_callable_for_every_way_of_calling(
    x: int, rate: Any, offset: Any, rate_by_keyword: bool
) -> None:
    # Whatever the hook reads is what the callable receives, for every call form.
    bus = EventBus()
    received: Dict[str, int] = {}

    def target(x: int, rate: int = 2, *, offset: int = 0) -> None:
        received.update(x=x, rate=rate, offset=offset)

    hooked = bus.wrap(target, "t")
    read: Dict[str, int] = {}
    bus.pre("t", lambda ctx: read.update(ctx.arguments))
    args: List[Any] = [x]
    kwargs: Dict[str, Any] = {}
    if rate is not None:
        if rate_by_keyword:
            kwargs["rate"] = rate
        else:
            args.append(rate)
    if offset is not None:
        kwargs["offset"] = offset
    hooked(*args, **kwargs)
    assert read == received


def test_a_positional_only_parameter_is_not_the_kwargs_key_of_its_name() -> None:
    # Writing ctx.arguments["x"] once edited kwargs["x"], which belongs to **kwargs,
    # instead of the positional-only x.
    bus = EventBus()

    @bus.hookable("f")
    def f(x: int, /, *rest: int, **extra: int) -> Any:
        return x, rest, extra

    def edit(ctx: CallContext) -> None:
        assert ctx.arguments["x"] == 1
        ctx.arguments["x"] = 10

    bus.pre("f", edit)
    assert f(1, x=2) == (10, (), {"x": 2})
    bus.clear()

    def extend(ctx: CallContext) -> None:
        ctx.arguments["rest"] = (7,)

    bus.pre("f", extend)
    assert f(1, x=2) == (1, (7,), {"x": 2})


def test_a_callable_object_that_hands_everything_to_forward_binds_to_forward() -> None:
    # bus.wrap(model) once gave ctx.arguments the keys args and kwargs.
    class Model:
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return self.forward(*args, **kwargs)

        def forward(self, x: int, scale: int = 2) -> int:
            return x * scale

    bus = EventBus()
    model = bus.wrap(Model(), "model")
    seen: List[Dict[str, Any]] = []

    def double_scale(ctx: CallContext) -> None:
        seen.append(dict(ctx.arguments))
        ctx.arguments["scale"] = 3

    bus.pre("model", double_scale)
    assert model(5) == 15
    assert seen == [{"x": 5, "scale": 2}]


def test_a_callable_without_a_signature_is_named_by_itself_not_by_its_point() -> None:
    # min has no signature Python can read; the error names the function, then the point.
    bus = EventBus()
    smallest = bus.wrap(min, "smallest")
    errors: List[str] = []

    def read(ctx: CallContext) -> None:
        try:
            ctx.arguments["x"]
        except TypeError as error:
            errors.append(str(error))

    bus.pre("smallest", read)
    assert smallest(3, 1, 2) == 1
    (message,) = errors
    assert "builtin_function_or_method 'min'" in message
    assert "hook point 'smallest'" in message
    assert "read ctx.args and ctx.kwargs instead" in message
