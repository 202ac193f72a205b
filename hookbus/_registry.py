"""The registry behind every bus: where hooks live, and the plans dispatch runs.

Hooks are stored by exact name, and patterns by kind. An event's plan is cached
in a dict (read by ``emit`` without a lock); a hook point keeps its own plan and
asks :meth:`Registry.plan` for a new one after ``Point.invalidate()``.
Every change to the hooks takes the lock and forgets the plans it affects, which
are then worked out again at the next dispatch. That is the whole copy-on-write
scheme: dispatch never locks, never sees a list being changed, and pays for
matching patterns only once per name. Points hear of a change only after the
lock is released (see ``_plan.py``).

One idiom holds the lock: ``with self._changing:`` (or, on the hot paths,
``self._lock.acquire()`` ... ``finally: self._unlock()``). A locked section only
*notes* what must happen outside the lock: the points whose hooks changed
(``_stale``) and the user objects it let go of (``_dropped``: removed handles,
a historic event's past arguments, closed traces). ``_unlock`` releases the lock,
then lets go of those objects (a finalizer may use the bus) and tells the points
(they may run any code). No caller notifies, or frees, by hand.

Register + remove is a benchmark row (``benchmarks/run.py``, row 2), so its
common case (a plain hook for an event's exact name, nothing to check, no scope)
takes two fast copies, listed in ``_dispatch.py``'s map with their parity tests
(``tests/test_fast_copies.py``) and their own benchmark rows: the flat path of
:func:`on_event` (``bus.on``; the twin: ``_register_checked``) and the inline drop
of an event's exact name, ``remove()`` of the handle that path makes (``_EventHandle``, one
frame; :meth:`Registry.unregister` runs it too; the twin: ``_drop_locked``). Each takes the
lock's token and gives it back inline (``_mutex.py``: the bus lock is a ``Mutex``, whose free
round trip is one list operation each way, a third of ``threading.Lock``'s; about 10% of
the row) and releases it there rather than through ``_unlock()``: neither notes anything
for after the lock (a weak hook to sweep sends register to its twin). An event's hooks
(``_event_hooks``) are cached only with its plan, so both forget them only where a plan
was cached. Measured on row 2, register + remove takes about 1.35x as long without the
flat path, 1.45x without the inline drop, and 1.07x releasing through ``_unlock()``;
``Handle.plain`` (bound once, as ``_plain_handle``) builds the handle in half the time
``Handle(...)`` takes, and :func:`on_event` makes the same stores inline (a frame less:
about 3% of the row).
:func:`on_event` is ``bus.on``'s own body, not a method the bus calls: ``EventBus.on``
runs its code as its own (:func:`facade_running`), a frame less again (about 5% of the
row's instructions), and the bus keeps the method's signature and docs.

A hook point's plan changed per call (a pre hook added and removed around each call) is a
row too: a plain pre, post or exception hook for a point's exact name, with nothing to
check, takes one more flat path, :meth:`Registry._register_point_hook` (the twin:
``_register_checked``), and its removal one, ``remove()`` of the handle that path makes
(``_PointHandle``; :meth:`Registry.unregister` runs it too; the twin: ``_drop_locked``).
Under the lock each point of the name that can (a ``HookPoint``)
follows the change (``_follow_locked``): it takes the plan that follows from the one it
keeps, so the next call works out nothing, and the hook's removal gives the plan before
it back, compiled; any other point is told after the lock, as ``_unlock`` would, and
the plans replaced are let go of after it too.

Memory per hook is a benchmark row too (row 4): a name's only hook of a kind is kept
as the handle itself, not in a list (a ``Bucket``), and a handle shares one options
object with every handle that has no rare option (``_handle._Options``).

Everything the registry keeps lives here, guarded by that lock: the hooks by
kind (exact names by name, patterns in one list), the live hook points by name
(held weakly), the paused names, the plan caches, and the declarations
(``_declarations.Declarations``), with what the registry does with them:
checking a hook against the specs and a strict bus's names before it is
registered, declaring, replaying a historic event's past emissions to a new
hook, and listing the hooks that match nothing (``check_pending()``).

What is valid where is not decided here: the table (``_kinds.py``) says which hook
kinds exist and what shape each takes (``_checked_shape``), which kinds an event's
plan resolves (``_WRAPPING_EVENTS``) and which reach points (``AT_POINTS``), and the
one rule a strict bus and ``check_pending()`` share (``known_names``).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import weakref
from inspect import CO_ASYNC_GENERATOR, CO_COROUTINE, CO_GENERATOR
from types import FunctionType
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
    cast,
)

from ._arounds import may_return_a_value
from ._declarations import (
    Declarations,
    Declared,
    ResultCallback,
    UnknownNameError,
    did_you_mean,
    mismatch_message,
    unknown_emitted,
)
from ._errors import ErrorPolicy, HookError, raise_collected
from ._handle import (
    DEFAULT_OPTIONS,
    MARKED_COROUTINES,
    NO_SENDER,
    Handle,
    Owner,
    hook_name,
    is_async_callable,
    refuse_unheld_hook,
    where_defined,
)
from ._kinds import (
    AT_POINTS,
    DECLARED_EVENT,
    EVENT,
    EVENT_RUNS,
    GENERATOR,
    HOOK_KINDS,
    PLAIN,
    hook_kind,
    known_names,
    methods,
    other_namespace,
    refuses_others,
    where_it_runs,
)
from ._live_points import LivePoints, PointRefs
from ._mutex import Mutex
from ._names import Matcher, check_and_cache, check_name, is_pattern, matcher_for
from ._open_scopes import OpenScope, innermost_scope, open_scopes, opened_anywhere
from ._options import method_name, parse_options
from ._plan import EventPlan, FastHooks, Point, PointPlan, PointSource, event_plan, fast_hooks
from ._spec import context_mismatch
from ._sync_dispatch import dispatch_event
from ._trace import Trace, Tracer, tracer_for

# Bound once: a classmethod is bound again at each access.
_plain_handle = Handle.plain
_new_object = object.__new__

__all__ = ["Registry"]

H = TypeVar("H", bound=Callable[..., Any])

# Emitting many distinct names (say f"user.{id}") must not grow the cache forever.
_PLAN_CACHE_LIMIT = 65_536

# The hooks of one kind under one exact name: the handle itself while it is the only one
# (as most are: a list would cost each name 64 bytes more), else a list of them in
# registration order.
Bucket = Union[Handle, List[Handle]]
# A copy of the hooks, for Registry.snapshot: (exact, patterns).
StoredHooks = Tuple[Dict[str, Dict[str, List[Handle]]], Dict[str, List[Handle]]]
# Paused names (None: the whole bus) -> open pauses; never changed in place, so a
# snapshot keeps the one it saw.
PauseCounts = Dict[Optional[str], int]

_NO_NAMES: Dict[str, Bucket] = {}
_MATCH_ALL = matcher_for("*")


def _members(bucket: Optional[Bucket]) -> Sequence[Handle]:
    """The handles of a bucket (``None``: no bucket), in registration order."""
    if bucket is None:
        return ()
    return bucket if bucket.__class__ is list else (bucket,)  # type: ignore[return-value]


def _order(handle: Handle) -> Tuple[int, int]:
    return (-handle.priority, handle.seq)


def _refuses_others(point: Point) -> bool:
    """Whether ``point``'s kind of point refuses the hooks that never run there, on any bus
    (a point whose class names no kind of the table refuses nothing)."""
    return refuses_others(getattr(point, "kind", ""))


def _what(kind: str) -> str:
    return "event" if kind == "event" else "hook point"


# A plain function whose code has none of these flags is a plain sync hook: the shape
# every kind but around needs, told without inspect (register's common case).
_GENERATOR_CODE = CO_GENERATOR | CO_ASYNC_GENERATOR
_SHAPED_CODE = CO_COROUTINE | _GENERATOR_CODE

# The hook kinds an event's dispatch runs around its event hooks (an around hook wraps
# the whole emission): the plan of an emission resolves these, as the table says.
_WRAPPING_EVENTS = tuple(kind for kind in EVENT.runs if kind != "event")

# The hook kinds register's flat point path takes (``Registry._register_point_hook``):
# plain hooks, called with the call's context, that run at hook points and never at an
# event (so a change of them forgets no event plan): the core's pre, post and exception.
_FLAT_POINT_KINDS = frozenset(
    kind
    for kind, row in HOOK_KINDS.items()
    if row.shape == PLAIN and row.takes_context and kind in AT_POINTS and kind not in EVENT_RUNS
)


def _hook_function(hook: Any) -> Any:
    """The function that runs when ``hook`` is called: a ``functools.partial``'s own,
    a callable object's ``__call__``."""
    inner = hook
    while isinstance(inner, functools.partial):
        inner = inner.func
    if not inspect.isfunction(inner) and not inspect.ismethod(inner) and callable(inner):
        inner = type(inner).__call__
    return inner


def _generator_of(hook: Any) -> Optional[str]:
    """``"generator"`` or ``"async generator"`` when calling ``hook`` makes one, else None."""
    inner = _hook_function(hook)
    if inspect.isasyncgenfunction(inner):
        return "async generator"
    if inspect.isgeneratorfunction(inner):
        return "generator"
    return None


def _checked_shape(kind: str, hook: Any) -> bool:
    """Whether ``hook`` is async; refuse it if it isn't callable, or if its shape isn't the
    one the table gives ``kind`` (an unknown kind is refused too, naming the known ones).

    Checked at registration: an around hook that cannot yield would fail only at the
    first call of what it wraps, and a generator function given as any other kind of
    hook would be called and its generator dropped, its body never run.
    """
    shape = hook_kind(kind).shape
    if not callable(hook):
        raise TypeError(
            f"{method_name(kind)}() needs a callable hook, got {type(hook).__name__} "
            f"{hook!r}; accepted: a function, method, lambda, functools.partial or "
            f"callable object"
        )
    made = _generator_of(hook)
    if shape == GENERATOR:
        if made is None:
            raise TypeError(
                f"{method_name(kind)}() needs a generator function, got {hook_name(hook)} "
                f"({type(hook).__name__}); an around hook yields once, where the call runs:\n"
                f"    def hook(ctx):\n"
                f"        ...  # before the call\n"
                f"        yield\n"
                f"        ...  # after it (an error of the call is raised at the yield)\n"
                f"'async def' with 'yield' for async hook points and emit_async"
            )
        return made == "async generator"
    if made is not None:
        raise TypeError(
            f"{method_name(kind)}() got the {made} function {hook_name(hook)}: calling it "
            f"only makes a {made}, so its body would never run. A hook that yields once, "
            f"where the call runs, is an around hook: register it with around(). To hand "
            f"out a {made} on purpose (collect() then returns it), register a plain "
            f"function that returns one: lambda *args: {hook_name(hook)}(*args)"
        )
    return is_async_callable(hook)


def _context_hook_error(kind: str, written: str) -> TypeError:
    """The error for a hook around a call that can't take the call's context."""
    return TypeError(
        f"{kind} hook {written} can't be called as hook(ctx): a hook around a call gets "
        f"one argument, the CallContext (ctx.args and ctx.kwargs are the call's arguments, "
        f"ctx.result its result, ctx.target what it was called on; a torch hook's "
        f"(module, args, output) are ctx.target, ctx.args and ctx.result). Nothing was "
        f"registered"
    )


def _async_hook_error(handle: Handle, point_name: str) -> TypeError:
    """The error for an async hook registered where a sync point would run it."""
    return TypeError(
        f"async {handle.kind} hook {handle!r} matches the sync hook point {point_name!r}; "
        f"async hooks need an async hook point (an 'async def' function). Use a plain "
        f"'def' hook there."
    )


def _sync_point_error(point_name: str, handle: Handle) -> TypeError:
    """The error for a sync point made where an async hook would match it."""
    return TypeError(
        f"the sync hook point {point_name!r} matches the async hook {handle!r}; async hooks "
        f"need an async hook point (an 'async def' function)"
    )


def _same_registration(handles: Iterable[Handle], handle: Handle) -> Optional[Handle]:
    """The handle among ``handles`` that registers what ``handle`` would, if any (lock held)."""
    for each in handles:
        if each.same_registration(handle):
            return each
    return None


def _tell(points: Sequence[Point]) -> Optional[BaseException]:
    """Invalidate each point (no lock held); return the first error, after every point
    was told (as ``Registry._unlock`` tells them)."""
    failure: Optional[BaseException] = None
    for point in points:
        try:
            point.invalidate()
        except BaseException as error:  # rare: a point refused its plan
            failure = failure or error
    return failure


def _remove_from(names: Dict[str, Bucket], name: str, handle: Handle) -> None:
    """Take ``handle`` out of the list bucket of ``name``; a handle left alone is kept
    as itself (lock held)."""
    bucket: List[Handle] = names[name]  # type: ignore[assignment]
    bucket.remove(handle)
    if len(bucket) > 1:
        return
    if bucket:
        names[name] = bucket[0]
    else:
        del names[name]


class _Duplicate(Exception):
    """Carries the registration found again out of the locked section, to be reported."""

    def __init__(self, handle: Handle) -> None:
        super().__init__()
        self.handle = handle


def _duplicate_error(handle: Handle, existing: Handle) -> ValueError:
    """The error for a second registration of one callable on one name, for targets
    that one sender can match (no target matches every sender)."""
    overlap = ""
    if handle.targeted != existing.targeted:
        overlap = (
            " One registration is for any sender and the other for one sender: both "
            "would run for that sender."
        )
    return ValueError(
        f"{hook_name(handle.hook)} is already registered for {handle.kind} {handle.name!r} "
        f"on bus {handle.registry.bus.name!r}: {existing!r}. A callable is registered once per "
        f"name and sender (no target: every sender).{overlap} blinker and pyee would ignore "
        f"a second registration and torch would run the hook twice; hookbus refuses it, so "
        f"that neither happens silently. To change its options, remove the first "
        f"(handle.remove()) and register again; to run it twice on purpose, register "
        f"functools.partial(hook)"
    )


class _EventHandle(Handle):
    """The handle of an event hook on an exact name, as ``bus.on`` makes it: its
    ``remove()`` unregisters it inline, one frame rather than the handle's over the
    registry's (register + remove is a benchmark row).

    The inline drop is ``_drop_locked()`` for an event's exact name (its twin, as
    :meth:`Registry.remove` runs it; parity: ``tests/test_fast_copies.py``), and
    :meth:`Registry.unregister` runs it too. The caller holds the handle, so nothing of
    the user's goes under the lock: nothing is noted for after it.

    It has no ``__init__`` of its own Python: :func:`on_event` makes it by calling the
    class with no argument, the cheapest object CPython makes (``object.__new__(cls)``
    costs about 300 instructions more, 3% of the row), then makes ``Handle.plain``'s
    stores; a handle with options is made by ``object.__new__`` and ``Handle.__init__``.
    """

    __slots__ = ()
    __init__ = object.__init__  # pyright: ignore[reportAssignmentType]

    def remove(self) -> None:
        """Unregister the hook. Calling it again, or after ``clear()``, does nothing."""
        registry: Registry = self.registry  # type: ignore[assignment]
        lock = registry._lock
        try:
            lock.free.pop()  # lock.acquire(), inline (see _mutex.py)
        except IndexError:  # held: wait for it
            lock.wait()
        try:
            if self._registered:  # a handle's kind and name stay: its bucket is found
                self._registered = False
                name = self.name
                names = registry._events
                if names[name] is self:
                    del names[name]
                else:
                    _remove_from(names, name, self)
                if name in registry.event_plans:  # see on_event
                    registry.event_plans.pop(name, None)
                    registry._event_hooks.pop(name, None)
        finally:
            lock.free.append(True)  # lock.release(), inline
            if lock.waiting:
                lock.wake()


class _PointHandle(Handle):
    """The handle of a plain hook on a hook point's exact name, as register's flat point path
    makes it (``Registry._register_point_hook``): its ``remove()`` unregisters it inline,
    one frame rather than the handle's over the registry's (a hook added and removed
    around each call is a benchmark row).

    The inline drop is ``_drop_locked()`` for a point kind's exact name (its twin, as
    :meth:`Registry.remove` runs it; parity: ``tests/test_fast_copies.py``), and
    :meth:`Registry.unregister` runs it for any such handle. One lock, and the name's
    points follow the change under it (``Registry._follow_locked``), or are told after it;
    the caller holds the handle, so only the plans the points let go of are dropped after
    the lock.
    """

    __slots__ = ()

    def remove(self) -> None:
        """Unregister the hook. Calling it again, or after ``clear()``, does nothing."""
        if not self._registered:
            return
        registry: Registry = self.registry  # type: ignore[assignment]
        stale: Sequence[Point] = ()
        registry._lock.acquire()
        try:
            if self._registered:  # a handle's kind and name stay: its bucket is found
                self._registered = False
                name = self.name
                names = registry._exact[self.kind]
                if names[name] is self:
                    del names[name]
                else:
                    _remove_from(names, name, self)
                refs = registry._points.refs_or(name, ())
                if refs:
                    stale, _replaced = registry._follow_locked(refs, self, False)
        finally:
            registry._lock.release()
        if stale:
            failure = _tell(stale)
            if failure is not None:
                raise failure


class _Changing:
    """``with registry._changing:``, the lock held the one way (see the module docstring)."""

    __slots__ = ("_registry",)

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def __enter__(self) -> None:
        self._registry._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._registry._unlock()


class Registry:
    """The hook store and plan cache of one :class:`EventBus` (``bus.registry``).

    Its public methods are the interface the rest of hookbus uses: registering
    (:meth:`register`), removing (:meth:`unregister`,
    :meth:`remove`, :meth:`claim`, :meth:`clear`), plans (:meth:`plan_event`,
    :meth:`event_handles`, :meth:`plan`), points (:meth:`add_point`,
    :meth:`remove_point`), state (:meth:`set_errors`, :meth:`set_trace`,
    :meth:`pause`, :meth:`snapshot`, :meth:`restore`) and
    introspection (:meth:`hooks`). Nothing else touches its dicts or its lock.

    Methods named ``*_locked`` expect the caller to hold ``_lock``, a plain
    (non-reentrant) lock: nothing that runs with it held may take it again, and
    nothing with it held calls a point, a user's code, a warning or a logger, or
    lets go of a user's object (see the module docstring).

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> handle = bus.registry.register("event", "saved", print, {})
        >>> bus.registry.hooks("saved") == [handle], bus.registry.errors
        (True, 'raise')
        >>> bus.registry.unregister(handle)
        >>> bus.registry.hooks()
        []
    """

    def __init__(self, bus: Owner, errors: ErrorPolicy, emit_full: Callable[..., None]) -> None:
        self.bus = bus
        """The bus this registry serves (its name is in messages)."""
        self._facade = cast(Facade, bus)  # the same, as on_event takes it (its registry)
        # What an event's plan runs when emit's fast loop can't run its hooks:
        # emit_full(event, *args, **kwargs), the bus's full loop.
        self._emit_full = emit_full
        self.errors: ErrorPolicy = errors
        """The error policy; change it with :meth:`set_errors`."""
        self.tracer: Optional[Tracer] = None
        """What dispatch records into: the open traces (none, one :class:`Trace`, or a
        group of them); :meth:`set_trace` changes it."""
        self.event_plans: Dict[str, Any] = {}
        """Event name -> plan, read by ``emit`` without a lock (never replaced, only cleared)."""
        self._lock = Mutex()  # threading.Lock's twin, a third of its cost (see _mutex.py)
        self._seq = itertools.count()
        self._changing = _Changing(self)
        # Hooks by kind: exact names by name, patterns in one list, each in registration
        # order. Nested dicts rather than (kind, name) keys: a tuple key costs 56 bytes
        # more per name. Never replaced (the hot path holds them), only changed.
        # An event's exact names, kept as well as by kind (never replaced: bus.on and its
        # handle's remove() read it without a lookup by kind, a tenth of their dict work).
        self._events: Dict[str, Bucket] = {}
        self._exact: Dict[str, Dict[str, Bucket]] = {"event": self._events}  # always there
        self._patterns: Dict[str, List[Handle]] = {}
        # Event name -> its hooks and its around hooks' plan (None: none), for the slow paths;
        # a name is here only while its plan is in event_plans (register relies on it).
        self._event_hooks: Dict[str, Tuple[Tuple[Handle, ...], Optional[PointPlan]]] = {}
        # Live hook points by name, held weakly: a point dies with its wrapper or module.
        self._points = LivePoints()
        # What makes points on demand (see add_source), held weakly; replaced, never
        # changed in place, so that it is read without the lock.
        self._sources: Tuple[weakref.ref[PointSource], ...] = ()
        self._stale: List[Point] = []  # points to tell, once the lock is released
        self._dropped: List[Any] = []  # user objects to let go of, once it is released
        self._pauses: PauseCounts = {}
        self._paused_patterns: Dict[str, Matcher] = {}
        self._collected: List[Handle] = []
        self._traces: Tuple[Trace, ...] = ()  # open, in the order they opened
        # Names already checked, with their glob matcher (None for a plain name).
        self._names: Dict[str, Optional[Matcher]] = {}
        self.declarations = Declarations()
        """The declared events, their history, and the names emitted so far."""
        self.checking = False
        self._declared_count = 0  # bumped by each declaration, read by register()
        """Whether registration checks names and specs: set for good by ``strict=True``,
        the first declaration, or the first point of a kind that refuses the hooks that
        never run there (an operation point), so that a bus that has none pays one test."""

    # --- registration and removal -----------------------------------------------------

    def register(
        self,
        kind: str,
        name: str,
        hook: Callable[..., Any],
        options: Mapping[str, Any],
        scope: Optional[OpenScope] = None,  # not keyword-only: CPython then inlines the call
    ) -> Handle:
        """Check everything, then register; nothing is half-registered on failure.

        An event hook with no scope and no option takes ``bus.on``'s flat path
        (:func:`on_event`); every other case :meth:`_register_checked`. Names are
        checked once (with their pattern matcher) and cached, and plain functions
        told sync without ``inspect``. If a point matched by the hook fails to take
        it (a warning turned into an error, say), the hook is unregistered again and
        the error propagates.
        """
        if kind == "event" and scope is None and not options:  # bus.on's own flat path
            return on_event(self._facade, name, hook)  # type: ignore[no-any-return]
        if name.__class__ is not str:  # an enum member (or a mistake): a plain str, or raise
            name = check_name(name, f"{_what(kind)} name", allow_pattern=True)
        try:
            match = self._names[name]
        except KeyError:
            match = check_and_cache(self._names, name, f"{_what(kind)} name")
        if hook.__class__ is FunctionType and not hook.__code__.co_flags & _SHAPED_CODE:
            # A plain function: the shape every kind but around takes, told without inspect.
            is_async = MARKED_COROUTINES and hasattr(hook, "_is_coroutine_marker")
        else:
            is_async = _checked_shape(kind, hook)
        if options:
            priority, once, target, weak, with_name, optional = parse_options(kind, options)
            if weak:  # counted here, before the handle's call adds references to it
                refuse_unheld_hook(hook)
            # An event's exact name (with a scope, here) drops inline, as bus.on's does.
            handle = _new_object(_EventHandle if kind == "event" and match is None else Handle)
            Handle.__init__(
                handle, self, kind, name, hook, priority, 0, once, target, weak, is_async, match,
                with_name, optional,
            )  # fmt: skip
        elif kind in _FLAT_POINT_KINDS and match is None and scope is None and not is_async:
            return self._register_point_hook(kind, name, hook)
        elif kind == "event" and match is None:
            handle = _EventHandle.plain(self, kind, name, hook, is_async, match)
        else:
            handle = _plain_handle(self, kind, name, hook, is_async, match)
        return self._register_checked(handle, scope)

    def _register_point_hook(self, kind: str, name: str, hook: Any) -> Handle:
        """:meth:`register` of a plain sync hook of a kind in ``_FLAT_POINT_KINDS`` (pre,
        post, exception) for an exact name, with no option and no scope.

        The hot path of a hook point's plan changed per call (``benchmarks/run.py``): when
        there is nothing to check (no declaration or strict bus, no point source, no open
        scope, no weak hook to sweep), it takes the lock once and tells the name's points
        after it, as ``_unlock`` would, without noting them. :meth:`_register_checked`
        takes every other case, and is its slow twin (``tests/test_fast_copies.py``).
        """
        # Handle.plain's stores, without its frame (parity: tests/test_fast_copies.py).
        handle: Handle = _new_object(_PointHandle)
        handle.registry = self
        handle.kind = kind
        handle.name = name
        handle.seq = 0
        handle.is_async = False
        handle.match = None
        handle._registered = False
        handle._options = DEFAULT_OPTIONS
        handle._hook = hook
        if hook.__class__ is FunctionType:  # context_mismatch's common case, without its frame
            code = hook.__code__
            takes_context = code.co_argcount == 1 and not code.co_kwonlyargcount
        else:
            takes_context = False
        # A hook that can't take the context: the checked path says what is wrong.
        if (
            self.checking
            or self._sources
            or (opened_anywhere and open_scopes.get())
            or (not takes_context and context_mismatch(hook) is not None)
        ):
            return self._register_checked(handle, None)
        duplicate: Optional[Handle] = None
        flat = False
        stale: Sequence[Point] = ()
        self._lock.acquire()
        try:
            # A declaration or a source came meanwhile, or a weak hook's object died: the
            # checked path, which takes the lock the full way.
            if not (self.checking or self._sources or self._collected):
                names = self._exact.get(kind)
                if names is None:
                    names = self._exact[kind] = {}
                bucket = names.setdefault(name, handle)
                if bucket is not handle:  # the name has hooks of this kind already
                    duplicate = _same_registration(_members(bucket), handle)
                    if duplicate is None:
                        if isinstance(bucket, list):
                            bucket.append(handle)
                        else:
                            names[name] = [bucket, handle]
                if duplicate is None:
                    handle.seq = next(self._seq)
                    handle._registered = True
                    # _invalidate_locked() for a point kind's exact name: each point named
                    # so follows the change, or is told once the lock is released.
                    # The plans the points let go of go with this frame, after the lock.
                    refs = self._points.refs_or(name, ())
                    if refs:
                        stale, _replaced = self._follow_locked(refs, handle, True)
                    flat = True
        finally:
            self._lock.release()  # nothing was noted for after the lock
        if not flat:
            if duplicate is not None:  # raised here: the message reads the user's hook
                raise _duplicate_error(handle, duplicate)
            return self._register_checked(handle, None)
        if stale:
            failure = _tell(stale)
            if failure is not None:
                self.unregister(handle)  # all or nothing, as _register_checked
                raise failure
        return handle

    def decorator(self, kind: str, name: str, options: Mapping[str, Any]) -> Callable[[H], H]:
        """The decorator form of a registration: name and options are checked now, not later.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> register = bus.registry.decorator("event", "saved", {"priority": "HIGH"})
            >>> @register
            ... def log(doc):
            ...     print("saved", doc)
            >>> bus.emit("saved", "a.txt")
            saved a.txt
        """
        name = check_name(name, f"{_what(kind)} name", allow_pattern=True)
        parse_options(kind, options)

        def decorate(fn: H) -> H:
            self.register(kind, name, fn, options)
            return fn

        return decorate

    def _register_checked(self, handle: Handle, scope: Optional[OpenScope]) -> Handle:
        """:meth:`register` of every case but the common one: specs, strict names,
        scopes, patterns, async hooks, and hook points to tell of the change."""
        kind, name, match = handle.kind, handle.name, handle.match
        hook = handle.hook
        at_points = kind in AT_POINTS
        if kind != "event" and hook is not None:  # an event hook's shape was told already
            row = HOOK_KINDS.get(kind) or hook_kind(kind)  # an unknown kind: refused, named
            if row.shape == GENERATOR:  # register's common case told a plain function
                handle.is_async = _checked_shape(kind, hook)
                # An async generator cannot return a value; a generator's code says.
                handle.may_return_value = not handle.is_async and may_return_a_value(
                    _hook_function(hook)
                )
            if row.takes_context:
                written = context_mismatch(hook)
                if written is not None:
                    raise _context_hook_error(kind, written)
        sources = self._sources
        if sources and at_points:  # no lock held: sources make points
            self._prepare_points(handle)
        declared_count = self._declared_count
        checking = self.checking
        if checking:  # specs and strict names: checked before the lock is taken
            self._check_registration(handle)
        if scope is None and opened_anywhere and open_scopes.get():
            scope = innermost_scope(self)
        history: Any = ()
        conflict: Optional[str] = None
        duplicate: Optional[Handle] = None
        self._lock.acquire()
        while self._declared_count != declared_count:  # declared meanwhile: check again
            self._unlock()
            declared_count, checking = self._declared_count, True
            self._check_registration(handle)
            self._lock.acquire()
        try:
            if self._collected:
                self._sweep_collected_locked()
            if handle.is_async and at_points:
                conflict = self._async_conflict_locked(handle)
            if match is None:
                bucket = self._exact.get(kind, _NO_NAMES).get(name)
                if bucket is not None:  # the first hook of a name has no duplicate to find
                    duplicate = _same_registration(_members(bucket), handle)
            else:
                duplicate = _same_registration(self._patterns.get(kind, ()), handle)
            if conflict is None and duplicate is None:
                handle.seq = next(self._seq)
                if match is None:
                    names = self._exact.setdefault(kind, {})
                    bucket = names.get(name)
                    if bucket is None:
                        names[name] = handle
                    elif isinstance(bucket, list):
                        bucket.append(handle)
                    else:
                        names[name] = [bucket, handle]
                else:
                    self._patterns.setdefault(kind, []).append(handle)
                handle._registered = True
                self._invalidate_locked(kind, name, match)
                if checking and kind == "event":
                    history = self.declarations.history_for(name, match)
        finally:
            try:
                self._unlock()  # tells the points: one may refuse the hook
            except BaseException:
                self.unregister(handle)  # all or nothing, even for a point's error
                raise
        if duplicate is not None:  # raised here: the message reads the hook
            raise _duplicate_error(handle, duplicate)
        if conflict is not None:
            raise _async_hook_error(handle, conflict)
        if self._sources is not sources and at_points:  # a source came meanwhile
            for source in self._live_sources():
                source.make_points(kind, name, match)
        if scope is not None:
            scope.add(handle)
        if history:
            self._replay(handle, history)
        return handle

    def unregister(self, handle: Handle) -> None:
        """``handle.remove()``: unregister one handle known to be this bus's (idempotent)."""
        if handle.__class__ is _EventHandle:  # an event's exact name: the inline drop
            handle.remove()
            return
        if handle.__class__ is _PointHandle:  # a point kind's exact name: the inline drop
            handle.remove()
            return
        if handle.match is None and handle.kind in _FLAT_POINT_KINDS:
            # The same drop for such a handle made elsewhere (the checked path, an adapter).
            _PointHandle.remove(handle)  # type: ignore[arg-type]
            return
        # Not ``with self._changing``: its __enter__ and __exit__ are two calls through C,
        # and a hook point's hook added and removed per call is a benchmark row.
        self._lock.acquire()
        try:
            self._drop_locked(handle)
        finally:
            self._unlock()

    def _follow_locked(
        self, refs: PointRefs, handle: Handle, added: bool
    ) -> Tuple[Sequence[Point], Any]:
        """``_invalidate_locked`` for a plain sync hook of a point kind, for its exact name,
        just added (or removed): each point of ``refs`` (the name's, not empty) takes the
        plan that follows from its own (``follow``, which a point may have), else is
        returned, to be told after the lock; with what the points let go of (a plan, or
        a list of them), to be dropped after it too.

        A name's one point (the common case) makes no list: about 800 instructions of
        the row of a plan changed per call, whose hook is added and removed."""
        if len(refs) == 1:
            point = refs[0]()
            if point is None:
                return (), None
            follow = getattr(point, "follow", None)
            plan = None if follow is None else follow(handle, added)
            return ((point,), None) if plan is None else ((), plan)
        stale: List[Point] = []
        replaced: List[PointPlan] = []
        for ref in refs:  # a tuple, never changed in place
            point = ref()
            if point is not None:
                follow = getattr(point, "follow", None)
                plan = None if follow is None else follow(handle, added)
                if plan is None:
                    stale.append(point)
                else:
                    replaced.append(plan)
        return stale, replaced

    def remove(self, handles: Sequence[Handle]) -> None:
        """Unregister ``handles``, all of this bus (checked first: nothing half-removed)."""
        for handle in handles:  # before the lock: the message reads the user's hook
            if handle.registry is not self:
                raise ValueError(
                    f"{handle!r} belongs to the bus {handle.registry.bus.name!r}, not to "
                    f"{self.bus.name!r}; remove it with handle.remove() or through its own bus"
                )
        with self._changing:
            for handle in handles:
                self._drop_locked(handle)

    def clear(self, name: Optional[str] = None) -> None:
        """Unregister every hook, or every hook registered under exactly ``name``."""
        with self._changing:
            for handle in self._all_hooks_locked():
                if name is None or handle.name == name:
                    self._drop_locked(handle)

    def claim(self, handle: Handle) -> bool:
        """Atomically unregister a ``once`` hook; True for the one caller that won."""
        with self._changing:  # a once hook's dispatch waits for this
            if not handle._registered:
                return False
            self._drop_locked(handle)
        return True

    def forget_collected(self, handle: Handle) -> None:
        """Weakref callback: unregister a weak hook whose object died.

        It may run at any moment, even inside this bus's own locked section on this
        thread (a collection can start anywhere), so it never waits for the lock:
        if the lock is busy, the handle is swept by the next locked operation.
        Until then the dispatch loops skip it, and ``handle.active`` is already False.
        """
        if self._lock.acquire(blocking=False):
            try:
                self._drop_locked(handle)
            finally:
                self._unlock()
        else:
            self._collected.append(handle)

    def _drop_locked(self, handle: Handle) -> None:
        if not handle._registered:
            return  # removed already, by another thread or an earlier call
        handle._registered = False
        if handle.match is None:
            names = self._exact[handle.kind]
            if names[handle.name] is handle:
                del names[handle.name]
            else:
                _remove_from(names, handle.name, handle)
        else:
            self._patterns[handle.kind].remove(handle)
        self._dropped.append(handle)  # it may hold the last reference to the hook
        self._invalidate_locked(handle.kind, handle.name, handle.match)

    def _sweep_collected_locked(self) -> None:
        while self._collected:
            self._drop_locked(self._collected.pop())

    # --- state: errors, trace, pauses, snapshots ----------------------------------------

    def set_errors(self, policy: ErrorPolicy) -> None:
        """Switch the error policy (checked by the caller); every plan is worked out again."""
        with self._changing:
            self.errors = policy
            self._invalidate_all_locked()

    def set_trace(self, trace: Trace, is_open: bool) -> bool:
        """Open or close ``trace`` (traces overlap in any order); False if it already was."""
        with self._changing:
            if any(each is trace for each in self._traces) == is_open:
                return False
            others = tuple(each for each in self._traces if each is not trace)
            self._dropped.append(self._traces)
            self._traces = (*others, trace) if is_open else others
            self.tracer = tracer_for(self._traces)
            self._invalidate_all_locked()
        return True

    def pause(self, name: Optional[str], delta: int) -> None:
        """Add ``delta`` (+1 or -1) to the pauses of ``name`` (a name, a pattern, or None: all)."""
        with self._changing:
            counts = dict(self._pauses)  # a new dict: a snapshot keeps the one it saw
            count = counts.get(name, 0) + delta
            if count:
                counts[name] = count
            else:
                counts.pop(name, None)
            self._pauses = counts
            self._paused_patterns = {
                paused: matcher_for(paused)
                for paused in counts
                if paused is not None and is_pattern(paused)
            }
            self._invalidate_all_locked()

    def _paused_locked(self, name: str) -> bool:
        """Whether a dispatch of ``name`` is paused: by name, by pattern, or all of them."""
        pauses = self._pauses
        if None in pauses or name in pauses:
            return True
        return any(match(name) for match in self._paused_patterns.values())

    def snapshot(self) -> Tuple[Any, ...]:
        """Everything :meth:`restore` needs to undo later changes (the pytest plugin)."""
        with self._changing:
            self._sweep_collected_locked()
            exact = {
                kind: {n: list(_members(b)) for n, b in names.items()}
                for kind, names in self._exact.items()
            }
            patterns = {kind: list(bucket) for kind, bucket in self._patterns.items()}
            stored: StoredHooks = (exact, patterns)
            snapshot = (stored, self.errors, self._traces, self._pauses)
        return snapshot

    def restore(self, snapshot: Tuple[Any, ...]) -> None:
        """Put hooks, error policy, trace and pauses back as :meth:`snapshot` saw them.

        Hooks added since are unregistered, hooks removed since come back, except
        those that can never run again: a weakly held hook, or a weakly held target,
        collected meanwhile. Like every removal, it lets go of those handles (which
        may hold the last reference to a strongly held target) once the lock is
        released.
        """
        (exact, patterns), errors, traces, pauses = snapshot
        back: List[Handle] = []  # point hooks brought back: their sources make points
        with self._changing:
            self._sweep_collected_locked()
            now = self._all_hooks_locked()
            present: Set[int] = {id(handle) for handle in now} if self._sources else set()
            self._dropped.append(now)  # the hooks added since may go with it
            for handle in now:
                handle._registered = False
            buckets = [*(b for names in exact.values() for b in names.values())]
            for bucket in [*buckets, *patterns.values()]:
                kept = [h for h in bucket if h.alive]
                if len(kept) != len(bucket):
                    self._dropped.append(bucket[:])  # those left out go after the lock
                    bucket[:] = kept
                for handle in bucket:
                    if handle.kind != "event" and id(handle) not in present:
                        back.append(handle)
                    handle._registered = True
            # The same dict objects: the hot path of register and remove holds them.
            named = {kind: {n: b for n, b in names.items() if b} for kind, names in exact.items()}
            self._events.clear()
            self._events.update(named.pop("event", {}))
            self._exact.clear()
            self._exact["event"] = self._events
            self._exact.update(named)
            self._patterns.clear()
            self._patterns.update({kind: bucket for kind, bucket in patterns.items() if bucket})
            self._dropped.append(self._traces)
            self.errors, self._traces, self.tracer = errors, traces, tracer_for(traces)
            self._pauses = pauses  # never changed in place (see pause)
            self._paused_patterns = {
                paused: matcher_for(paused)
                for paused in pauses
                if paused is not None and is_pattern(paused)
            }
            self._invalidate_all_locked()
        if self._sources:
            sources = self._live_sources()
            for handle in back:
                for source in sources:
                    source.make_points(handle.kind, handle.name, handle.match)

    # --- introspection ------------------------------------------------------------------

    def hooks(self, name: Optional[str] = None, *, literal: bool = False) -> List[Handle]:
        """All hooks (by kind, name, order), or those that would run for ``name``, kind by kind.

        A ``name`` with glob characters asks for that pattern's own hooks, unless it is
        ``literal``: then for those that run when it is emitted or called.
        """
        with self._changing:
            self._sweep_collected_locked()
            every = self._all_hooks_locked()
            if name is None:
                return sorted(every, key=lambda h: (h.kind, h.name, -h.priority, h.seq))
            kinds = sorted({h.kind for h in every})
            return [h for kind in kinds for h in self._matching_locked(kind, name, literal)]

    def points(self, name: Optional[str] = None) -> List[Point]:
        """The live hook points named ``name``, or all of them (those that the point
        sources would make included: they are made first)."""
        if self._sources:
            for source in self._live_sources():
                if name is None:
                    source.make_points(None, "*", _MATCH_ALL)
                else:
                    source.make_points(None, name, None)
        with self._changing:
            if name is None:
                return self._points.every()
            return self._points.named(name)

    def _all_hooks_locked(self) -> List[Handle]:
        """Every hook: the exact ones, then the patterns."""
        handles = [
            h
            for names in self._exact.values()
            for bucket in names.values()
            for h in _members(bucket)
        ]
        handles += [h for bucket in self._patterns.values() for h in bucket]
        return handles

    # --- declared events ----------------------------------------------------------------

    def declare(self, declared: Declared) -> None:
        """Declare an event, after checking the hooks registered for it so far.

        All or nothing: if a hook doesn't accept the spec, the error lists every one,
        and the name stays undeclared; so does a hook registered under the name whose
        kind never runs at an event (nor at a point of that name). The hooks are
        checked without the lock (``inspect.signature`` may run user code); the
        declaration is committed only if they are still the ones checked, else they
        are checked again.
        """
        declarations = self.declarations
        while True:
            if declarations.already(declared):
                return
            hooks = self.hooks(declared.name, literal=True)
            checked = tuple(h for h in hooks if h.kind == "event")
            declarations.refuse_mismatches(declared, checked)
            misplaced = self._commit_declaration(declared, checked)
            if misplaced is None:
                continue
            if misplaced:  # raised here: the message reads the hooks
                raise UnknownNameError(
                    f"cannot declare event {declared.name!r}: a declared name is an event, "
                    f"and {len(misplaced)} hook{'s' if len(misplaced) != 1 else ''} registered "
                    f"under it would then never run:\n"
                    + "\n".join(
                        f"  - {handle!r} ({handle.where}): {handle.kind} hooks run at hook "
                        f"points; an event runs {methods(DECLARED_EVENT.runs)} hooks"
                        for handle in misplaced
                    )
                    + "\nRemove them, or give the event another name",
                    misplaced,
                )
            return

    def _commit_declaration(
        self, declared: Declared, checked: Tuple[Handle, ...]
    ) -> Optional[List[Handle]]:
        """Declare ``declared`` if its event hooks are still ``checked``, the ones checked
        against its spec without the lock; ``None`` if they changed (check them again).

        Returns the hooks registered under its exact name whose kind runs neither at an
        event nor at a point of that name, declaring nothing if there are any (``[]``:
        declared).
        """
        name = declared.name
        with self._changing:
            if self.declarations.already(declared):
                return []
            resolved = self._resolve_locked("event", name, paused_ok=True, literal=True)
            if resolved != checked:
                return None
            points = self._points.named(name)
            taken: Set[str] = {kind for point in points for kind in point.kinds}
            misplaced = [
                handle
                for kind, names in self._exact.items()
                if kind not in DECLARED_EVENT.runs and kind not in taken
                for handle in _members(names.get(name))
            ]
            if misplaced:
                return sorted(misplaced, key=lambda handle: handle.seq)
            self.declarations.add(declared)
            self._declared_count += 1
            self.checking = True
            self._invalidate_locked("event", name, None)
            return []

    def _check_registration(self, handle: Handle) -> None:
        """Refuse a hook that a declared event's spec, or a strict bus, rules out.

        Called before the lock is taken: ``inspect.signature`` may run user code (a
        ``__signature__`` property), and so may a hook's ``repr``.
        """
        declarations = self.declarations
        kind, name, match, hook = handle.kind, handle.name, handle.match, handle.hook
        what = (
            f"{'async ' if handle.is_async else ''}hook {hook_name(hook)} ({where_defined(hook)})"
        )
        if match is None:
            strict = declarations.strict and not handle.optional
            if (
                strict
                or (kind not in DECLARED_EVENT.runs and name in declarations.specs)
                or self._refusing_point(kind, name) is not None
            ):
                self._refuse_unknown_name(kind, name, what, strict)
        if kind != "event" or hook is None:
            return
        for declared in declarations.specs_for(name, match):
            reason = declarations.fit(handle, hook, declared)
            if reason is not None:
                raise TypeError(mismatch_message(what, declared, reason, handle.with_name))
            if handle.is_async and declared.historic:
                raise TypeError(
                    f"{what} would be replayed at once by the historic event "
                    f"{declared.name!r}, and the replay is synchronous; use a plain 'def' "
                    f"hook there"
                )

    def _refusing_point(self, kind: str, name: str) -> Optional[Point]:
        """The point named ``name`` whose kind refuses a hook of ``kind`` on any bus (an
        operation point refuses an event hook, as a declared event refuses a pre hook)."""
        for point in self.points(name):
            if kind not in point.kinds and _refuses_others(point):
                return point
        return None

    def _refuse_unknown_name(self, kind: str, name: str, what: str, strict: bool) -> None:
        """Refuse a hook whose exact name is no place its kind runs at (:func:`known_names`):
        on a ``strict`` bus, any such name; on any bus, a declared event's (a declared name
        is an event: a hook of a kind that never runs at one would never run)."""
        events = set(self.declarations.specs)
        points: Dict[str, Set[str]] = {}
        for point in self.points() if strict else self.points(name):
            points.setdefault(point.name, set()).update(point.kinds)
        known = known_names(kind, events, points)
        if name in known:
            return
        noun = where_it_runs(kind)
        line = (
            f"  - {kind} {what}: no {noun} is named {name!r}{did_you_mean(name, known)}"
            f"{other_namespace(kind, name, events, points)}"
        )
        if strict:
            raise UnknownNameError(
                f"strict bus {self.bus.name!r} refuses a hook for an unknown name:\n{line}\n"
                f"Declare events with @bus.event and define hook points with @bus.hookable "
                f"before hooking them (or make the bus with strict=False)"
            )
        refusing = None if name in events else self._refusing_point(kind, name)
        runs = f"A declared event runs {methods(DECLARED_EVENT.runs)} hooks only"
        if refusing is not None:
            runs = f"A point of kind {refusing.kind!r} runs {methods(refusing.kinds)} hooks only"
        raise UnknownNameError(
            f"bus {self.bus.name!r} refuses a hook that could never run:\n{line}\n{runs}"
        )

    def checked_handles(
        self,
        event: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        result_callback: ResultCallback = None,
    ) -> Tuple[Handle, ...]:
        """The hooks of an emission, once a declared event's arguments are checked.

        Called by the slow paths (``collect``, ``first``, the async twins, emit's full
        loop) on a bus that declares events; a historic emission is recorded (with the
        ``result_callback`` that its replays give their results to).
        """
        declared = self.declarations.specs.get(event)
        if declared is None:
            return self.event_handles(event)
        try:
            declared.binder(*args, **kwargs)
        except TypeError as error:
            self.declarations.refuse_arguments(error, event, args, kwargs)
            raise
        if declared.historic:
            return self.record_emission(event, args, kwargs, result_callback)
        return self.event_handles(event)

    def _replay(self, handle: Handle, history: List[Tuple[str, Any, Any, ResultCallback]]) -> None:
        """Call a new hook of a historic event with each past emission, in order (no lock).

        Under the ``"collect"`` policy every emission is replayed, then one group holds
        the errors of all; ``"raise"`` stops at the first error, ``"log"`` never does.
        An emission made with ``Event.emit_with_results`` gets the hook's result.
        """
        errors: List[Exception] = []
        for event, args, kwargs, result_callback in history:
            results: Optional[List[Any]] = None if result_callback is None else []
            try:
                dispatch_event(self, event, (handle,), args, kwargs, results)
            except HookError as group:
                errors.extend(group.exceptions)
            for result in results or ():
                if result is not None:
                    result_callback(result)  # type: ignore[misc]
        raise_collected(errors, handle.name)

    def unmatched(self) -> Tuple[List[Handle], List[str]]:
        """The hooks whose names match no place their kind runs at, each with a line
        saying why (``check_pending()``): the rule of a strict bus, :func:`known_names`,
        with the emitted names known too."""
        handles = sorted(self.hooks(), key=lambda handle: handle.seq)
        point_kinds: Dict[str, Set[str]] = {}
        for point in self.points():
            point_kinds.setdefault(point.name, set()).update(point.kinds)
        events = self.declarations.known_events()  # a copy, made without a thread switch
        found: List[Handle] = []
        lines: List[str] = []
        for handle in handles:
            if handle.name == "*" or handle.optional:
                continue  # watches everything, names nothing; or may never find its name
            known = known_names(handle.kind, events, point_kinds)
            match = handle.match
            if (handle.name in known) if match is None else any(match(n) for n in known):
                continue
            noun = where_it_runs(handle.kind, "declared or emitted event")
            if match is None:
                reason = f"no {noun} is named {handle.name!r}"
            else:
                reason = f"the pattern {handle.name!r} matches no {noun}"
            hint = did_you_mean(handle.name, known)
            hint += other_namespace(handle.kind, handle.name, events, point_kinds)
            found.append(handle)
            lines.append(f"  - {handle!r} ({handle.where}): {reason}{hint}")
        if lines and self.declarations.emitted_overflow:
            lines.append(
                "  (this bus saw too many distinct event names to remember them all: an "
                "event emitted only lately may be missing here)"
            )
        return found, lines

    def forget(self, name: str) -> None:
        """Drop the past emissions of the historic event ``name`` (or its enum member)."""
        name = check_name(name, "event name", allow_pattern=False)
        with self._changing:
            self._dropped.append(self.declarations.forget(name))  # the user's arguments

    # --- plans ----------------------------------------------------------------------

    def _resolve_locked(
        self, kind: str, name: str, *, paused_ok: bool = False, literal: bool = False
    ) -> Tuple[Handle, ...]:
        """The hooks of ``kind`` that run for ``name``, in order (lock held).

        ``literal``: ``name`` is a name even if it holds glob characters (a torch
        module may be called ``"a[0]"``), so patterns that match it apply.
        """
        if not paused_ok and self._pauses and self._paused_locked(name):
            return ()
        return self._matching_locked(kind, name, literal)

    def _matching_locked(self, kind: str, name: str, literal: bool) -> Tuple[Handle, ...]:
        """The hooks of ``kind`` for ``name``, exact and by pattern, in dispatch order.

        A ``name`` with glob characters asks for that pattern's own hooks, unless it is
        ``literal`` (a torch module may be called ``"a[0]"``).
        """
        bucket = _members(self._exact.get(kind, _NO_NAMES).get(name))
        patterns = self._patterns.get(kind)
        if not patterns and len(bucket) < 2:  # the common case: one check per kind, for
            return tuple(bucket)  # points that ask for all their kinds at each change
        if not literal and is_pattern(name):  # introspection of a pattern: its own hooks
            own = [handle for handle in patterns or () if handle.name == name]
            return tuple(sorted(own, key=_order))
        if not patterns:
            return tuple(sorted(bucket, key=_order))
        handles = [*bucket, *(handle for handle in patterns if handle.match(name))]  # type: ignore[misc]
        handles.sort(key=_order)
        return tuple(handles)

    def plan_event(self, event: str) -> Any:
        """Work out, cache and return the plan of ``event`` (the emit cache missed)."""
        # Emit needs no handles tuple: caching one only for events that are
        # collected (or whose hook raised) saves a tuple and an entry per event.
        plan = self.event_plans.get(event)  # emit missed it under another key (an enum's)
        if plan is not None:
            return plan
        return self._replan_event(event, keep_handles=False)[0]

    def _replan_event(
        self, event: str, *, keep_handles: bool = True
    ) -> Tuple[Any, Tuple[Tuple[Handle, ...], Optional[PointPlan]]]:
        """Work out and cache the plan (and the hooks) of ``event``; return both.

        Any string is an event name, glob characters included: patterns only
        select hooks. A strict bus refuses a name it doesn't know.
        """
        event = check_name(event, "event name", allow_pattern=False)
        declarations = self.declarations
        known: Optional[List[str]] = None
        plan: Any = None
        handles: Tuple[Handle, ...] = ()
        around: Optional[PointPlan] = None
        with self._changing:  # the emit cache missed
            self._sweep_collected_locked()
            if (
                declarations.strict
                and event not in declarations.specs
                and not self._points.has(event)
            ):
                known = [*declarations.specs, *self._points.names()]
            else:
                declarations.saw_emitted(event)
                handles = self._resolve_locked("event", event, literal=True)
                wrapping = {
                    kind: self._resolve_locked(kind, event, literal=True)
                    for kind in _WRAPPING_EVENTS
                }
                plain = self.errors == "raise" and self.tracer is None
                declared = declarations.specs.get(event)
                full = functools.partial(self._emit_full, event)
                if any(wrapping.values()):  # they wrap the whole emission: the full loop
                    plan, around = EventPlan((full,)), PointPlan(wrapping, plain)
                else:
                    plan = event_plan(handles, plain, full, declared)
                if len(self.event_plans) >= _PLAN_CACHE_LIMIT:
                    self.event_plans.clear()
                    self._event_hooks.clear()
                self.event_plans[event] = plan
                if keep_handles:
                    self._event_hooks[event] = (handles, around)
        if known is not None:  # raised here: no message is built under the lock
            raise unknown_emitted(self.bus.name, event, known) from None  # not emit's miss
        return plan, (handles, around)

    def event_hooks(self, event: str) -> Tuple[Tuple[Handle, ...], Optional[PointPlan]]:
        """The handles of ``event`` in order, and the plan of its around hooks (``None``
        when it has none): what the slow loops run (emit_async, collect, first)."""
        hooks = self._event_hooks.get(event)
        if hooks is None:
            # Not re-read from the cache: another thread may clear it at once.
            hooks = self._replan_event(event)[1]
        return hooks

    def keyword_sender(self, event: str, kwargs: Dict[str, Any]) -> Any:
        """The sender of an emission that has no positional argument: a declared event's
        first parameter, passed by keyword; else :data:`NO_SENDER` (no lock: read as
        :meth:`checked_handles` reads the specs)."""
        declared = self.declarations.specs.get(event) if kwargs else None
        if declared is None or declared.sender_keyword is None:
            return NO_SENDER
        return kwargs.get(declared.sender_keyword, NO_SENDER)

    def event_handles(self, event: str) -> Tuple[Handle, ...]:
        """The handles of ``event``, in order (its around hooks aside)."""
        return self.event_hooks(event)[0]

    def record_emission(
        self,
        event: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        result_callback: Optional[Callable[[Any], Any]] = None,
    ) -> Tuple[Handle, ...]:
        """Record an emission of the historic event ``event``; return the hooks to run.

        One locked step: a hook registered meanwhile gets the emission either live
        or replayed, never both and never neither.
        """
        with self._changing:
            self._sweep_collected_locked()
            self.declarations.saw_emitted(event)
            self.declarations.record(event, args, kwargs, result_callback)
            return self._resolve_locked("event", event, literal=True)

    # --- hook points ----------------------------------------------------------------

    def add_point(self, point: Point) -> None:
        """Keep ``point`` (weakly) by name; refuse it if an async hook matches a sync point."""
        self.add_points((point,))

    def add_points(self, points: Sequence[Point]) -> None:
        """:meth:`add_point` for many points (a model's modules), under one lock.

        All or nothing: if an async hook matches one sync point, none is added.
        """
        conflict: Optional[Tuple[Point, Handle]] = None
        with self._changing:
            async_hooks = [h for h in self._all_hooks_locked() if h.is_async]
            added: List[Point] = []
            if not self.checking and any(_refuses_others(point) for point in points):
                self.checking = True  # for good: event hooks take the checked way there
            for point in points:
                handle = self._add_point_locked(point, async_hooks)
                if handle is not None:  # all or nothing: forget those added
                    conflict = (point, handle)
                    for kept in added:
                        self._discard_point_locked(kept)
                    break
                added.append(point)
        if conflict is not None:  # raised here: the message reads the hook's attributes
            refused, handle = conflict
            raise _sync_point_error(refused.name, handle)

    def remove_point(self, point: Point) -> None:
        """Forget ``point``: hook changes no longer reach it (idempotent)."""
        self.remove_points((point,))

    def remove_points(self, points: Sequence[Point]) -> None:
        """:meth:`remove_point` for many points, under one lock."""
        with self._changing:
            for point in points:
                self._discard_point_locked(point)

    def add_source(self, source: PointSource) -> None:
        """Ask ``source`` (held weakly) for points before hooks that may match them.

        From then on, before a hook of any kind but ``"event"`` is registered, the
        registry calls ``source.make_points(kind, name, match)`` (no lock held), and,
        if no source knows the name and no point matches it (and it is not
        ``optional=True``, nor, for an around hook, a declared or emitted event),
        ``source.refuse_unmatched(kind, name, match)``, which may refuse it. A bus
        with no source pays one test of an empty tuple per registration. The source
        makes the points that hooks registered before this call match itself.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> class Names:  # knows the names "a" and "b", makes no point
            ...     def make_points(self, kind, name, match):
            ...         return name in ("a", "b")
            ...     def refuse_unmatched(self, kind, name, match):
            ...         if name in ("aa", "bb"):
            ...             raise ValueError(f"no point named {name!r}")
            >>> names = Names()
            >>> bus.registry.add_source(names)
            >>> bus.post("aa", print)
            Traceback (most recent call last):
            ValueError: no point named 'aa'
            >>> _ = bus.post("a", print)
            >>> bus.registry.remove_source(names)
            >>> _ = bus.post("aa", print)
        """
        with self._changing:
            live = tuple(ref for ref in self._sources if ref() is not None)
            self._sources = (*live, weakref.ref(source))

    def remove_source(self, source: PointSource) -> None:
        """Stop asking ``source`` for points (idempotent); its points stay until removed.

        Example: see :meth:`add_source`.
        """
        with self._changing:
            self._sources = tuple(
                ref for ref in self._sources if ref() is not None and ref() is not source
            )

    def _live_sources(self) -> List[PointSource]:
        live = [source for source in (ref() for ref in self._sources) if source is not None]
        if len(live) != len(self._sources):  # a source died: forget it
            with self._changing:
                self._sources = tuple(ref for ref in self._sources if ref() is not None)
        return live

    def _prepare_points(self, handle: Handle) -> None:
        """Before ``handle`` is registered (no lock held): the sources make the points
        it matches, or one refuses it as a typo (nothing is registered then)."""
        kind, name, match = handle.kind, handle.name, handle.match
        sources = self._live_sources()
        known = [source.make_points(kind, name, match) for source in sources]
        if any(known) or handle.optional:
            return
        with self._changing:
            points = self._points
            if match is None:
                found = points.has(name)
            else:
                found = any(match(each) for each in points.names())
            if not found and kind in EVENT_RUNS:  # around hooks wrap events too
                events = {*self.declarations.emitted, *self.declarations.specs}
                found = name in events if match is None else any(map(match, events))
        if not found:
            for source in sources:
                source.refuse_unmatched(kind, name, match)

    def _add_point_locked(self, point: Point, handles: Iterable[Handle]) -> Optional[Handle]:
        """Keep ``point``, unless it is sync and one of ``handles`` (all hooks) is async.

        Returns that async handle, keeping nothing, for the caller to raise about
        once it released the lock (a handle's repr reads the user's callable).
        """
        if not point.is_async:
            for handle in handles:
                if (
                    handle.is_async
                    and handle.kind in point.kinds
                    and handle.applies_to(point.name)
                ):
                    return handle
        self._points.add(point)
        return None

    def _discard_point_locked(self, point: Point) -> None:
        self._points.discard(point)

    def _async_conflict_locked(self, handle: Handle) -> Optional[str]:
        """The name of a sync point that the async ``handle`` would apply to, if any."""
        for point_name, points in self._points.items():
            if handle.applies_to(point_name) and any(not p.is_async for p in points):
                return point_name
        return None

    def locked(self) -> bool:
        """Whether the bus lock is held now, by any thread.

        A finalizer that would warn checks it first: the garbage collector may run it
        while the lock is held, and a warning handler may use the bus.
        """
        return self._lock.locked()

    def has_hooks(self, kinds: Sequence[str]) -> bool:
        """Whether any hook of these kinds is registered (under any name or pattern).

        Lets an adapter that adds many points at once skip asking each for its
        plan when no hook could apply. Read without the lock: a hook registered
        after the points were added reaches them through :meth:`Point.invalidate`.
        """
        exact, patterns = self._exact, self._patterns
        return any(exact.get(kind) or patterns.get(kind) for kind in kinds)

    def plan(self, point: Point) -> Optional[PointPlan]:
        """The plan of ``point`` as the hooks are now; ``None`` when no hook applies."""
        name, kinds = point.name, point.kinds  # read before the lock: the point's own code
        hooks: Dict[str, Tuple[Handle, ...]] = {}
        fast: Dict[str, FastHooks] = {}
        found = has_async = False
        self._lock.acquire()  # not ``with``: this runs for each point whose hooks changed
        try:
            if self._collected:
                self._sweep_collected_locked()
            # A point's name is a name, whatever it holds (a torch module "a[0]"). The
            # pause test of _resolve_locked, once for every kind of the point.
            if self._pauses and self._paused_locked(name):
                return None
            exact, patterns = self._exact, self._patterns
            plain = self.errors == "raise" and self.tracer is None
            none: FastHooks = () if plain else None
            # One loop, not a comprehension, for each kind's hooks and their bare callables
            # (what PointPlan works out from the hooks alone): a plan may change per call
            # (a benchmark row). _matching_locked's and fast_hooks' common cases inline:
            # no pattern of the kind, and a name's lone hook kept as the handle itself.
            for kind in kinds:
                names = exact.get(kind)
                bucket = None if names is None else names.get(name)
                if (patterns and patterns.get(kind)) or isinstance(bucket, list):
                    handles = hooks[kind] = self._matching_locked(kind, name, True)
                    if not handles:
                        fast[kind] = none
                        continue
                    found = True
                    bare = fast[kind] = fast_hooks(handles, plain)
                    if bare is None and not has_async:
                        has_async = any(handle.is_async for handle in handles)
                elif bucket is None:
                    hooks[kind] = ()
                    fast[kind] = none
                else:
                    hooks[kind] = (bucket,)
                    found = True
                    if bucket.is_async:
                        fast[kind], has_async = None, True
                    else:
                        fast[kind] = (bucket._hook,) if plain and bucket._options.bare else None
        finally:
            if self._stale or self._dropped:  # a weak hook swept: tell, let go
                self._unlock()
            else:
                self._lock.release()  # _unlock's common case, without the call
        return PointPlan(hooks, plain, fast, has_async) if found else None

    def _invalidate_locked(self, kind: str, name: str, match: Optional[Matcher]) -> None:
        """Forget the plans that a change of hooks for ``name`` (or a pattern) affects."""
        if kind in EVENT_RUNS:  # an around hook wraps events and points
            if match is None:
                self.event_plans.pop(name, None)
                self._event_hooks.pop(name, None)
            else:
                self.event_plans.clear()
                self._event_hooks.clear()
        if kind not in AT_POINTS:
            return
        if match is None:
            for ref in self._points.refs(name):
                point = ref()
                if point is not None:
                    self._stale.append(point)
        else:
            self._stale += self._points.matching(match)

    def _invalidate_all_locked(self) -> None:
        self.event_plans.clear()
        self._event_hooks.clear()
        self._stale += self._points.every()

    # --- the one way out of the lock --------------------------------------------------

    def _unlock(self) -> None:
        """Release the lock; then let go of what was dropped, and tell the points.

        The end of every locked section (see the module docstring). The dropped
        objects go first, with no lock held: a finalizer may use the bus. A point
        is told once, however many changes reached it; a point's error propagates
        after the others were told.
        """
        stale, dropped = self._stale, self._dropped
        if stale:
            self._stale = []
        if dropped:
            self._dropped = []
        self._lock.release()
        if dropped:
            del dropped[:]  # the last references to the user's objects may go here
        if not stale:
            return
        if len(stale) == 1:  # the common case: its error propagates as the loop's would
            stale[0].invalidate()
            return
        failure: Optional[BaseException] = None
        for point in dict.fromkeys(stale):
            try:
                point.invalidate()
            except BaseException as error:  # rare: a point refused its plan
                failure = failure or error
        if failure is not None:
            raise failure


class Facade(Protocol):
    """What :func:`on_event` needs of the bus it registers for: the bus's registry."""

    @property
    def registry(self) -> Registry: ...


def on_event(bus: Facade, event: Any, hook: Any = None, /, **options: Any) -> Any:
    """``bus.on(event, hook, **options)``, whose body this is: ``bus.on`` runs this code
    as its own (:func:`facade_running`), one frame, and :meth:`Registry.register` of an
    event hook with no scope calls it.

    The hot path of register + remove (``benchmarks/run.py``, row 2): the handle is built
    here, as :meth:`Handle.plain` builds it, rather than in a frame of its own, and the
    flat path (a hook for an event's exact name, with no declaration, strict names or
    open scope to consult) takes the lock once and notes nothing for after it.
    :meth:`Registry._register_checked` takes every other case.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> handle = on_event(bus, "saved", print)
        >>> bus.emit("saved", "a.txt")
        a.txt
        >>> handle.remove()
    """
    registry = bus.registry
    if hook is None:  # the decorator form
        return registry.decorator("event", event, options)
    if type(event) is not str:  # an enum member (or a mistake): a plain str, or raise
        event = check_name(event, "event name", allow_pattern=True)
    try:
        match = registry._names[event]
    except KeyError:
        match = check_and_cache(registry._names, event, "event name")
    if type(hook) is FunctionType and not hook.__code__.co_flags & _SHAPED_CODE:
        is_async = MARKED_COROUTINES and hasattr(hook, "_is_coroutine_marker")
    else:
        is_async = _checked_shape("event", hook)
    handle: Handle
    if options:
        priority, once, target, weak, with_name, optional = parse_options("event", options)
        if weak:  # counted here, before the handle's call adds references to it
            refuse_unheld_hook(hook)
        handle = _new_object(Handle if match is not None else _EventHandle)
        Handle.__init__(
            handle, registry, "event", event, hook, priority, 0, once, target, weak, is_async,
            match, with_name, optional,
        )  # fmt: skip
    else:  # Handle.plain's stores, without its frame (parity: tests/test_fast_copies.py),
        # less seq and _registered: the path taken stores them (the flat path its last).
        handle = _new_object(Handle) if match is not None else _EventHandle()  # pyright: ignore[reportCallIssue]
        handle.registry = registry
        handle.kind = "event"
        handle.name = event
        handle.is_async = is_async
        handle.match = match
        handle._options = DEFAULT_OPTIONS
        handle._hook = hook
    if match is not None or registry.checking or (opened_anywhere and open_scopes.get()):
        handle.seq, handle._registered = 0, False
        return registry._register_checked(handle, None)
    lock = registry._lock
    try:
        try:
            lock.free.pop()  # lock.acquire(), inline (see _mutex.py)
        except IndexError:  # held: wait for it
            lock.wait()
        try:
            # A declaration came meanwhile (check the hook), or a weak hook's object
            # died (sweep it): the checked path, which takes the lock the full way.
            if not (registry.checking or registry._collected):
                names = registry._events
                bucket = names.setdefault(event, handle)
                if bucket is not handle:  # the name has hooks already
                    duplicate = _same_registration(_members(bucket), handle)
                    if duplicate is not None:
                        raise _Duplicate(duplicate)
                    if isinstance(bucket, list):
                        bucket.append(handle)
                    else:
                        names[event] = [bucket, handle]
                handle.seq = next(registry._seq)
                handle._registered = True
                # _invalidate_locked() for an event name; an event's hooks are cached
                # only with its plan, so no plan means nothing else to forget. (A test
                # before the pop: no call where there is no plan, as on row 2.)
                if event in registry.event_plans:
                    registry.event_plans.pop(event, None)
                    registry._event_hooks.pop(event, None)
                return handle
        finally:  # nothing was noted for after the lock
            lock.free.append(True)  # lock.release(), inline
            if lock.waiting:
                lock.wake()
    except _Duplicate as found:  # raised here: the message reads the user's hook
        raise _duplicate_error(handle, found.handle) from None
    handle.seq, handle._registered = 0, False
    return registry._register_checked(handle, None)


def point_hook_body(kind: str) -> Callable[..., Any]:
    """The body of ``bus.pre``, ``bus.post`` or ``bus.exception`` (``kind``): the bus
    method runs it as its own (:func:`facade_running`), one frame, as ``bus.on`` runs
    :func:`on_event`.

    A plain sync function for a name checked before, with no option, goes straight to
    :meth:`Registry._register_point_hook`, the flat point path (a hook added and
    removed around each call is a benchmark row: the frame and the checks of
    :meth:`Registry.register` it saves are about 3,000 instructions of it); every other
    case is :meth:`Registry.register`'s, which decides the same way for that case.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> double = bus.wrap(lambda x: 2 * x, "double")
        >>> handle = point_hook_body("post")(bus, "double", lambda ctx: None)
        >>> handle.kind, double(2)
        ('post', 4)
    """

    def on_point(bus: Facade, name: Any, hook: Any = None, /, **options: Any) -> Any:
        registry = bus.registry
        if hook is None:  # the decorator form
            return registry.decorator(kind, name, options)
        if (
            options
            or hook.__class__ is not FunctionType
            or hook.__code__.co_flags & _SHAPED_CODE
            or (MARKED_COROUTINES and hasattr(hook, "_is_coroutine_marker"))
            or name.__class__ is not str
            or registry._names.get(name, _MATCH_ALL) is not None  # a pattern, or unchecked
        ):
            return registry.register(kind, name, hook, options)
        return registry._register_point_hook(kind, name, hook)

    return on_point


F = TypeVar("F", bound=Callable[..., Any])


def facade_running(body: Callable[..., Any]) -> Callable[[F], F]:
    """A decorator: the bus method it decorates (its name, signature and docs) runs
    ``body``'s code as its own, a frame less than calling ``body`` from its body.

    ``bus.on`` is one: register + remove is a benchmark row, and a frame is about 6% of
    it. The decorated method's own body says what it does (it calls ``body``), and
    ``inspect.signature`` reads its signature (``__wrapped__``).

    Example:
        >>> def add(owner, a, b=1):
        ...     return a + b
        >>> class Owner:
        ...     @facade_running(add)
        ...     def add(self, a, b=1):
        ...         "Add two numbers."
        ...         return add(self, a, b)
        >>> Owner().add(2), Owner.add.__doc__
        (3, 'Add two numbers.')
    """

    def decorate(facade: F) -> F:
        code = body.__code__
        made = FunctionType(
            code, body.__globals__, facade.__name__, body.__defaults__, body.__closure__
        )
        functools.update_wrapper(made, facade)
        return made  # type: ignore[return-value]

    return decorate
