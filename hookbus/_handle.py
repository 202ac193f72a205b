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
from types import BuiltinMethodType, FunctionType, MethodType, MethodWrapperType, ModuleType
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
    cast,
)

from typing_extensions import Protocol

from ._names import Matcher
from ._spec import CallerFactory

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "DEFAULT_OPTIONS",
    "MARKED_COROUTINES",
    "NO_SENDER",
    "VALUE_TYPES",
    "Handle",
    "HandleGroup",
    "HandleStore",
    "Owner",
    "Removable",
    "builtin_value",
    "is_async_callable",
    "refuse_unheld_hook",
    "same_callable",
    "tie_to",
    "unheld",
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


class _Options:
    """A handle's rare options, never changed: :data:`_DEFAULTS` is shared by every
    handle that has none (most of them), and a change makes a new one
    (:meth:`replaced`), so that a plan reading a handle sees its options whole."""

    __slots__ = (
        "bare",
        "by_name",
        "may_return_value",
        "once",
        "optional",
        "priority",
        "target",
        "weak",
        "with_name",
    )

    def __init__(
        self,
        priority: int = 0,
        once: bool = False,
        weak: bool = False,
        with_name: bool = False,
        optional: bool = False,
        target: Optional[_Sender] = None,
        by_name: Optional[Dict[str, CallerFactory]] = None,
        may_return_value: bool = False,
    ) -> None:
        self.priority = priority
        self.once = once
        self.weak = weak
        self.with_name = with_name
        self.optional = optional
        self.target = target
        self.by_name = by_name
        self.may_return_value = may_return_value
        # What Handle.runner decides per dispatch: with none, a plan calls the hook itself.
        self.bare = not (once or weak or with_name or target is not None)

    def replaced(self, **changes: Any) -> _Options:
        fields = {name: getattr(self, name) for name in self.__slots__ if name != "bare"}
        fields.update(changes)
        return _Options(**fields)


_DEFAULTS = _Options()
DEFAULT_OPTIONS: Any = _DEFAULTS
"""What :meth:`Handle.plain` stores as a handle's options: for a registry that builds a
plain handle inline, on its hot path."""


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
        "_options",
        "_registered",
        "is_async",
        "kind",
        "match",
        "name",
        "registry",
        "seq",
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
        self.seq = seq
        self.is_async = is_async
        self.match = match
        self._registered = False
        self._options = _DEFAULTS
        self._hook: Any = _weak_reference(hook, self) if weak else hook
        if priority or once or weak or with_name or optional or target is not None:
            sender = None if target is None else _Sender(target, self)
            self._options = _Options(priority, once, weak, with_name, optional, sender)
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

        Registration of a hook point's hooks, and adapters that need a handle of their
        own: calling the class costs twice as much, since CPython can't inline a call
        through ``type.__call__`` into ``__init__`` (parity: ``tests/test_fast_copies.py``).
        An event's registration (``bus.on``, ``_registry.on_event``) makes the same stores
        inline, with ``DEFAULT_OPTIONS``, to save this frame too.

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
        handle.seq = 0
        handle.is_async = is_async
        handle.match = match
        handle._registered = False
        handle._options = _DEFAULTS
        handle._hook = hook
        return handle

    # The rare options live in one object, shared by every handle that has none: a slot
    # each would cost every handle 8 bytes per option.

    @property
    def priority(self) -> int:
        """Higher runs first; ties run in registration order."""
        return self._options.priority

    @property
    def once(self) -> bool:
        """Whether the hook removes itself after its first call."""
        return self._options.once

    @property
    def weak(self) -> bool:
        """Whether the hook (for a method: its object) is held by a weak reference."""
        return self._options.weak

    @property
    def with_name(self) -> bool:
        """Whether an event hook gets the event's name first."""
        return self._options.with_name

    @property
    def optional(self) -> bool:
        """Whether its name may never exist (pluggy's ``optionalhook``)."""
        return self._options.optional

    @property
    def by_name(self) -> Optional[Dict[str, CallerFactory]]:
        """For each declared event whose spec the hook takes a subset of, by name, what
        makes its caller (``None`` when it takes every spec as it is)."""
        return self._options.by_name

    @property
    def may_return_value(self) -> bool:
        """For an around hook, whether its code may return a value after its ``yield``
        (then refused at the call; read at registration)."""
        return self._options.may_return_value

    @may_return_value.setter
    def may_return_value(self, value: bool) -> None:
        if value != self._options.may_return_value:
            self._options = self._options.replaced(may_return_value=value)

    @property
    def bare(self) -> bool:
        """Whether a dispatch may call the hook itself: it is sync and has no option that
        :meth:`runner` decides per dispatch (once, weak, target, with_name)."""
        return not self.is_async and self._options.bare

    @property
    def bus(self) -> Any:
        """The :class:`EventBus` the hook is registered on (``handle.registry.bus``)."""
        return self.registry.bus

    @property
    def hook(self) -> Optional[Callable[..., Any]]:
        """The registered callable, or ``None`` once a weakly held one was collected."""
        return self._hook() if self._options.weak else self._hook  # type: ignore[no-any-return]

    @property
    def target(self) -> Any:
        """The only sender (an event's first argument) or call target the hook fires for.

        ``None`` for any, and once a weakly held target was collected (the hook is
        then unregistered). Built-in values (``str``, ``int``, ``float``, ``bytes``,
        ``complex``) match by value, as blinker's ``str`` and ``int`` senders do; a bound
        method, that method of that object; other objects by identity, held weakly when
        they support it.
        """
        sender = self._options.target
        return None if sender is None else sender.get()

    @property
    def targeted(self) -> bool:
        """Whether the hook was registered with a ``target`` (even one since collected)."""
        return self._options.target is not None

    @property
    def active(self) -> bool:
        """Whether the hook is registered and (if held weakly) still alive, its target too."""
        return self._registered and self.alive

    @property
    def alive(self) -> bool:
        """Whether the hook could still run: a weakly held hook, or target, not collected.

        ``active`` is this and being registered; a snapshot restores only live hooks.
        """
        held, options = self._hook, self._options
        if options.weak and (held._owner() if held.__class__ is _WeakCMethod else held()) is None:
            return False  # (a C method's object is asked for nothing: no getattr runs)
        return options.target is None or options.target.get() is not None

    def fires_for(self, subject: Any) -> bool:
        """Whether the hook's ``target`` lets it fire for ``subject`` (the sender, or target).

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> handle = bus.on("sig", print, target=123456789)
            >>> handle.fires_for(int("123456789")), handle.fires_for(1)
            (True, False)
        """
        sender = self._options.target
        return sender is None or sender.matches(subject)

    def same_registration(self, other: Handle) -> bool:
        """Whether ``other`` registers the same callable (:func:`same_callable`) for the
        same kind and name, with targets that one sender can match both: the duplicate
        rule of register, so that no emission runs one callable twice.

        A registration for any sender (no ``target``) overlaps every other one;
        two targets overlap when the other's target is one this one fires for.
        """
        if self.kind != other.kind or self.name != other.name:
            return False
        mine: Any = self.hook
        theirs: Any = other.hook
        if mine is None or theirs is None or not same_callable(mine, theirs):
            return False
        if self._options.target is None or other._options.target is None:
            return True  # one of them fires for every sender, the other's included
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
        self._options = self._options.replaced(by_name=by_name or None)

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
        options = self._options
        if options.target is not None and not options.target.matches(subject):
            return None
        hook = self._hook() if options.weak else self._hook
        if hook is None:  # a weak hook whose object was collected
            return None
        if options.once and not self.registry.claim(self):
            return None  # another thread's dispatch ran it first
        if options.by_name is not None:  # a declared event's hook taking arguments by name
            hook = self.call_for(name, hook)
        return functools.partial(hook, name) if options.with_name else hook

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


def _check_handle(handle: Any) -> Handle:
    # Checked on the way in: remove() empties the group before removing, so a stray
    # object found there would leave every hook of the group registered.
    if not isinstance(handle, Handle):
        raise TypeError(
            f"HandleGroup holds Handles, got {type(handle).__name__}; accepted: what on, pre, "
            "post, exception and around return (for a group's handles, add each: "
            "for handle in other: group.add(handle))"
        )
    return handle


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
        self._handles: List[Handle] = [_check_handle(handle) for handle in handles]

    def add(self, handle: Handle) -> None:
        """Add a handle to the group (``TypeError`` for anything else)."""
        self._handles.append(_check_handle(handle))

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

# A built-in value of a subclass (a StrEnum or IntEnum member, a bool, numpy's float64),
# copied by the built-in type's own C code: no method of the subclass runs.
_BUILTIN_COPIES: Tuple[Tuple[type, str, Callable[[Any], Any]], ...] = (
    (str, "text", str.__str__),
    (int, "number", int.__int__),
    (float, "number", float.__float__),
    (bytes, "bytes", lambda value: bytes.__getitem__(value, slice(None))),
    (complex, "number", complex.__pos__),
)


def builtin_value(value: Any) -> Optional[Tuple[str, Any]]:
    """What a value sender compares as: its category and its value as a plain built-in.

    ``None`` for an object that is not a ``str``, ``int``, ``float``, ``bytes`` or
    ``complex`` (by its type: a ``__class__`` it claims is not asked). No method of
    the value's own class runs, so its ``__eq__`` or ``__str__`` is never called.

    Example:
        >>> import enum
        >>> class Mode(str, enum.Enum):
        ...     TRAIN = "train"
        >>> builtin_value(Mode.TRAIN), builtin_value(True), builtin_value(object())
        (('text', 'train'), ('number', 1), None)
    """
    kind: Any = type(cast(object, value))
    for base, category, _ in _BUILTIN_COPIES:
        if kind is base:
            return category, value
    for base, category, copy in _BUILTIN_COPIES:
        if issubclass(kind, base):
            return category, copy(value)
    return None


def same_callable(mine: Any, theirs: Any) -> bool:
    """Whether two hooks are one callable, as ``==`` says, without a user's ``__eq__``.

    The same object; or two bound methods of one function (or one C method, such as
    ``list.append``) bound to one object: each attribute access makes a new method
    object, so identity alone would tell ``obj.method`` from ``obj.method``.

    Example:
        >>> log = []
        >>> same_callable(log.append, log.append), same_callable(log.append, [].append)
        (True, False)
    """
    if mine is theirs:
        return True
    kind: Any = type(cast(object, mine))
    if kind is not type(theirs):
        return False
    if kind is MethodType:
        return bool(mine.__self__ is theirs.__self__ and mine.__func__ is theirs.__func__)
    if kind is BuiltinMethodType or kind is MethodWrapperType:
        return bool(mine.__self__ is theirs.__self__ and mine.__name__ == theirs.__name__)
    return False


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

    By value for built-in values; a bound method by its object and function (each
    ``obj.method`` is a new object); else by identity. Weakly when the object supports
    it (its hook is unregistered when it is collected), strongly when it can't.
    """

    __slots__ = ("_held", "_how", "_value")

    def __init__(self, target: Any, handle: Handle) -> None:
        self._held: Any
        self._how: str
        self._value = builtin_value(target)
        if self._value is not None:
            self._how, self._held = "value", target
            return
        if type(target) is MethodType:
            # Each ``obj.method`` makes a new method object, which dies at once: compared
            # by object and function (blinker's key for a method), held as WeakMethod does.
            try:
                self._held = weakref.WeakMethod(target, _unregister_when_collected(handle))
                self._how = "method"
            except TypeError:  # its object has no weak references
                self._how, self._held = "strong method", target
            return
        try:
            self._held = weakref.ref(target, _unregister_when_collected(handle))
            self._how = "weak"
        except TypeError:  # no weak references (a tuple, __slots__ without __weakref__)
            self._how, self._held = "identity", target

    def get(self) -> Any:
        """The target, or ``None`` once a weakly held one was collected."""
        how = self._how
        return self._held() if how == "weak" or how == "method" else self._held

    def matches(self, subject: Any) -> bool:
        held = self._held
        how = self._how
        if how == "weak":
            held = held()
            return held is not None and subject is held
        if subject is held:
            return True
        if how == "identity":
            return False
        if how != "value":  # a method: the same function of the same object
            return type(subject) is MethodType and same_callable(self.get(), subject)
        # By value only between built-in values, as built-ins: a user's __eq__ is never asked.
        value = builtin_value(subject)
        mine: Any = self._value
        return value is not None and value[0] == mine[0] and value[1] == mine[1]


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
        try:
            return weakref.WeakMethod(hook, collected)
        except TypeError:
            owner = type(cast(Any, hook).__self__).__name__
            raise TypeError(
                f"weak=True holds a method's object weakly, but {hook_name(hook)} is bound "
                f"to a {owner}, which does not support weak references; accepted: methods "
                f"of objects that do (a class with '__weakref__' in its __slots__, or "
                f"without __slots__); or register it strongly"
            ) from None
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


# --- what nothing but the registration refers to --------------------------------------
#
# A callable object or a partial made in the call (``bus.on(name, Hook(), weak=True)``)
# is referred to by the frames of the registration alone, and dies as it returns. Its
# reference count says so, once the references those frames hold are taken off: the
# hookbus frames' locals are read (the user's frames never are: reading a frame's
# locals may keep them alive), and what the calls themselves hold (the caller's stack,
# on Python 3.10 and before, or under a PEP 523 frame evaluator such as torch.compile's,
# and the counting's own) is measured at each check, through the same code, as
# _OWNER_ALONE is: how CPython counts can change within a process.


def unheld(value: Any) -> bool:
    """Whether nothing but the registration under way refers to ``value``.

    Counts the references that hookbus's own frames on the stack hold (from the
    caller of this function up to the first frame that is not hookbus's), and those
    the calls hold; any other reference (a variable of the user's, an attribute, a
    list) means that something else holds ``value``. Errs towards ``False``: a
    reference it can't account for (a ``*args`` tuple, a call through C) counts as
    held elsewhere.

    Example:
        >>> import functools
        >>> unheld(functools.partial(print, 1))
        True
        >>> kept = functools.partial(print, 1)
        >>> unheld(kept)
        False
    """
    total, held, passed = _references(value)  # first: the calibration reads this frame
    per_call, own = _calibrate()
    if per_call is None:  # an interpreter that counts otherwise: never refuse
        return False
    return total - held - per_call * passed <= own


def refuse_unheld_hook(hook: Any) -> None:
    """``weak=True``: refuse a callable object or ``functools.partial`` that nothing but
    the registration refers to, as a lambda is refused (see :func:`_weak_reference`).

    Functions and classes are not asked (a decorator holds one that nothing else
    refers to yet); methods are, by their object, when the handle is made.
    """
    kind: Any = type(cast(object, hook))
    if (
        kind is FunctionType
        or kind is MethodType
        or kind in _C_METHODS
        or issubclass(kind, type)
        or not kind.__weakrefoffset__  # refused when the handle is made, saying why
    ):
        return
    if unheld(hook):
        raise TypeError(
            f"weak=True on {hook_name(hook)} (a {kind.__name__}), which nothing else refers "
            f"to (made in the call, say): it would be collected as soon as the registration "
            f"returns and never run; keep it somewhere first (a variable, an attribute), or "
            f"register it strongly (the default)"
        )


def _references(value: Any) -> Tuple[int, int, int]:
    """``value``'s reference count; how many locals of hookbus frames hold it, from the
    caller's caller up; and how many of those frames got it as a parameter."""
    total = sys.getrefcount(value)
    held = passed = 0
    frame: Any = sys._getframe(2)  # the caller's locals hold it: counted in its own
    while frame is not None and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        module = frame.f_globals.get("__name__")
        if not isinstance(module, str) or not (
            module == "hookbus" or module.startswith("hookbus.")
        ):
            break  # the user's frame: its locals are never read
        code = frame.f_code
        parameters = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        for name, local in frame.f_locals.items():
            if local is value:
                held += 1
                passed += name in parameters
        frame = frame.f_back
    del frame
    return total, held, passed


class _Fresh:
    pass


def _through_one(value: Any) -> Tuple[int, int, int]:
    return _through_none(value)


def _through_none(value: Any) -> Tuple[int, int, int]:
    return _references(value)


def _calibrate() -> Tuple[Optional[int], int]:
    """What the calls hold: per frame that got the value as a parameter (its caller's
    stack, where calls don't hand their arguments over), and of the counting itself.
    ``None`` if the counts don't fit that model (then nothing is ever refused)."""
    total_1, held_1, passed_1 = _through_none(_Fresh())
    total_2, held_2, passed_2 = _through_one(_Fresh())
    if passed_2 - passed_1 != 1 or held_2 - held_1 != 1:
        return None, 0
    per_call = total_2 - total_1 - 1
    own = total_1 - held_1 - per_call * passed_1
    if per_call not in (0, 1) or own < 1:
        return None, 0
    return per_call, own


def tie_to(handle: Handle, owner: object) -> None:
    """Hold the weakly held hook of ``handle`` exactly as long as ``owner``.

    ``subscribe(obj, weak=True)``: a static or class method of ``obj``'s class does
    not refer to ``obj``, so a weak reference to it would outlive ``obj``; tied, it
    goes with ``obj`` as the plain methods do. The hook is held strongly meanwhile
    (a class's own function or classmethod refers to nothing ``owner`` needs).
    """
    hook = handle.hook
    if hook is not None:
        handle._hook = _HeldWith(hook, owner, _unregister_when_collected(handle))


class _HeldWith:
    """A hook alive as long as another object (see :func:`tie_to`)."""

    __slots__ = ("_hook", "_owner")

    def __init__(self, hook: Any, owner: object, callback: Callable[[Any], None]) -> None:
        try:
            self._owner = weakref.ref(owner, callback)
        except TypeError:
            raise TypeError(
                f"weak=True holds the hooks of a {type(owner).__name__} by a weak reference "
                f"to it, which it does not support; accepted: objects of classes without "
                f"__slots__, or with '__weakref__' in them; or subscribe it strongly"
            ) from None
        self._hook = hook

    def __call__(self) -> Any:
        return self._hook if self._owner() is not None else None


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
