"""Handles: one per registration, and groups that remove many at once.

A handle knows its store, the registry that keeps it (:class:`HandleStore`), as
torch's ``RemovableHandle`` knows its hooks dict: ``remove()`` asks the store, and
nothing here knows the bus.
"""

from __future__ import annotations

import functools
import inspect
import sys
import weakref
from types import BuiltinMethodType, MethodType, MethodWrapperType, ModuleType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
)

from typing_extensions import Protocol

from ._names import Matcher
from ._spec import CallerFactory

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "MARKED_COROUTINES",
    "NO_SENDER",
    "VALUE_TYPES",
    "Handle",
    "HandleGroup",
    "HandleStore",
    "Owner",
    "Removable",
    "is_async_callable",
]

NO_SENDER: Any = object()
"""The sender of an event emitted without arguments: no ``target`` is it."""


# Python 3.12+: inspect.markcoroutinefunction marks sync functions as async.
MARKED_COROUTINES = sys.version_info >= (3, 12)


def is_async_callable(hook: Any) -> bool:
    """Whether calling ``hook`` gives a coroutine: ``async def``, or an async ``__call__``.

    Example:
        >>> async def fetch(): ...
        >>> is_async_callable(fetch), is_async_callable(print)
        (True, False)
    """
    if inspect.iscoroutinefunction(hook):
        return True
    call: Any = getattr(hook.__class__, "__call__", None)  # noqa: B004 - the method, not callability
    return call is not None and inspect.iscoroutinefunction(call)


_new_object = object.__new__


class Owner(Protocol):
    """The bus a store serves, as the modules below the bus see it: messages name it."""

    @property
    def name(self) -> str: ...


class HandleStore(Protocol):
    """What a handle needs of the registry that keeps it: ``bus.registry`` is one."""

    @property
    def bus(self) -> Owner:
        """The bus the store serves."""
        ...

    def unregister(self, handle: Handle) -> None:
        """``handle.remove()``: unregister it (idempotent)."""
        ...

    def remove(self, handles: Sequence[Handle]) -> None:
        """Unregister many of its handles at once (``HandleGroup.remove()``)."""
        ...

    def claim(self, handle: Handle) -> bool:
        """Unregister a ``once`` hook; True for the one dispatch that won it."""
        ...

    def forget_collected(self, handle: Handle) -> None:
        """Unregister a hook whose weakly held object (or target) was collected."""
        ...


class Removable:
    """Anything that ``remove()`` undoes; as a context manager, it removes on exit."""

    __slots__ = ()

    def remove(self) -> None:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()


class Handle(Removable):
    """One registered hook. Returned by every registration; removes it again.

    ``remove()`` is idempotent, ``active`` says whether the hook is still
    registered, and a handle is a context manager that removes its hook on exit.
    The handle is also the bus's own record of the hook, so introspection
    (:meth:`EventBus.hooks`) returns handles too.

    Attributes:
        registry: the store that keeps the hook (``bus.registry``); ``bus`` is its bus.
        kind: ``"event"``, ``"around"``, ``"pre"``, ``"post"`` or ``"exception"`` (torch
            adds more).
        name: the event or hook-point name, or the glob pattern, it was registered for.
        priority: higher runs first; ties run in registration order.
        once: whether it removes itself after its first call.
        target: the only target (or sender) it fires for, or ``None`` for any
            (see the ``target`` property: by value or identity, held weakly).
        with_name: whether an event hook gets the event's name first.
        optional: whether its name may never exist (pluggy's ``optionalhook``).
        by_name: for each declared event whose spec it takes a subset of, by name,
            what makes its caller (``None`` when it takes every spec as it is).
        may_return_value: for an around hook, whether its code may return a value
            after its ``yield`` (then refused at the call; read at registration).

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> handle = bus.on("saved", print)
        >>> handle.active
        True
        >>> handle.remove(); handle.remove()  # the second call does nothing
        >>> handle.active
        False
        >>> with bus.on("saved", print):
        ...     bus.emit("saved", "inside the block")
        inside the block
    """

    __slots__ = (
        "__weakref__",
        "_hook",
        "_registered",
        "_target",
        "by_name",
        "is_async",
        "kind",
        "match",
        "may_return_value",
        "name",
        "once",
        "optional",
        "priority",
        "registry",
        "seq",
        "weak",
        "with_name",
    )

    def __init__(
        self,
        registry: HandleStore,
        kind: str,
        name: str,
        hook: Callable[..., Any],
        priority: int,
        seq: int,
        once: bool,  # positional too: keywords cost a third of a registration
        target: Any,
        weak: bool,
        is_async: bool,
        match: Optional[Matcher],
        with_name: bool = False,
        optional: bool = False,
    ) -> None:
        self.registry = registry
        self.kind = kind
        self.name = name
        self.priority = priority
        self.seq = seq
        self.once = once
        self.weak = weak
        self.is_async = is_async
        self.match = match
        self.with_name = with_name
        self.optional = optional
        self.by_name: Optional[Dict[str, CallerFactory]] = None
        self.may_return_value = False
        self._registered = False
        self._hook: Any = _weak_reference(hook, self) if weak else hook
        self._target = None if target is None else _Sender(target, self)
        # plain() below builds the same fields for the default options.

    @classmethod
    def plain(
        cls,
        registry: HandleStore,
        kind: str,
        name: str,
        hook: Callable[..., Any],
        is_async: bool = False,
        match: Optional[Matcher] = None,
    ) -> Handle:
        """A handle with the default options, as ``Handle(...)`` makes it, only faster.

        Registration's hot path, and adapters that need a handle of their own:
        calling the class costs twice as much, since CPython can't inline a call
        through ``type.__call__`` into ``__init__`` (parity: ``tests/test_fast_copies.py``).

        Example:
            >>> import hookbus
            >>> registry = hookbus.EventBus().registry
            >>> handle = hookbus.Handle.plain(registry, "event", "saved", print)
            >>> handle.priority, handle.once, handle.active
            (0, False, False)
        """
        handle: Handle = _new_object(cls)
        handle.registry = registry
        handle.kind = kind
        handle.name = name
        handle.priority = 0
        handle.seq = 0
        handle.once = False
        handle.weak = False
        handle.is_async = is_async
        handle.match = match
        handle.with_name = False
        handle.optional = False
        handle.by_name = None
        handle.may_return_value = False
        handle._registered = False
        handle._hook = hook
        handle._target = None
        return handle

    @property
    def bus(self) -> Any:
        """The :class:`EventBus` the hook is registered on (``handle.registry.bus``)."""
        return self.registry.bus

    @property
    def hook(self) -> Optional[Callable[..., Any]]:
        """The registered callable, or ``None`` once a weakly held one was collected."""
        return self._hook() if self.weak else self._hook  # type: ignore[no-any-return]

    @property
    def target(self) -> Any:
        """The only sender (an event's first argument) or call target the hook fires for.

        ``None`` for any, and once a weakly held target was collected (the hook is
        then unregistered). Built-in values (``str``, ``int``, ``float``, ``bytes``,
        ``complex``) match by value, as blinker's senders do; other objects by
        identity, held weakly when they support it.
        """
        sender = self._target
        return None if sender is None else sender.get()

    @property
    def targeted(self) -> bool:
        """Whether the hook was registered with a ``target`` (even one since collected)."""
        return self._target is not None

    @property
    def active(self) -> bool:
        """Whether the hook is registered and (if held weakly) still alive, its target too."""
        return (
            self._registered
            and (not self.weak or self._hook() is not None)
            and (self._target is None or self._target.get() is not None)
        )

    def fires_for(self, subject: Any) -> bool:
        """Whether the hook's ``target`` lets it fire for ``subject`` (the sender, or target).

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> handle = bus.on("sig", print, target=123456789)
            >>> handle.fires_for(int("123456789")), handle.fires_for(1)
            (True, False)
        """
        sender = self._target
        return sender is None or sender.matches(subject)

    def same_registration(self, other: Handle) -> bool:
        """Whether ``other`` registers the same callable for the same target (see register).

        Bound methods count as the same when they bind the same function to the
        same object, as ``==`` says, without calling the user's ``__eq__``.
        """
        if self.kind != other.kind or self.name != other.name:
            return False
        mine: Any = self.hook
        theirs: Any = other.hook
        if mine is None or theirs is None:
            return False
        if mine is not theirs and not (
            type(mine) is MethodType
            and type(theirs) is MethodType
            and mine.__self__ is theirs.__self__
            and mine.__func__ is theirs.__func__
        ):
            return False
        if self._target is None or other._target is None:
            return self._target is other._target
        target = other.target
        return target is not None and self.fires_for(target)

    def call_for(self, event: str, hook: Callable[..., Any]) -> Callable[..., Any]:
        """What a dispatch of the declared ``event`` calls for ``hook``: the hook itself,
        or, for a hook that takes the spec's arguments by name, its caller."""
        by_name = self.by_name
        if by_name is not None:
            factory = by_name.get(event)
            if factory is not None:
                return factory(hook)
        return hook

    def bind_by_name(self, event: str, factory: Optional[CallerFactory]) -> None:
        """Record how the declared ``event`` calls this hook (a new dict: plans read it)."""
        by_name: Dict[str, CallerFactory] = dict(self.by_name or {})
        if factory is None:
            by_name.pop(event, None)
        else:
            by_name[event] = factory
        self.by_name = by_name or None

    @property
    def where(self) -> str:
        """Where the hook was defined, as ``file:line`` (or ``"?"`` when unknown)."""
        return where_defined(self.hook)

    def applies_to(self, name: str) -> bool:
        """Whether the hook is registered for ``name``, exactly or by pattern."""
        return self.name == name or (self.match is not None and self.match(name) is not None)

    def runner(self, subject: Any, name: str) -> Optional[Callable[..., Any]]:
        """The callable to run in one dispatch, or ``None`` to skip the hook there.

        Every rare option is decided here, so each dispatch loop is one flat
        loop: ``subject`` is the event's sender (its first argument, else
        :data:`NO_SENDER`) or the call's target, checked against ``target``; a
        collected weak hook is skipped; a ``once`` hook runs only for the one
        dispatch that claims it; ``with_name`` gets ``name`` first.
        """
        if self._target is not None and not self._target.matches(subject):
            return None
        hook = self._hook() if self.weak else self._hook
        if hook is None:  # a weak hook whose object was collected
            return None
        if self.once and not self.registry.claim(self):
            return None  # another thread's dispatch ran it first
        if self.by_name is not None:  # a declared event's hook that takes arguments by name
            hook = self.call_for(name, hook)
        return functools.partial(hook, name) if self.with_name else hook

    def remove(self) -> None:
        """Unregister the hook. Calling it again, or after ``clear()``, does nothing."""
        if self._registered:
            self.registry.unregister(self)

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(
            f"{self!r} cannot be pickled or copied: a handle belongs to its bus, in the "
            f"process that made it. Register the hook again in the process that needs it "
            f"(for DataLoader workers: in worker_init_fn)"
        )

    def __repr__(self) -> str:
        options = "".join(
            (
                f" priority={self.priority}" if self.priority else "",
                " once" if self.once else "",
                " weak" if self.weak else "",
                " optional" if self.optional else "",
                " with_name" if self.with_name else "",
                f" target={type(self.target).__name__}" if self.target is not None else "",
            )
        )
        state = "active" if self.active else "removed"
        return f"<Handle {self.kind} {self.name!r} {hook_name(self.hook)}{options} {state}>"


class HandleGroup(Removable):
    """Handles removed together: ``remove()`` removes all, and so does leaving a ``with``.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> group = hookbus.HandleGroup([bus.on("a", print), bus.on("b", print)])
        >>> group.add(bus.on("c", print))
        >>> len(group), group.active
        (3, True)
        >>> group.remove()
        >>> group.active, bus.hooks()
        (False, [])
    """

    __slots__ = ("_handles",)

    def __init__(self, handles: Iterable[Handle] = ()) -> None:
        self._handles: List[Handle] = list(handles)

    def add(self, handle: Handle) -> None:
        """Add a handle to the group."""
        self._handles.append(handle)

    @property
    def active(self) -> bool:
        """Whether any hook of the group is still registered."""
        return any(handle.active for handle in self._handles)

    def remove(self) -> None:
        """Remove every hook of the group (each bus's lock is taken once)."""
        handles, self._handles = self._handles, []
        by_store: Dict[int, Tuple[HandleStore, List[Handle]]] = {}
        for handle in handles:
            by_store.setdefault(id(handle.registry), (handle.registry, []))[1].append(handle)
        for store, stored in by_store.values():
            store.remove(stored)

    def __iter__(self) -> Iterator[Handle]:
        return iter(list(self._handles))

    def __len__(self) -> int:
        return len(self._handles)

    def __repr__(self) -> str:
        count, active = len(self._handles), sum(handle.active for handle in self._handles)
        plural = "" if count == 1 else "s"
        return f"<{type(self).__name__} {count} handle{plural}, {active} active>"


VALUE_TYPES = (str, int, float, bytes, complex)
"""Senders matched by value (blinker keys ``str`` and ``int`` senders by value)."""


def _unregister_when_collected(handle: Handle) -> Callable[[object], None]:
    """A weakref callback that unregisters ``handle`` (its hook or target died)."""
    handle_ref = weakref.ref(handle)

    def collected(_: object) -> None:
        alive = handle_ref()
        if alive is not None:
            alive.registry.forget_collected(alive)

    return collected


class _Sender:
    """A handle's ``target``, held and compared as blinker holds and compares senders.

    By value for built-in values; else by identity, weakly when the object supports
    it (its hook is unregistered when it is collected), strongly when it can't.
    """

    __slots__ = ("_held", "_how")

    def __init__(self, target: Any, handle: Handle) -> None:
        self._held: Any
        self._how: str
        if isinstance(target, VALUE_TYPES):
            self._how, self._held = "value", target
            return
        try:
            self._held = weakref.ref(target, _unregister_when_collected(handle))
            self._how = "weak"
        except TypeError:  # no weak references (a tuple, __slots__ without __weakref__)
            self._how, self._held = "identity", target

    def get(self) -> Any:
        """The target, or ``None`` once a weakly held one was collected."""
        return self._held() if self._how == "weak" else self._held

    def matches(self, subject: Any) -> bool:
        held = self._held
        if self._how == "weak":
            held = held()
            return held is not None and subject is held
        if subject is held:
            return True
        # By value only between built-in values: a user's __eq__ is never asked.
        return self._how == "value" and isinstance(subject, VALUE_TYPES) and subject == held


def _weak_reference(hook: Callable[..., Any], handle: Handle) -> Any:
    """A weak reference to ``hook`` that unregisters ``handle`` when it dies."""
    if getattr(hook, "__name__", None) == "<lambda>":
        raise TypeError(
            "weak=True on a lambda: nothing else refers to a lambda written in the call, "
            "so it would be collected at once and never run; register it strongly (the "
            "default), or hold a named function and register that weakly"
        )
    # Bound methods are made afresh at each attribute access: hold the object and
    # the function apart, as WeakMethod does, or the reference dies at once.
    collected = _unregister_when_collected(handle)
    is_method = hasattr(hook, "__self__") and hasattr(hook, "__func__")
    is_c_method = isinstance(hook, _C_METHODS) and not isinstance(
        getattr(hook, "__self__", None), (ModuleType, type(None))
    )
    # Counted before anything here holds the object: only the method refers to it?
    if (is_method or is_c_method) and _refs_of_owner(hook) <= _OWNER_ALONE:
        raise TypeError(
            f"weak=True on {hook_name(hook)}, a method of an object that nothing else refers "
            f"to (one made in the call, say): the object would be collected at once and the "
            f"hook would never run; keep the object somewhere first, or register the hook "
            f"strongly (the default)"
        )
    if is_method:
        return weakref.WeakMethod(hook, collected)
    if is_c_method:
        bound: Any = hook
        return _WeakCMethod(hook, bound.__self__, collected)
    try:
        return weakref.ref(hook, collected)
    except TypeError:
        raise TypeError(
            f"weak=True needs a hook that supports weak references, got "
            f"{type(hook).__name__} {hook_name(hook)}; accepted: functions, bound "
            f"methods and most objects (not builtins); or register it strongly"
        ) from None


def _refs_of_owner(method: Any) -> int:
    """How many references the object a method is bound to has, as seen from here."""
    return sys.getrefcount(method.__self__)


class _Alone:
    def method(self) -> None: ...


# The count _refs_of_owner gives for an object that only its bound method refers to,
# measured through the same code: what Python counts (stack references included)
# differs between versions, so it is measured rather than assumed.
_OWNER_ALONE = _refs_of_owner(_Alone().method)


# Methods of C types bound to an object (deque().append, d.__setitem__): like a
# bound method, each attribute access makes a new one, but there is no __func__.
_C_METHODS = (BuiltinMethodType, MethodWrapperType)


class _WeakCMethod:
    """``WeakMethod`` for a C type's method: its object held weakly, found again by name."""

    __slots__ = ("_name", "_owner")

    def __init__(self, method: Any, owner: object, callback: Callable[[Any], None]) -> None:
        name: str = method.__name__
        label = f"{type(owner).__name__}.{name}"
        try:
            self._owner = weakref.ref(owner, callback)
        except TypeError:
            raise TypeError(
                f"weak=True holds a method's object weakly, but {label} is bound to a "
                f"{type(owner).__name__}, which does not support weak references; accepted: "
                f"methods of objects that do (a subclass of {type(owner).__name__} does); "
                f"or register it strongly"
            ) from None
        if getattr(owner, name, None) != method:
            raise TypeError(
                f"weak=True finds a method again by name on its object, but {label} is not "
                f"what the name {name!r} gives on it now; register it strongly"
            )
        self._name = name

    def __call__(self) -> Any:
        owner = self._owner()
        return None if owner is None else getattr(owner, self._name)


def hook_name(hook: Any) -> str:
    """The hook's qualified name for messages and reprs, without calling its ``repr``."""
    if hook is None:
        return "<collected>"
    if isinstance(hook, functools.partial):
        return f"partial({hook_name(hook.func)})"
    name = getattr(hook, "__qualname__", None) or getattr(hook, "__name__", None)
    return str(name) if name else f"<{type(hook).__name__} object>"


def where_defined(hook: Any) -> str:
    """Where ``hook`` (or what it wraps) is defined, as ``file:line`` (``"?"`` if unknown)."""
    while isinstance(hook, functools.partial):
        hook = hook.func
    hook = getattr(hook, "__func__", hook)
    code = getattr(hook, "__code__", None)
    if code is None:
        call: Any = getattr(hook.__class__, "__call__", None)  # noqa: B004 - the method, not callability
        code = getattr(call, "__code__", None)
    if code is None:
        return "?"
    return f"{code.co_filename}:{code.co_firstlineno}"
