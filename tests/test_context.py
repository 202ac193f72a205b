"""The call context: the fields every hook of one call shares, ``ctx.recover``, and
``ctx.skip(value)``, with which a pre hook short-circuits the call (a cache hit, a dry run).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Dict, List

import pytest

import hookbus
from hookbus import CallContext, EventBus

# --- the fields of a call, shared by its hooks ---------------------------------------------


def test_call_context_fields_and_per_call_data() -> None:
    bus = EventBus()
    seen: List[Any] = []

    @bus.hookable("work")
    def work(a: int, *, b: int) -> int:
        return a + b

    def before(ctx: CallContext) -> None:
        ctx.data["token"] = ctx.call_index * 100

    def after(ctx: CallContext) -> None:
        seen.append((ctx.name, ctx.target, ctx.args, ctx.kwargs, ctx.result, ctx.data["token"]))

    bus.pre("work", before)
    bus.post("work", after)
    work(1, b=2)
    work(3, b=4)
    assert seen == [
        ("work", work.__wrapped__, (1,), {"b": 2}, 3, 0),  # type: ignore[attr-defined]
        ("work", work.__wrapped__, (3,), {"b": 4}, 7, 100),  # type: ignore[attr-defined]
    ]
    assert "hunter" not in repr(CallContext("n", None, ("hunter2",), {}))


@pytest.mark.parametrize("traced", [False, True], ids=["compiled", "reference"])
def test_data_a_skip_a_recovery_and_the_error_are_each_the_calls_own(traced: bool) -> None:
    # Each call starts with no data, no skip, no recovery and no error, whatever the
    # call before it set; within a call, its hooks see all four side by side.
    bus = EventBus()

    @bus.hookable("load")
    def load(key: str) -> str:
        if key == "bad":
            raise KeyError(key)
        return key.upper()

    seen: List[Any] = []

    def before(ctx: CallContext) -> None:
        seen.append(("pre", dict(ctx.data), ctx.skipped, ctx.recovered, ctx.exception))
        ctx.data["key"] = ctx.args[0]
        if ctx.args[0] == "cached":
            ctx.skip("from cache")

    def on_error(ctx: CallContext) -> None:
        seen.append(("exception", ctx.data["key"], ctx.recovered, type(ctx.exception)))
        ctx.recover("recovered")

    def after(ctx: CallContext) -> None:
        seen.append(("post", ctx.data["key"], ctx.skipped, ctx.recovered, ctx.result))

    bus.pre("load", before)
    bus.exception("load", on_error)
    bus.post("load", after)
    load("warm")  # a hook point compiles its plan at the second call
    seen.clear()
    with bus.trace() if traced else contextlib.nullcontext():
        results = [load(key) for key in ("cached", "bad", "plain", "cached")]
    assert results == ["from cache", "recovered", "PLAIN", "from cache"]
    fresh = ("pre", {}, False, False, None)
    assert seen == [
        fresh, ("post", "cached", True, False, "from cache"),
        fresh, ("exception", "bad", False, KeyError), ("post", "bad", False, True, "recovered"),
        fresh, ("post", "plain", False, False, "PLAIN"),
        fresh, ("post", "cached", True, False, "from cache"),
    ]  # fmt: skip


@pytest.mark.parametrize("traced", [False, True], ids=["compiled", "reference"])
def test_a_skipped_call_that_recovers_is_both_and_the_next_skipped_call_is_not_recovered(
    traced: bool,
) -> None:
    bus = EventBus()

    @bus.hookable("load")
    def load(key: str) -> str:
        return key

    seen: List[Any] = []

    def fail_after_the_skip(ctx: CallContext) -> None:
        if ctx.args[0] == "fails":
            raise ValueError("a pre hook after the skip")

    bus.pre("load", lambda ctx: ctx.skip("skipped"), priority=1)
    bus.pre("load", fail_after_the_skip)
    bus.exception("load", lambda ctx: ctx.recover("recovered"))
    bus.post("load", lambda ctx: seen.append((ctx.skipped, ctx.recovered, ctx.result)))
    load("warm")  # a hook point compiles its plan at the second call
    seen.clear()
    with bus.trace() if traced else contextlib.nullcontext():
        assert load("fails") == "recovered"
        assert load("plain") == "skipped"
    assert seen == [(True, True, "recovered"), (True, False, "skipped")]


def test_recover_outside_an_exception_hook_is_an_error() -> None:
    bus = EventBus()

    @bus.hookable("f")
    def f() -> int:
        return 1

    bus.post("f", lambda ctx: ctx.recover(2))
    with pytest.raises(RuntimeError, match="exception hooks"):
        f()


def test_a_context_is_a_call_context_and_refuses_pickling_clearly() -> None:
    import pickle

    bus = EventBus()
    seen: List[object] = []

    @bus.hookable("load")
    def load(key: str) -> str:
        return key

    bus.pre("load", seen.append)
    load("a")
    (ctx,) = seen
    assert type(ctx) is hookbus.CallContext
    with pytest.raises(TypeError, match=r"cannot be pickled.*ctx\.args, ctx\.kwargs"):
        pickle.dumps(ctx)


def test_the_constructor_takes_every_field_by_position_or_keyword_and_refuses_missing_ones() -> (
    None
):
    point = object()
    by_position = CallContext("load", "target", ("a",), {"b": 1}, 4, "post", point)
    by_keyword = CallContext(
        name="load",
        target="target",
        args=("a",),
        kwargs={"b": 1},
        call_index=4,
        phase="post",
        point=point,
    )
    for ctx in (by_position, by_keyword):
        assert type(ctx) is CallContext
        fields = (ctx.name, ctx.target, ctx.args, ctx.kwargs, ctx.call_index, ctx.phase)
        assert fields == ("load", "target", ("a",), {"b": 1}, 4, "post")
        assert (ctx.result, ctx._point, ctx.skipped) == (None, point, False)
    defaults = CallContext("load", None, (), {})
    assert (defaults.call_index, defaults.phase, defaults._point) == (0, "pre", None)
    with pytest.raises(TypeError, match="kwargs"):
        CallContext("load", None, ())  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        CallContext("load", None, (), {}, 0, "pre", None, "extra")  # type: ignore[call-arg]


# --- ctx.skip ------------------------------------------------------------------------------


def make_point(bus: EventBus) -> Any:
    calls: List[int] = []

    @bus.hookable("square")
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    return square, calls


def test_hooks_that_skip_or_keep_data_still_see_the_arguments_by_name() -> None:
    # ctx.skip and ctx.data give a call state of its own; ctx.arguments still finds
    # the point's signature after them, on the first call (the reference sequence) and
    # the next ones (the compiled call), with keyword arguments and without.
    bus = EventBus()
    seen: List[Any] = []

    @bus.hookable("scale")
    def scale(x: int, factor: int = 2) -> int:
        return x * factor

    def pre(ctx: CallContext) -> None:
        if ctx.args[0] < 0:
            ctx.skip(0)
        ctx.data["x"] = ctx.arguments["x"]

    def post(ctx: CallContext) -> None:
        seen.append((ctx.data["x"], dict(ctx.arguments), ctx.skipped, ctx.result))

    bus.pre("scale", pre)
    bus.post("scale", post)
    for _ in range(3):
        assert scale(3) == 6
        assert scale(-1, factor=5) == 0
        assert scale(4, factor=3) == 12
    each = [
        (3, {"x": 3, "factor": 2}, False, 6),
        (-1, {"x": -1, "factor": 5}, True, 0),
        (4, {"x": 4, "factor": 3}, False, 12),
    ]
    assert seen == each * 3


def test_skip_returns_the_value_without_calling() -> None:
    bus = EventBus()
    square, calls = make_point(bus)
    cache = {3: 9}

    def cached(ctx: CallContext) -> None:
        if ctx.args[0] in cache:
            ctx.skip(cache[ctx.args[0]])

    bus.pre("square", cached)
    assert square(3) == 9
    assert calls == []
    assert square(4) == 16
    assert calls == [4]


def test_post_hooks_run_after_a_skip_and_know_it() -> None:
    bus = EventBus()
    square, calls = make_point(bus)
    seen: List[Any] = []
    bus.pre("square", lambda ctx: ctx.skip(-1) if ctx.args[0] < 0 else None)
    bus.post("square", lambda ctx: seen.append((ctx.args[0], ctx.skipped, ctx.result)))
    assert square(-5) == -1
    assert square(2) == 4
    assert seen == [(-5, True, -1), (2, False, 4)]
    assert calls == [2]


def test_a_post_hook_may_still_replace_a_skipped_result() -> None:
    bus = EventBus()
    square, _ = make_point(bus)
    bus.pre("square", lambda ctx: ctx.skip(1))
    bus.post("square", lambda ctx: setattr(ctx, "result", ctx.result + 1))
    assert square(9) == 2


def test_skip_without_a_value_returns_none() -> None:
    bus = EventBus()
    square, calls = make_point(bus)
    bus.pre("square", lambda ctx: ctx.skip())
    assert square(2) is None
    assert calls == []


def test_later_pre_hooks_still_run_and_see_the_skip() -> None:
    # Pre and post hooks stay paired (a timer's start and stop), so every pre hook runs.
    bus = EventBus()
    square, calls = make_point(bus)
    seen: List[bool] = []
    bus.pre("square", lambda ctx: ctx.skip(0), priority=10)
    bus.pre("square", lambda ctx: seen.append(ctx.skipped))
    assert square(5) == 0
    assert seen == [True]
    assert calls == []


def test_skip_outside_a_pre_hook_is_refused() -> None:
    bus = EventBus()
    square, _ = make_point(bus)
    bus.post("square", lambda ctx: ctx.skip(0))
    with pytest.raises(RuntimeError, match=r"pre hooks.*'post'"):
        square(2)


def test_skip_from_an_exception_hook_is_refused_pointing_to_recover() -> None:
    bus = EventBus()

    @bus.hookable("fail")
    def fail() -> None:
        raise ValueError("boom")

    bus.exception("fail", lambda ctx: ctx.skip(0))
    with pytest.raises(RuntimeError, match=r"recover"):
        fail()


def test_assigning_result_in_a_pre_hook_points_to_skip() -> None:
    bus = EventBus()
    square, calls = make_point(bus)
    bus.pre("square", lambda ctx: setattr(ctx, "result", 5))
    with pytest.raises(RuntimeError, match=r"ctx\.skip\(value\)"):
        square(2)
    assert calls == []


def test_skipped_is_false_for_a_plain_call() -> None:
    bus = EventBus()
    square, _ = make_point(bus)
    seen: List[bool] = []
    bus.pre("square", lambda ctx: seen.append(ctx.skipped))
    bus.post("square", lambda ctx: seen.append(ctx.skipped))
    square(1)
    assert seen == [False, False]


def test_skip_on_an_async_point() -> None:
    bus = EventBus()
    awaited: List[int] = []

    @bus.hookable("fetch")
    async def fetch(key: int) -> int:
        awaited.append(key)
        return key

    async def cached(ctx: CallContext) -> None:
        ctx.skip("cached")

    seen: List[Any] = []
    bus.pre("fetch", cached)
    bus.post("fetch", lambda ctx: seen.append((ctx.skipped, ctx.result)))
    assert asyncio.run(fetch(1)) == "cached"
    assert awaited == []
    assert seen == [(True, "cached")]


def test_skip_with_rare_options_on_the_general_path() -> None:
    # once and the collect policy take the general dispatch loop: skip works there too.
    bus = EventBus(errors="collect")
    square, calls = make_point(bus)
    bus.pre("square", lambda ctx: ctx.skip(0), once=True)
    assert square(3) == 0
    assert square(3) == 9
    assert calls == [3]


def test_a_dry_run_skips_a_call_that_would_delete() -> None:
    bus = EventBus()
    deleted: Dict[str, bool] = {}

    @bus.hookable("delete")
    def delete(path: str) -> bool:
        deleted[path] = True
        return True

    bus.pre("delete", lambda ctx: ctx.skip(False))
    assert delete("/tmp/x") is False
    assert deleted == {}
