"""The sync and async dispatch loops are one body: the sync file is generated, and current,
and both variants give the same outcomes for the same hooks."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookbus import CallContext, EventBus
from hookbus._async_dispatch import call_with_hooks_async, dispatch_event_async
from hookbus._sync_dispatch import call_with_hooks, dispatch_event

ROOT = Path(__file__).resolve().parent.parent


def test_the_sync_variant_is_generated_from_the_async_one_and_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "unasync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_generator_applies_its_rules() -> None:
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import unasync
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    source = (
        '"""Doc."""\n'
        "import inspect  # async only\n"
        "async def run_async(x):\n"
        "    # sync only: check(x)\n"
        "    y = await x  # async only\n"
        "    return await run_async(x)\n"
        "async def helper(x):  # async only\n"
        "    return x\n"
        "def keep(handle):\n"
        "    return handle.is_async\n"
    )
    out = unasync.generate(source)
    assert "import inspect" not in out
    assert "helper" not in out
    assert "y = " not in out
    assert "def run(x):\n    check(x)\n    return run(x)\n" in out
    assert "handle.is_async" in out  # only the source's own *_async functions are renamed


class _Point:
    """A hook point of the seam's shape, for asking the registry for a plan."""

    name = "work"
    kinds = ("around", "pre", "post", "exception")
    kind = "function"
    where = "?"
    is_async = True
    skip_refusal = None

    def invalidate(self) -> None:
        pass


# --- hooks around a call -------------------------------------------------------------

PRE = ["none", "raise", "skip", "args"]
POST = ["none", "raise", "result"]
EXCEPTION = ["none", "recover", "raise"]
AROUND = ["plain", "raise_before", "recover", "raise_after", "twice", "no_yield"]


def _call(
    pre: List[str],
    post: List[str],
    exception: List[str],
    around: List[str],
    call_raises: bool,
    policy: str,
    variant: str,
) -> Tuple[List[Any], Any]:
    bus = EventBus("variants", errors=policy)  # type: ignore[arg-type]
    log: List[Any] = []

    def named(hook: Callable[..., Any], label: str) -> Callable[..., Any]:
        hook.__qualname__ = label
        return hook

    def make_pre(index: int, how: str) -> Callable[[CallContext], None]:
        def hook(ctx: CallContext) -> None:
            log.append(("pre", index, ctx.args))
            if how == "raise":
                raise ValueError(f"pre {index}")
            if how == "skip":
                ctx.skip(f"skipped by {index}")
            if how == "args":
                ctx.args = (ctx.args[0] + 1,)

        return named(hook, f"pre{index}")

    def make_post(index: int, how: str) -> Callable[[CallContext], None]:
        def hook(ctx: CallContext) -> None:
            log.append(("post", index, ctx.result))
            if how == "raise":
                raise KeyError(f"post {index}")
            if how == "result":
                ctx.result = (ctx.result, index)

        return named(hook, f"post{index}")

    def make_exception(index: int, how: str) -> Callable[[CallContext], None]:
        def hook(ctx: CallContext) -> None:
            log.append(("exception", index, repr(ctx.exception)))
            if how == "recover":
                ctx.recover(f"recovered by {index}")
            if how == "raise":
                raise RuntimeError(f"exception {index}")

        return named(hook, f"exception{index}")

    def make_around(index: int, how: str) -> Callable[[CallContext], Any]:
        def hook(ctx: CallContext) -> Any:
            log.append(("around", index, "before"))
            if how == "raise_before":
                raise OSError(f"around {index} before")
            if how == "no_yield":
                return
            try:
                yield
            except Exception as error:
                log.append(("around", index, "caught", repr(error)))
                if how == "recover":
                    ctx.recover(f"around {index} recovered")
                raise
            log.append(("around", index, "after", ctx.result))
            if how == "raise_after":
                raise OSError(f"around {index} after")
            if how == "twice":
                yield

        return named(hook, f"around{index}")

    for index, how in enumerate(around):
        bus.around("work", make_around(index, how))
    for index, how in enumerate(pre):
        bus.pre("work", make_pre(index, how))
    for index, how in enumerate(post):
        bus.post("work", make_post(index, how))
    for index, how in enumerate(exception):
        bus.exception("work", make_exception(index, how))
    point = _Point()
    plan = bus.registry.plan(point)

    def body(x: int) -> Any:
        log.append(("call", x))
        if call_raises:
            raise LookupError("the call")
        return x * 10

    async def async_body(x: int) -> Any:
        return body(x)

    ctx = CallContext.for_call("work", None, (1,), {}, 0, "pre", point)
    outcome: Any
    try:
        if plan is None:
            outcome = ("no plan",)
        elif variant == "sync":
            outcome = ("returned", call_with_hooks(bus.registry, plan, ctx, body))
        else:
            coroutine = call_with_hooks_async(bus.registry, plan, ctx, async_body)
            outcome = ("returned", asyncio.run(coroutine))
    except BaseException as error:
        notes = getattr(error, "__notes__", [])
        inner = [repr(e) for e in getattr(error, "exceptions", ())]
        outcome = (type(error).__name__, str(error), notes, inner, repr(error.__cause__))
    return log, outcome


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(PRE), max_size=3),
    st.lists(st.sampled_from(POST), max_size=3),
    st.lists(st.sampled_from(EXCEPTION), max_size=3),
    st.lists(st.sampled_from(AROUND), max_size=3),
    st.booleans(),
    st.sampled_from(["raise", "collect", "log"]),
)
def test_call_with_hooks_and_its_async_variant_give_the_same_outcomes(
    pre: List[str],
    post: List[str],
    exception: List[str],
    around: List[str],
    call_raises: bool,
    policy: str,
) -> None:
    arguments = (pre, post, exception, around, call_raises, policy)
    assert _call(*arguments, variant="sync") == _call(*arguments, variant="async")


# --- events ----------------------------------------------------------------------------

EVENT = ["none", "value", "raise", "skip_value"]


def _emit(
    hooks: List[str], policy: str, collect: bool, first: bool, variant: str
) -> Tuple[List[Any], Any]:
    bus = EventBus("variants", errors=policy)  # type: ignore[arg-type]
    calls: List[Any] = []

    def make(index: int, how: str) -> Callable[..., Any]:
        def hook(*args: Any, **kwargs: Any) -> Any:
            calls.append((index, args, kwargs))
            if how == "raise":
                raise ValueError(f"hook {index}")
            if how == "value":
                return index
            if how == "skip_value":
                return None if index % 2 else index
            return None

        hook.__qualname__ = f"hook{index}"
        return hook

    for index, how in enumerate(hooks):
        bus.on("e", make(index, how))
    handles = bus.registry.event_handles("e")
    results: Optional[List[Any]] = [] if collect else None
    args: Tuple[Any, ...] = (1,)
    kwargs: Dict[str, Any] = {"k": 2}
    outcome: Any = None
    try:
        if variant == "sync":
            dispatch_event(bus.registry, "e", handles, args, kwargs, results, first)
        else:
            dispatch = dispatch_event_async(
                bus.registry, "e", handles, args, kwargs, results, first
            )
            asyncio.run(dispatch)
    except BaseException as error:
        inner = [(repr(e), getattr(e, "__notes__", [])) for e in getattr(error, "exceptions", ())]
        outcome = (type(error).__name__, str(error), getattr(error, "__notes__", []), inner)
    return calls, (outcome, results)


@given(
    st.lists(st.sampled_from(EVENT), max_size=5),
    st.sampled_from(["raise", "collect", "log"]),
    st.booleans(),
    st.booleans(),
)
def test_dispatch_event_and_its_async_variant_give_the_same_outcomes(
    hooks: List[str], policy: str, collect: bool, first: bool
) -> None:
    arguments = (hooks, policy, collect, first)
    assert _emit(*arguments, variant="sync") == _emit(*arguments, variant="async")


@pytest.mark.parametrize("variant", ["sync", "async"])
def test_the_parity_check_sees_the_hooks_run(variant: str) -> None:
    # Guards the tests above: they compare something, not two empty runs.
    log, outcome = _call(["args"], ["result"], [], ["plain"], False, "raise", variant)
    assert outcome == ("returned", (20, 0))
    assert ("call", 2) in log
    assert ("around", 0, "after", (20, 0)) in log
    calls, (error, results) = _emit(["value", "raise"], "collect", True, False, variant)
    assert len(calls) == 2
    assert results == [0]
    assert error[0] == "HookError"
