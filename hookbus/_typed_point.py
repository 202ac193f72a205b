"""What type checkers see of a hook point: ``f.pre``, ``f.post``, ``f.exception`` typed by ``f``.

Typing only, and free at run time: ``@bus.hookable`` returns the plain wrapper
function that :func:`~hookbus._hookpoint.make_hookable` builds, with ``pre``,
``post`` and ``exception`` set to its :class:`HookPoint`'s methods. These protocols
say so to mypy and pyright: calling the point takes ``f``'s parameters and returns
its result, and a hook registered through it must take a ``CallContext[R]`` (``R``
being what ``f`` returns, awaited for an ``async def``) and return ``None``.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Optional,
    Protocol,
    Type,
    TypeVar,
    overload,
)

from typing_extensions import Concatenate, ParamSpec, Self, Unpack

if TYPE_CHECKING:
    from ._context import CallContext
    from ._hookpoint import HookPoint
    from ._options import HookOptions

__all__ = ["AsyncTypedPoint", "TypedClassPoint", "TypedPoint"]

P = ParamSpec("P")
Q = ParamSpec("Q")
R = TypeVar("R")
S = TypeVar("S")
C = TypeVar("C", contravariant=True)

# The hooks a point takes: a context of its result type in, nothing out.
Hook = Callable[["CallContext[R]"], None]
AsyncHook = Callable[["CallContext[R]"], Optional[Awaitable[None]]]


class TypedPoint(Protocol[P, R]):
    """A hook point made from ``def f(...) -> R``, as type checkers see it.

    It is called as ``f`` is, and its ``pre``, ``post`` and ``exception`` methods
    register hooks for its name, as ``bus.pre(name, hook)`` does, type-checked: a
    hook must take one ``CallContext[R]`` (so ``ctx.result`` is an ``R`` in a post
    hook) and return ``None``. Each returns the hook unchanged, with or without
    options, called or as a decorator (:meth:`EventBus.handles_of` finds the
    handle). On a method, hooks run for every instance: register through the
    class (``Model.forward.post``) and pass ``target=obj`` for one instance.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("label")
        ... def label(x: int) -> str:
        ...     return f"#{x}"
        >>> @label.post
        ... def shout(ctx: hookbus.CallContext[str]) -> None:
        ...     ctx.result = ctx.result.upper() + "!"
        >>> label(3)
        '#3!'
        >>> [handle.kind for handle in bus.handles_of(shout)]
        ['post']
    """

    __name__: str
    __qualname__: str
    __hookbus_point__: HookPoint

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @overload
    def __get__(self, instance: None, owner: Any, /) -> Self: ...

    @overload
    def __get__(
        self: TypedPoint[Concatenate[S, Q], R], instance: S, owner: Any, /
    ) -> Callable[Q, R]: ...

    @overload
    def pre(self, hook: Hook[R], /, **options: Unpack[HookOptions]) -> Hook[R]: ...

    @overload
    def pre(self, /, **options: Unpack[HookOptions]) -> Callable[[Hook[R]], Hook[R]]: ...

    @overload
    def post(self, hook: Hook[R], /, **options: Unpack[HookOptions]) -> Hook[R]: ...

    @overload
    def post(self, /, **options: Unpack[HookOptions]) -> Callable[[Hook[R]], Hook[R]]: ...

    @overload
    def exception(self, hook: Hook[R], /, **options: Unpack[HookOptions]) -> Hook[R]: ...

    @overload
    def exception(self, /, **options: Unpack[HookOptions]) -> Callable[[Hook[R]], Hook[R]]: ...

    # around: to come with bus.around (a hook that wraps the call), typed the same way.


class AsyncTypedPoint(Protocol[P, R]):
    """A hook point made from ``async def f(...) -> R``: its call is awaited, and its hooks
    may be plain or ``async def`` functions of a ``CallContext[R]``.

    ``R`` is what the call returns once awaited, which is what ``ctx.result`` holds
    in a post hook. See :class:`TypedPoint` for the rest.

    Example:
        >>> import asyncio, hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("fetch")
        ... async def fetch(url: str) -> bytes:
        ...     return b"page"
        >>> @fetch.post
        ... async def measure(ctx: hookbus.CallContext[bytes]) -> None:
        ...     print(len(ctx.result), "bytes")
        >>> asyncio.run(fetch("https://example.org"))
        4 bytes
        b'page'
    """

    __name__: str
    __qualname__: str
    __hookbus_point__: HookPoint

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]: ...

    @overload
    def __get__(self, instance: None, owner: Any, /) -> Self: ...

    @overload
    def __get__(
        self: AsyncTypedPoint[Concatenate[S, Q], R], instance: S, owner: Any, /
    ) -> Callable[Q, Coroutine[Any, Any, R]]: ...

    @overload
    def pre(self, hook: AsyncHook[R], /, **options: Unpack[HookOptions]) -> AsyncHook[R]: ...

    @overload
    def pre(self, /, **options: Unpack[HookOptions]) -> Callable[[AsyncHook[R]], AsyncHook[R]]: ...

    @overload
    def post(self, hook: AsyncHook[R], /, **options: Unpack[HookOptions]) -> AsyncHook[R]: ...

    @overload
    def post(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[AsyncHook[R]], AsyncHook[R]]: ...

    @overload
    def exception(self, hook: AsyncHook[R], /, **options: Unpack[HookOptions]) -> AsyncHook[R]: ...

    @overload
    def exception(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[AsyncHook[R]], AsyncHook[R]]: ...

    # around: to come with bus.around (a hook that wraps the call), typed the same way.


class TypedClassPoint(Protocol[C, P, R]):
    """A hook point made from a classmethod, ``@hookable`` above ``@classmethod``.

    Type checkers hand such a decorator the function, whose first parameter is the
    class: read through the class or an instance, the point is a :class:`TypedPoint`
    without it, as Python's classmethod binds it.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> class Model:
        ...     @bus.hookable("make")
        ...     @classmethod
        ...     def make(cls, size: int) -> "Model":
        ...         return cls()
        >>> _ = Model.make.post(lambda ctx: print("made", type(ctx.result).__name__))
        >>> _ = Model.make(3)
        made Model
    """

    __name__: str
    __qualname__: str

    def __call__(self, cls: Type[C], /, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def __get__(self, instance: Optional[C], owner: Type[C], /) -> TypedPoint[P, R]: ...
