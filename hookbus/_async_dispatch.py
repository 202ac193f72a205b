"""The dispatch loops, written once: the async variants, from which the sync ones are made.

``.ci/unasync.py`` writes ``_sync_dispatch.py`` from this file (a test checks that
it is current, ``tests/test_dispatch_variants.py`` that both give the same
outcomes): ``async def`` becomes ``def``, ``await`` goes, ``name_async`` becomes
``name``, a line that ends with ``# async only`` is left out (a whole definition,
when its first line does), and ``# sync only: code`` becomes ``code``. Where the
two differ, that is all: the async variant awaits what a hook returns, and runs
async generators as around hooks; the sync one refuses async hooks.
"""

from __future__ import annotations

import asyncio  # async only
import inspect  # async only
import typing  # async only
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, cast

from ._arounds import FINISHED, Started, did_not_yield, refusing_a_returned_value, yielded_twice
from ._context import CallContext, RareState, reject_returned
from ._dispatch import (
    NOT_COLLECTED,
    # sync only: check_event_result,
    replace_error,
    # sync only: sync_emit_refusal,
    # sync only: sync_point_refusal,
)
from ._errors import add_note, describe, handle_error, raise_collected

if TYPE_CHECKING:
    from ._handle import Handle
    from ._plan import DispatchSettings, PointPlan
    from ._trace import Tracer  # async only

__all__ = [
    "call_with_hooks_async",
    "dispatch_concurrently",  # async only
    "dispatch_event_async",
    "recover_or_raise_async",
    "resume_arounds_async",
    "run_phase_async",
    "start_arounds_async",
]


# --- events ------------------------------------------------------------------------


async def dispatch_event_async(
    registry: DispatchSettings,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
    first: bool = False,
    pairs: bool = False,
) -> None:
    """Run the event hooks ``handles`` with the rare features on; append results.

    ``first`` (``bus.first``): stop after the first result that is not ``None``.
    ``pairs`` (``bus.collect_pairs``): append ``(handle, result)``.
    The async variant awaits whatever a hook returns that is awaitable; the sync
    one refuses async hooks, and a coroutine a hook returns.
    """
    policy = registry.errors
    tracer = registry.tracer
    errors: List[Exception] = []
    # sync only: async_hooks = [handle for handle in handles if handle.is_async]
    # sync only: if async_hooks:
    # sync only:     raise sync_emit_refusal(event, async_hooks)
    sender = args[0] if args else registry.keyword_sender(event, kwargs)
    try:
        for handle in handles:
            hook = handle.runner(sender, event)
            if hook is None:
                continue
            start = perf_counter_ns() if tracer is not None else 0
            try:
                result = hook(*args, **kwargs)
                if inspect.isawaitable(result):  # async only
                    result = await result  # async only
                # sync only: if result is not None:
                # sync only:     check_event_result(result, event)
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
                results.append((handle, result) if pairs else result)
                if first and result is not None:
                    break
    except BaseException:
        errors.clear()  # collected before a BaseException: their tracebacks hold this frame
        raise
    raise_collected(errors, event)


async def dispatch_concurrently(  # async only
    registry: DispatchSettings,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
) -> None:
    """:func:`dispatch_event_async` for ``bus.gather``: every hook is called in order,
    and the awaitables they return are awaited together (``asyncio.gather``); the
    error policy then applies to the errors in hook order, once all have finished.

    A sync hook's error is one of those errors, except under ``"raise"``: it then
    stops the emission at once. A sync hook's ``BaseException`` (an interrupt) stops it
    too, the sync errors before it logged first under ``"log"``, as :func:`dispatch_event_async`
    logs them. Whatever stops it, the coroutines already made are closed, never left
    unawaited.
    """
    policy = registry.errors
    tracer = registry.tracer
    sender = args[0] if args else registry.keyword_sender(event, kwargs)
    # (handle, what it returned or raised, whether it raised, when it was called)
    called: List[Tuple[Handle, Any, bool, int]] = []
    errors: List[Exception] = []
    awaited = False
    outcomes: Any = None
    outcome: Any = None
    try:
        for handle in handles:
            hook = handle.runner(sender, event)
            if hook is None:
                continue
            start = perf_counter_ns() if tracer is not None else 0
            try:
                value = hook(*args, **kwargs)
            except BaseException as error:  # a sync hook raised before anything was awaited
                if tracer is not None:
                    tracer._record(event, "event", handle, perf_counter_ns() - start)
                if not isinstance(error, Exception):
                    if policy == "log":  # what failed before it is logged, as emit logs it
                        for done, failed, raised, _ in called:
                            if raised:
                                handle_error(policy, failed, done, event, errors)
                    raise  # interrupted: no policy applies to the interrupt
                if policy == "raise":
                    add_note(error, describe(handle, event))
                    raise
                called.append((handle, error, True, start))
                continue
            if tracer is not None and not inspect.isawaitable(value):
                tracer._record(event, "event", handle, perf_counter_ns() - start)
            called.append((handle, value, False, start))
        pending = [
            value if tracer is None else _traced(value, tracer, event, handle, start)
            for handle, value, raised, start in called
            if not raised and inspect.isawaitable(value)
        ]
        awaited = True
        outcomes = iter(await asyncio.gather(*pending, return_exceptions=True))
        for handle, value, raised, _ in called:
            outcome = next(outcomes) if not raised and inspect.isawaitable(value) else value
            if raised or isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome  # cancelled, interrupted: no policy applies
                if policy == "raise":
                    add_note(outcome, describe(handle, event))
                    raise outcome
                handle_error(policy, outcome, handle, event, errors)
            elif results is not None and outcome is not NOT_COLLECTED:
                results.append(outcome)
    except BaseException:
        if not awaited:
            for _, started, _, _ in called:
                if inspect.iscoroutine(started):
                    started.close()  # never awaited: no warning, no work left behind
        # What the hooks raised holds this frame in its traceback: no cycle through it.
        called.clear()
        errors.clear()
        outcomes = outcome = None
        raise
    raise_collected(errors, event)


async def _traced(  # async only
    awaitable: typing.Awaitable[Any], tracer: Tracer, event: str, handle: Handle, start: int
) -> Any:
    """Await what a hook returned, then record the hook (``gather`` under a trace)."""
    try:
        return await awaitable
    finally:
        tracer._record(event, "event", handle, perf_counter_ns() - start)


# --- hooks around a call ---------------------------------------------------------


async def run_phase_async(
    registry: DispatchSettings,
    handles: Tuple[Handle, ...],
    ctx: CallContext,
) -> None:
    """Run one phase's hooks on ``ctx``, in order, under the bus's error policy.

    In the exception phase every hook runs, until one recovers: a hook that
    raises replaces the error (``ctx.exception``) for the hooks after it, and a
    recovery it made before raising is void; the caller raises whatever error is
    left. Every other phase runs every hook, after a recovery too. The async
    variant awaits async hooks.
    """
    phase = ctx.phase
    policy = registry.errors
    tracer = registry.tracer
    errors: List[Exception] = []
    try:
        for handle in handles:
            hook = handle.runner(ctx.target, ctx.name)
            if hook is None:
                continue
            start = perf_counter_ns() if tracer is not None else 0
            try:
                returned = hook(ctx)
                if inspect.isawaitable(returned):  # async only
                    returned = await returned  # async only
                if returned is not None:
                    reject_returned(handle, ctx, returned)
            except Exception as error:
                if phase == "exception":  # raising is how an exception hook replaces the error
                    add_note(error, describe(handle, ctx.name))
                    replace_error(ctx, error)  # a recovery the hook made first is void
                    continue
                if policy == "raise":
                    add_note(error, describe(handle, ctx.name))
                    raise
                handle_error(policy, error, handle, ctx.name, errors)
                continue
            finally:
                if tracer is not None:
                    tracer._record(ctx.name, phase, handle, perf_counter_ns() - start)
            # ctx.recovered, read inline: the post hooks run on the value
            if phase == "exception" and type(ctx._rare) is RareState and ctx._rare.recovered:
                break
    except BaseException:
        errors.clear()  # collected before a BaseException: their tracebacks hold this frame
        raise
    raise_collected(errors, ctx.name)


async def recover_or_raise_async(
    registry: DispatchSettings,
    plan: PointPlan,
    ctx: CallContext,
    error: Exception,
    posts_ran: bool = False,
) -> Any:
    """A pre hook, the call or (``posts_ran``) a post hook raised ``error``: run the
    exception hooks, then, if one recovered, the post hooks (unless they ran).

    Returns what the call then returns, or raises the error left (the original, or
    what the last exception hook raised instead). Whatever happens, the context
    lets go of the error before this returns or raises: the error's traceback
    holds the frame that holds the context, so keeping it would make a reference
    cycle that keeps the call's arguments alive until the garbage collector runs.
    """
    ctx.phase = "exception"
    rare = ctx._rare_state()
    rare.exception = error
    left: Optional[BaseException] = None
    try:
        await run_phase_async(registry, plan.exception, ctx)
        if rare.recovered and plan.post and not posts_ran:
            ctx.phase = "post"
            await run_phase_async(registry, plan.post, ctx)  # may raise: see finally
        left, rare.exception = rare.exception, None
        if not rare.recovered:
            raise cast(BaseException, left)
        return ctx._result
    finally:
        rare.exception = None
        # This frame is in the tracebacks of the errors the hooks raised (their frames
        # point back to it), recovered or not, a post hook's after a recovery included:
        # no cycle through it.
        del error, left


async def call_with_hooks_async(
    registry: DispatchSettings,
    plan: PointPlan,
    ctx: CallContext,
    fn: Callable[..., typing.Awaitable[Any]],
    bound: bool = False,
) -> Any:
    """The whole sequence of one hooked call, top to bottom.

    1. Around hooks, outermost (highest priority) first, run up to their ``yield``.
    2. Pre hooks, in order; the first error ends the phase.
    3. The call, unless a pre hook called ``ctx.skip(value)``. ``bound``: ``fn``
       takes ``ctx.target`` (self or cls) first.
    4. If 2 or 3 raised, the exception hooks (:func:`recover_or_raise_async`); else
       the post hooks, and if one of them raises, the exception hooks then.
    5. Around hooks, innermost first, resume at their ``yield``
       (:func:`resume_arounds_async`): with the result, or with the error raised there.

    For the plans a hook point's compiled call can't run (``_compiled_call.py``), and
    for an event's around hooks (``fn`` then runs the event hooks). The async
    variant is for ``async def`` callables, whose hooks may be sync or async.
    """
    # sync only: if plan.has_async:
    # sync only:     raise sync_point_refusal(plan, ctx)
    started: List[Started] = []  # this call's: it resumes them, whatever is removed meanwhile
    try:
        if plan.around:  # 1.
            await start_arounds_async(registry, plan.around, plan.around_hooks, ctx, started)
        try:
            if plan.pre:  # 2.
                await run_phase_async(registry, plan.pre, ctx)
            if type(ctx._rare) is RareState and ctx._rare.skipped:  # 3. (ctx.skipped, inline)
                result = ctx._result
            elif bound:
                result = await fn(ctx.target, *ctx._args, **ctx._kwargs)
            else:
                result = await fn(*ctx._args, **ctx._kwargs)
        except Exception as error:  # 4.
            if not plan.exception:
                raise
            result = await recover_or_raise_async(registry, plan, ctx, error)
        else:
            if plan.post:
                ctx.phase = "post"
                ctx._result = result
                try:
                    await run_phase_async(registry, plan.post, ctx)
                except Exception as error:
                    if not plan.exception:
                        raise
                    result = await recover_or_raise_async(
                        registry,
                        plan,
                        ctx,
                        error,
                        posts_ran=True,
                    )
                else:
                    result = ctx._result
    except BaseException as error:
        if not started:
            raise
        return await resume_arounds_async(started, ctx, None, error)  # 5.
    if started:
        return await resume_arounds_async(started, ctx, result, None)  # 5.
    return result


async def start_arounds_async(
    registry: DispatchSettings,
    handles: Tuple[Handle, ...],
    bare: Optional[Tuple[Callable[..., Any], ...]],
    ctx: CallContext,
    started: List[Started],
) -> None:
    """Run around hooks up to their ``yield``, outermost first, appending each to ``started``.

    ``bare``: their callables, when none has a rare option (the plan's
    ``around_hooks``). ``started`` is the caller's to keep: it resumes them
    (:func:`resume_arounds_async`) after the call, or with the error if a set-up
    here raised (which carries a note naming its hook), whatever is removed meanwhile.
    Each entry holds the tracer open now, which records the hook once it is resumed.
    """
    tracer = registry.tracer
    for position, handle in enumerate(handles):
        hook = handle.runner(ctx.target, ctx.name) if bare is None else bare[position]
        if hook is None:
            continue
        start = perf_counter_ns() if tracer is not None else 0
        try:
            around = hook(ctx)
            if handle.may_return_value:  # its code may return a value: refused if it does
                around = refusing_a_returned_value(around, handle, ctx)
            async_gen = inspect.isasyncgen(around)  # async only
            if (await _anext(around) if async_gen else next(around, FINISHED)) is FINISHED:
                raise did_not_yield(handle, ctx)
        except BaseException as error:
            add_note(error, describe(handle, ctx.name))
            if tracer is not None:
                tracer._record(ctx.name, "around", handle, perf_counter_ns() - start)
            raise
        set_up_ns = perf_counter_ns() - start if tracer is not None else 0
        started.append((handle, around, tracer, set_up_ns))


async def resume_arounds_async(
    started: List[Started],
    ctx: CallContext,
    result: Any,
    error: Optional[BaseException],
) -> Any:
    """Resume the started around hooks, innermost first; return the result or raise.

    Each resumes with the outcome the ones inside it left: ``ctx.result`` after a
    success, or the error raised at its ``yield``. A hook that raises replaces the
    error; one that calls ``ctx.recover(value)`` swallows an ``Exception``
    (a ``BaseException`` always goes on). Every started hook is resumed exactly
    once, whatever the others do: one that yields again is closed, and if even
    that fails, the outer ones still get the error. The trace open when a hook
    started records it, once, with its set-up's and teardown's time.
    """
    for handle, around, tracer, set_up_ns in reversed(started):
        start = perf_counter_ns() if tracer is not None else 0
        async_gen = inspect.isasyncgen(around)  # async only
        try:
            if error is None:
                ctx.phase = "post"
                ctx._result = result
                if (await _anext(around) if async_gen else next(around, FINISHED)) is FINISHED:
                    result = ctx._result
                    continue
            else:
                ctx.phase = "exception"
                rare = ctx._rare_state()
                rare.exception = error
                rare.recovered = False
                try:
                    await around.athrow(error) if async_gen else around.throw(error)
                finally:
                    rare.exception = None
        except (StopIteration, StopAsyncIteration):  # it finished, after the error
            if ctx.recovered and isinstance(error, Exception):
                error, result = None, ctx._result
            continue  # caught without ctx.recover(): the error goes on
        except BaseException as failure:
            if failure is not error:
                add_note(failure, describe(handle, ctx.name))
            error = failure
            continue
        finally:
            if tracer is not None:
                tracer._record(ctx.name, "around", handle, set_up_ns + perf_counter_ns() - start)
        # It yielded a second time: end it (its finally blocks run), and say so.
        try:
            await around.aclose() if async_gen else around.close()
        except BaseException as failure:  # it ignored the close, or a finally block raised
            error = yielded_twice(handle, ctx, error, failure)
        else:
            error = yielded_twice(handle, ctx, error, None)
    if error is not None:
        try:
            raise error
        finally:
            del error  # this frame is in the error's traceback: no cycle through it
    return result


async def _anext(around: Any) -> Any:  # async only
    """``next(around, FINISHED)`` for an async generator."""
    try:
        await around.__anext__()
    except StopAsyncIteration:
        return FINISHED
    return None
