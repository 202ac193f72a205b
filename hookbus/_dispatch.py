"""The call sequence, the dispatch loops off the fast path, and the map of every loop.

:func:`~hookbus.adapter.call_with_hooks` (and its async twin) is the one function
that runs a whole hooked call, top to bottom, like pluggy's ``_multicall``: around
hooks' set-up, pre hooks, the call, exception or post hooks, around hooks' teardown.
What varies per hook (target, weak, once, with_name) is decided by
:meth:`Handle.runner <hookbus.Handle.runner>`, and a hook's return value is
refused by ``_context.reject_returned``. The loops read only the error policy
and the tracer of the registry (``_plan.DispatchSettings``).

Each loop is written once: the async variants, in ``_async_dispatch.py``, are the
source, and ``_sync_dispatch.py`` is generated from them by ``.ci/unasync.py``
(a test checks that it is current). This module holds what both share.

Every loop over hooks in hookbus, and every copy made for speed. A copy is kept
only while its line of the benchmark's "fast copies" row (``benchmarks/run.py
--only fast``) shows it at most 0.95x its slow twin, and its parity test (all in
``tests/test_fast_copies.py``) shows it does what the twin does.

Events
    * ``_bus.py`` ``EventBus.emit``: the inline fast loop over a tuple of bare
      callables (three copies: with kwargs, without, and without for a lone hook, with
      no loop: row 1's "1 hook", 0.88x the loop); its errors are named by
      :func:`note_fast_error`. Slow twin: ``dispatch_event``. A plan the loop can't
      run as bare callables is a ``_plan.EventPlan``, a tuple holding what runs the
      full loop, so that the loop runs every plan with no test of its kind first.
      ``_event.py`` ``Event.emit``: a copy of that loop with the name bound, for an
      emission without keywords whose plan is cached (the bus gives the event its
      plans): a method, which CPython calls inline and specializes, where a
      ``functools.partial`` of ``bus.emit`` held by the instance is a call through C
      and an attribute lookup CPython does not specialize (the declared events row's
      ``event.emit`` line pays for it); every other emission goes to ``bus.emit``, and
      so does every emission of a bus whose class changes ``emit``. Slow twin: a
      ``functools.partial`` of ``bus.emit`` (what ``Event.emit`` was before).
      A declared event's arguments are checked by the plan's first callable: the first
      hook itself when its parameters are the spec's, else the generated binder, or,
      where a count is the whole positional check, one generated caller that checks
      and calls the first hook (``_spec.make_checking_call``; a ``_plan.CheckedPlan``,
      whose emissions with keywords run the binder's plan). Not a hand copy: generated,
      and checked against Python's binding of the spec for every call shape
      (``tests/test_spec.py``).
    * ``dispatch_event``: emit's full loop (once, target, weak, with_name, error
      policies, tracing), and ``collect``'s and ``first``'s; an event's around hooks
      wrap it through ``call_with_hooks`` (``EventBus._emit_full``).
    * ``dispatch_event_async``: its async variant, for ``emit_async`` and
      ``collect_async``; ``gather`` awaits the hooks together in
      ``dispatch_concurrently`` (async only).

Hooks around a call
    * ``_compiled_call.py``: a sync hook point's call, generated as straight-line
      code for each ``direct`` plan (plain sync around, pre and post hooks: see
      ``_plan.PointPlan``), compiled once per shape; its rare ways out (an error
      thrown into the around hooks) go to ``resume_arounds``. Not a hand copy: the
      generator is checked against its reference, ``call_with_hooks``, for any
      plan (``tests/test_compiled_call.py``), and the crossings matrix runs on it.
    * ``call_with_hooks`` (and ``_async``): the whole sequence; around hooks'
      set-up in ``start_arounds`` and their teardown in ``resume_arounds`` (the
      caller keeps the started ones, ``_arounds.Started``, and resumes them); the
      torch adapter's module points use these two as well.
    * ``run_phase`` (and ``_async``): the hooks of one phase on one
      ``CallContext``; every other path ends here, the exception phase included
      (``recover_or_raise``).

The torch adapter (``torch/_point.py``, one native hook per phase and module;
``torch/_operations.py`` and ``torch/_value_point.py``, operations and names)
    * A module's post hooks alone (the common case): torch calls the generated
      native post hook itself (``_compiled_call.native_post_hook``, the post phase's
      generator; no dispatcher frame), bound to the point and reading its plan from
      ``ModulePoint.native_post`` (no hand copy: checked against ``run_phase`` for any
      phase in ``tests/test_compiled_call.py``, and through torch in
      ``tests/test_fast_copies.py``). Slow twin: ``ModulePoint._on_post`` and
      ``_on_post_full``, through ``run_phase``, which also take what the generated
      code leaves (a plan changed meanwhile, torch's error path).
    * Every other phase of a module builds its context, then runs ``run_phase``.
    * ``OperationSite.run`` (``torch/_operations.py``): an operation point's post
      hooks alone (a names vocabulary's value read or replaced, rows 13 and 14) run
      the same generated post phase when plain. Slow twin: ``run_phase``.
      A lone plain reader (``ResultReader`` post hook or ``ArgumentsReader`` pre
      hook: the names vocabulary's private hooks on an attention's ``softmax`` and
      ``scaled_dot_product_attention``, row 13) has its ``read`` called with no
      context, its error noted as ``run_phase`` notes it. Slow twin: the reader
      itself (its ``__call__``) through ``run_phase``.
    * ``torch/_function_swap.py``'s dispatcher: with one mode on the thread's list (one
      hooked attention running), it tests what the mode's ``__torch_function__`` tests
      (the name selected, no site's hook running) and calls ``OperationSite.run``
      itself (row 13). Slow twin: the mode's ``__torch_function__``, as torch calls it
      when the function is not swapped.
    * ``OperationSite._around`` (``torch/_operations.py``): a site seen through the
      function swaps (the names' attention pattern, row 13) keeps its mode on the
      thread's list from a bracket in the module's forward swap, around the forward
      itself, rather than from native hooks: no hook left on the module, so torch
      takes its short call path, and a ``finally`` pops the mode however the forward
      ends. Slow twin: the native hooks ``OperationSite._on_pre`` and ``_on_post``.
    * ``NamePoint.emit`` (``torch/_value_point.py``): a name's plain post hooks, the
      same generated post phase. Slow twin: ``run_phase``.

Registration (``_registry.py``; row 2, register + remove, pays for these)
    * ``_registry.on_event``'s flat path (``bus.on``, which runs its code as its own,
      and ``Registry.register`` of an event hook with no scope or option), for a hook
      on an event's exact name with nothing to check. Slow twin: ``Registry._register_checked``.
    * the inline drop of an event's exact name: ``remove()`` of the handle ``bus.on``
      makes for one (``_registry._EventHandle``), which ``Registry.unregister`` runs
      too (a frame less on row 2: the handle's over the registry's). Slow
      twin: ``Registry._drop_locked``, as ``Registry.remove`` runs it.
    * both take and give back the bus lock inline: ``Mutex.acquire``'s free case
      (``lock.free.pop()``, else ``lock.wait()``) and ``Mutex.release`` (``_mutex.py``).
      Twin: those methods, as every other locked section calls them
      (parity: the inline paths wait for a held lock, and leave it free).

Registration at hook points (``_registry.py``; the row of a plan changed per call pays)
    * ``_registry.point_hook_body``, the body ``bus.pre``, ``bus.post`` and
      ``bus.exception`` run as their own (one frame): a plain sync function for a name
      checked before, with no option, goes straight to the flat path below. Slow twin:
      ``Registry.register``.
    * ``Registry._register_point_hook``, ``register``'s flat path for a plain pre, post
      or exception hook on a point's exact name with nothing to check: one lock, the
      name's points told after it. Slow twin: ``Registry._register_checked``.
    * the inline drop of the same hooks: ``remove()`` of the handle that flat path makes
      (``_registry._PointHandle``), which ``Registry.unregister`` runs for any such
      handle: one lock, the name's points told after it. Slow twin:
      ``Registry._drop_locked``, as ``Registry.remove`` runs it.
    * Both let each ``HookPoint`` of the name follow the change under the lock
      (``HookPoint.follow``): the plan that follows from the one it keeps
      (``PointPlan.with_hook``, ``without_hook``, or the parent given back). Slow
      twin: ``Registry.plan``, which works the plan out from the hooks at the next call.
      A plan that follows runs the first call its point kept for its call shape
      (``HookPoint._keep_first``): generated code, checked against ``call_with_hooks``
      (``tests/test_compiled_call.py``).

Constructors
    * ``Handle.plain`` builds what ``Handle.__init__`` builds for the default
      options, and so does ``_registry.on_event`` inline (no frame of its own);
      ``CallContext.for_call`` what ``CallContext.__init__`` builds.
"""

from __future__ import annotations

import inspect
from types import FunctionType
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from typing_extensions import Protocol

from ._errors import add_note, describe
from ._handle import hook_name, where_defined

if TYPE_CHECKING:
    from ._context import CallContext
    from ._declarations import Declarations
    from ._handle import Handle
    from ._plan import PointPlan

__all__ = [
    "NOT_COLLECTED",
    "EventHooks",
    "check_event_result",
    "note_fast_error",
    "replace_error",
    "sync_emit_refusal",
    "sync_point_refusal",
]


NOT_COLLECTED: Any = object()
"""Returned by an event hook that observes only: ``collect()`` leaves it out of its results.

The pytest plugin's recorder listens to ``"*"``; without this, every ``collect()``
would gain a ``None`` from it and the code under test would see other results."""


def check_event_result(result: Any, event: str) -> Any:
    """Refuse a coroutine returned to a sync dispatch, which could never await it.

    Returns ``result`` otherwise.
    """
    if inspect.iscoroutine(result):
        result.close()  # so Python doesn't also warn that it was never awaited
        raise TypeError(
            f"a hook of event {event!r} returned a coroutine to a sync emit, which cannot "
            f"await it; use 'await bus.emit_async(...)', or make the hook 'async def' so "
            f"that emit refuses it up front"
        )
    return result


def sync_emit_refusal(event: str, async_hooks: List[Handle]) -> TypeError:
    """The error for a sync dispatch of an event that has async hooks."""
    return TypeError(
        f"event {event!r} has async hooks ({', '.join(map(repr, async_hooks))}); "
        f"a sync emit cannot await them: use 'await bus.emit_async(...)'"
    )


def sync_point_refusal(plan: PointPlan, ctx: CallContext) -> TypeError:
    """The error for a sync call of a hook point whose plan has async hooks."""
    hooks = [h for h in plan.around + plan.pre + plan.post + plan.exception if h.is_async]
    return TypeError(
        f"hook point {ctx.name!r} is sync but has async hooks ({hooks!r}); "
        f"async hooks need an async hook point (an 'async def' function)"
    )


class EventHooks(Protocol):
    """What :func:`note_fast_error` reads of the registry: ``bus.registry`` is one."""

    @property
    def checking(self) -> bool: ...

    @property
    def declarations(self) -> Declarations: ...

    def event_handles(self, event: str) -> Tuple[Handle, ...]: ...


def note_fast_error(
    registry: EventHooks,
    error: BaseException,
    event: str,
    hook: Any,
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
) -> None:
    """Name the hook in ``error``'s notes, for an error raised in emit's fast loop; or
    raise the error naming a declared event's spec, if no hook ran.

    The fast loop holds bare callables; the event's handles tell which one it was: the
    hook itself, or the caller made for a hook that takes a declared event's arguments
    by name (its ``__wrapped__``).
    """
    if registry.checking:
        registry.declarations.refuse_arguments(error, event, args, kwargs)
    handles = registry.event_handles(event)
    wrapped = getattr(hook, "__wrapped__", None) if hook.__class__ is FunctionType else None
    for each in (hook, wrapped) if wrapped is not None else (hook,):
        for handle in handles:
            if handle.hook is each:
                add_note(error, describe(handle, event))
                return
    # Removed while the event was emitted (by itself, say): no handle knows it any more.
    raised = wrapped if wrapped is not None else hook
    add_note(
        error,
        f"hookbus: raised by the event hook {hook_name(raised)} ({where_defined(raised)}) on "
        f"event {event!r}, removed while the event was emitted",
    )


def replace_error(ctx: CallContext, error: Exception) -> None:
    """An exception hook raised ``error``: it is the call's error from now on, and a
    recovery the hook made before raising is void (raising is its last word)."""
    rare = ctx._rare_state()
    if error.__context__ is None and error is not rare.exception:
        error.__context__ = rare.exception  # shown as "during handling of ..."
    rare.exception = error
    rare.recovered = False
