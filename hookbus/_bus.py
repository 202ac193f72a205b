"""The EventBus: the whole public API of a bus, and the ``emit`` fast path.

One class: events (``emit``, ``collect``, ``first``), registration (``on``, ``pre``,
``post``, ``exception``, ``subscribe``), hook points (``hookable``, ``wrap``),
declared events (``event``, ``forget``, ``check_pending``), handles, scopes, pauses,
traces and introspection. What it keeps, and the lock, are the registry's
(``_registry``); :class:`PointInfo` is what ``points()`` returns, ``Pause``
(``_pause``) what ``paused()`` does and ``Subset`` (``_without``) what ``without()`` does.
"""

from __future__ import annotations

import enum
import itertools
from types import CoroutineType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Coroutine,
    Dict,
    FrozenSet,
    Iterable,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    TypeVar,
    cast,
    overload,
)

from typing_extensions import Concatenate, ParamSpec, Unpack

from ._async_dispatch import call_with_hooks_async, dispatch_concurrently, dispatch_event_async
from ._context import CallContext
from ._declarations import Declared, UnknownNameError
from ._dispatch import check_event_result, note_fast_error, sync_emit_refusal
from ._errors import ErrorPolicy, check_policy
from ._event import Event, EventDecorator
from ._handle import NO_SENDER, Handle, HandleGroup, same_callable
from ._hookpoint import AsyncTypedPoint, Decorator, TypedClassPoint, TypedPoint, make_hookable
from ._kinds import hook_kind
from ._names import check_name
from ._options import EventHookOptions, HookOptions, PriorityLike, spell_out_options
from ._pause import Pause
from ._plan import NO_HOOKS, CheckedPlan, EventPlan, PointPlan
from ._registry import Registry, facade_running, on_event, point_hook_body
from ._scope import Scope
from ._spec import spec_of
from ._subscribe import subscribe
from ._sync_dispatch import call_with_hooks, dispatch_event
from ._trace import Trace
from ._without import Subset

if TYPE_CHECKING:
    pass


# The bodies of bus.pre, bus.post and bus.exception, which those methods run as their own.
_on_pre = point_hook_body("pre")
_on_post = point_hook_body("post")
_on_exception = point_hook_body("exception")

__all__ = ["EventBus", "PointInfo"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S")
H = TypeVar("H", bound=Callable[..., Any])
AnyHook = Callable[..., Any]

# Numbers for buses made without a name (next() on a count is atomic).
_unnamed_buses = itertools.count(1)


class PointInfo(NamedTuple):
    """One hook point, as :meth:`EventBus.points` lists it.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("load")
        ... def load(path):
        ...     return path
        >>> info = bus.points()[0]
        >>> info.name, info.kind, info.where  # doctest: +ELLIPSIS
        ('load', 'function', '<doctest ...>:1')
    """

    name: str
    """The point's name, as ``pre``, ``post`` and ``exception`` take it."""
    kind: str
    """What it wraps: ``"function"``, ``"method"`` or (torch) ``"module"``."""
    where: str
    """Where that is defined, as ``file:line`` (``"?"`` if unknown)."""


def _leave_out(
    left_out: FrozenSet[Handle], handles: Tuple[Handle, ...], around: Optional[PointPlan]
) -> Tuple[Tuple[Handle, ...], Optional[PointPlan]]:
    """An event's hooks and around hooks, less those left out (:class:`Subset`)."""
    kept = tuple(handle for handle in handles if handle not in left_out)
    if around is not None:
        arounds = tuple(handle for handle in around.around if handle not in left_out)
        around = PointPlan({"around": arounds}, plain=False) if arounds else None
    return kept, around


def _sender(registry: Registry, event: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """An emission's sender, the ``ctx.target`` of its around hooks (``None`` for none)."""
    sender = args[0] if args else registry.keyword_sender(event, kwargs)
    return None if sender is NO_SENDER else sender


def _listed(given: Any) -> Sequence[Any]:
    """The items of a list or tuple (what ``handles_of`` returns), else none."""
    return cast("Sequence[Any]", given) if isinstance(given, (list, tuple)) else ()


def _is_handle_list(given: Any) -> bool:
    return isinstance(given, (list, tuple)) and all(
        isinstance(item, Handle) for item in _listed(given)
    )


def _not_handles(given: Any) -> str:
    """What :meth:`EventBus.without` was given instead of handles, for its refusal."""
    strays = [type(item).__name__ for item in _listed(given) if not isinstance(item, Handle)]
    held = f"holding {strays[0]}" if strays else repr(given)
    return f"{type(given).__name__} {held}"


class EventBus:
    """Events, hook points, and the hooks registered on them.

    A bus holds two kinds of hooks:

    * **event hooks**, ``bus.on(event, hook)``, called as ``hook(*args, **kwargs)``
      with exactly what ``bus.emit(event, *args, **kwargs)`` was given: the observer
      pattern, with any existing callback;
    * **hooks around calls**: ``bus.pre``, ``bus.post`` and ``bus.exception`` on a
      hook point, a callable made with ``@bus.hookable`` or ``bus.wrap`` (or, with
      :mod:`hookbus.torch`, a module). Each is called as ``hook(ctx)`` with a
      :class:`CallContext`.

    Every registration takes the options ``priority`` (higher runs first, ties in
    registration order; an int or a :class:`Priority` name), ``once`` (removed after
    its first call), ``target`` (fires only for that sender or target) and ``weak``
    (held by weak reference), and returns a :class:`Handle`. Names may be glob
    patterns when registering (``"train.*"``).

    **Dispatch and reentrancy.** Each name's hooks are kept as an immutable,
    pre-sorted tuple, rebuilt under a lock when hooks change. An emission or call
    runs the tuple it read when it began: a hook added meanwhile (by a hook, or by
    another thread) first runs at the next dispatch, and a hook removed meanwhile
    still gets this one, except a ``once`` hook, which is claimed atomically and so
    runs at most once.

    **Declared events.** ``@bus.event`` on a stub function gives a name a spec:
    hooks are checked against it at registration, emissions before any hook runs
    (see ``event``). ``strict=True`` refuses hooks for names that are neither
    declared nor hook points; ``check_pending`` lists them on any bus.

    **Names.** ``EventBus("orders")`` names a bus in reprs and messages. Without a
    name, buses are numbered in the order they are made (``bus-1``, ``bus-2``...), so
    that two buses never look alike; :data:`hookbus.default_bus` is ``default``.

    **Errors.** ``errors="raise"`` (default) propagates a hook's error at once,
    with a note naming the hook and the event; ``"collect"`` runs every hook and
    then raises one :class:`HookError` (an ``ExceptionGroup``); ``"log"`` logs each
    error on the ``"hookbus"`` logger and goes on.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> _ = bus.on("saved", lambda doc: print("saved", doc))
        >>> bus.emit("saved", "report.txt")
        saved report.txt
        >>> other = hookbus.EventBus()
        >>> bus.name != other.name, other.name.startswith("bus-"), hookbus.default_bus.name
        (True, True, 'default')
    """

    def __init__(
        self, name: Optional[str] = None, *, errors: ErrorPolicy = "raise", strict: bool = False
    ) -> None:
        if not isinstance(strict, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"strict= takes True or False, got {type(strict).__name__} {strict!r}")
        if name is None:
            name = f"bus-{next(_unnamed_buses)}"
        elif not isinstance(name, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"EventBus(name=) takes a str, got {type(name).__name__} {name!r}; or leave it "
                f"out to number the bus (bus-1, bus-2, ...)"
            )
        self.name = name
        """The bus's name, shown in its repr and in error messages."""
        self.registry = Registry(self, check_policy(errors), self._emit_planned)
        """The hook store behind this facade: hookbus's own modules register through it."""
        self.registry.declarations.strict = self.registry.checking = strict
        # emit's hot path reads the plan cache directly (the registry never replaces it).
        self._plans = self.registry.event_plans
        self._emissions = itertools.count()  # call_index of the emissions that around hooks see

    # --- the fast path --------------------------------------------------------------

    def emit(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """Call every hook of ``event`` as ``hook(*args, **kwargs)``, in order.

        Returns ``None``: events are notifications. To gather the hooks' return
        values, as an extension point does, use :meth:`collect`. An event with
        async hooks needs :meth:`emit_async`; here it raises ``TypeError``.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> _ = bus.on("greet", lambda name, punct="!": print(f"hi {name}{punct}"))
            >>> bus.emit("greet", "ada", punct="?")
            hi ada?
        """
        # Every plan is a tuple: the hooks as bare callables (a _plan.CheckedPlan's first
        # one checks a declared event's positional arguments), or (a _plan.EventPlan)
        # what runs the full loop, or nothing. So the loop runs any plan, with no test
        # first.
        plan: Any
        try:
            plan = self._plans[event]
        except (KeyError, TypeError):  # TypeError: unhashable, so check_name explains
            if event.__class__ is not str:  # an enum member: its string, from here on
                event = check_name(event, "event name", allow_pattern=False)
            plan = self.registry.plan_event(event)
        if plan is NO_HOOKS:  # no hooks: return before the loop's set-up
            return
        try:
            # Results are dropped, but a dropped coroutine would never be awaited.
            if kwargs:
                if plan.__class__ is CheckedPlan:  # its first caller takes no keywords
                    plan = plan.keywords
                for hook in plan:
                    result = hook(*args, **kwargs)
                    if result is not None and result.__class__ is CoroutineType:
                        check_event_result(result, event)
            elif len(plan) == 1:  # no loop for a lone hook: its iterator was 1/9 of that emit
                hook = plan[0]
                result = hook(*args)
                if result is not None and result.__class__ is CoroutineType:
                    check_event_result(result, event)
            else:
                for hook in plan:
                    result = hook(*args)
                    if result is not None and result.__class__ is CoroutineType:
                        check_event_result(result, event)
        except Exception as error:
            if plan.__class__ is not EventPlan:  # else the full loop named the hook itself
                # No ``hook = None`` before the loop (2% of a 1-hook emit): only an error
                # raised between two bytecodes (a signal handler's) comes before the first
                # hook is bound, and then no hook is named. (Not ``locals()``: its dict
                # would hold the error, and the arguments, in a cycle with the traceback.)
                try:
                    raised_by = hook  # pyright: ignore[reportPossiblyUnboundVariable]
                except UnboundLocalError:
                    raised_by = None
                if raised_by is not None:
                    note_fast_error(self.registry, error, event, raised_by, args, kwargs)
            raise

    def _emit_planned(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """What an event's plan runs when the fast loop can't run its hooks (the
        registry binds ``event``): emit's full loop."""
        self._emit_full(event, args, kwargs, None)

    # --- events, the rest ----------------------------------------------------------

    def collect(self, event: str, /, *args: Any, **kwargs: Any) -> List[Any]:
        """Like :meth:`emit`, but return the hooks' results in call order.

        One result per hook that ran, ``None`` included: each result lines up with a
        hook, and ``len(results)`` counts the hooks that ran (so ``bool(results)`` is
        pyee's ``emit()`` answer). pluggy leaves ``None`` out; its rule is
        ``[r for r in bus.collect(...) if r is not None]``.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> _ = bus.on("plugins", lambda: "csv")
            >>> _ = bus.on("plugins", lambda: "json", priority="HIGH")
            >>> bus.collect("plugins")
            ['json', 'csv']
        """
        return self._emit_full(event, args, kwargs, [])  # type: ignore[no-any-return]

    def collect_pairs(self, event: str, /, *args: Any, **kwargs: Any) -> List[Tuple[Handle, Any]]:
        """Like :meth:`collect`, with each result paired with the hook that returned it.

        blinker's ``send`` returns ``(receiver, result)`` pairs; here each pair is
        ``(handle, result)``, and ``handle.hook`` is the receiver. Only the hooks
        that ran have a pair: one skipped for its ``target``, a ``once`` hook used
        up, or one that failed under ``errors="log"`` has none, which is why
        zipping :meth:`hooks` with :meth:`collect`'s results can misalign.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> def database(sender, key):
            ...     return f"stored {key}"
            >>> _ = bus.on("lookup", database, target="db")
            >>> def cache(sender, key):
            ...     return f"cached {key}"
            >>> _ = bus.on("lookup", cache)
            >>> for handle, result in bus.collect_pairs("lookup", "web", key="a"):
            ...     print(handle.hook.__name__, result)
            cache cached a
        """
        return self._emit_full(event, args, kwargs, [], pairs=True)  # type: ignore[no-any-return]

    def _emission_hooks(
        self,
        event: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        left_out: FrozenSet[Handle],
    ) -> Tuple[str, Tuple[Handle, ...], Optional[PointPlan]]:
        """The name, the event hooks and the around hooks of one emission, sync or async:
        an Enum member becomes its string, and a declared name's arguments are checked
        first."""
        registry = self.registry
        if event.__class__ is not str:
            event = check_name(event, "event name", allow_pattern=False)
        handles = (
            registry.checked_handles(event, args, kwargs)
            if registry.checking
            else registry.event_handles(event)
        )
        around = registry.event_hooks(event)[1]
        if left_out:
            handles, around = _leave_out(left_out, handles, around)
        return event, handles, around

    def _emit_full(
        self,
        event: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        results: Optional[List[Any]],
        first: bool = False,
        pairs: bool = False,
        left_out: FrozenSet[Handle] = frozenset(),
    ) -> Any:
        """Every dispatch of an event but emit's fast loop (``results``: collect them;
        ``pairs``: as ``(handle, result)``; ``left_out``: hooks not to run, for ``without``).

        A declared event's arguments are checked first; its around hooks, if any,
        wrap the whole emission (``_dispatch.call_with_hooks``), and may replace
        the arguments before and the result after. Returns what ``emit`` (None),
        ``collect`` (the list) or ``first`` (the first result not None) returns.
        """
        registry = self.registry
        event, handles, around = self._emission_hooks(event, args, kwargs, left_out)

        def emission(*args: Any, **kwargs: Any) -> Any:
            collected: Optional[List[Any]] = None if results is None else []
            dispatch_event(registry, event, handles, args, kwargs, collected, first, pairs)
            if first:  # None, or the one that stopped the loop
                return collected[-1] if collected else None
            return collected

        if around is None:
            return emission(*args, **kwargs)
        if around.has_async or any(handle.is_async for handle in handles):
            # Refused before the around hooks' set-up runs, in an event's words.
            refused = [handle for handle in (*around.around, *handles) if handle.is_async]
            raise sync_emit_refusal(event, refused)
        sender = _sender(registry, event, args, kwargs)
        ctx = CallContext.for_call(event, sender, args, kwargs, next(self._emissions))
        return call_with_hooks(registry, around, ctx, emission)

    async def _emit_full_async(
        self,
        event: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        results: Optional[List[Any]],
        concurrent: bool = False,
        pairs: bool = False,
        left_out: FrozenSet[Handle] = frozenset(),
    ) -> Any:
        """:meth:`_emit_full` for ``emit_async``, ``collect_async``, ``collect_pairs_async``
        and ``gather``."""
        registry = self.registry
        event, handles, around = self._emission_hooks(event, args, kwargs, left_out)

        async def emission(*args: Any, **kwargs: Any) -> Any:
            collected: Optional[List[Any]] = None if results is None else []
            if concurrent:
                await dispatch_concurrently(registry, event, handles, args, kwargs, collected)
            else:
                await dispatch_event_async(
                    registry, event, handles, args, kwargs, collected, pairs=pairs
                )
            return collected

        if around is None:
            return await emission(*args, **kwargs)
        sender = _sender(registry, event, args, kwargs)
        ctx = CallContext.for_call(event, sender, args, kwargs, next(self._emissions))
        return await call_with_hooks_async(registry, around, ctx, emission)

    async def emit_async(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """Call every hook of ``event`` in order, awaiting those that return awaitables.

        Sync and ``async def`` hooks mix freely; each is awaited before the next
        starts, with the same order and error policy as :meth:`emit`.

        Example:
            >>> import asyncio, hookbus
            >>> bus = hookbus.EventBus()
            >>> async def notify(user):
            ...     await asyncio.sleep(0)
            ...     print("notified", user)
            >>> _ = bus.on("signup", notify)
            >>> asyncio.run(bus.emit_async("signup", "ada"))
            notified ada
        """
        await self._emit_full_async(event, args, kwargs, None)

    async def collect_async(self, event: str, /, *args: Any, **kwargs: Any) -> List[Any]:
        """Like :meth:`emit_async`, but return the hooks' (awaited) results in call order.

        Example:
            >>> import asyncio, hookbus
            >>> bus = hookbus.EventBus()
            >>> async def double(x):
            ...     return 2 * x
            >>> _ = bus.on("calc", double)
            >>> asyncio.run(bus.collect_async("calc", 21))
            [42]
        """
        return await self._emit_full_async(event, args, kwargs, [])  # type: ignore[no-any-return]

    async def collect_pairs_async(
        self, event: str, /, *args: Any, **kwargs: Any
    ) -> List[Tuple[Handle, Any]]:
        """Like :meth:`collect_async`, with each result paired with its hook's handle.

        blinker's ``send_async``: each hook is awaited before the next starts, and
        the pairs are ``(handle, result)``, as :meth:`collect_pairs` makes them.

        Example:
            >>> import asyncio, hookbus
            >>> bus = hookbus.EventBus()
            >>> async def thumbnail(sender):
            ...     return f"thumbnail of {sender}"
            >>> _ = bus.on("fetched", thumbnail)
            >>> pairs = asyncio.run(bus.collect_pairs_async("fetched", "page"))
            >>> [(handle.hook.__name__, result) for handle, result in pairs]
            [('thumbnail', 'thumbnail of page')]
        """
        return await self._emit_full_async(  # type: ignore[no-any-return]
            event, args, kwargs, [], pairs=True
        )

    async def gather(self, event: str, /, *args: Any, **kwargs: Any) -> List[Any]:
        """Like :meth:`collect_async`, with the hooks' coroutines run concurrently.

        Every hook is called in order (a sync hook runs then and there); the
        awaitables they return are then awaited together, as ``asyncio.gather``
        does, and the results come back in hook order. The error policy applies
        once all have finished, to the errors in hook order: ``"raise"`` raises
        the first (the others' work is done, not cancelled), ``"collect"`` all of
        them in one :class:`HookError`. A sync hook that raises before anything is
        awaited stops the emission, closing the coroutines already made. pyee's
        ``AsyncIOEventEmitter`` runs hooks concurrently too; blinker's ``send_async``
        awaits one after the other, as :meth:`collect_async` does.

        Example:
            >>> import asyncio, hookbus
            >>> bus = hookbus.EventBus()
            >>> async def fetch(name, delay):
            ...     await asyncio.sleep(delay)
            ...     print("done", name)
            ...     return name
            >>> _ = bus.on("refresh", lambda: fetch("slow", 0.02))
            >>> _ = bus.on("refresh", lambda: fetch("fast", 0))
            >>> asyncio.run(bus.gather("refresh"))
            done fast
            done slow
            ['slow', 'fast']
        """
        return await self._emit_full_async(  # type: ignore[no-any-return]
            event, args, kwargs, [], concurrent=True
        )

    # --- registration --------------------------------------------------------------

    @overload
    def on(self, event: str, hook: AnyHook, /, **options: Unpack[EventHookOptions]) -> Handle: ...
    @overload
    def on(self, event: str, /, **options: Unpack[EventHookOptions]) -> Callable[[H], H]: ...

    @facade_running(on_event)  # one frame: this body's call runs as bus.on (row 2)
    def on(self, event: str, hook: Any = None, /, **options: Any) -> Any:
        """Register ``hook`` for ``event``; with no hook, return a decorator.

        ``event`` may be a glob pattern (``"train.*"``, ``"*"``; a name holding glob
        characters is registered as :func:`hookbus.literal` of it) or an enum member.
        The hook is called with exactly what :meth:`emit` is given (a declared event's
        hook may take a subset of its spec, by name). ``target=obj`` makes it fire
        only when ``obj`` is the first positional argument (the sender, as in blinker:
        built-in values compare by value, other objects by identity, held weakly; a
        declared event's sender is its spec's first parameter, even by keyword). A
        callable is registered once per name and sender: a second registration raises
        (one for any sender and one for a given sender included).
        ``with_name=True`` passes the event's name first, ``hook(event, *args,
        **kwargs)``, for hooks that watch many events through a pattern.

        The call form returns a :class:`Handle`. The decorator form returns the
        function unchanged; :meth:`handles_of` finds its handle.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.on("train.*", priority="HIGH")
            ... def log(step):
            ...     print("step", step)
            >>> bus.emit("train.step", 3)
            step 3
            >>> [h.name for h in bus.handles_of(log)]
            ['train.*']
            >>> _ = bus.on("*", lambda event, *args: print("saw", event, args), with_name=True)
            >>> bus.emit("eval.done", 0.9)
            saw eval.done (0.9,)
        """
        return on_event(self, event, hook, **options)

    @overload
    def pre(self, name: str, hook: AnyHook, /, **options: Unpack[HookOptions]) -> Handle: ...
    @overload
    def pre(self, name: str, /, **options: Unpack[HookOptions]) -> Callable[[H], H]: ...

    @facade_running(_on_pre)  # one frame (a plan changed per call)
    def pre(self, name: str, hook: Any = None, /, **options: Any) -> Any:
        """Register a hook that runs before each call of the hook point ``name``.

        It is called as ``hook(ctx)``, and may replace the arguments by assigning
        ``ctx.args`` (a tuple) and ``ctx.kwargs`` (a dict). It must return ``None``.

        A name that matches no hook point may be refused as a typo of a name an
        adapter knows (a torch module's: see docs/torch.md, "Names on the bus").

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("greet")
            ... def greet(name):
            ...     return f"hello {name}"
            >>> @bus.pre("greet")
            ... def shout(ctx):
            ...     ctx.args = (ctx.args[0].upper(),)
            >>> greet("ada")
            'hello ADA'
        """
        return _on_pre(self, name, hook, **options)

    @overload
    def post(self, name: str, hook: AnyHook, /, **options: Unpack[HookOptions]) -> Handle: ...
    @overload
    def post(self, name: str, /, **options: Unpack[HookOptions]) -> Callable[[H], H]: ...

    @facade_running(_on_post)  # one frame (a plan changed per call)
    def post(self, name: str, hook: Any = None, /, **options: Any) -> Any:
        """Register a hook that runs after each call of ``name`` that returned.

        It is called as ``hook(ctx)`` with the return value in ``ctx.result``, and
        may replace it by assigning ``ctx.result`` (``None`` included).

        A name that matches no hook point may be refused as a typo of a name an
        adapter knows (a torch module's: see docs/torch.md, "Names on the bus").

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("load")
            ... def load():
            ...     return {"secret": 1, "public": 2}
            >>> @bus.post("load")
            ... def redact(ctx):
            ...     ctx.result = {k: v for k, v in ctx.result.items() if k != "secret"}
            >>> load()
            {'public': 2}
        """
        return _on_post(self, name, hook, **options)

    @overload
    def exception(self, name: str, hook: AnyHook, /, **options: Unpack[HookOptions]) -> Handle: ...
    @overload
    def exception(self, name: str, /, **options: Unpack[HookOptions]) -> Callable[[H], H]: ...

    @facade_running(_on_exception)  # one frame (a plan changed per call)
    def exception(self, name: str, hook: Any = None, /, **options: Any) -> Any:
        """Register a hook that runs when a call of ``name`` raises an ``Exception``.

        It is called as ``hook(ctx)`` with the error in ``ctx.exception``. It may
        observe it (return: the error propagates unchanged), raise another error,
        or recover with ``ctx.recover(value)``: the call then returns ``value``,
        after the post hooks ran on it.

        A name that matches no hook point may be refused as a typo of a name an
        adapter knows (a torch module's: see docs/torch.md, "Names on the bus").

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("fetch")
            ... def fetch(url):
            ...     raise ConnectionError(url)
            >>> @bus.exception("fetch")
            ... def offline(ctx):
            ...     if isinstance(ctx.exception, ConnectionError):
            ...         ctx.recover("cached page")
            >>> fetch("https://example.org")
            'cached page'
        """
        return _on_exception(self, name, hook, **options)

    @overload
    def around(self, name: str, hook: AnyHook, /, **options: Unpack[HookOptions]) -> Handle: ...
    @overload
    def around(self, name: str, /, **options: Unpack[HookOptions]) -> Callable[[H], H]: ...

    def around(self, name: str, hook: Any = None, /, **options: Any) -> Any:
        """Register a hook that runs around every call of ``name``, with teardown guaranteed.

        The hook is a generator function taking ``ctx``, as in
        ``contextlib.contextmanager`` and pluggy's wrappers: the code before its one
        ``yield`` runs before the call (and before every pre hook), the code after it
        once the call and its other hooks are done, whatever happened. If they
        raised, the error is raised at the ``yield``, so ``try``/``except``/``finally``
        work as usual: let it go on, raise another (outer hooks see that one), or
        swallow it with ``ctx.recover(value)`` (catching it without ``recover`` does
        not swallow it). After a success, ``ctx.result`` can be read and replaced.
        Higher priority is outer. ``KeyboardInterrupt`` and other
        ``BaseException`` errors are raised at the ``yield`` too, and always go on.

        On an event, an around hook wraps the whole emission: every event hook
        runs at its ``yield``, and ``ctx.result`` is what ``collect`` or ``first``
        return (``None`` for ``emit``). On an ``async def`` point and for
        ``emit_async``, it may be an async generator (``async def`` with ``yield``).
        A name that matches no hook point and no declared or emitted event may be
        refused as a typo of a name an adapter knows (see :meth:`post`).

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("load")
            ... def load(path):
            ...     if not path:
            ...         raise FileNotFoundError("no path")
            ...     return path.upper()
            >>> @bus.around("load")
            ... def span(ctx):
            ...     print("open span")
            ...     try:
            ...         yield
            ...         ctx.result = ctx.result + "!"
            ...     finally:
            ...         print("close span")
            >>> load("a")
            open span
            close span
            'A!'
            >>> load("")
            Traceback (most recent call last):
            FileNotFoundError: no path
        """
        if hook is not None:
            return self.registry.register("around", name, hook, options)
        return self.registry.decorator("around", name, options)

    def subscribe(
        self,
        obj: object,
        /,
        *,
        weak: bool = False,
        priority: Optional[PriorityLike] = None,
        events: Optional[Iterable[str]] = None,
        target: Any = None,
    ) -> HandleGroup:
        """Register every hook method of ``obj``; return one group that removes them all.

        The hook methods are those marked with :func:`hookbus.listens`, plus, when
        the object lists event names (a ``hook_events`` attribute, or
        ``events=``, a collection of names or a mapping of method name to event
        name), each method named like one of them. Methods without a priority of
        their own take ``priority=``, else the object's ``hook_priority`` (an int
        or a :class:`Priority` name, mmengine's included), else 0. ``weak=True``
        holds the methods weakly: when ``obj`` is collected, its hooks go too, its
        static and class methods included; an ``obj`` that nothing else refers to is
        refused (``TypeError``), as its hooks would go at once.
        ``target`` applies to every method. All are registered, or none; an object
        subscribed already is refused (``ValueError``). A module subscribes its
        functions marked with :func:`hookbus.listens` (pluggy's plugin modules).

        Example:
            >>> import hookbus
            >>> class Logger:
            ...     hook_events = ("before_run", "after_run")
            ...     hook_priority = "LOW"
            ...     def before_run(self, runner):
            ...         print("start", runner)
            ...     def after_run(self, runner):
            ...         print("done", runner)
            >>> bus = hookbus.EventBus()
            >>> subscription = bus.subscribe(Logger())
            >>> bus.emit("before_run", "runner-1")
            start runner-1
            >>> [(h.name, h.priority) for h in subscription]
            [('before_run', -20), ('after_run', -20)]
            >>> subscription.remove()
            >>> bus.hooks()
            []
        """
        return subscribe(
            self.registry, obj, weak=weak, priority=priority, events=events, target=target
        )

    # --- hook points ----------------------------------------------------------------

    @overload
    def hookable(self, fn: classmethod[T, P, R], /) -> classmethod[T, P, R]: ...

    @overload
    def hookable(  # type: ignore[overload-overlap]  # pyright: ignore[reportOverlappingOverload]
        self, fn: staticmethod[P, R], /
    ) -> staticmethod[P, R]: ...

    @overload
    def hookable(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncTypedPoint[P, R]: ...

    @overload
    def hookable(  # pyright: ignore[reportOverlappingOverload]
        self, fn: Callable[Concatenate[Type[S], P], R], /
    ) -> TypedClassPoint[S, P, R]: ...

    @overload
    def hookable(self, fn: Callable[P, R], /) -> TypedPoint[P, R]: ...

    @overload
    def hookable(self, name: Optional[str] = None, /) -> Decorator: ...

    def hookable(self, fn_or_name: Any = None, /) -> Any:
        """Make a callable a hook point: ``@bus.hookable`` or ``@bus.hookable("name")``.

        Each call of the result runs the point's pre hooks, the callable, then its
        post hooks (or its exception hooks, if it raised). With no hooks
        registered, it costs about as much as a ``functools.wraps`` pass-through.
        The name defaults to the callable's ``__qualname__``.

        Works on functions, methods, classmethods and staticmethods (in a class
        body, either above or below ``@classmethod``), builtins, callable objects
        and ``async def`` functions or ``async def __call__`` objects (the result
        is then a coroutine function whose hooks may be sync or async). The result
        keeps ``__name__``, ``__doc__``, ``__wrapped__`` and ``inspect.signature``.
        On a method, ``ctx.target`` is the instance (or class) and ``ctx.args`` the
        arguments after it. Making a hook point of a hook point of the same bus and
        name returns it unchanged, so its hooks run once per call.

        A class is refused (it would stop being a class): to hook construction,
        decorate its ``__init__``. A generator function's call only creates the
        generator: post hooks get the generator object, and an error raised during
        iteration happens after the call, so no exception hook sees it. To hook the
        work itself, make the function that consumes the generator (or the one
        that computes each item) the hook point, or emit events from inside the
        generator.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> class Model:
            ...     @bus.hookable("forward")
            ...     def forward(self, x):
            ...         return x + 1
            >>> _ = bus.post("forward", lambda ctx: print(type(ctx.target).__name__, ctx.result))
            >>> Model().forward(1)
            Model 2
            2
        """
        bus = self
        if fn_or_name is None or isinstance(fn_or_name, (str, enum.Enum)):
            name: Optional[str] = None
            if fn_or_name is not None:
                name = check_name(fn_or_name, "hook point name", allow_pattern=False)

            def decorate(fn: Any) -> Any:
                return make_hookable(bus.registry, fn, name)

            return decorate
        return make_hookable(bus.registry, fn_or_name, None)

    @overload
    def wrap(
        self, fn: classmethod[T, P, R], name: Optional[str] = None, /
    ) -> classmethod[T, P, R]: ...

    @overload
    def wrap(  # type: ignore[overload-overlap]  # pyright: ignore[reportOverlappingOverload]
        self, fn: staticmethod[P, R], name: Optional[str] = None, /
    ) -> staticmethod[P, R]: ...

    @overload
    def wrap(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]], name: Optional[str] = None, /
    ) -> AsyncTypedPoint[P, R]: ...

    @overload
    def wrap(  # pyright: ignore[reportOverlappingOverload]
        self, fn: Callable[Concatenate[Type[S], P], R], name: Optional[str] = None, /
    ) -> TypedClassPoint[S, P, R]: ...

    @overload
    def wrap(self, fn: Callable[P, R], name: Optional[str] = None, /) -> TypedPoint[P, R]: ...

    def wrap(self, fn: Any, name: Optional[str] = None, /) -> Any:
        """Return ``fn`` wrapped as the hook point ``name``; ``fn`` itself is unchanged.

        The call form of :meth:`EventBus.hookable`, for callables you don't define, such as
        builtins, bound methods or other libraries' functions.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> hooked_len = bus.wrap(len, "len")
            >>> _ = bus.post("len", lambda ctx: print("len ->", ctx.result))
            >>> hooked_len("four")
            len -> 4
            4
        """
        return make_hookable(self.registry, fn, name)

    # --- declared events, and the names that exist --------------------------------

    def first(self, event: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call the hooks of ``event`` in order until one returns something other than ``None``.

        Returns that result, or ``None`` if no hook returned one; the hooks after it
        are not called. This is pluggy's ``firstresult``, for any event, per call.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> _ = bus.on("loader", lambda path: None, priority=1)
            >>> _ = bus.on("loader", lambda path: f"csv reader for {path}")
            >>> _ = bus.on("loader", lambda path: print("never called"))
            >>> bus.first("loader", "a.csv")
            'csv reader for a.csv'
        """
        return self._emit_full(event, args, kwargs, [], first=True)

    def without(self, *hooks: Any) -> Subset:
        """Emissions of this bus that leave out some hooks: pluggy's ``subset_hook_caller``.

        ``hooks`` are handles, groups of them (what :meth:`subscribe` returns for
        a plugin), or lists of them (what :meth:`handles_of` returns). The
        :class:`Subset` returned has ``emit``, ``collect``, ``first``, ``emit_async``
        and ``collect_async``, which run every hook of the event but those, event
        hooks and around hooks alike. The bus is not changed: its own
        emissions, in every thread, run them all.

        Example:
            >>> import hookbus
            >>> class Csv:
            ...     @hookbus.listens("formats")
            ...     def formats(self):
            ...         return "csv"
            >>> class Json:
            ...     @hookbus.listens("formats")
            ...     def formats(self):
            ...         return "json"
            >>> bus = hookbus.EventBus()
            >>> csv, json = bus.subscribe(Csv()), bus.subscribe(Json())
            >>> bus.without(json).collect("formats")
            ['csv']
        """
        left_out: Set[Handle] = set()
        for given in hooks:
            if isinstance(given, Handle):
                left_out.add(given)
            elif isinstance(given, HandleGroup) or _is_handle_list(given):
                left_out.update(given)
            else:
                raise TypeError(
                    f"without() takes handles or groups of them, got {_not_handles(given)}; "
                    f"accepted: what on() or subscribe() returned, or the list "
                    f"bus.handles_of(hook) returns"
                )
        return Subset(self, self._emit_full, self._emit_full_async, frozenset(left_out))

    @overload
    def event(self, stub: Callable[P, Any], /) -> Event[P]: ...

    @overload
    def event(
        self, name: Optional[str] = None, /, *, historic: bool = False
    ) -> EventDecorator: ...

    def event(self, stub_or_name: Any = None, /, *, historic: bool = False) -> Any:
        """Declare an event from a stub function: ``@bus.event`` or ``@bus.event("name")``.

        The stub's signature is the event's spec and its docstring documents it; the
        name defaults to the stub's ``__name__``. From then on, every hook registered
        for the name is checked at once against the spec (``TypeError`` if it can't
        take what the event passes), and so are hooks registered before; every
        emission's arguments are checked before any hook runs. Re-declaring with the
        same spec is allowed (a module imported again); a different spec raises.

        ``historic=True``: a hook registered after emissions is called at once with
        each past emission's arguments, in order (pluggy's historic hooks). The
        history grows with each emission: :meth:`EventBus.forget` drops it.

        Returns an :class:`Event`, whose methods are typed by the spec.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event("user.created")
            ... def user_created(user: str, *, admin: bool = False) -> None:
            ...     '''Emitted after a user row is committed.'''
            >>> _ = bus.on("user.created", lambda user, admin=False: print("hi", user))
            >>> user_created.emit("ada")
            hi ada
            >>> bus.emit("user.created", "ada", True)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            TypeError: event 'user.created' was emitted with arguments that don't match ...
        """
        if not isinstance(historic, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"option historic= takes True or False, got {type(historic).__name__} {historic!r}"
            )
        if stub_or_name is None or isinstance(stub_or_name, (str, enum.Enum)):
            name: Optional[str] = None
            if stub_or_name is not None:
                name = check_name(stub_or_name, "event name", allow_pattern=False)

            def declare(stub: Any) -> Any:
                return self._declare_stub(stub, name, historic)

            return declare
        return self._declare_stub(stub_or_name, None, historic)

    def _declare_stub(self, stub: Any, name: Optional[str], historic: bool) -> Event[Any]:
        signature = spec_of(stub, "event()")
        if name is None:
            if stub.__name__ == "<lambda>":
                raise ValueError(
                    "event(): a lambda has no name to give the event; name it explicitly, "
                    "as in bus.event('user.created')(lambda user: None)"
                )
            name = check_name(stub.__name__, "event name", allow_pattern=False)
        self.registry.declare(Declared(name, signature, historic))
        # Event.emit runs emit's cached plans itself, unless a subclass changed what emit does.
        plans = self._plans if type(self).emit is EventBus.emit else None
        return Event(self, name, stub, signature, historic=historic, plans=plans)

    def forget(self, name: str) -> None:
        """Drop the past emissions of the historic event ``name``, releasing their arguments.

        Hooks registered from now on are called only with later emissions; the event
        stays historic and records again from here. ``name`` may be an enum member, as
        wherever a name is taken.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event(historic=True)
            ... def configured(config: str, /) -> None: ...
            >>> configured.emit("first")
            >>> bus.forget("configured")
            >>> configured.emit("second")
            >>> _ = configured.on(print)
            second
        """
        self.registry.forget(name)

    def check_pending(self) -> None:
        """Raise if a hook's name matches no declared event, hook point or emitted event.

        The error, an :class:`UnknownNameError`, lists every such hook with where it
        was defined and the closest known names ("did you mean 'Motor.spin'?"); a
        pattern is listed when it matches nothing known. Returns ``None`` when all is
        well. Call it at the end of an application's start-up, or in a test. The
        name is pluggy's.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event("Motor.spin")
            ... def spin(rpm: int) -> None: ...
            >>> handle = bus.on("Motr.spin", print)
            >>> bus.check_pending()  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            hookbus.UnknownNameError: 1 hook matches no declared event, hook point ...
              - <Handle event 'Motr.spin' print active> (?): no ... did you mean 'Motor.spin'?
            ...
            >>> handle.remove()
            >>> bus.check_pending()
        """
        found, lines = self.registry.unmatched()
        if found:
            count = len(found)
            raise UnknownNameError(
                f"{count} hook{'s' if count != 1 else ''} match{'es' if count == 1 else ''} "
                f"no declared event, hook point or emitted event:\n"
                + "\n".join(lines)
                + "\nFix the names, declare the events (@bus.event) or define the hook "
                "points (@bus.hookable)",
                found,
            )

    @property
    def strict(self) -> bool:
        """Whether registering for an unknown name raises at once (``EventBus(strict=True)``).

        Example:
            >>> import hookbus
            >>> hookbus.EventBus(strict=True).strict
            True
        """
        return self.registry.declarations.strict

    def points(self) -> List[PointInfo]:
        """The hook points of this bus, sorted by name: what there is to hook.

        Each :class:`PointInfo` tells a point's ``name``, its ``kind``
        (``"function"``, ``"method"``, or ``"module"`` for a torch module) and
        ``where`` it is defined.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable
            ... def load(path):
            ...     return path
            >>> [(point.name, point.kind) for point in bus.points()]
            [('load', 'function')]
        """
        return sorted(PointInfo(p.name, p.kind, p.where) for p in self.registry.points())

    def explain(self, name: str) -> str:
        """The code that runs for a call of the hook point ``name`` now, as Python source.

        When a point's hooks change, hookbus compiles its next call to straight-line
        code (no loop over the hooks, the context filled inline), as attrs does for
        ``__init__``; tracebacks through it show these lines. This returns that code,
        with what each of its hook names is bound to (``make`` builds the plan's
        runner; ``make_wrapper``'s body is the same call run by the point's own
        function, which takes this code while the plan lasts); or says why the reference
        sequence (``call_with_hooks``) runs instead: async hooks, a hook
        with an option (``once``, ``weak``, ``target``, ``with_name``), an error policy
        other than ``"raise"``, or an open trace. A name shared by several points gives
        each one's; an event's hooks run in ``emit``'s loop, and it says so. A name
        with neither raises ``LookupError``.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("double")
            ... def double(x):
            ...     return 2 * x
            >>> @double.post
            ... def plus_one(ctx):
            ...     ctx.result += 1
            >>> print(bus.explain("double"))
            # 'double': a compiled call
            #   post_0 = <Handle post 'double' plus_one active>
            def make(call, name, target, counter, registry, reference, post_0):
                def hooked_call(point, plan, args, kwargs):
                    ctx = new(CallContext)
                    ctx.name = name
                    ctx.target = target
                    ctx._args = args
                    ctx._kwargs = kwargs
                    ctx.call_index = next(counter)
                    ctx.phase = "post"
                    ctx._rare = point
                    if ctx._kwargs:
                        ctx._result = call(*ctx._args, **ctx._kwargs)
                    else:
                        ctx._result = call(*ctx._args)
                    try:
                        returned = post_0(ctx)
                        if returned is not None:
                            reject_returned(plan.post[0], ctx, returned)
                    except Exception as error:
                        add_note(error, describe(plan.post[0], name))
                        raise
                    return ctx._result
                return hooked_call
            <BLANKLINE>
            <BLANKLINE>
            def make_wrapper(call, point):
                def call_point(*args, **kwargs):
                    plan = point.plan
                    if plan is None:
                        return call(*args, **kwargs)
                    if plan.shape != '0 pre, 1 post':
                        return plan.run(point, plan, args, kwargs)
                    name, counter, target, post_0 = plan.bindings
                    ctx = new(CallContext)
                    ctx.name = name
                    ctx.target = target
                    ctx._args = args
                    ctx._kwargs = kwargs
                    ctx.call_index = next(counter)
                    ctx.phase = "post"
                    ctx._rare = point
                    if ctx._kwargs:
                        ctx._result = call(*ctx._args, **ctx._kwargs)
                    else:
                        ctx._result = call(*ctx._args)
                    try:
                        returned = post_0(ctx)
                        if returned is not None:
                            reject_returned(plan.post[0], ctx, returned)
                    except Exception as error:
                        add_note(error, describe(plan.post[0], name))
                        raise
                    return ctx._result
                return call_point
            <BLANKLINE>
            >>> _ = double.pre(lambda ctx: None, once=True)
            >>> print(bus.explain("double"))  # doctest: +NORMALIZE_WHITESPACE
            # 'double': call_with_hooks runs the plan (a hook with an option, an error
            policy other than 'raise', or a trace open)
            <BLANKLINE>
        """
        name = check_name(name, "explain() name", allow_pattern=False)
        points = self.registry.points(name)
        parts: List[str] = []
        for point in points:
            explain = getattr(point, "explain", None)
            parts.append(
                explain()
                if explain is not None
                else f"# {name!r}: a {point.kind} point; its adapter's dispatch runs the plan\n"
            )
        if self.registry.hooks(name) and not points:
            parts.append(f"# {name!r}: an event; emit runs its hooks in a loop (not compiled)\n")
        if not parts:
            raise LookupError(
                f"explain() found no hook point and no hook named {name!r} on {self!r}; "
                f"bus.points() lists the points"
            )
        return "\n".join(parts)

    # --- what is registered ---------------------------------------------------------

    def hooks(self, name: Optional[str] = None, *, kind: Optional[str] = None) -> List[Handle]:
        """The registered hooks, as handles.

        With a ``name``, the hooks that would run for it (patterns included), in
        dispatch order, kind by kind; without one, all hooks. ``kind`` keeps one
        kind (``"event"``, ``"pre"``, ``"post"``, ``"exception"``, ...). Each handle
        tells its ``priority``, ``where`` it was defined, and more.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> _ = bus.on("train.*", print)
            >>> _ = bus.on("train.step", print, priority=5)
            >>> [(h.name, h.priority) for h in bus.hooks("train.step")]
            [('train.step', 5), ('train.*', 0)]
        """
        if name is not None:
            name = check_name(name, "hooks() name", allow_pattern=True)
        if kind is not None:
            hook_kind(kind)  # a misspelt kind is refused, not read as "no such hooks"
        handles = self.registry.hooks(name)
        return [handle for handle in handles if kind is None or handle.kind == kind]

    def events(self) -> List[str]:
        """The event names and patterns that have event hooks, sorted.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> _ = bus.on("b", print); _ = bus.on("a.*", print)
            >>> bus.events()
            ['a.*', 'b']
        """
        return sorted({handle.name for handle in self.hooks(kind="event")})

    def handles_of(self, hook: Callable[..., Any], name: Optional[str] = None) -> List[Handle]:
        """The handles of every registration of ``hook`` on this bus, or of those for ``name``.

        This reaches the handle of a hook registered with the decorator form. With a
        ``name``, only the registrations that :meth:`hooks` lists for it: those that run
        for that name (a pattern's included), or, for a pattern, those registered under
        it. pyee's ``remove_listener(event, f)`` is ``remove()`` on each of
        ``bus.handles_of(f, event)``. A registration is of ``hook`` when it holds that
        object, or the same method of the same object (``obj.method``, ``log.append``),
        as the duplicate rule says; no hook's own ``__eq__`` is called.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.on("a")
            ... @bus.on("b")
            ... def react():
            ...     pass
            >>> for handle in bus.handles_of(react, "a"):
            ...     handle.remove()
            >>> [handle.name for handle in bus.hooks()]
            ['b']
        """
        if name is not None:
            name = check_name(name, "handles_of() name", allow_pattern=True)
        # Not ==: one hook whose __eq__ raises (a mock, a proxy) would break it for all.
        return [h for h in self.registry.hooks(name) if same_callable(h.hook, hook)]

    # --- handles, scopes, pauses ---------------------------------------------------

    def scope(self) -> Scope:
        """A context manager that removes, on exit, every hook registered while open.

        Only registrations on this bus, from the same thread or asyncio task, join
        the innermost open scope. The scope's own ``on`` / ``pre`` / ``post`` /
        ``exception`` methods add to it from anywhere.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> with bus.scope() as scope:
            ...     _ = bus.on("a", print)
            ...     _ = scope.on("b", print)
            ...     len(bus.hooks())
            2
            >>> len(bus.hooks())
            0
        """
        return Scope(self.registry)

    def paused(self, name: Optional[str] = None) -> Pause:
        """A context manager during which ``name`` (a name or pattern) dispatches nothing.

        With no name, the whole bus is paused. Pauses apply to every thread and
        every sender (no hook of the name runs, whatever its ``target``), and nest (a
        name stays paused until its last pause ends). Hook points still run their
        callable, just without hooks.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> _ = bus.on("tick", print)
            >>> with bus.paused("tick"):
            ...     bus.emit("tick", "muted")
            >>> bus.emit("tick", "heard")
            heard
        """
        if name is not None:
            name = check_name(name, "paused() name", allow_pattern=True)
        return Pause(self.registry, name)

    def trace(self) -> Trace:
        """A context manager recording every hook call while open, with its duration.

        Tracing switches dispatch to the instrumented loop; when no trace is open,
        it costs nothing.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> _ = bus.on("tick", lambda: None)
            >>> with bus.trace() as trace:
            ...     bus.emit("tick")
            >>> [(record.name, record.kind) for record in trace.records]
            [('tick', 'event')]
        """
        return Trace(self.registry)

    def clear(self, name: Optional[str] = None) -> None:
        """Remove every hook, or every hook registered under exactly ``name``.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> handle = bus.on("a", print)
            >>> bus.clear()
            >>> handle.active, bus.hooks()
            (False, [])
        """
        if name is not None:
            name = check_name(name, "clear() name", allow_pattern=True)
        self.registry.clear(name)

    @property
    def errors(self) -> ErrorPolicy:
        """The error policy: ``"raise"``, ``"collect"`` or ``"log"`` (settable)."""
        return self.registry.errors

    @errors.setter
    def errors(self, policy: ErrorPolicy) -> None:
        self.registry.set_errors(check_policy(policy))

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(
            f"EventBus {self.name!r} cannot be pickled or copied: a bus and its hooks belong "
            f"to the process that made them. Create the bus, and register its hooks, in the "
            f"process that uses it (for DataLoader workers: in worker_init_fn)"
        )

    def __repr__(self) -> str:
        handles = self.hooks()
        hooks, names = len(handles), len({(handle.kind, handle.name) for handle in handles})
        return (
            f"<EventBus {self.name!r} {hooks} hook{'' if hooks == 1 else 's'} on {names} "
            f"name{'' if names == 1 else 's'}, errors={self.registry.errors!r}>"
        )


# help(bus.on) and inspect.signature show the options by name (the overloads show them to
# type checkers).
spell_out_options(EventBus.on, EventHookOptions)
for _method in (EventBus.pre, EventBus.post, EventBus.exception, EventBus.around):
    spell_out_options(_method, HookOptions)
