"""The registry behind every bus: where hooks live, and the plans dispatch runs.

Hooks are stored by exact name, and patterns by kind. A *plan* is what one
dispatch of one name runs: the matching hooks, sorted, as an immutable tuple. An
event's plan is cached in a dict (read by ``emit`` without a lock); a hook
point's plan is kept on the point. Every change to the hooks takes the lock and
forgets the plans it affects, which are then worked out again at the next
dispatch. That is the whole copy-on-write scheme: dispatch never locks, never
sees a list being changed, and pays for matching patterns only once per name.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import sys
import threading
import weakref
from inspect import CO_COROUTINE
from types import FunctionType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union, cast

from ._dispatch import PointPlan
from ._errors import ErrorPolicy, add_note, describe
from ._handle import Handle, Scope, _open_scopes, innermost_scope, plain_handle
from ._names import Matcher, check_name, is_pattern, matcher_for
from ._priority import to_priority
from ._trace import Trace
from ._wrapper import HookPoint

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["NO_HOOKS", "Registry"]

H = TypeVar("H", bound=Callable[..., Any])

_OPTIONS = ("priority", "once", "target", "weak", "with_name")

# An event plan is either a tuple of plain callables (the fast path) or an
# _EventPlan holding the handles, when any rare feature is in play.
_FastPlan = Tuple[Callable[..., Any], ...]

# Emitting many distinct names (say f"user.{id}") must not grow the cache forever.
_PLAN_CACHE_LIMIT = 65_536
# Checked names are cached only to speed up registering the same names again: a
# few hundred cover a program's hooks without holding many dynamic names.
_NAME_CACHE_LIMIT = 1_024

# Python 3.12+: inspect.markcoroutinefunction marks sync functions as async.
_MARKED_COROUTINES = sys.version_info >= (3, 12)


class _EventPlan:
    """The hooks of one event in order, when the plain fast loop can't run them."""

    __slots__ = ("handles",)

    def __init__(self, handles: Tuple[Handle, ...]) -> None:
        self.handles = handles


# The plan of an event without hooks: emit returns at once, with no test on the
# tuple path (a plain tuple plan always has hooks).
NO_HOOKS = _EventPlan(())


def _is_async_callable(hook: Any) -> bool:
    if inspect.iscoroutinefunction(hook):
        return True
    call: Any = getattr(hook.__class__, "__call__", None)  # noqa: B004 - the method, not callability
    return call is not None and inspect.iscoroutinefunction(call)


def _order(handle: Handle) -> Tuple[int, int]:
    return (-handle.priority, handle.seq)


_NO_NAMES: Dict[str, List[Handle]] = {}


def _what(kind: str) -> str:
    return "event" if kind == "event" else "hook point"


def _method(kind: str) -> str:
    """The registering method's name, for messages (the torch adapter adds kinds)."""
    return "on" if kind == "event" else kind


class Registry:
    """The hook store and plan cache of an :class:`EventBus` (its base class).

    Methods named ``*_locked`` expect the caller to hold ``_lock``, a plain
    (non-reentrant) lock: nothing that runs with it held may take it again.
    """

    name: str
    _errors: ErrorPolicy

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = itertools.count()
        # kind -> name -> hooks, in registration order (nested rather than keyed by
        # (kind, name): a tuple key would cost 56 bytes more per name).
        self._exact: Dict[str, Dict[str, List[Handle]]] = {}
        self._patterns: Dict[str, List[Handle]] = {}
        # Any, not Union[_FastPlan, _EventPlan]: emit tells them apart by class, the
        # fastest test there is, which type checkers don't narrow on.
        self._event_plans: Dict[str, Any] = {}
        self._event_handles: Dict[str, Tuple[Handle, ...]] = {}
        self._points: Dict[str, weakref.WeakSet[HookPoint]] = {}
        self._points_sweep_at = 64
        self._pauses: Dict[Optional[str], int] = {}
        self._pause_matchers: Dict[str, Matcher] = {}
        self._collected: List[Handle] = []
        self._tracer: Optional[Trace] = None
        # Names already checked, with their glob matcher (None for a plain name).
        self._names: Dict[str, Optional[Matcher]] = {}

    # --- registration and removal -----------------------------------------------------

    def _register_or_decorate(
        self, kind: str, name: str, hook: Any, options: Dict[str, Any]
    ) -> Any:
        if hook is None:
            # Check everything now, so that a bad decorator fails where it is written.
            check_name(name, f"{_what(kind)} name", allow_pattern=True)
            self._parse_options(kind, options)

            def decorate(fn: H) -> H:
                self._register(kind, name, fn, options)
                return fn

            return decorate
        return self._register(kind, name, hook, options)

    def _parse_options(
        self, kind: str, options: Dict[str, Any]
    ) -> Tuple[int, bool, Any, bool, bool]:
        unknown = [key for key in options if key not in _OPTIONS]
        if unknown:
            close = difflib.get_close_matches(unknown[0], _OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"unknown option {unknown[0]!r} for {_method(kind)}(){hint}; "
                f"accepted: {', '.join(_OPTIONS)}"
            )
        priority = to_priority(options.get("priority", 0))
        once, weak = options.get("once", False), options.get("weak", False)
        with_name = options.get("with_name", False)
        for option, value in (("once", once), ("weak", weak), ("with_name", with_name)):
            if not isinstance(value, bool):
                raise TypeError(
                    f"option {option}= takes True or False, got {type(value).__name__} {value!r}"
                )
        if with_name and kind != "event":
            raise TypeError(
                f"option with_name= is for event hooks (on); a {_method(kind)} hook gets "
                f"the name as ctx.name already"
            )
        return priority, once, options.get("target"), weak, with_name

    def _register(
        self,
        kind: str,
        name: str,
        hook: Callable[..., Any],
        options: Dict[str, Any],
        *,
        scope: Optional[Scope] = None,
    ) -> Handle:
        """Check everything, then register; nothing is half-registered on failure.

        This is the hot path of register + remove, hence the shortcuts: names
        checked once (with their pattern matcher) and cached, no option parsing
        when there are none, plain functions told sync without ``inspect``.
        """
        try:
            match = self._names[name]
        except (KeyError, TypeError):  # TypeError: unhashable, so check_name explains
            match = self._check_new_name(kind, name)
        if not callable(hook):
            raise TypeError(
                f"{_method(kind)}() needs a callable hook, got {type(hook).__name__} {hook!r}; "
                f"accepted: a function, method, lambda, functools.partial or callable object"
            )
        is_async = (
            hook.__class__ is not FunctionType
            or hook.__code__.co_flags & CO_COROUTINE != 0
            or (_MARKED_COROUTINES and getattr(hook, "_is_coroutine_marker", None) is not None)
        ) and _is_async_callable(hook)
        bus = cast("EventBus", self)  # the only subclass
        if options:
            priority, once, target, weak, with_name = self._parse_options(kind, options)
            handle = Handle(
                bus, kind, name, hook, priority, 0, once, target, weak, is_async, match, with_name
            )  # fmt: skip
        else:
            handle = plain_handle(bus, kind, name, hook, is_async, match)
        if scope is None and _open_scopes.get():
            scope = innermost_scope(bus)
        lock = self._lock
        lock.acquire()
        try:
            if self._collected:
                self._sweep_collected_locked()
            if is_async and kind != "event":
                self._refuse_async_on_sync_points_locked(handle)
            handle.seq = next(self._seq)
            if match is None:
                names = self._exact.get(kind)
                if names is None:
                    names = self._exact[kind] = {}
                bucket = names.get(name)
                if bucket is None:
                    names[name] = [handle]
                else:
                    bucket.append(handle)
            else:
                self._patterns.setdefault(kind, []).append(handle)
            handle._registered = True
            self._invalidate_locked(kind, name, match)
        finally:
            lock.release()
        if scope is not None:
            scope.add(handle)
        return handle

    def _check_new_name(self, kind: str, name: str) -> Optional[Matcher]:
        """Check a name not seen before; cache it with its matcher (None: not a pattern)."""
        check_name(name, f"{_what(kind)} name", allow_pattern=True)
        match = matcher_for(name) if is_pattern(name) else None
        if len(self._names) >= _NAME_CACHE_LIMIT:
            self._names.clear()
        self._names[name] = match
        return match

    def _refuse_async_on_sync_points_locked(self, handle: Handle) -> None:
        for point_name, points in self._points.items():
            if handle.applies_to(point_name) and any(not p.is_async for p in points):
                raise TypeError(
                    f"async {handle.kind} hook {handle!r} matches the sync hook point "
                    f"{point_name!r}; async hooks need an async hook point (an "
                    f"'async def' function). Use a plain 'def' hook there."
                )

    def _unregister(self, handle: Handle) -> None:
        """``handle.remove()``: ``_remove`` of one handle known to be this bus's."""
        lock = self._lock
        lock.acquire()  # not ``with``: it costs twice as much, on the hot path of remove()
        try:
            self._drop_locked(handle)
        finally:
            lock.release()

    def _remove(self, handles: List[Handle]) -> None:
        lock = self._lock
        lock.acquire()  # not ``with``: it costs twice as much, on the hot path of remove()
        try:
            self._remove_locked(handles)
        finally:
            lock.release()

    def _remove_locked(self, handles: List[Handle]) -> None:
        for handle in handles:  # check all first: nothing is half-removed
            if handle.bus is not self:
                # Names, not reprs: a bus's repr takes the lock, which is held here.
                raise ValueError(
                    f"{handle!r} belongs to the bus {handle.bus.name!r}, not to {self.name!r}; "
                    f"remove it with handle.remove() or through its own bus"
                )
        for handle in handles:
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

    def _claim(self, handle: Handle) -> bool:
        """Atomically unregister a ``once`` hook; True for the one caller that won."""
        with self._lock:
            if not handle._registered:
                return False
            self._remove_locked([handle])
            return True

    def _forget_collected(self, handle: Handle) -> None:
        """Weakref callback: unregister a weak hook whose object died.

        It may run at any moment, even inside this bus's own locked section on this
        thread (a collection can start anywhere), so it never waits for the lock:
        if the lock is busy, the handle is swept by the next locked operation.
        Until then the dispatch loops skip it, and ``handle.active`` is already False.
        """
        if self._lock.acquire(blocking=False):
            try:
                self._remove_locked([handle])
            finally:
                self._lock.release()
        else:
            self._collected.append(handle)

    def _sweep_collected_locked(self) -> None:
        while self._collected:
            self._remove_locked([self._collected.pop()])

    def _all_locked(self) -> List[Handle]:
        handles = [
            h for names in self._exact.values() for bucket in names.values() for h in bucket
        ]
        handles += [h for bucket in self._patterns.values() for h in bucket]
        return handles

    def _snapshot(self) -> Tuple[Any, ...]:
        """Everything :meth:`_restore` needs to undo later changes (the pytest plugin)."""
        with self._lock:
            self._sweep_collected_locked()
            return (
                {
                    kind: {n: list(b) for n, b in names.items()}
                    for kind, names in self._exact.items()
                },
                {kind: list(bucket) for kind, bucket in self._patterns.items()},
                self._errors,
                self._tracer,
                dict(self._pauses),
                dict(self._pause_matchers),
            )

    def _restore(self, snapshot: Tuple[Any, ...]) -> None:
        """Put hooks, error policy, trace and pauses back as :meth:`_snapshot` saw them.

        Hooks added since are unregistered, hooks removed since come back, except
        weakly held ones whose object died meanwhile.
        """
        exact, patterns, errors, tracer, pauses, pause_matchers = snapshot
        with self._lock:
            self._sweep_collected_locked()
            for handle in self._all_locked():
                handle._registered = False
            buckets = [b for names in exact.values() for b in names.values()]
            for bucket in [*buckets, *patterns.values()]:
                bucket[:] = [h for h in bucket if not h.weak or h._hook() is not None]
                for handle in bucket:
                    handle._registered = True
            self._exact = {
                kind: {n: b for n, b in names.items() if b} for kind, names in exact.items()
            }
            self._patterns = {kind: bucket for kind, bucket in patterns.items() if bucket}
            self._errors, self._tracer = errors, tracer
            self._pauses, self._pause_matchers = pauses, pause_matchers
            self._invalidate_all_locked()

    # --- plans ----------------------------------------------------------------------

    def _resolve_locked(
        self, kind: str, name: str, *, paused_ok: bool = False
    ) -> Tuple[Handle, ...]:
        """The hooks of ``kind`` that run for ``name``, in order (lock held)."""
        if not paused_ok and self._pauses and self._is_paused_locked(name):
            return ()
        handles = list(self._exact.get(kind, _NO_NAMES).get(name, ()))
        if is_pattern(name):
            return tuple(handles)  # introspection of a pattern: its own hooks only
        handles += [handle for handle in self._patterns.get(kind, ()) if handle.match(name)]  # type: ignore[misc]
        handles.sort(key=_order)
        return tuple(handles)

    def _is_paused_locked(self, name: str) -> bool:
        if None in self._pauses or name in self._pauses:
            return True
        return any(match(name) for match in self._pause_matchers.values())

    def _plan_event(self, event: str) -> Union[_FastPlan, _EventPlan]:
        """Work out, cache and return the plan of ``event`` (the emit cache missed)."""
        # Emit needs no handles tuple: caching one only for events that are
        # collected (or whose hook raised) saves a tuple and an entry per event.
        return self._replan_event(event, keep_handles=False)[0]

    def _replan_event(
        self, event: str, *, keep_handles: bool = True
    ) -> Tuple[Union[_FastPlan, _EventPlan], Tuple[Handle, ...]]:
        """Work out and cache the plan (and the handles) of ``event``; return both."""
        check_name(event, "event name", allow_pattern=False)
        with self._lock:
            self._sweep_collected_locked()
            handles = self._resolve_locked("event", event)
            plain = (
                self._errors == "raise"
                and self._tracer is None
                and not any(
                    h.once or h.weak or h.is_async or h.with_name or h.target is not None
                    for h in handles
                )
            )
            plan: Union[_FastPlan, _EventPlan] = (
                NO_HOOKS
                if not handles
                else tuple(h._hook for h in handles)
                if plain
                else _EventPlan(handles)
            )
            if len(self._event_plans) >= _PLAN_CACHE_LIMIT:
                self._event_plans.clear()
                self._event_handles.clear()
            self._event_plans[event] = plan
            if keep_handles:
                self._event_handles[event] = handles
        return plan, handles

    def _handles_for_event(self, event: str) -> Tuple[Handle, ...]:
        handles = self._event_handles.get(event)
        if handles is None:
            # Not re-read from the cache: another thread may clear it at once.
            handles = self._replan_event(event)[1]
        return handles

    def _note_fast_error(self, error: BaseException, event: str, hook: Any) -> None:
        for handle in self._handles_for_event(event):
            if handle._hook is hook:
                add_note(error, describe(handle, event))
                return

    def _check_point_name(self, name: str) -> str:
        return check_name(name, "hook point name", allow_pattern=False)

    def _add_point(self, point: HookPoint) -> None:
        with self._lock:
            if not point.is_async:
                for handle in self._all_locked():
                    if (
                        handle.is_async
                        and handle.kind in point.kinds
                        and handle.applies_to(point.name)
                    ):
                        raise TypeError(
                            f"the sync hook point {point.name!r} matches the async hook "
                            f"{handle!r}; async hooks need an async hook point (an "
                            f"'async def' function)"
                        )
            if point.name not in self._points and len(self._points) >= self._points_sweep_at:
                # A point dies with its wrapper: forget names left with none, or
                # wrapping under ever-new names would leak (amortized per doubling).
                for name in [name for name, points in self._points.items() if not points]:
                    del self._points[name]
                self._points_sweep_at = 2 * len(self._points) + 64
            self._points.setdefault(point.name, weakref.WeakSet()).add(point)

    def _resolve_point(self, point: HookPoint) -> Optional[PointPlan]:
        with self._lock:
            self._sweep_collected_locked()
            plan = point.build_plan()
            point.plan = plan
        return plan

    def _invalidate_locked(self, kind: str, name: str, match: Optional[Matcher]) -> None:
        """Forget the plans that a change of hooks for ``name`` (or a pattern) affects."""
        if kind == "event":
            if match is None:
                self._event_plans.pop(name, None)
                self._event_handles.pop(name, None)
            else:
                self._event_plans.clear()
                self._event_handles.clear()
            return
        if match is None:
            for point in list(self._points.get(name, ())):
                point.invalidate()
            return
        for point_name, points in list(self._points.items()):
            if match(point_name):
                for point in list(points):
                    point.invalidate()

    def _invalidate_all_locked(self) -> None:
        self._event_plans.clear()
        self._event_handles.clear()
        for points in list(self._points.values()):
            for point in list(points):
                point.invalidate()

    def _set_pause_locked(self, name: Optional[str], delta: int) -> None:
        count = self._pauses.get(name, 0) + delta
        if count:
            self._pauses[name] = count
            if name is not None and is_pattern(name):
                self._pause_matchers[name] = matcher_for(name)
        else:
            self._pauses.pop(name, None)
            self._pause_matchers.pop(name or "", None)
        self._invalidate_all_locked()

    def _set_tracer(self, tracer: Optional[Trace]) -> None:
        with self._lock:
            self._tracer = tracer
            self._invalidate_all_locked()
