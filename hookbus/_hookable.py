"""The bus's hook-point methods, ``hookable`` and ``wrap``: a base of :class:`EventBus`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, cast, overload

from typing_extensions import ParamSpec

from ._names import check_name
from ._wrapper import Decorator, make_hookable

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["HookPointMethods"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class HookPointMethods:
    """:meth:`EventBus.hookable` and :meth:`EventBus.wrap`, the bus's hook-point methods.

    A base of :class:`EventBus` only, so that the facade's module stays short;
    the methods live with the wrapper they make.
    """

    __slots__ = ()

    @overload
    def hookable(self, fn: classmethod[T, P, R], /) -> classmethod[T, P, R]: ...

    @overload
    def hookable(self, fn: staticmethod[P, R], /) -> staticmethod[P, R]: ...

    @overload
    def hookable(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def hookable(self, name: Optional[str] = None, /) -> Decorator: ...

    def hookable(self, fn_or_name: Any = None, /) -> Any:
        """Make a callable a hook point: ``@bus.hookable`` or ``@bus.hookable("name")``.

        Each call of the result runs the point's pre hooks, the callable, then its
        post hooks (or its exception hooks, if it raised). With no hooks
        registered, it costs about as much as a ``functools.wraps`` pass-through.
        The name defaults to the callable's ``__qualname__``.

        Works on functions, methods, classmethods and staticmethods (in a class
        body, either above or below ``@classmethod``), builtins, callable objects
        and ``async def`` functions or ``async def __call__`` objects (the result
        is then a coroutine function whose hooks may be sync or async). The result
        keeps ``__name__``, ``__doc__``, ``__wrapped__`` and ``inspect.signature``.
        On a method, ``ctx.target`` is the instance (or class) and ``ctx.args`` the
        arguments after it. Making a hook point of a hook point of the same bus and
        name returns it unchanged, so its hooks run once per call.

        A class is refused (it would stop being a class): to hook construction,
        decorate its ``__init__``. A generator function's call only creates the
        generator: post hooks get the generator object, and an error raised during
        iteration happens after the call, so no exception hook sees it. To hook the
        work itself, make the function that consumes the generator (or the one
        that computes each item) the hook point, or emit events from inside the
        generator.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> class Model:
            ...     @bus.hookable("forward")
            ...     def forward(self, x):
            ...         return x + 1
            >>> _ = bus.post("forward", lambda ctx: print(type(ctx.target).__name__, ctx.result))
            >>> Model().forward(1)
            Model 2
            2
        """
        bus = cast("EventBus", self)  # the only class this is a base of
        if fn_or_name is None or isinstance(fn_or_name, str):
            name: Optional[str] = fn_or_name
            if name is not None:
                check_name(name, "hook point name", allow_pattern=False)

            def decorate(fn: Any) -> Any:
                return make_hookable(bus, fn, name)

            return decorate
        return make_hookable(bus, fn_or_name, None)

    @overload
    def wrap(
        self, fn: classmethod[T, P, R], name: Optional[str] = None, /
    ) -> classmethod[T, P, R]: ...

    @overload
    def wrap(
        self, fn: staticmethod[P, R], name: Optional[str] = None, /
    ) -> staticmethod[P, R]: ...

    @overload
    def wrap(self, fn: Callable[P, R], name: Optional[str] = None, /) -> Callable[P, R]: ...

    def wrap(self, fn: Any, name: Optional[str] = None, /) -> Any:
        """Return ``fn`` wrapped as the hook point ``name``; ``fn`` itself is unchanged.

        The call form of :meth:`EventBus.hookable`, for callables you don't define, such as
        builtins, bound methods or other libraries' functions.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> hooked_len = bus.wrap(len, "len")
            >>> _ = bus.post("len", lambda ctx: print("len ->", ctx.result))
            >>> hooked_len("four")
            len -> 4
            4
        """
        return make_hookable(cast("EventBus", self), fn, name)
