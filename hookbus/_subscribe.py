"""Hook classes: ``bus.subscribe(obj)`` registers an object's hook methods in one go.

Two ways to say which methods are hooks, usable together:

* **marked**: ``@listens("event", ...)`` on a method, any name, any kind of hook;
* **named**: the class lists event names (``hook_events``, or
  ``subscribe(events=...)``), and each method named like one of them listens to it,
  as mmengine's ``Hook`` and Lightning's ``Callback`` methods do.
"""

from __future__ import annotations

import difflib
from types import MethodType, ModuleType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Tuple,
    TypeVar,
    cast,
    overload,
)

from typing_extensions import Concatenate, ParamSpec, Protocol

from ._event import Event
from ._handle import HandleGroup, tie_to, unheld
from ._kinds import DECLARED_EVENT, hook_kind, methods, runs_at_points
from ._names import check_name
from ._options import PriorityLike, to_priority

if TYPE_CHECKING:
    from ._registry import Registry

__all__ = ["Listening", "listens", "subscribe"]

F = TypeVar("F")
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")

_MARK = "__hookbus_listens__"


class Listening(NamedTuple):
    """One ``@listens`` mark: what a method listens to, and how."""

    event: str
    """The event or hook-point name, or a glob pattern."""
    kind: str
    """A hook kind of the table: ``"event"``, ``"around"``, ``"pre"``, ``"post"``,
    ``"exception"``, or one an adapter added."""
    priority: Optional[int]
    """The method's own priority, or ``None`` to take the object's default."""
    once: bool
    """Whether the hook removes itself after its first call."""
    optional: bool = False
    """Whether the name may never exist (pluggy's ``optionalhook``; see ``HookOptions``)."""


class _ListensToEvent(Protocol[P]):
    """What ``listens(event)`` returns for a declared event: it checks the method's
    parameters (after ``self`` or ``cls``) against the event's spec."""

    @overload
    def __call__(self, method: staticmethod[P, R], /) -> staticmethod[P, R]: ...

    @overload
    def __call__(self, method: classmethod[T, P, R], /) -> classmethod[T, P, R]: ...

    @overload
    def __call__(
        self, method: Callable[Concatenate[S, P], R], /
    ) -> Callable[Concatenate[S, P], R]: ...

    # A staticmethod (or classmethod) below the mark: mypy hands it the function.
    @overload
    def __call__(self, method: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def listens(
    event: Event[P],
    *,
    priority: Optional[PriorityLike] = None,
    once: bool = False,
    optional: bool = False,
) -> _ListensToEvent[P]: ...


@overload
def listens(
    event: Event[Any],
    *,
    kind: Literal["around"],
    priority: Optional[PriorityLike] = None,
    once: bool = False,
    optional: bool = False,
) -> Callable[[F], F]: ...


@overload
def listens(
    event: str,
    *,
    priority: Optional[PriorityLike] = None,
    once: bool = False,
    kind: str = "event",
    optional: bool = False,
) -> Callable[[F], F]: ...


def listens(
    event: object,
    *,
    priority: Optional[PriorityLike] = None,
    once: bool = False,
    kind: str = "event",
    optional: bool = False,
) -> Any:
    """Mark a method as a hook for :meth:`EventBus.subscribe`; the method is unchanged.

    ``kind="event"`` (the default) makes it an event hook, called with what
    :meth:`EventBus.emit` is given; ``"pre"``, ``"post"`` and ``"exception"`` make
    it a hook around the hook point ``event``, called with a :class:`CallContext`;
    ``"around"`` makes a generator method an around hook of the hook point or event
    (pluggy's ``wrapper=True`` implementation, in its plugin class).
    Without ``priority``, the method takes the object's default (its
    ``hook_priority`` attribute, else ``subscribe(priority=...)``, else 0). Marks
    stack, so one method may listen to several names. A subclass that overrides a
    marked method without marking it keeps listening; one that sets the name to
    ``None`` stops. Works on ``async def`` methods, classmethods and staticmethods,
    and on a module's functions (``bus.subscribe(module)``, pluggy's plugin modules).
    ``optional=True``: the name may never be declared (pluggy's ``optionalhook``).

    ``event`` may be a declared :class:`Event` (what ``@bus.event`` returns)
    instead of its name: type checkers then check the method's parameters after
    ``self`` against the event's spec, and the bus that declares it checks them
    when the object is subscribed, as for any hook of a declared event. With
    ``kind="around"`` the method is the event's around hook (a declared event runs
    event and around hooks only).

    Example:
        >>> import hookbus
        >>> class Thermostat:
        ...     @hookbus.listens("temperature")
        ...     def react(self, celsius):
        ...         print("heating" if celsius < 19 else "idle")
        ...     @hookbus.listens("temperature", priority="HIGH")
        ...     def log(self, celsius):
        ...         print(f"{celsius} C")
        >>> bus = hookbus.EventBus()
        >>> _ = bus.subscribe(Thermostat())
        >>> bus.emit("temperature", 17)
        17 C
        heating
        >>> @bus.event
        ... def order_paid(order_id: int) -> None: ...
        >>> class Mailer:
        ...     @hookbus.listens(order_paid)
        ...     def receipt(self, order_id: int) -> None:
        ...         print("receipt for", order_id)
        >>> _ = bus.subscribe(Mailer())
        >>> order_paid.emit(7)
        receipt for 7
    """
    hook_kind(kind)  # an unknown kind is refused, naming the known ones
    if isinstance(event, Event):
        if kind not in DECLARED_EVENT.runs:
            raise ValueError(
                f"listens({event!r}, kind={kind!r}): a declared event runs "
                f"{methods(DECLARED_EVENT.runs)} hooks only (kind="
                f"{' or '.join(map(repr, DECLARED_EVENT.runs))}); for a hook around a hook "
                f"point, give the point's name"
            )
        event = event.name
    name = check_name(
        event, "hook point name" if runs_at_points(kind) else "event name", allow_pattern=True
    )
    own_priority = None if priority is None else to_priority(priority)
    if not isinstance(once, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"listens(once=) takes True or False, got {type(once).__name__} {once!r}")
    if not isinstance(optional, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"listens(optional=) takes True or False, got {type(optional).__name__} {optional!r}"
        )
    mark = Listening(name, kind, own_priority, once, optional)

    def mark_method(method: F) -> F:
        # classmethod and staticmethod hide the function: mark the function inside,
        # which is what the class body lookup in subscribe() finds again.
        function: Any = getattr(method, "__func__", method)
        if not callable(function):
            raise TypeError(
                f"@listens({name!r}) needs a method, got {type(method).__name__} {method!r}; "
                f"accepted: a function defined in a class body (plain, async, classmethod "
                f"or staticmethod)"
            )
        marks: Tuple[Listening, ...] = getattr(function, _MARK, ())
        if any(m.event == name and m.kind == kind for m in marks):
            raise ValueError(
                f"{_qualname(function)} already listens to {kind} {name!r}; a method "
                f"listens to each name once"
            )
        # Decorators apply bottom-up: prepend, so the marks read in source order.
        setattr(function, _MARK, (mark, *marks))
        return method

    return mark_method


def subscribe(
    registry: Registry,
    obj: object,
    *,
    weak: bool = False,
    priority: Optional[PriorityLike] = None,
    events: Optional[Iterable[str]] = None,
    target: Any = None,
) -> HandleGroup:
    """Register every hook method of ``obj`` in ``registry``; see :meth:`EventBus.subscribe`."""
    if isinstance(obj, type):
        raise TypeError(
            f"subscribe() takes an instance, got the class {obj.__qualname__}; "
            f"did you mean subscribe({obj.__qualname__}())?"
        )
    default = _default_priority(obj, priority)
    is_module = isinstance(obj, ModuleType)
    # A module is a plugin as pluggy has them: its own marked functions are its hooks.
    plan = _marked_functions(obj) if isinstance(obj, ModuleType) else _marked(type(obj))
    listed = _listed_events(obj, events)
    owner: object = obj if is_module else type(obj)
    for method_name, event in listed.items():
        if method_name not in plan and callable(getattr(owner, method_name, None)):
            plan[method_name] = (Listening(event, "event", None, False),)
    if not plan:
        raise ValueError(_nothing_to_subscribe(obj, listed))

    # weak=True: the object's hooks live as long as it does, all of them; an object
    # that nothing else refers to would take them with it as subscribe returns.
    tied = weak and not is_module
    if tied and unheld(obj):
        raise TypeError(
            f"subscribe(weak=True) on a {type(obj).__qualname__} that nothing else refers "
            f"to (one made in the call, say): its hooks would go as soon as subscribe "
            f"returns and never run; keep the object somewhere first, or subscribe it "
            f"strongly (the default)"
        )
    group = HandleGroup()
    try:  # all or nothing: a failing registration removes the ones before it
        for method_name, marks in plan.items():
            method = getattr(obj, method_name)
            if method is None:  # a subclass switched the hook off
                continue
            # A static or class method doesn't refer to obj: tie it to obj's life.
            bound_to_obj = type(method) is MethodType and method.__self__ is obj
            for mark in marks:
                options: Dict[str, Any] = {
                    "priority": default if mark.priority is None else mark.priority,
                    "once": mark.once,
                    "weak": weak,
                    "target": target,
                    "optional": mark.optional,
                }
                handle = registry.register(mark.kind, mark.event, method, options)
                group.add(handle)
                if tied and not bound_to_obj:
                    tie_to(handle, obj)
    except BaseException:
        group.remove()
        raise
    return group


def _marked(cls: type) -> Dict[str, Tuple[Listening, ...]]:
    """Method name -> marks, bases first, each name where it was first defined."""
    found: Dict[str, Tuple[Listening, ...]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            marks = _marks_of(value)
            # An unmarked override keeps the base's marks (and its place in the order).
            if marks:
                found[name] = marks
    return found


def _marked_functions(module: ModuleType) -> Dict[str, Tuple[Listening, ...]]:
    """Function name -> marks, for a module's marked functions, in definition order."""
    found: Dict[str, Tuple[Listening, ...]] = {}
    for name, value in list(vars(module).items()):
        marks = _marks_of(value)
        if marks:
            found[name] = marks
    return found


def _marks_of(value: object) -> Tuple[Listening, ...]:
    # Class attributes may be any object, some answering every getattr (mocks,
    # proxies): only a tuple of our own marks counts.
    marks: object = getattr(getattr(value, "__func__", value), _MARK, ())
    if not isinstance(marks, tuple):
        return ()
    items: Tuple[object, ...] = cast("Tuple[object, ...]", marks)
    if all(isinstance(mark, Listening) for mark in items):
        return cast("Tuple[Listening, ...]", items)
    return ()


def _default_priority(obj: object, priority: Optional[PriorityLike]) -> int:
    if priority is not None:
        return to_priority(priority)
    declared = getattr(obj, "hook_priority", None)
    if declared is None:
        return 0
    try:
        return to_priority(declared)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{type(obj).__qualname__}.hook_priority: {error}") from None


def _listed_events(obj: object, events: Optional[Iterable[str]]) -> Dict[str, str]:
    """Method name -> event name, from ``events=`` or the object's ``hook_events``."""
    source = "events="
    given: object = events
    if given is None:
        given = getattr(obj, "hook_events", None)
        source = f"{type(obj).__qualname__}.hook_events"
        if given is None:
            return {}
    if isinstance(given, str) or not isinstance(given, Iterable):
        raise TypeError(
            f"{source} must be a collection of event names or a mapping of method name to "
            f"event name, got {type(given).__name__} {given!r}"
            + (f"; write ({given!r},) for one event" if isinstance(given, str) else "")
        )
    pairs: Iterable[Tuple[object, object]]
    if isinstance(given, Mapping):
        pairs = cast("Mapping[object, object]", given).items()
    else:
        names: List[object] = list(cast("Iterable[object]", given))
        if isinstance(given, (set, frozenset)):
            names.sort(key=str)  # registration order must not depend on hashing
        pairs = [(name, name) for name in names]
    listed: Dict[str, str] = {}
    for method_name, event in pairs:
        if not isinstance(method_name, str) or not method_name.isidentifier():
            raise ValueError(
                f"{source}: {method_name!r} can't be a method name; for events whose "
                f"names aren't identifiers, give a mapping {{method name: event name}}"
            )
        listed[method_name] = check_name(event, f"{source} event", allow_pattern=True)
    return listed


def _nothing_to_subscribe(obj: object, listed: Mapping[str, str]) -> str:
    if isinstance(obj, ModuleType):
        return (
            f"module {obj.__name__} has no hook functions: mark its functions with "
            f"@hookbus.listens('event'), or list the events its functions are named "
            f"after (hook_events = [...] or subscribe(module, events=[...]))"
        )
    kind = type(obj).__qualname__
    if not listed:
        return (
            f"{kind} has no hook methods: mark methods with @hookbus.listens('event'), "
            f"or list the events its methods are named after (hook_events = [...] "
            f"or subscribe(obj, events=[...]))"
        )
    methods = [name for name in dir(type(obj)) if not name.startswith("_")]
    hints = [
        f"{method!r} (did you mean {close[0]!r}?)"
        for method in methods
        for close in [difflib.get_close_matches(method, list(listed), n=1, cutoff=0.8)]
        if close
    ]
    return f"{kind} has no method named after any of its events ({', '.join(listed)})" + (
        f"; near misses: {', '.join(hints)}" if hints else ""
    )


def _qualname(function: Any) -> str:
    return str(getattr(function, "__qualname__", None) or repr(function))
