"""The typed handle of a declared event: :class:`Event`, what ``@bus.event`` returns.

Its methods are the bus's, with the name bound and the arguments typed by the
spec (``ParamSpec``). It sits below the bus, so it holds the bus through
:class:`EventMethods`, the bus's methods that it forwards to.
"""

from __future__ import annotations

from inspect import Signature
from types import CoroutineType, MappingProxyType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Generic,
    List,
    Mapping,
    Optional,
    TypeVar,
    overload,
)

from typing_extensions import Concatenate, Literal, ParamSpec, Protocol, Unpack

from ._dispatch import check_event_result, note_fast_error
from ._names import literal
from ._plan import EventPlan
from ._spec import format_spec
from ._sync_dispatch import dispatch_event

if TYPE_CHECKING:
    from ._handle import Handle
    from ._options import HookOptions
    from ._registry import Registry

__all__ = ["Event", "EventDecorator", "EventMethods"]

P = ParamSpec("P")
R = TypeVar("R")
H = TypeVar("H", bound=Callable[..., Any])


class EventMethods(Protocol):
    """What an :class:`Event` needs of its bus: the :class:`EventBus` is one."""

    @property
    def name(self) -> str:
        """The bus's name."""
        ...

    @property
    def registry(self) -> Registry:
        """The bus's registry."""
        ...

    def emit(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """See :meth:`EventBus.emit`."""
        ...

    def collect(self, event: str, /, *args: Any, **kwargs: Any) -> List[Any]:
        """See :meth:`EventBus.collect`."""
        ...

    def first(self, event: str, /, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`EventBus.first`."""
        ...

    async def emit_async(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """See :meth:`EventBus.emit_async`."""
        ...

    async def collect_async(self, event: str, /, *args: Any, **kwargs: Any) -> List[Any]:
        """See :meth:`EventBus.collect_async`."""
        ...


_NO_PLANS: Mapping[str, Any] = MappingProxyType({})
"""The plans of an event whose bus gave none: :meth:`Event.emit` is then bus.emit's."""


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
        bus: EventMethods,
        name: str,
        stub: Callable[P, Any],
        signature: Signature,
        *,
        historic: bool = False,
        plans: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.bus = bus
        self.name = name
        self.signature = signature
        self.historic = historic
        self.__doc__ = stub.__doc__
        self.__module__ = stub.__module__
        self.__wrapped__ = stub
        # ``plans``: the emit plans the bus caches by name (``EventBus.emit``'s), given
        # by a bus whose emit is ``EventBus.emit``: :meth:`emit` below then runs a cached
        # plan itself, a copy of emit's fast loop; else it is bus.emit's. (No instance
        # value named ``emit``, on any event: CPython specializes ``event.emit(...)``
        # only for a method that no instance of the class ever shadowed.)
        self._plans: Mapping[str, Any] = _NO_PLANS if plans is None else plans

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
        # A copy of EventBus.emit's fast loop with the name bound, for an emission
        # without keywords whose plan is cached; every other one is bus.emit's
        # (parity: tests/test_fast_copies.py; it pays: benchmarks/run.py --only fast).
        name = self.name
        plan: Any
        try:
            plan = self._plans[name]
        except KeyError:
            return self.bus.emit(name, *args, **kwargs)
        if kwargs or plan.__class__ is EventPlan:
            return self.bus.emit(name, *args, **kwargs)
        try:
            if len(plan) == 1:
                hook = plan[0]
                result = hook(*args)
                if result is not None and result.__class__ is CoroutineType:
                    check_event_result(result, name)
            else:
                for hook in plan:
                    result = hook(*args)
                    if result is not None and result.__class__ is CoroutineType:
                        check_event_result(result, name)
        except Exception as error:
            try:  # as in EventBus.emit: bound unless raised before the first hook
                raised_by = hook  # pyright: ignore[reportPossiblyUnboundVariable]
            except UnboundLocalError:
                raised_by = None
            if raised_by is not None:
                note_fast_error(self.bus.registry, error, name, raised_by, args, kwargs)
            raise
        return None

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
        handles = registry.checked_handles(self.name, args, kwargs, result_callback)
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
            return self.bus.registry.decorator("event", name, options)
        self.bus.registry.register("event", name, hook, options)
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
            return self.bus.registry.decorator("around", name, options)
        self.bus.registry.register("around", name, hook, options)
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


Event.__module__ = "hookbus"  # tracebacks show where users import it from
