"""The dispatch loops for everything off the fast path.

``EventBus.emit`` and the hook-point wrapper each have a few-line fast path of
their own (a tuple of plain callables; no hooks at all). Everything else is here:
once, target filters, weak hooks, error policies, tracing, async hooks, and the
pre / call / exception / post sequence around a call. Each loop is one flat
function so that a reader can follow one dispatch from top to bottom.
"""

from __future__ import annotations

import inspect
from functools import partial
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Tuple

from ._context import CallContext
from ._errors import add_note, describe, handle_error, raise_collected

if TYPE_CHECKING:
    from ._bus import EventBus
    from ._handle import Handle

__all__ = [
    "PointPlan",
    "call_with_hooks",
    "call_with_hooks_async",
    "check_event_result",
    "dispatch_event",
    "dispatch_event_async",
]


class PointPlan:
    """The hooks of one hook point, per phase, in the order they run."""

    __slots__ = ("exception", "has_async", "post", "pre")

    def __init__(
        self,
        pre: Tuple[Handle, ...],
        post: Tuple[Handle, ...],
        exception: Tuple[Handle, ...],
    ) -> None:
        self.pre = pre
        self.post = post
        self.exception = exception
        self.has_async = any(handle.is_async for handle in pre + post + exception)


# --- events ------------------------------------------------------------------------

NOT_COLLECTED: Any = object()
"""Returned by an event hook that observes only: ``collect()`` leaves it out of its results.

The pytest plugin's recorder listens to ``"*"``; without this, every ``collect()``
would gain a ``None`` from it and the code under test would see other results."""


def _event_hook(
    bus: EventBus, handle: Handle, event: str, args: Tuple[Any, ...]
) -> Optional[Callable[..., Any]]:
    """The callable to run for ``handle`` in this emission, or None to skip it."""
    if handle.target is not None and (not args or args[0] is not handle.target):
        return None
    hook = handle.hook
    if hook is None:  # a weak hook whose object was collected
        return None
    if handle.once and not bus._claim(handle):
        return None  # another thread's emission ran it first
    return partial(hook, event) if handle.with_name else hook


def check_event_result(result: Any, event: str) -> None:
    """Refuse a coroutine returned to a sync dispatch, which could never await it."""
    if inspect.iscoroutine(result):
        result.close()  # so Python doesn't also warn that it was never awaited
        raise TypeError(
            f"a hook of event {event!r} returned a coroutine to a sync emit, which cannot "
            f"await it; use 'await bus.emit_async(...)', or make the hook 'async def' so "
            f"that emit refuses it up front"
        )


def dispatch_event(
    bus: EventBus,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
) -> None:
    """Run the event hooks ``handles`` with the rare features on; append results."""
    policy = bus.errors
    tracer = bus._tracer
    errors: List[Exception] = []
    async_hooks = [handle for handle in handles if handle.is_async]
    if async_hooks:
        raise TypeError(
            f"event {event!r} has async hooks ({', '.join(map(repr, async_hooks))}); "
            f"a sync emit cannot await them: use 'await bus.emit_async(...)'"
        )
    for handle in handles:
        hook = _event_hook(bus, handle, event, args)
        if hook is None:
            continue
        start = perf_counter_ns() if tracer is not None else 0
        try:
            result = hook(*args, **kwargs)
            if result is not None:
                check_event_result(result, event)
        except Exception as error:
            if policy == "raise":
                add_note(error, describe(handle, event))
                raise
            handle_error(policy, error, handle, event, errors)
            continue
        finally:
            if tracer is not None:
                tracer._record(event, "event", handle, perf_counter_ns() - start)
        if results is not None and result is not NOT_COLLECTED:
            results.append(result)
    raise_collected(errors, event)


async def dispatch_event_async(
    bus: EventBus,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
) -> None:
    """Like :func:`dispatch_event`, awaiting whatever a hook returns that is awaitable."""
    policy = bus.errors
    tracer = bus._tracer
    errors: List[Exception] = []
    for handle in handles:
        hook = _event_hook(bus, handle, event, args)
        if hook is None:
            continue
        start = perf_counter_ns() if tracer is not None else 0
        try:
            result = hook(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except Exception as error:
            if policy == "raise":
                add_note(error, describe(handle, event))
                raise
            handle_error(policy, error, handle, event, errors)
            continue
        finally:
            if tracer is not None:
                tracer._record(event, "event", handle, perf_counter_ns() - start)
        if results is not None and result is not NOT_COLLECTED:
            results.append(result)
    raise_collected(errors, event)


# --- hook points -------------------------------------------------------------------


def _phase_hook(bus: EventBus, handle: Handle, ctx: CallContext) -> Optional[Callable[..., Any]]:
    """The callable to run for ``handle`` in this call, or None to skip it."""
    if handle.target is not None and ctx.target is not handle.target:
        return None
    hook = handle.hook
    if hook is None:
        return None
    if handle.once and not bus._claim(handle):
        return None
    return hook


def _returned(handle: Handle, ctx: CallContext, returned: Any) -> None:
    """Reject a hook's return value: hooks change a call only through ``ctx``."""
    if inspect.iscoroutine(returned):
        returned.close()  # never leave an un-awaited coroutine behind
        raise TypeError(
            f"{ctx.phase} hook {handle!r} returned a coroutine on the sync hook point "
            f"{ctx.name!r}; async hooks need an async hook point (an 'async def' function)"
        )
    raise TypeError(
        f"{ctx.phase} hook {handle!r} on {ctx.name!r} returned "
        f"{type(returned).__name__}, not None; hooks change a call by assigning to the "
        f"context (ctx.args = ..., ctx.kwargs = ..., ctx.result = ..., ctx.recover(value))"
    )


def run_phase(bus: EventBus, handles: Tuple[Handle, ...], ctx: CallContext) -> None:
    """Run one phase's hooks on ``ctx``, in order, under the bus's error policy.

    Exception hooks stop at the first that recovers; an error raised by an
    exception hook always propagates (raising is how it replaces the error).
    """
    policy = "raise" if ctx.phase == "exception" else bus.errors
    tracer = bus._tracer
    errors: List[Exception] = []
    for handle in handles:
        hook = _phase_hook(bus, handle, ctx)
        if hook is None:
            continue
        start = perf_counter_ns() if tracer is not None else 0
        try:
            returned = hook(ctx)
            if returned is not None:
                _returned(handle, ctx, returned)
        except Exception as error:
            if policy == "raise":
                add_note(error, describe(handle, ctx.name))
                raise
            handle_error(policy, error, handle, ctx.name, errors)
            continue
        finally:
            if tracer is not None:
                tracer._record(ctx.name, ctx.phase, handle, perf_counter_ns() - start)
        if ctx._recovered:
            break
    raise_collected(errors, ctx.name)


async def run_phase_async(bus: EventBus, handles: Tuple[Handle, ...], ctx: CallContext) -> None:
    """Like :func:`run_phase`, awaiting async hooks."""
    policy = "raise" if ctx.phase == "exception" else bus.errors
    tracer = bus._tracer
    errors: List[Exception] = []
    for handle in handles:
        hook = _phase_hook(bus, handle, ctx)
        if hook is None:
            continue
        start = perf_counter_ns() if tracer is not None else 0
        try:
            returned = hook(ctx)
            if inspect.isawaitable(returned):
                returned = await returned
            if returned is not None:
                _returned(handle, ctx, returned)
        except Exception as error:
            if policy == "raise":
                add_note(error, describe(handle, ctx.name))
                raise
            handle_error(policy, error, handle, ctx.name, errors)
            continue
        finally:
            if tracer is not None:
                tracer._record(ctx.name, ctx.phase, handle, perf_counter_ns() - start)
        if ctx._recovered:
            break
    raise_collected(errors, ctx.name)


def call_with_hooks(
    bus: EventBus,
    plan: PointPlan,
    ctx: CallContext,
    fn: Callable[..., Any],
) -> Any:
    """Pre hooks, the call, then exception hooks (if it raised) and post hooks."""
    if plan.has_async:
        hooks = [h for h in plan.pre + plan.post + plan.exception if h.is_async]
        raise TypeError(
            f"hook point {ctx.name!r} is sync but has async hooks ({hooks!r}); "
            f"async hooks need an async hook point (an 'async def' function)"
        )
    if plan.pre:
        run_phase(bus, plan.pre, ctx)
    try:
        result = fn(*ctx.args, **ctx.kwargs)
    except Exception as error:
        if not plan.exception:
            raise
        ctx.phase = "exception"
        ctx._exception = error
        run_phase(bus, plan.exception, ctx)
        if not ctx._recovered:
            raise
        result = ctx.result
    if plan.post:
        ctx.phase = "post"
        ctx.result = result
        run_phase(bus, plan.post, ctx)
        return ctx.result
    return result


async def call_with_hooks_async(
    bus: EventBus,
    plan: PointPlan,
    ctx: CallContext,
    fn: Callable[..., Awaitable[Any]],
) -> Any:
    """:func:`call_with_hooks` for ``async def`` callables; hooks may be sync or async."""
    if plan.pre:
        await run_phase_async(bus, plan.pre, ctx)
    try:
        result = await fn(*ctx.args, **ctx.kwargs)
    except Exception as error:
        if not plan.exception:
            raise
        ctx.phase = "exception"
        ctx._exception = error
        await run_phase_async(bus, plan.exception, ctx)
        if not ctx._recovered:
            raise
        result = ctx.result
    if plan.post:
        ctx.phase = "post"
        ctx.result = result
        await run_phase_async(bus, plan.post, ctx)
        return ctx.result
    return result
