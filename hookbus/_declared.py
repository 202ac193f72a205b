"""Declared events: what a bus knows about names, and the typed :class:`Event` handle.

A declaration (``@bus.event`` on a stub) gives a name a spec. This module holds
what the bus knows about names (declared events, their history, names seen
emitted) and the typed :class:`Event` that ``@bus.event`` returns.

The registry asks this component whether a new hook fits every declared event it
would run for, and its name is known on a strict bus (:func:`check_registration`),
what an emission of a declared name must check first (:attr:`Declared.binder`),
and which hooks match nothing known (:func:`unmatched`, for ``check_pending()``).
It holds no lock of its own: the registry changes it under the bus lock, and runs
the slow checks (``inspect.signature``, which may run user code) without it.
"""

from __future__ import annotations

import difflib
import functools
import itertools
from inspect import Signature
from types import FunctionType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generic,
    Iterable,
    List,
    Optional,
    Set,
    Tuple,
    TypeVar,
    cast,
    overload,
)

from typing_extensions import Concatenate, Literal, ParamSpec, Protocol, Unpack

from ._dispatch import dispatch_event
from ._errors import HookError, raise_collected
from ._handle import hook_name, where_defined
from ._names import Matcher, literal
from ._options import HookOptions
from ._spec import (
    bad_arguments,
    by_name,
    code_shape,
    format_spec,
    make_binder,
)

if TYPE_CHECKING:
    from ._bus import EventBus
    from ._handle import Handle
    from ._registry import Registry

__all__ = [
    "Declarations",
    "Declared",
    "Event",
    "EventDecorator",
    "UnknownNameError",
    "check_registration",
    "checked_handles",
    "close_names",
    "declare",
    "replay",
    "unknown_emitted",
    "unmatched",
]

P = ParamSpec("P")
R = TypeVar("R")
H = TypeVar("H", bound=Callable[..., Any])

# Names emitted so far, kept for check_pending(); a program emitting ever-new names
# (f"user.{id}") must not grow this forever.
_EMITTED_LIMIT = 65_536

ResultCallback = Optional[Callable[[Any], Any]]

# One past emission of a historic event: (order across events, args, kwargs, and the
# callback that gets each hook's result, replays included: Event.emit_with_results).
Emission = Tuple[int, Tuple[Any, ...], Dict[str, Any], ResultCallback]


class UnknownNameError(LookupError):
    """Hooks registered for names that nothing declares, defines or emits.

    Raised by :meth:`EventBus.check_pending` (listing every such hook), and at
    registration on a bus made with ``strict=True``. Each entry names the hook,
    where it was defined, and the known names closest to its own. ``handles``
    holds the hooks' handles.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus(strict=True)
        >>> @bus.event
        ... def motor_spin(rpm: int) -> None: ...
        >>> try:
        ...     bus.on("motor_spn", print)
        ... except hookbus.UnknownNameError as error:
        ...     print(str(error).splitlines()[1].split(": ", 1)[1])
        no declared event is named 'motor_spn'; did you mean 'motor_spin'?
    """

    def __init__(self, message: str, handles: Iterable[Handle] = ()) -> None:
        super().__init__(message)
        self.handles: List[Handle] = list(handles)

    def __str__(self) -> str:
        return str(self.args[0])


class Declared:
    """One declared event: its spec, and the function that checks emit's arguments."""

    __slots__ = ("binder", "binder_shape", "historic", "name", "signature", "text")

    def __init__(self, name: str, signature: Signature, historic: bool) -> None:
        self.name = name
        self.signature = signature
        self.historic = historic
        self.text = format_spec(name, signature)
        #: Called with emit's arguments before any hook: raises TypeError if they
        #: don't bind to the spec, at the cost of one call of an empty function.
        self.binder: Callable[..., None] = make_binder(signature, name)
        self.binder_shape = code_shape(cast(FunctionType, self.binder))

    def checks_itself(self, hook: Any) -> bool:
        """Whether calling ``hook`` fails exactly when the arguments don't bind to the spec.

        True for a plain function with the spec's parameters: called first, its own
        argument binding is the check, and the binder can be left out of the plan.
        """
        return hook.__class__ is FunctionType and code_shape(hook) == self.binder_shape

    def same_as(self, other: Declared) -> bool:
        """Whether re-declaring ``other`` over this one is harmless (a module re-import)."""
        return self.text == other.text and self.historic == other.historic

    def described(self) -> str:
        return self.text + (" (historic)" if self.historic else "")


def close_names(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'a' or 'b'?"``, or ``""`` when no known name is close.

    Example:
        >>> close_names("Motr.spin", ["Motor.spin", "eval"])
        "; did you mean 'Motor.spin'?"
        >>> close_names("Motr.spin", ["Motor.spin", "Motor.stop", "eval"])
        "; did you mean 'Motor.spin' or 'Motor.stop'?"
    """
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {' or '.join(map(repr, close))}?"


class Declarations:
    """The declared events of one bus, historic emissions, and the names emitted so far.

    Changed only with the bus lock held; read without it where noted.
    """

    __slots__ = (
        "_emissions",
        "emitted",
        "emitted_overflow",
        "history",
        "specs",
        "strict",
    )

    def __init__(self) -> None:
        self.specs: Dict[str, Declared] = {}
        #: The past emissions of each historic event, oldest first.
        self.history: Dict[str, List[Emission]] = {}
        self._emissions = itertools.count()
        self.emitted: Set[str] = set()
        self.emitted_overflow = False
        #: ``EventBus(strict=True)``: a hook for an unknown name is refused at once.
        self.strict = False

    # --- declaring (lock held) ----------------------------------------------------------

    def already(self, declared: Declared) -> bool:
        """True if the same spec is declared already; raise if a different one is."""
        existing = self.specs.get(declared.name)
        if existing is None:
            return False
        if existing.same_as(declared):
            return True  # a module imported again, or reloaded
        raise TypeError(
            f"event {declared.name!r} is already declared as {existing.described()}; it "
            f"can't be declared again as {declared.described()}. A second declaration must "
            f"be the same (as when a module is imported again): use another name for "
            f"another event"
        )

    def add(self, declared: Declared) -> None:
        self.specs[declared.name] = declared
        if declared.historic:
            self.history[declared.name] = []

    def forget(self, name: str) -> List[Emission]:
        """Drop the past emissions of ``name``; return them, for the caller to let go of
        once it released its lock (their arguments' finalizers may use the bus)."""
        history = self.history.get(name)
        if history is None:
            historic = ", ".join(map(repr, sorted(self.history))) or "none"
            raise ValueError(
                f"{name!r} is not a historic event, so there is nothing to forget; "
                f"historic events of this bus: {historic}"
            )
        self.history[name] = []
        return history

    def refuse_mismatches(self, declared: Declared, handles: Iterable[Handle]) -> None:
        """Raise listing every hook among ``handles`` that doesn't fit ``declared`` (no lock)."""
        handles = tuple(handles)
        lines = self.mismatches(declared, handles)
        if not lines:
            return
        for handle in handles:  # the name stays undeclared: no hook takes it by name
            handle.bind_by_name(declared.name, None)
        many = len(lines) != 1
        raise TypeError(
            f"cannot declare event {declared.name!r} as {declared.text}: {len(lines)} "
            f"hook{'s' if many else ''} registered before the declaration "
            f"{'do' if many else 'does'} not accept what it passes:\n"
            + "\n".join(lines)
            + f"\nRemove or change {'them' if many else 'it'}, or give the event another name"
        )

    # --- checking hooks -------------------------------------------------------------------

    def specs_for(self, name: str, match: Optional[Matcher]) -> List[Declared]:
        """The declared events that a hook registered for ``name`` would run for."""
        if match is None:
            declared = self.specs.get(name)
            return [] if declared is None else [declared]
        return [declared for event, declared in list(self.specs.items()) if match(event)]

    @staticmethod
    def fit(handle: Handle, hook: Callable[..., Any], declared: Declared) -> Optional[str]:
        """Why ``hook`` can't take what ``declared`` passes, or None.

        A hook that takes the spec's arguments by name gets its caller recorded on
        ``handle`` (worked out once here, before any plan runs it).
        """
        name = declared.name
        reason, factory = by_name(hook, name, declared.signature, with_name=handle.with_name)
        if reason is None:
            handle.bind_by_name(name, factory)
        return reason

    def mismatches(self, declared: Declared, handles: Iterable[Handle]) -> List[str]:
        """One line per hook among ``handles`` that can't take what ``declared`` passes."""
        lines: List[str] = []
        for handle in handles:
            hook = handle.hook
            if hook is None:
                continue  # a weak hook whose object died: it will never run
            reason = self.fit(handle, hook, declared)
            if reason is None and handle.is_async and declared.historic:
                reason = (
                    "an async hook, which the synchronous replay of past emissions can't await"
                )
            if reason is not None:
                lines.append(f"  - {handle!r} ({handle.where}): {reason}")
        return lines

    def refuse_arguments(
        self, error: BaseException, event: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> None:
        """If ``error`` says the arguments of a declared event don't bind, raise that.

        ``error`` must come from the call itself (no hook frame in its traceback):
        the binder's, or the first hook's when its parameters are the spec's. The
        error raised instead names the event, its spec and what was passed.
        """
        declared = self.specs.get(event)
        traceback = error.__traceback__
        if declared is None or not isinstance(error, TypeError) or traceback is None:
            return
        if traceback.tb_next is not None:
            return  # a hook ran, and raised this itself
        wrong = bad_arguments(event, declared.signature, args, kwargs)
        if wrong is not None:
            try:
                raise wrong from None
            finally:
                # Its traceback holds this frame: without this, the cycle would keep
                # the emitted arguments alive until a collection.
                del wrong

    # --- historic events --------------------------------------------------------------------

    def record(
        self,
        event: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        result_callback: ResultCallback = None,
    ) -> None:
        """Keep an emission of a historic event (lock held)."""
        self.history[event].append((next(self._emissions), args, dict(kwargs), result_callback))

    def history_for(
        self, name: str, match: Optional[Matcher]
    ) -> List[Tuple[str, Tuple[Any, ...], Dict[str, Any], ResultCallback]]:
        """The past emissions a new hook for ``name`` must get, oldest first (lock held)."""
        found = [
            (order, event, args, kwargs, callback)
            for event, emissions in self.history.items()
            if event == name or (match is not None and match(event))
            for order, args, kwargs, callback in emissions
        ]
        found.sort(key=lambda entry: entry[0])
        return [(event, args, kwargs, callback) for _, event, args, kwargs, callback in found]

    # --- names ----------------------------------------------------------------------------

    def saw_emitted(self, event: str) -> None:
        """Remember that ``event`` was emitted (called when its plan is worked out)."""
        if event in self.emitted:
            return
        if len(self.emitted) >= _EMITTED_LIMIT:
            self.emitted_overflow = True
            return
        self.emitted.add(event)

    def known_events(self) -> Set[str]:
        """Declared and emitted event names."""
        return set(self.specs) | self.emitted


def mismatch_message(what: str, declared: Declared, reason: str, with_name: bool) -> str:
    """The registration error: which hook, which event and spec, and why."""
    first = " after the event's name (with_name=True)" if with_name else ""
    return (
        f"{what} does not accept what event {declared.name!r} passes, {declared.text}"
        f"{first}: {reason}. A hook takes the spec's parameters it names (any of them, "
        f"by name), or every one (at their places, or through *args / **kwargs), and "
        f"needs no argument the spec doesn't give"
    )


# --- what the registry calls ------------------------------------------------------------------


def check_registration(registry: Registry, handle: Handle) -> None:
    """Refuse a hook that a declared event's spec, or a strict bus, rules out.

    Called before the registry takes its lock: ``inspect.signature`` may run user
    code (a ``__signature__`` property), and so may a hook's ``repr``.
    """
    declarations = registry.declarations
    kind, name, match, hook = handle.kind, handle.name, handle.match, handle.hook
    what = f"{'async ' if handle.is_async else ''}hook {hook_name(hook)} ({where_defined(hook)})"
    if declarations.strict and match is None and not handle.optional:
        _refuse_unknown_name(registry, kind, name, what)
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


def _refuse_unknown_name(registry: Registry, kind: str, name: str, what: str) -> None:
    """``strict=True``: a hook's name must be a declared event, or a point of its kind."""
    events = set(registry.declarations.specs)
    points = {point.name: point.kinds for point in registry.points()}
    known = events if kind == "event" else {n for n, kinds in points.items() if kind in kinds}
    if name in known:
        return
    noun = "declared event" if kind == "event" else "hook point"
    raise UnknownNameError(
        f"strict bus {registry.bus.name!r} refuses a hook for an unknown name:\n"
        f"  - {kind} {what}: no {noun} is named {name!r}{close_names(name, known)}"
        f"{_other_namespace(kind, name, events, set(points))}\n"
        f"Declare events with @bus.event and define hook points with @bus.hookable before "
        f"hooking them (or make the bus with strict=False)"
    )


def unknown_emitted(bus_name: str, event: str, known: Iterable[str]) -> UnknownNameError:
    """``strict=True``: the error for emitting a name that is neither declared nor a point."""
    return UnknownNameError(
        f"strict bus {bus_name!r} refuses to emit {event!r}: no declared event or hook "
        f"point has that name{close_names(event, known)}\nDeclare the event with @bus.event "
        f"before emitting it (or make the bus with strict=False)"
    )


def _other_namespace(kind: str, name: str, events: Set[str], points: Set[str]) -> str:
    if kind == "event" and name in points:
        return f"; {name!r} is a hook point: use pre, post or exception"
    if kind != "event" and name in events:
        return f"; {name!r} is an event: use on"
    return ""


def declare(registry: Registry, declared: Declared) -> None:
    """Declare an event, after checking the hooks registered for it so far.

    All or nothing: if a hook doesn't accept the spec, the error lists every one,
    and the name stays undeclared. The hooks are checked without the lock
    (``inspect.signature`` may run user code); the registry commits only if they
    are still the ones checked, else they are checked again.
    """
    while True:
        if registry.declarations.already(declared):
            return
        hooks = registry.hooks(declared.name, literal=True)
        checked = tuple(h for h in hooks if h.kind == "event")
        registry.declarations.refuse_mismatches(declared, checked)
        if registry.commit_declaration(declared, checked):
            return


def checked_handles(
    registry: Registry,
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
    declared = registry.declarations.specs.get(event)
    if declared is None:
        return registry.event_handles(event)
    try:
        declared.binder(*args, **kwargs)
    except TypeError as error:
        registry.declarations.refuse_arguments(error, event, args, kwargs)
        raise
    if declared.historic:
        return registry.record_emission(event, args, kwargs, result_callback)
    return registry.event_handles(event)


def replay(
    registry: Registry, handle: Handle, history: List[Tuple[str, Any, Any, ResultCallback]]
) -> None:
    """Call a new hook of a historic event with each past emission, in order (no lock).

    Under the ``"collect"`` policy every emission is replayed, then one group holds
    the errors of all; ``"raise"`` stops at the first error, ``"log"`` never does.
    An emission made with :meth:`Event.emit_with_results` gets the hook's result.
    """
    errors: List[Exception] = []
    for event, args, kwargs, result_callback in history:
        results: Optional[List[Any]] = None if result_callback is None else []
        try:
            dispatch_event(registry, event, (handle,), args, kwargs, results)
        except HookError as group:
            errors.extend(group.exceptions)
        for result in results or ():
            if result is not None:
                result_callback(result)  # type: ignore[misc]
    raise_collected(errors, handle.name)


def unmatched(registry: Registry) -> Tuple[List[Handle], List[str]]:
    """The hooks whose names match nothing known, each with a line saying why."""
    handles = sorted(registry.hooks(), key=lambda handle: handle.seq)
    point_kinds: Dict[str, Set[str]] = {}
    for point in registry.points():
        point_kinds.setdefault(point.name, set()).update(point.kinds)
    events = registry.declarations.known_events()  # a copy, made without a thread switch
    found: List[Handle] = []
    lines: List[str] = []
    for handle in handles:
        if handle.name == "*" or handle.optional:
            continue  # watches everything, names nothing; or may never find its name
        if handle.kind == "event":
            known, noun = events, "declared or emitted event"
        else:
            known = {name for name, kinds in point_kinds.items() if handle.kind in kinds}
            noun = "hook point"
        match = handle.match
        if (handle.name in known) if match is None else any(match(n) for n in known):
            continue
        if match is None:
            reason = f"no {noun} is named {handle.name!r}"
        else:
            reason = f"the pattern {handle.name!r} matches no {noun}"
        hint = close_names(handle.name, known)
        hint += _other_namespace(handle.kind, handle.name, events, set(point_kinds))
        found.append(handle)
        lines.append(f"  - {handle!r} ({handle.where}): {reason}{hint}")
    if lines and registry.declarations.emitted_overflow:
        lines.append(
            "  (this bus saw too many distinct event names to remember them all: an event "
            "emitted only lately may be missing here)"
        )
    return found, lines


# --- the typed handle of a declared event ---------------------------------------------


class _OnDecorator(Protocol[P]):
    """What ``event.on()`` returns: a decorator that type-checks the hook against the spec."""

    def __call__(self, hook: Callable[P, R], /) -> Callable[P, R]: ...


class _OnNamedDecorator(Protocol[P]):
    """``event.on(with_name=True)``: the hook takes the event's name first."""

    def __call__(
        self, hook: Callable[Concatenate[str, P], R], /
    ) -> Callable[Concatenate[str, P], R]: ...


class EventDecorator(Protocol):
    """What ``bus.event("name")`` returns: it turns a stub into an :class:`Event`."""

    def __call__(self, stub: Callable[P, Any], /) -> Event[P]: ...


class Event(Generic[P]):
    """A declared event: its name, its spec, and its bus's methods with typed arguments.

    Made by :meth:`EventBus.event` from a stub function, whose signature is the
    spec and whose docstring documents the event. Every hook registered for the
    name (through this object, ``bus.on(name, ...)`` or a matching pattern) is
    checked against the spec at once, and every emission's arguments are checked
    before any hook runs. Type checkers check both too, through ``ParamSpec``.

    Attributes:
        bus: the :class:`EventBus` the event is declared on.
        name: the event's name, as ``bus.emit`` takes it.
        signature: the spec, an ``inspect.Signature``.
        historic: whether hooks registered late are called with past emissions.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.event("user.created")
        ... def user_created(user: str, *, admin: bool = False) -> None:
        ...     '''Emitted after a user row is committed.'''
        >>> user_created
        <Event user.created(user: str, *, admin: bool = False)>
        >>> _ = user_created.on(lambda user, admin=False: print("welcome", user, admin))
        >>> user_created.emit("ada", admin=True)
        welcome ada True
        >>> user_created.__doc__
        'Emitted after a user row is committed.'
    """

    def __init__(
        self,
        bus: EventBus,
        name: str,
        stub: Callable[P, Any],
        signature: Signature,
        *,
        historic: bool = False,
    ) -> None:
        self.bus = bus
        self.name = name
        self.signature = signature
        self.historic = historic
        self.__doc__ = stub.__doc__
        self.__module__ = stub.__module__
        self.__wrapped__ = stub
        # An instance attribute over the method below: the same call, only faster.
        # bus.emit with the name bound: a C-level partial costs less than a method
        # forwarding to it, or a copy of its loop (tests/test_fast_copies.py).
        self.__dict__["emit"] = functools.partial(bus.emit, name)

    # --- emitting ---------------------------------------------------------------------

    def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call every hook with these arguments: ``bus.emit(name, ...)``.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def saved(path: str, /) -> None: ...
            >>> _ = saved.on(print)  # print takes the path by position only
            >>> saved.emit("report.txt")
            report.txt
        """
        self.bus.emit(self.name, *args, **kwargs)

    def collect(self, *args: P.args, **kwargs: P.kwargs) -> List[Any]:
        """The hooks' results in call order: ``bus.collect(name, ...)``.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def formats() -> None: ...
            >>> _ = formats.on(lambda: "csv")
            >>> formats.collect()
            ['csv']
        """
        return self.bus.collect(self.name, *args, **kwargs)

    def first(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """The first hook result that is not ``None``; no later hook runs (pluggy's firstresult).

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def find_loader(path: str) -> None: ...
            >>> _ = find_loader.on(lambda path: "csv" if path.endswith(".csv") else None)
            >>> _ = find_loader.on(lambda path: "any")
            >>> find_loader.first("a.csv"), find_loader.first("a.txt")
            ('csv', 'any')
        """
        return self.bus.first(self.name, *args, **kwargs)

    def emit_with_results(
        self, result_callback: Callable[[Any], Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """Emit, and give ``result_callback`` each hook's result that is not ``None``.

        On a historic event, a hook registered later is replayed this emission, and
        its result goes to the same callback: pluggy's
        ``call_historic(result_callback=...)``. The error policy is the bus's.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event(historic=True)
            ... def formats(registry: str) -> None: ...
            >>> _ = formats.on(lambda registry: "csv")
            >>> formats.emit_with_results(print, "main")
            csv
            >>> _ = formats.on(lambda registry: "json")  # replayed: its result too
            json
        """
        registry = self.bus.registry
        handles = checked_handles(registry, self.name, args, kwargs, result_callback)
        results: List[Any] = []
        dispatch_event(registry, self.name, handles, args, kwargs, results)
        for result in results:
            if result is not None:
                result_callback(result)

    async def emit_async(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call every hook, awaiting async ones: ``await bus.emit_async(name, ...)``.

        Example:
            >>> import asyncio, hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def signup(user: str) -> None: ...
            >>> async def notify(user):
            ...     print("notified", user)
            >>> _ = signup.on(notify)
            >>> asyncio.run(signup.emit_async("ada"))
            notified ada
        """
        await self.bus.emit_async(self.name, *args, **kwargs)

    async def collect_async(self, *args: P.args, **kwargs: P.kwargs) -> List[Any]:
        """The hooks' awaited results in call order: ``await bus.collect_async(name, ...)``.

        Example:
            >>> import asyncio, hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def calc(x: int) -> None: ...
            >>> async def double(x):
            ...     return 2 * x
            >>> _ = calc.on(double)
            >>> asyncio.run(calc.collect_async(21))
            [42]
        """
        return await self.bus.collect_async(self.name, *args, **kwargs)

    # --- hooks ------------------------------------------------------------------------

    @overload
    def on(
        self,
        hook: Callable[P, R],
        /,
        *,
        with_name: Literal[False] = False,
        **options: Unpack[HookOptions],
    ) -> Callable[P, R]: ...

    @overload
    def on(
        self,
        hook: Callable[Concatenate[str, P], R],
        /,
        *,
        with_name: Literal[True],
        **options: Unpack[HookOptions],
    ) -> Callable[Concatenate[str, P], R]: ...

    @overload
    def on(
        self,
        /,
        *,
        with_name: Literal[False] = False,
        **options: Unpack[HookOptions],
    ) -> _OnDecorator[P]: ...

    @overload
    def on(
        self,
        /,
        *,
        with_name: Literal[True],
        **options: Unpack[HookOptions],
    ) -> _OnNamedDecorator[P]: ...

    def on(self, hook: Optional[Callable[..., Any]] = None, /, **options: Any) -> Any:
        """Register a hook for this event and return it; with no hook, return a decorator.

        The hook is checked against the spec at once (``TypeError`` if it can't
        take what the event passes, and nothing is registered), and by type
        checkers. The options are :meth:`EventBus.on`'s.

        Every form returns the hook itself, so that a bare ``@event.on`` leaves the
        decorated name the working function (blinker's and psygnal's habit). So it is
        no :class:`Handle`: ``with event.on(hook):`` and ``event.on(hook).remove()``
        fail. :meth:`EventBus.handles_of` finds its handles, and
        ``bus.on(event.name, hook)`` returns one.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def step(n: int) -> None: ...
            >>> @step.on(priority="HIGH")
            ... def log(n):
            ...     print("step", n)
            >>> step.emit(3)
            step 3
            >>> @step.on
            ... def count(n):
            ...     return n + 1
            >>> count(1), [handle.name for handle in bus.handles_of(count)]
            (2, ['step'])
            >>> step.on(lambda n, size: None)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            TypeError: hook <lambda> (...) does not accept what event 'step' passes, ...
        """
        name = literal(self.name)  # the event's own name, whatever it holds
        if hook is None:
            return self.bus.on(name, **options)
        self.bus.on(name, hook, **options)
        return hook

    @overload
    def around(self, hook: H, /, **options: Unpack[HookOptions]) -> H: ...

    @overload
    def around(self, /, **options: Unpack[HookOptions]) -> Callable[[H], H]: ...

    def around(self, hook: Any = None, /, **options: Any) -> Any:
        """Register an around hook for this event: it wraps every emission whole.

        A generator function taking ``ctx`` (``ctx.args`` and ``ctx.kwargs`` are the
        emitted arguments); see :meth:`EventBus.around`. Returns the hook, or with no
        hook a decorator, as :meth:`on` does.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def saved(path: str) -> None: ...
            >>> def timed(ctx):
            ...     print("before", ctx.args)
            ...     yield
            ...     print("after")
            >>> _ = saved.around(timed)
            >>> _ = saved.on(lambda path: print("saved", path))
            >>> saved.emit("a.txt")
            before ('a.txt',)
            saved a.txt
            after
        """
        name = literal(self.name)  # the event's own name, whatever it holds
        if hook is None:
            return self.bus.around(name, **options)
        self.bus.around(name, hook, **options)
        return hook

    def hooks(self) -> List[Handle]:
        """The hooks that run for this event, in order, as handles.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.event
            ... def tick() -> None: ...
            >>> _ = tick.on(lambda: None, priority=5)
            >>> [h.priority for h in tick.hooks()]
            [5]
        """
        handles = self.bus.registry.hooks(self.name, literal=True)
        return [handle for handle in handles if handle.kind == "event"]

    def __repr__(self) -> str:
        return f"<Event {format_spec(self.name, self.signature)}>"
