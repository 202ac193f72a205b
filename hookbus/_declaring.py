"""The declared-events half of the bus's API: ``event``, ``first``, ``forget``,
``check_pending``, ``points`` and ``strict`` (:class:`EventBus` inherits them).

The rules themselves live in ``_spec`` (does a hook accept a spec, do arguments
bind) and ``_declared`` (what the bus knows about names); this module is their
public face, documented with :class:`EventBus`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, NamedTuple, Optional, cast, overload

from typing_extensions import ParamSpec

from ._declared import Declared, UnknownNameError, checked_handles, declare, unmatched
from ._dispatch import dispatch_event
from ._event import Event, EventDecorator
from ._names import check_name
from ._spec import spec_of

if TYPE_CHECKING:
    from ._bus import EventBus
    from ._handle import Handle
    from ._registry import Registry

__all__ = ["DeclaredEvents", "PointInfo"]

P = ParamSpec("P")


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


class DeclaredEvents:
    """The methods of :class:`EventBus` for declared events and the names that exist,
    and for the hooks registered on them (``hooks``, ``events``, ``handles_of``)."""

    name: str
    registry: Registry

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
        results: List[Any] = []
        registry = self.registry
        handles = (
            checked_handles(registry, event, args, kwargs)
            if registry.checking
            else registry.event_handles(event)
        )
        dispatch_event(registry, event, handles, args, kwargs, results, True)
        return results[-1] if results else None  # None, or the one that stopped the loop

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
        if stub_or_name is None or isinstance(stub_or_name, str):
            name: Optional[str] = stub_or_name
            if name is not None:
                check_name(name, "event name", allow_pattern=False)

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
        declare(self.registry, Declared(name, signature, historic))
        return Event(cast("EventBus", self), name, stub, signature, historic=historic)

    def forget(self, name: str) -> None:
        """Drop the past emissions of the historic event ``name``, releasing their arguments.

        Hooks registered from now on are called only with later emissions; the event
        stays historic and records again from here.

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
            hookbus._declared.UnknownNameError: 1 hook matches no declared event, hook point ...
              - <Handle event 'Motr.spin' print active> (?): no ... did you mean 'Motor.spin'?
            ...
            >>> handle.remove()
            >>> bus.check_pending()
        """
        found, lines = unmatched(self.registry)
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
            check_name(name, "hooks() name", allow_pattern=True)
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

    def handles_of(self, hook: Callable[..., Any]) -> List[Handle]:
        """The handles of every registration of ``hook`` on this bus.

        This reaches the handle of a hook registered with the decorator form.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.on("a")
            ... def react():
            ...     pass
            >>> for handle in bus.handles_of(react):
            ...     handle.remove()
            >>> bus.hooks()
            []
        """
        return [handle for handle in self.hooks() if handle.hook == hook]
