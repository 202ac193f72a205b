"""The registry behind every bus: where hooks live, and the plans dispatch runs.

Hooks are stored by exact name, and patterns by kind. An event's plan is cached
in a dict (read by ``emit`` without a lock); a hook point keeps its own plan and
asks :meth:`Registry.plan` for a new one after ``Point.invalidate()``.
Every change to the hooks takes the lock and forgets the plans it affects, which
are then worked out again at the next dispatch. That is the whole copy-on-write
scheme: dispatch never locks, never sees a list being changed, and pays for
matching patterns only once per name. Points hear of a change only after the
lock is released (see ``_plan.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from inspect import CO_COROUTINE
from types import FunctionType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from ._declared import Declarations, Declared, check_registration, replay
from ._errors import ErrorPolicy
from ._handle import (
    MARKED_COROUTINES,
    Handle,
    Scope,
    _open_scopes,
    innermost_scope,
    is_async_callable,
)
from ._names import Matcher, check_and_cache, check_name
from ._options import method_name, parse_options
from ._pause import NO_PAUSES
from ._plan import Point, PointPlan, event_plan
from ._points import PointTable, async_hook_error, notify, sync_point_error
from ._store import HookStore
from ._trace import Trace, Tracer, tracer_for

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["Registry"]

# Emitting many distinct names (say f"user.{id}") must not grow the cache forever.
_PLAN_CACHE_LIMIT = 65_536

_NO_POINTS: Tuple[Point, ...] = ()


class _Released:
    """Stands for a lock released early, so that the ``finally`` releasing it is a no-op."""

    __slots__ = ()

    def release(self) -> None:
        pass


_NO_LOCK: Any = _Released()


def _what(kind: str) -> str:
    return "event" if kind == "event" else "hook point"


def _is_async_hook(kind: str, hook: Any) -> bool:
    """Whether ``hook``, which is not a plain function, is async; refuse what isn't callable."""
    if not callable(hook):
        raise TypeError(
            f"{method_name(kind)}() needs a callable hook, got {type(hook).__name__} "
            f"{hook!r}; accepted: a function, method, lambda, functools.partial or "
            f"callable object"
        )
    return is_async_callable(hook)


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
    nothing with it held calls a point, a user's code, a warning or a logger.

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

    def __init__(self, bus: EventBus, errors: ErrorPolicy) -> None:
        self.bus = bus
        self.errors: ErrorPolicy = errors
        """The error policy; change it with :meth:`set_errors`."""
        self.tracer: Optional[Tracer] = None
        """What dispatch records into: the open traces (none, one :class:`Trace`, or a
        group of them); :meth:`set_trace` changes it."""
        self.event_plans: Dict[str, Any] = {}
        """Event name -> plan, read by ``emit`` without a lock (never replaced, only cleared)."""
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._store = HookStore()
        self._exact, self._patterns = self._store.exact, self._store.patterns  # the hot path's
        self._event_handles: Dict[str, Tuple[Handle, ...]] = {}
        self._points = PointTable()
        self._stale: List[Point] = []  # points to invalidate once the lock is released
        self._pauses = NO_PAUSES
        self._collected: List[Handle] = []
        self._traces: Tuple[Trace, ...] = ()  # open, in the order they opened
        # Names already checked, with their glob matcher (None for a plain name).
        self._names: Dict[str, Optional[Matcher]] = {}
        self.declarations = Declarations()
        """The declared events, their history, and the names emitted so far."""
        self.checking = False
        self._declared_count = 0  # bumped by each declaration, read by register()
        """Whether registration checks names and specs: set for good by ``strict=True``
        or by the first declaration, so that a bus that uses neither pays one test."""

    # --- registration and removal -----------------------------------------------------

    def register(
        self,
        kind: str,
        name: str,
        hook: Callable[..., Any],
        options: Mapping[str, Any],
        *,
        scope: Optional[Scope] = None,
    ) -> Handle:
        """Check everything, then register; nothing is half-registered on failure.

        This is the hot path of register + remove, hence the shortcuts: names
        checked once (with their pattern matcher) and cached, no option parsing
        when there are none, plain functions told sync without ``inspect``, and a
        flat path for the common case (a hook for an event's exact name, with no
        declaration, strict names or scope to consult); :meth:`_register_checked`
        takes every other case. If a point matched by the hook fails to take it (a
        warning turned into an error, say), the hook is unregistered again and the
        error propagates.
        """
        try:
            match = self._names[name]
        except (KeyError, TypeError):  # TypeError: unhashable, so check_name explains
            match = check_and_cache(self._names, name, f"{_what(kind)} name")
        if hook.__class__ is FunctionType:  # told sync or async without inspect
            is_async = hook.__code__.co_flags & CO_COROUTINE != 0 or (
                MARKED_COROUTINES and getattr(hook, "_is_coroutine_marker", None) is not None
            )
        else:
            is_async = _is_async_hook(kind, hook)
        if options:
            priority, once, target, weak, with_name = parse_options(kind, options)
            handle = Handle(
                self.bus, kind, name, hook, priority, 0, once, target, weak, is_async, match,
                with_name,
            )  # fmt: skip
        else:
            handle = Handle.plain(self.bus, kind, name, hook, is_async, match)
        if (
            kind != "event"
            or match is not None
            or self.checking
            or scope is not None
            or _open_scopes.get()
        ):
            return self._register_checked(handle, scope)
        lock = self._lock
        lock.acquire()  # not ``with``: it costs twice as much
        try:
            if not self.checking:  # else a declaration came meanwhile: check the hook
                if self._collected:
                    self._sweep_collected_locked()
                handle.seq = next(self._seq)
                names = self._exact.get("event")
                if names is None:
                    names = self._exact["event"] = {}
                bucket = names.get(name)
                if bucket is None:
                    names[name] = [handle]
                else:
                    bucket.append(handle)
                handle._registered = True
                self.event_plans.pop(name, None)  # _invalidate_locked() for an event name
                self._event_handles.pop(name, None)
                return handle
        finally:
            lock.release()
        return self._register_checked(handle, scope)

    def _register_checked(self, handle: Handle, scope: Optional[Scope]) -> Handle:
        """:meth:`register` of every case but the common one: specs, strict names,
        scopes, patterns, async hooks, and hook points to tell of the change."""
        kind, name, match = handle.kind, handle.name, handle.match
        declared_count = self._declared_count
        checking = self.checking
        if checking:  # specs and strict names: checked before the lock is taken
            check_registration(self, handle)
        if scope is None and _open_scopes.get():
            scope = innermost_scope(self.bus)
        history: Any = ()
        lock = self._lock
        lock.acquire()
        while self._declared_count != declared_count:  # declared meanwhile: check again
            lock.release()
            declared_count, checking = self._declared_count, True
            check_registration(self, handle)
            lock.acquire()
        try:
            if self._collected:
                self._sweep_collected_locked()
            if handle.is_async and kind != "event":
                conflict = self._points.async_conflict(handle)
                if conflict is not None:
                    lock.release()  # the message reads the hook: never under the lock
                    lock = _NO_LOCK
                    raise async_hook_error(handle, conflict)
            handle.seq = next(self._seq)
            if match is None:
                self._exact.setdefault(kind, {}).setdefault(name, []).append(handle)
            else:
                self._patterns.setdefault(kind, []).append(handle)
            handle._registered = True
            self._invalidate_locked(kind, name, match)
            stale = self._take_stale_locked() if self._stale else _NO_POINTS
            if checking and kind == "event":
                history = self.declarations.history_for(name, match)
        finally:
            lock.release()
        if stale:
            try:
                notify(stale)
            except BaseException:
                self.unregister(handle)  # all or nothing, even for a point's error
                raise
        if scope is not None:
            scope.add(handle)
        if history:
            replay(self, handle, history)
        return handle

    def unregister(self, handle: Handle) -> None:
        """``handle.remove()``: unregister one handle known to be this bus's (idempotent)."""
        lock = self._lock
        lock.acquire()  # not ``with``: it costs twice as much, on the hot path of remove()
        try:
            if handle.kind == "event" and handle.match is None and handle._registered:
                # _drop_locked() inlined for the common case: a call costs a third of the rest
                handle._registered = False
                name = handle.name
                names = self._exact["event"]
                bucket = names[name]
                bucket.remove(handle)
                if not bucket:
                    del names[name]
                self.event_plans.pop(name, None)
                self._event_handles.pop(name, None)
                return
            self._drop_locked(handle)
            stale = self._take_stale_locked() if self._stale else _NO_POINTS
        finally:
            lock.release()
        if stale:
            notify(stale)

    def remove(self, handles: Sequence[Handle]) -> None:
        """Unregister ``handles``, all of this bus (checked first: nothing half-removed)."""
        for handle in handles:  # before the lock: the message reads the user's hook
            if handle.bus is not self.bus:
                raise ValueError(
                    f"{handle!r} belongs to the bus {handle.bus.name!r}, not to "
                    f"{self.bus.name!r}; remove it with handle.remove() or through its own bus"
                )
        lock = self._lock
        lock.acquire()
        try:
            self._remove_locked(handles)
            stale = self._take_stale_locked() if self._stale else _NO_POINTS
        finally:
            lock.release()
        if stale:
            notify(stale)

    def clear(self, name: Optional[str] = None) -> None:
        """Unregister every hook, or every hook registered under exactly ``name``."""
        with self._changing():
            handles = [h for h in self._store.all() if name is None or h.name == name]
            self._remove_locked(handles)

    def claim(self, handle: Handle) -> bool:
        """Atomically unregister a ``once`` hook; True for the one caller that won."""
        with self._lock:  # not _changing(): a once hook's dispatch waits for this
            if not handle._registered:
                return False
            self._remove_locked([handle])
            stale = self._take_stale_locked() if self._stale else _NO_POINTS
        notify(stale)
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
                self._remove_locked([handle])
                stale = self._take_stale_locked() if self._stale else _NO_POINTS
            finally:
                self._lock.release()
            notify(stale)
        else:
            self._collected.append(handle)

    def _remove_locked(self, handles: Sequence[Handle]) -> None:
        for handle in handles:  # this bus's own: remove() checked those it was given
            self._drop_locked(handle)

    def _drop_locked(self, handle: Handle) -> None:
        if not handle._registered:
            return  # removed already, by another thread or an earlier call
        handle._registered = False
        if handle.match is None:
            names = self._exact[handle.kind]
            bucket = names[handle.name]
            bucket.remove(handle)
            if not bucket:
                del names[handle.name]
        else:
            self._patterns[handle.kind].remove(handle)
        self._invalidate_locked(handle.kind, handle.name, handle.match)

    def _sweep_collected_locked(self) -> None:
        while self._collected:
            self._remove_locked([self._collected.pop()])

    # --- state: errors, trace, pauses, snapshots ----------------------------------------

    def set_errors(self, policy: ErrorPolicy) -> None:
        """Switch the error policy (checked by the caller); every plan is worked out again."""
        with self._changing():
            self.errors = policy
            self._invalidate_all_locked()

    def set_trace(self, trace: Trace, is_open: bool) -> bool:
        """Open or close ``trace`` (traces overlap in any order); False if it already was."""
        with self._changing():
            if any(each is trace for each in self._traces) == is_open:
                return False
            others = tuple(each for each in self._traces if each is not trace)
            self._traces = (*others, trace) if is_open else others
            self.tracer = tracer_for(self._traces)
            self._invalidate_all_locked()
        return True

    def pause(self, name: Optional[str], delta: int) -> None:
        """Add ``delta`` (+1 or -1) to the pauses of ``name`` (a name, a pattern, or None: all)."""
        with self._changing():
            self._pauses = self._pauses.changed(name, delta)
            self._invalidate_all_locked()

    def snapshot(self) -> Tuple[Any, ...]:
        """Everything :meth:`restore` needs to undo later changes (the pytest plugin)."""
        with self._changing():
            self._sweep_collected_locked()
            snapshot = (
                self._store.copy(),
                self.errors,
                self._traces,
                self._pauses,
            )
        return snapshot

    def restore(self, snapshot: Tuple[Any, ...]) -> None:
        """Put hooks, error policy, trace and pauses back as :meth:`snapshot` saw them.

        Hooks added since are unregistered, hooks removed since come back, except
        weakly held ones whose object died meanwhile.
        """
        stored, errors, traces, pauses = snapshot
        with self._changing():
            self._sweep_collected_locked()
            self._store.restore(stored)
            self.errors, self._traces, self.tracer = errors, traces, tracer_for(traces)
            self._pauses = pauses
            self._invalidate_all_locked()

    # --- introspection ------------------------------------------------------------------

    def hooks(self, name: Optional[str] = None) -> List[Handle]:
        """All hooks (by kind, name, order), or those that would run for ``name``, kind by kind."""
        with self._changing():
            self._sweep_collected_locked()
            return self._store.listing(name)

    def points(self, name: Optional[str] = None) -> List[Point]:
        """The live hook points named ``name``, or all of them."""
        with self._lock:
            return self._points.all() if name is None else self._points.named(name)

    # --- declared events ----------------------------------------------------------------

    def commit_declaration(self, declared: Declared, checked: Tuple[Handle, ...]) -> bool:
        """Declare ``declared`` if its event hooks are still ``checked``, the ones checked
        against its spec without the lock; False if they changed (check them again)."""
        with self._lock:
            if self.declarations.already(declared):
                return True
            if self._resolve_locked("event", declared.name, paused_ok=True) != checked:
                return False
            self.declarations.add(declared)
            self._declared_count += 1
            self.checking = True
            self._invalidate_locked("event", declared.name, None)
            return True

    def forget(self, name: str) -> None:
        """Drop the past emissions of the historic event ``name``."""
        with self._lock:
            self.declarations.forget(name)

    # --- plans ----------------------------------------------------------------------

    def _resolve_locked(
        self, kind: str, name: str, *, paused_ok: bool = False, literal: bool = False
    ) -> Tuple[Handle, ...]:
        """The hooks of ``kind`` that run for ``name``, in order (lock held).

        ``literal``: ``name`` is a name even if it holds glob characters (a torch
        module may be called ``"a[0]"``), so patterns that match it apply.
        """
        if not paused_ok and self._pauses and self._pauses.covers(name):
            return ()
        return self._store.matching(kind, name, literal)

    def plan_event(self, event: str) -> Any:
        """Work out, cache and return the plan of ``event`` (the emit cache missed)."""
        # Emit needs no handles tuple: caching one only for events that are
        # collected (or whose hook raised) saves a tuple and an entry per event.
        return self._replan_event(event, keep_handles=False)[0]

    def _replan_event(
        self, event: str, *, keep_handles: bool = True
    ) -> Tuple[Any, Tuple[Handle, ...]]:
        """Work out and cache the plan (and the handles) of ``event``; return both."""
        check_name(event, "event name", allow_pattern=False)
        declarations = self.declarations
        with self._lock:  # not _changing(): the emit cache missed
            self._sweep_collected_locked()
            declarations.saw_emitted(event)
            handles = self._resolve_locked("event", event)
            plain = self.errors == "raise" and self.tracer is None
            plan = event_plan(handles, plain, declarations.specs.get(event))
            if len(self.event_plans) >= _PLAN_CACHE_LIMIT:
                self.event_plans.clear()
                self._event_handles.clear()
            self.event_plans[event] = plan
            if keep_handles:
                self._event_handles[event] = handles
            stale = self._take_stale_locked() if self._stale else _NO_POINTS
        notify(stale)
        return plan, handles

    def event_handles(self, event: str) -> Tuple[Handle, ...]:
        """The handles of ``event``, in order (for the slow loops: emit_async, collect)."""
        handles = self._event_handles.get(event)
        if handles is None:
            # Not re-read from the cache: another thread may clear it at once.
            handles = self._replan_event(event)[1]
        return handles

    def record_emission(
        self, event: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Tuple[Handle, ...]:
        """Record an emission of the historic event ``event``; return the hooks to run.

        One locked step: a hook registered meanwhile gets the emission either live
        or replayed, never both and never neither.
        """
        with self._lock:
            self._sweep_collected_locked()
            self.declarations.saw_emitted(event)
            self.declarations.record(event, args, kwargs)
            return self._resolve_locked("event", event)

    def add_point(self, point: Point) -> None:
        """Keep ``point`` (weakly) by name; refuse it if an async hook matches a sync point."""
        self.add_points((point,))

    def add_points(self, points: Sequence[Point]) -> None:
        """:meth:`add_point` for many points (a model's modules), under one lock.

        All or nothing: if an async hook matches one sync point, none is added.
        """
        with self._lock:
            async_hooks = [h for h in self._store.all() if h.is_async]
            added: List[Point] = []
            conflict: Optional[Tuple[Point, Handle]] = None
            for point in points:
                handle = self._points.add(point, async_hooks)
                if handle is not None:  # all or nothing: forget those added
                    conflict = (point, handle)
                    for kept in added:
                        self._points.discard(kept)
                    break
                added.append(point)
        if conflict is not None:  # raised here: the message reads the hook's attributes
            refused, handle = conflict
            raise sync_point_error(refused.name, handle)

    def remove_point(self, point: Point) -> None:
        """Forget ``point``: hook changes no longer reach it (idempotent)."""
        self.remove_points((point,))

    def remove_points(self, points: Sequence[Point]) -> None:
        """:meth:`remove_point` for many points, under one lock."""
        with self._lock:
            for point in points:
                self._points.discard(point)

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
        name = point.name
        lock = self._lock
        lock.acquire()  # not _changing(): this runs for each point whose hooks changed
        try:
            if self._collected:
                self._sweep_collected_locked()
            # A point's name is a name, whatever it holds (a torch module "a[0]").
            hooks = {kind: self._resolve_locked(kind, name, literal=True) for kind in point.kinds}
            plain = self.errors == "raise" and self.tracer is None
            stale = self._take_stale_locked() if self._stale else _NO_POINTS
        finally:
            lock.release()
        if stale:
            notify(stale)
        if not any(hooks.values()):
            return None
        return PointPlan(hooks, plain)

    def _invalidate_locked(self, kind: str, name: str, match: Optional[Matcher]) -> None:
        """Forget the plans that a change of hooks for ``name`` (or a pattern) affects."""
        if kind == "event":
            if match is None:
                self.event_plans.pop(name, None)
                self._event_handles.pop(name, None)
            else:
                self.event_plans.clear()
                self._event_handles.clear()
            return
        self._stale += self._points.affected(name, match)

    def _invalidate_all_locked(self) -> None:
        self.event_plans.clear()
        self._event_handles.clear()
        self._stale += self._points.all()

    @contextlib.contextmanager
    def _changing(self) -> Generator[None, None, None]:
        """Hold the lock; once it is released, tell the points what changed meanwhile."""
        with self._lock:
            yield
            stale = self._take_stale_locked() if self._stale else _NO_POINTS
        notify(stale)

    def _take_stale_locked(self) -> Sequence[Point]:
        """The points to invalidate (once the lock is released), each once."""
        if not self._stale:
            return _NO_POINTS
        stale, self._stale = self._stale, []
        return stale if len(stale) == 1 else tuple(dict.fromkeys(stale))
