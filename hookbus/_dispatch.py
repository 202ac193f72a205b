"""The dispatch loops for everything off the fast path.

``EventBus.emit`` and the hook-point wrapper each have a few-line fast path of
their own (a tuple of plain callables; no hooks at all). Everything else is here:
once, target filters, weak hooks, error policies, tracing, async hooks, and the
pre / call / exception / post sequence around a call. Each loop is one flat
function so that a reader can follow one dispatch from top to bottom.
"""

from __future__ import annotations

import inspect
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Tuple

from ._context import CallContext, reject_returned
from ._errors import add_note, describe, handle_error, raise_collected
from ._handle import NO_SENDER

if TYPE_CHECKING:
    from ._handle import Handle
    from ._plan import PointPlan
    from ._registry import Registry

__all__ = [
    "call_with_hooks",
    "call_with_hooks_async",
    "check_event_result",
    "dispatch_event",
    "dispatch_event_async",
]


# --- events ------------------------------------------------------------------------

NOT_COLLECTED: Any = object()
"""Returned by an event hook that observes only: ``collect()`` leaves it out of its results.

The pytest plugin's recorder listens to ``"*"``; without this, every ``collect()``
would gain a ``None`` from it and the code under test would see other results."""


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
    registry: Registry,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
) -> None:
    """Run the event hooks ``handles`` with the rare features on; append results."""
    policy = registry.errors
    tracer = registry.tracer
    errors: List[Exception] = []
    async_hooks = [handle for handle in handles if handle.is_async]
    if async_hooks:
        raise TypeError(
            f"event {event!r} has async hooks ({', '.join(map(repr, async_hooks))}); "
            f"a sync emit cannot await them: use 'await bus.emit_async(...)'"
        )
    sender = args[0] if args else NO_SENDER
    for handle in handles:
        hook = handle.runner(sender, event)
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
    registry: Registry,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
) -> None:
    """Like :func:`dispatch_event`, awaiting whatever a hook returns that is awaitable."""
    policy = registry.errors
    tracer = registry.tracer
    errors: List[Exception] = []
    sender = args[0] if args else NO_SENDER
    for handle in handles:
        hook = handle.runner(sender, event)
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


def run_phase(registry: Registry, handles: Tuple[Handle, ...], ctx: CallContext) -> None:
    """Run one phase's hooks on ``ctx``, in order, under the bus's error policy.

    Exception hooks stop at the first that recovers; an error raised by an
    exception hook always propagates (raising is how it replaces the error).
    """
    policy = "raise" if ctx.phase == "exception" else registry.errors
    tracer = registry.tracer
    errors: List[Exception] = []
    for handle in handles:
        hook = handle.runner(ctx.target, ctx.name)
        if hook is None:
            continue
        start = perf_counter_ns() if tracer is not None else 0
        try:
            returned = hook(ctx)
            if returned is not None:
                reject_returned(handle, ctx, returned)
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


async def run_phase_async(
    registry: Registry, handles: Tuple[Handle, ...], ctx: CallContext
) -> None:
    """Like :func:`run_phase`, awaiting async hooks."""
    policy = "raise" if ctx.phase == "exception" else registry.errors
    tracer = registry.tracer
    errors: List[Exception] = []
    for handle in handles:
        hook = handle.runner(ctx.target, ctx.name)
        if hook is None:
            continue
        start = perf_counter_ns() if tracer is not None else 0
        try:
            returned = hook(ctx)
            if inspect.isawaitable(returned):
                returned = await returned
            if returned is not None:
                reject_returned(handle, ctx, returned)
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
    registry: Registry,
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
        run_phase(registry, plan.pre, ctx)
    try:
        result = fn(*ctx.args, **ctx.kwargs)
    except Exception as error:
        if not plan.exception:
            raise
        ctx.phase = "exception"
        ctx._exception = error
        run_phase(registry, plan.exception, ctx)
        if not ctx._recovered:
            raise
        result = ctx.result
    if plan.post:
        ctx.phase = "post"
        ctx.result = result
        run_phase(registry, plan.post, ctx)
        return ctx.result
    return result


async def call_with_hooks_async(
    registry: Registry,
    plan: PointPlan,
    ctx: CallContext,
    fn: Callable[..., Awaitable[Any]],
) -> Any:
    """:func:`call_with_hooks` for ``async def`` callables; hooks may be sync or async."""
    if plan.pre:
        await run_phase_async(registry, plan.pre, ctx)
    try:
        result = await fn(*ctx.args, **ctx.kwargs)
    except Exception as error:
        if not plan.exception:
            raise
        ctx.phase = "exception"
        ctx._exception = error
        await run_phase_async(registry, plan.exception, ctx)
        if not ctx._recovered:
            raise
        result = ctx.result
    if plan.post:
        ctx.phase = "post"
        ctx.result = result
        await run_phase_async(registry, plan.post, ctx)
        return ctx.result
    return result
