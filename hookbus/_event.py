"""Declared events: the typed handle that ``@bus.event`` returns for a stub function."""

from __future__ import annotations

from inspect import Signature
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Callable, Generic, List, Optional, TypeVar, overload

from typing_extensions import Concatenate, Literal, ParamSpec, Protocol, Unpack

from ._dispatch import check_event_result
from ._errors import note_fast_error
from ._options import HookOptions
from ._spec import format_spec

if TYPE_CHECKING:
    from ._bus import EventBus
    from ._handle import Handle

__all__ = ["Event"]

P = ParamSpec("P")
R = TypeVar("R")


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


def _emitter(bus: EventBus, name: str) -> Callable[..., None]:
    """``Event.emit``: ``bus.emit(name, ...)`` with the name bound, only faster.

    A copy of ``EventBus.emit``'s fast loop without keywords (its kwargs, slow
    and uncached cases go to ``bus.emit`` itself): forwarding every call to
    ``bus.emit`` would cost a fifth more. Parity: ``tests/test_fast_copies.py``.
    """
    plans = bus.registry.event_plans  # never replaced, only cleared
    registry = bus.registry
    emit = bus.emit

    def emit_event(*args: Any, **kwargs: Any) -> None:
        plan: Any = plans.get(name)
        if kwargs or plan.__class__ is not tuple:
            return emit(name, *args, **kwargs)
        hook = None
        try:
            for hook in plan:
                result = hook(*args)
                if result is not None and result.__class__ is CoroutineType:
                    check_event_result(result, name)
        except Exception as error:
            note_fast_error(registry, error, name, hook, args, {})
            raise
        return None

    emit_event.__name__ = emit_event.__qualname__ = "emit"
    return emit_event


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
        self.__dict__["emit"] = _emitter(bus, name)

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
        hook: Callable[P, Any],
        /,
        *,
        with_name: Literal[False] = False,
        **options: Unpack[HookOptions],
    ) -> Handle: ...

    @overload
    def on(
        self,
        hook: Callable[Concatenate[str, P], Any],
        /,
        *,
        with_name: Literal[True],
        **options: Unpack[HookOptions],
    ) -> Handle: ...

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
        """Register a hook for this event; with no hook, return a decorator.

        The hook is checked against the spec at once (``TypeError`` if it can't
        take what the event passes, and nothing is registered), and by type
        checkers. The options are :meth:`EventBus.on`'s.

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
            >>> step.on(lambda: None)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            TypeError: hook <lambda> (...) does not accept what event 'step' passes, ...
        """
        if hook is None:
            return self.bus.on(self.name, **options)
        return self.bus.on(self.name, hook, **options)

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
        return self.bus.hooks(self.name, kind="event")

    def __repr__(self) -> str:
        return f"<Event {format_spec(self.name, self.signature)}>"
