"""The sync dispatch loops, generated from ``_async_dispatch.py``: do not edit.

Change the async source, then run ``python .ci/unasync.py`` (a test checks this file).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, cast

from ._arounds import FINISHED, Started, did_not_yield, refusing_a_returned_value, yielded_twice
from ._context import CallContext, RareState, reject_returned
from ._dispatch import (
    NOT_COLLECTED,
    check_event_result,
    replace_error,
    sync_emit_refusal,
    sync_point_refusal,
)
from ._errors import add_note, describe, handle_error, raise_collected

if TYPE_CHECKING:
    from ._handle import Handle
    from ._plan import DispatchSettings, PointPlan

__all__ = [
    "call_with_hooks",
    "dispatch_event",
    "recover_or_raise",
    "resume_arounds",
    "run_phase",
    "start_arounds",
]


# --- events ------------------------------------------------------------------------


def dispatch_event(
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
    async_hooks = [handle for handle in handles if handle.is_async]
    if async_hooks:
        raise sync_emit_refusal(event, async_hooks)
    sender = args[0] if args else registry.keyword_sender(event, kwargs)
    try:
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
                results.append((handle, result) if pairs else result)
                if first and result is not None:
                    break
    except BaseException:
        errors.clear()  # collected before a BaseException: their tracebacks hold this frame
        raise
    raise_collected(errors, event)


# --- hooks around a call ---------------------------------------------------------


def run_phase(
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


def recover_or_raise(
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
        run_phase(registry, plan.exception, ctx)
        if rare.recovered and plan.post and not posts_ran:
            ctx.phase = "post"
            run_phase(registry, plan.post, ctx)  # may raise: see finally
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


def call_with_hooks(
    registry: DispatchSettings,
    plan: PointPlan,
    ctx: CallContext,
    fn: Callable[..., Any],
    bound: bool = False,
) -> Any:
    """The whole sequence of one hooked call, top to bottom.

    1. Around hooks, outermost (highest priority) first, run up to their ``yield``.
    2. Pre hooks, in order; the first error ends the phase.
    3. The call, unless a pre hook called ``ctx.skip(value)``. ``bound``: ``fn``
       takes ``ctx.target`` (self or cls) first.
    4. If 2 or 3 raised, the exception hooks (:func:`recover_or_raise`); else
       the post hooks, and if one of them raises, the exception hooks then.
    5. Around hooks, innermost first, resume at their ``yield``
       (:func:`resume_arounds`): with the result, or with the error raised there.

    For the plans a hook point's compiled call can't run (``_compiled_call.py``), and
    for an event's around hooks (``fn`` then runs the event hooks). The async
    variant is for ``def`` callables, whose hooks may be sync or async.
    """
    if plan.has_async:
        raise sync_point_refusal(plan, ctx)
    started: List[Started] = []  # this call's: it resumes them, whatever is removed meanwhile
    try:
        if plan.around:  # 1.
            start_arounds(registry, plan.around, plan.around_hooks, ctx, started)
        try:
            if plan.pre:  # 2.
                run_phase(registry, plan.pre, ctx)
            if type(ctx._rare) is RareState and ctx._rare.skipped:  # 3. (ctx.skipped, inline)
                result = ctx._result
            elif bound:
                result = fn(ctx.target, *ctx._args, **ctx._kwargs)
            else:
                result = fn(*ctx._args, **ctx._kwargs)
        except Exception as error:  # 4.
            if not plan.exception:
                raise
            result = recover_or_raise(registry, plan, ctx, error)
        else:
            if plan.post:
                ctx.phase = "post"
                ctx._result = result
                try:
                    run_phase(registry, plan.post, ctx)
                except Exception as error:
                    if not plan.exception:
                        raise
                    result = recover_or_raise(
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
        return resume_arounds(started, ctx, None, error)  # 5.
    if started:
        return resume_arounds(started, ctx, result, None)  # 5.
    return result


def start_arounds(
    registry: DispatchSettings,
    handles: Tuple[Handle, ...],
    bare: Optional[Tuple[Callable[..., Any], ...]],
    ctx: CallContext,
    started: List[Started],
) -> None:
    """Run around hooks up to their ``yield``, outermost first, appending each to ``started``.

    ``bare``: their callables, when none has a rare option (the plan's
    ``around_hooks``). ``started`` is the caller's to keep: it resumes them
    (:func:`resume_arounds`) after the call, or with the error if a set-up
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
            if next(around, FINISHED) is FINISHED:
                raise did_not_yield(handle, ctx)
        except BaseException as error:
            add_note(error, describe(handle, ctx.name))
            if tracer is not None:
                tracer._record(ctx.name, "around", handle, perf_counter_ns() - start)
            raise
        set_up_ns = perf_counter_ns() - start if tracer is not None else 0
        started.append((handle, around, tracer, set_up_ns))


def resume_arounds(
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
        try:
            if error is None:
                ctx.phase = "post"
                ctx._result = result
                if next(around, FINISHED) is FINISHED:
                    result = ctx._result
                    continue
            else:
                ctx.phase = "exception"
                rare = ctx._rare_state()
                rare.exception = error
                rare.recovered = False
                try:
                    around.throw(error)
                finally:
                    rare.exception = None
        except StopIteration:  # it finished, after the error
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
            around.close()
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
