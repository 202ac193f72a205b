"""The call sequence, the dispatch loops off the fast path, and the map of every loop.

:func:`call_with_hooks` (and its async twin) is the one function that runs a
whole hooked call, top to bottom, like pluggy's ``_multicall``: around hooks'
set-up, pre hooks, the call, exception or post hooks, around hooks' teardown.
What varies per hook (target, weak, once, with_name) is decided by
:meth:`Handle.runner <hookbus.Handle.runner>`, and a hook's return value is
refused by ``_context.reject_returned``. Every loop over hooks in hookbus:

Events
    * ``_bus.py`` ``EventBus.emit``: the inline fast loop over a tuple of bare
      callables (two copies: with and without kwargs). Its slow twin is
      :func:`dispatch_event`; parity: ``tests/test_fast_copies.py``.
      ``Event.emit`` is ``bus.emit`` with the name bound (a ``functools.partial``).
    * :func:`dispatch_event`: emit's full loop (once, target, weak, with_name,
      error policies, tracing), and ``collect``'s and ``first``'s; an event's around
      hooks wrap it through :func:`call_with_hooks` (``EventBus._dispatch``).
    * :func:`dispatch_event_async`: its twin for ``emit_async`` and ``collect_async``;
      ``gather`` awaits the hooks together in ``_dispatch_concurrently``.

Hooks around a call
    * ``_hookpoint.py`` ``make_hookable.call_hooked``: the direct loop, when the plan
      is ``direct`` (plain sync pre and post hooks, no around hook: see
      ``_plan.PointPlan``); its slow twin is :func:`call_with_hooks`; parity:
      ``tests/test_fast_copies.py``.
    * :func:`call_with_hooks` / :func:`call_with_hooks_async`: the whole sequence;
      around hooks' set-up loops in :func:`start_arounds` (the async twin inline) and
      their teardown in :func:`resume_arounds` / :func:`resume_arounds_async`; the torch
      adapter's module points use the first two as well.
    * :func:`run_phase` / :func:`run_phase_async`: the hooks of one phase on one
      ``CallContext``; every other path ends here, the exception phase included
      (:func:`recover_or_raise`).

The torch adapter (``torch/_point.py``, one native hook per phase and module)
    * ``ModulePoint._on_post``: the inline fast loop for post hooks alone (the
      common case); its slow twin is ``_on_post_full``; parity:
      ``tests/test_fast_copies.py``.
    * Every other phase of a module builds its context, then runs :func:`run_phase`.

The fast constructors ``Handle.plain`` and ``CallContext.for_call`` (classmethods)
build what ``Handle.__init__`` and ``CallContext.__init__`` build. Every parity
test is in one file, ``tests/test_fast_copies.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Tuple, cast

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
    "recover_or_raise",
    "resume_arounds",
    "run_phase",
    "start_arounds",
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
    first: bool = False,
    pairs: bool = False,
) -> None:
    """Run the event hooks ``handles`` with the rare features on; append results.

    ``first`` (``bus.first``): stop after the first result that is not ``None``.
    ``pairs`` (``bus.collect_pairs``): append ``(handle, result)``.
    """
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
            results.append((handle, result) if pairs else result)
            if first and result is not None:
                break
    raise_collected(errors, event)


async def dispatch_event_async(
    registry: Registry,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
    concurrent: bool = False,
    pairs: bool = False,
) -> None:
    """Like :func:`dispatch_event`, awaiting whatever a hook returns that is awaitable.

    ``concurrent`` (``bus.gather``): every hook is called in order, and the
    awaitables they return are awaited together (``asyncio.gather``); the error
    policy then applies to the errors in hook order, once all have finished.
    ``pairs`` (``bus.collect_pairs_async``): append ``(handle, result)``.
    """
    if concurrent:
        await _dispatch_concurrently(registry, event, handles, args, kwargs, results)
        return
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
            results.append((handle, result) if pairs else result)
    raise_collected(errors, event)


async def _dispatch_concurrently(
    registry: Registry,
    event: str,
    handles: Tuple[Handle, ...],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    results: Optional[List[Any]],
) -> None:
    """:func:`dispatch_event_async` with the hooks' awaitables awaited together."""
    sender = args[0] if args else NO_SENDER
    called: List[Tuple[Handle, Any]] = []  # (handle, its result or awaitable), in order
    for handle in handles:
        hook = handle.runner(sender, event)
        if hook is None:
            continue
        try:
            called.append((handle, hook(*args, **kwargs)))
        except Exception as error:  # a sync hook raised before anything was awaited
            for _, started in called:
                if inspect.iscoroutine(started):
                    started.close()  # never awaited: no warning, no work left behind
            add_note(error, describe(handle, event))
            raise
    pending = [value for _, value in called if inspect.isawaitable(value)]
    outcomes = iter(await asyncio.gather(*pending, return_exceptions=True))
    policy = registry.errors
    errors: List[Exception] = []
    for handle, value in called:
        outcome = next(outcomes) if inspect.isawaitable(value) else value
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome  # cancelled, interrupted: no policy applies
            if policy == "raise":
                add_note(outcome, describe(handle, event))
                raise outcome
            handle_error(policy, outcome, handle, event, errors)
        elif results is not None and outcome is not NOT_COLLECTED:
            results.append(outcome)
    raise_collected(errors, event)


# --- hooks around a call ---------------------------------------------------------


def run_phase(registry: Registry, handles: Tuple[Handle, ...], ctx: CallContext) -> None:
    """Run one phase's hooks on ``ctx``, in order, under the bus's error policy.

    In the exception phase every hook runs, until one recovers: a hook that
    raises replaces the error (``ctx.exception``) for the hooks after it, and the
    caller raises whatever error is left.
    """
    phase = ctx.phase
    policy = registry.errors
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
            if phase == "exception":  # raising is how an exception hook replaces the error
                add_note(error, describe(handle, ctx.name))
                _replace_error(ctx, error)
                continue
            if policy == "raise":
                add_note(error, describe(handle, ctx.name))
                raise
            handle_error(policy, error, handle, ctx.name, errors)
            continue
        finally:
            if tracer is not None:
                tracer._record(ctx.name, phase, handle, perf_counter_ns() - start)
        if ctx._recovered:
            break
    raise_collected(errors, ctx.name)


async def run_phase_async(
    registry: Registry, handles: Tuple[Handle, ...], ctx: CallContext
) -> None:
    """Like :func:`run_phase`, awaiting async hooks."""
    phase = ctx.phase
    policy = registry.errors
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
            if phase == "exception":
                add_note(error, describe(handle, ctx.name))
                _replace_error(ctx, error)
                continue
            if policy == "raise":
                add_note(error, describe(handle, ctx.name))
                raise
            handle_error(policy, error, handle, ctx.name, errors)
            continue
        finally:
            if tracer is not None:
                tracer._record(ctx.name, phase, handle, perf_counter_ns() - start)
        if ctx._recovered:
            break
    raise_collected(errors, ctx.name)


def _replace_error(ctx: CallContext, error: Exception) -> None:
    """An exception hook raised ``error``: it is the call's error from now on."""
    if error.__context__ is None and error is not ctx._exception:
        error.__context__ = ctx._exception  # shown as "during handling of ..."
    ctx._exception = error


def recover_or_raise(
    registry: Registry,
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
    ctx._exception = error
    try:
        run_phase(registry, plan.exception, ctx)
        if ctx._recovered and plan.post and not posts_ran:
            ctx.phase = "post"
            run_phase(registry, plan.post, ctx)
    finally:
        left, ctx._exception = ctx._exception, None
    if not ctx._recovered:
        try:
            raise cast(BaseException, left)
        finally:
            del error, left  # this frame is in the error's traceback: no cycle through it
    return ctx._result


async def recover_or_raise_async(
    registry: Registry,
    plan: PointPlan,
    ctx: CallContext,
    error: Exception,
    posts_ran: bool = False,
) -> Any:
    """:func:`recover_or_raise`, awaiting async hooks."""
    ctx.phase = "exception"
    ctx._exception = error
    try:
        await run_phase_async(registry, plan.exception, ctx)
        if ctx._recovered and plan.post and not posts_ran:
            ctx.phase = "post"
            await run_phase_async(registry, plan.post, ctx)
    finally:
        left, ctx._exception = ctx._exception, None
    if not ctx._recovered:
        try:
            raise cast(BaseException, left)
        finally:
            del error, left  # this frame is in the error's traceback: no cycle through it
    return ctx._result


def call_with_hooks(
    registry: Registry,
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
    4. If 2 or 3 raised, the exception hooks (:func:`recover_or_raise`); else the
       post hooks, and if one of them raises, the exception hooks then.
    5. Around hooks, innermost first, resume at their ``yield``
       (:func:`resume_arounds`): with the result, or with the error raised there.

    For the plans the hook point's direct loop can't run (``_hookpoint.py``), and
    for an event's around hooks (``fn`` then runs the event hooks).
    """
    if plan.has_async:
        hooks = [h for h in plan.around + plan.pre + plan.post + plan.exception if h.is_async]
        raise TypeError(
            f"hook point {ctx.name!r} is sync but has async hooks ({hooks!r}); "
            f"async hooks need an async hook point (an 'async def' function)"
        )
    started: List[Tuple[Handle, Any]] = []
    try:
        if plan.around:  # 1.
            start_arounds(plan.around, plan.around_hooks, ctx, started)
        try:
            if plan.pre:  # 2.
                run_phase(registry, plan.pre, ctx)
            if ctx._skipped:  # 3.
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
                    result = recover_or_raise(registry, plan, ctx, error, posts_ran=True)
                else:
                    result = ctx._result
    except BaseException as error:
        if not started:
            raise
        return resume_arounds(started, ctx, None, error)  # 5.
    if started:
        return resume_arounds(started, ctx, result, None)  # 5.
    return result


# ``next(generator, _FINISHED)`` tells a finished around hook without a StopIteration:
# raising and catching one, with its traceback, cost a third of an around hook's call.
_FINISHED: Any = object()


def start_arounds(
    handles: Tuple[Handle, ...],
    bare: Optional[Tuple[Callable[..., Any], ...]],
    ctx: CallContext,
    started: List[Tuple[Handle, Any]],
) -> None:
    """Run around hooks up to their ``yield``, outermost first, appending each to ``started``.

    ``bare``: their callables, when none has a rare option (the plan's
    ``around_hooks``). If one raises, those in ``started`` must be resumed with
    the error (:func:`resume_arounds`): the caller does it, as it does after the call.
    """
    for position, handle in enumerate(handles):
        hook = handle.runner(ctx.target, ctx.name) if bare is None else bare[position]
        if hook is not None:
            around = hook(ctx)
            if next(around, _FINISHED) is _FINISHED:
                raise _did_not_yield(handle, ctx)
            started.append((handle, around))


def resume_arounds(
    started: List[Tuple[Handle, Any]],
    ctx: CallContext,
    result: Any,
    error: Optional[BaseException],
) -> Any:
    """Resume the started around hooks, innermost first; return the result or raise.

    Each resumes with the outcome the ones inside it left: ``ctx.result`` after a
    success, or the error raised at its ``yield``. A hook that raises replaces the
    error; one that calls ``ctx.recover(value)`` swallows an ``Exception``
    (a ``BaseException`` always goes on). Every started hook is resumed exactly
    once, whatever the others do.
    """
    for handle, around in reversed(started):
        if error is None:
            ctx.phase = "post"
            ctx._result = result
            try:
                if next(around, _FINISHED) is _FINISHED:
                    result = ctx._result
                    continue
            except BaseException as failure:
                add_note(failure, describe(handle, ctx.name))
                error = failure
                continue
        else:
            ctx.phase = "exception"
            ctx._exception = error
            ctx._recovered = False
            try:
                around.throw(error)
            except StopIteration:
                if ctx._recovered and isinstance(error, Exception):
                    error, result = None, ctx._result
                continue  # caught without ctx.recover(): the error goes on
            except BaseException as failure:
                if failure is not error:
                    add_note(failure, describe(handle, ctx.name))
                error = failure
                continue
            finally:
                ctx._exception = None
        around.close()  # it yielded a second time: end it (its finally blocks run)
        error = _yielded_twice(handle, ctx, error)
    if error is not None:
        try:
            raise error
        finally:
            del error  # this frame is in the error's traceback: no cycle through it
    return result


async def call_with_hooks_async(
    registry: Registry,
    plan: PointPlan,
    ctx: CallContext,
    fn: Callable[..., Awaitable[Any]],
    bound: bool = False,
) -> Any:
    """:func:`call_with_hooks` for ``async def`` callables; hooks may be sync or async."""
    started: List[Tuple[Handle, Any]] = []
    try:
        bare = plan.around_hooks
        for position, handle in enumerate(plan.around):  # 1.
            hook = handle.runner(ctx.target, ctx.name) if bare is None else bare[position]
            if hook is not None:
                around = hook(ctx)
                try:
                    if inspect.isasyncgen(around):
                        await around.__anext__()
                    else:
                        next(around)
                except (StopIteration, StopAsyncIteration):
                    raise _did_not_yield(handle, ctx) from None
                started.append((handle, around))
        try:
            if plan.pre:  # 2.
                await run_phase_async(registry, plan.pre, ctx)
            if ctx._skipped:  # 3.
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
                        registry, plan, ctx, error, posts_ran=True
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


async def resume_arounds_async(
    started: List[Tuple[Handle, Any]],
    ctx: CallContext,
    result: Any,
    error: Optional[BaseException],
) -> Any:
    """:func:`resume_arounds` for async points: async generators are awaited."""
    for handle, hook_run in reversed(started):
        around: Any = hook_run  # a generator or an async generator
        is_async = inspect.isasyncgen(around)
        if error is None:
            ctx.phase = "post"
            ctx._result = result
            try:
                if is_async:
                    await cast(Any, around).asend(None)
                else:
                    around.send(None)
            except (StopIteration, StopAsyncIteration):
                result = ctx._result
                continue
            except BaseException as failure:
                add_note(failure, describe(handle, ctx.name))
                error = failure
                continue
        else:
            ctx.phase = "exception"
            ctx._exception = error
            ctx._recovered = False
            try:
                if is_async:
                    await around.athrow(error)
                else:
                    around.throw(error)
            except (StopIteration, StopAsyncIteration):
                if ctx._recovered and isinstance(error, Exception):
                    error, result = None, ctx._result
                continue
            except BaseException as failure:
                if failure is not error:
                    add_note(failure, describe(handle, ctx.name))
                error = failure
                continue
            finally:
                ctx._exception = None
        if is_async:
            await around.aclose()
        else:
            around.close()
        error = _yielded_twice(handle, ctx, error)
    if error is not None:
        try:
            raise error
        finally:
            del error
    return result


def _did_not_yield(handle: Handle, ctx: CallContext) -> RuntimeError:
    return RuntimeError(
        f"around hook {handle!r} on {ctx.name!r} returned without yielding; an around "
        f"hook yields exactly once, where the call runs"
    )


def _yielded_twice(
    handle: Handle, ctx: CallContext, error: Optional[BaseException]
) -> RuntimeError:
    twice = RuntimeError(
        f"around hook {handle!r} on {ctx.name!r} yielded a second time; an around hook "
        f"yields exactly once, where the call runs (it was closed)"
    )
    twice.__cause__ = error  # the call's own error, if any
    return twice
