"""Scopes: a group of handles that also collects every hook registered while it is open."""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional

from ._handle import Handle, HandleGroup
from ._open_scopes import Opening, Token, enter, leave

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack

    from ._options import EventHookOptions, HookOptions
    from ._registry import Registry

__all__ = ["Scope", "warn_never_entered"]


class Scope(HandleGroup):
    """A group that also collects every hook registered on its bus while it is open.

    Made by :meth:`EventBus.scope`. Inside ``with bus.scope():``, every registration
    on ``bus`` made in the same thread or asyncio task (and tasks it starts) joins
    the innermost open scope, and leaving the block removes them all, even when it
    raises. Scopes nest: an inner scope removes only what was registered inside it.
    A scope can also register directly (``scope.on(...)``), from any thread, and
    may be exited from any thread or task: from then on, nothing joins it.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> with bus.scope():
        ...     _ = bus.on("tick", print)
        ...     bus.emit("tick", "heard")
        heard
        >>> bus.emit("tick", "not heard")
        >>> bus.hooks()
        []
    """

    __slots__ = ("_opening", "_token", "_used", "registry")

    def __init__(self, registry: Registry) -> None:
        super().__init__()
        self.registry = registry
        self._opening: Optional[Opening] = None
        self._token: Optional[Token] = None
        self._used = False  # entered, or given a hook through scope.on(...)

    def add(self, handle: Handle) -> None:
        """Add a handle to the scope (``scope.on(...)`` does)."""
        self._used = True
        super().add(handle)

    def on(
        self, event: str, hook: Callable[..., Any], **options: Unpack[EventHookOptions]
    ) -> Handle:
        """Register an event hook in this scope (see :meth:`EventBus.on`)."""
        return self.registry.register("event", event, hook, options, scope=self)

    def pre(self, name: str, hook: Callable[..., Any], **options: Unpack[HookOptions]) -> Handle:
        """Register a pre hook in this scope (see :meth:`EventBus.pre`)."""
        return self.registry.register("pre", name, hook, options, scope=self)

    def post(self, name: str, hook: Callable[..., Any], **options: Unpack[HookOptions]) -> Handle:
        """Register a post hook in this scope (see :meth:`EventBus.post`)."""
        return self.registry.register("post", name, hook, options, scope=self)

    def exception(
        self, name: str, hook: Callable[..., Any], **options: Unpack[HookOptions]
    ) -> Handle:
        """Register an exception hook in this scope (see :meth:`EventBus.exception`)."""
        return self.registry.register("exception", name, hook, options, scope=self)

    def around(
        self, name: str, hook: Callable[..., Any], **options: Unpack[HookOptions]
    ) -> Handle:
        """Register an around hook in this scope (see :meth:`EventBus.around`)."""
        return self.registry.register("around", name, hook, options, scope=self)

    def __enter__(self) -> Self:
        if self._opening is not None:
            raise RuntimeError("this scope is already open; make a new one with bus.scope()")
        self._opening, self._token = enter(self)
        self._used = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        opening, self._opening = self._opening, None
        token, self._token = self._token, None
        try:
            if opening is not None and token is not None:
                leave(opening, token)
        finally:
            self.remove()

    def __del__(self) -> None:
        if not getattr(self, "_used", True):  # bus.scope() without ``with``: collected nothing
            warn_never_entered(
                self.registry,
                f"bus.scope() of {self.registry.bus!r} was never entered, so it collects and "
                f"removes nothing: write 'with bus.scope():' (or register through scope.on(...))",
            )


def warn_never_entered(registry: Registry, message: str) -> None:
    """Warn that a context manager of a bus was dropped without a ``with``.

    Called from ``__del__``, whose caller is the statement that dropped it. Nothing is
    said while the bus lock is held (the garbage collector may run a finalizer then, and
    a warning handler may use the bus) or while Python shuts down.
    """
    if not sys.is_finalizing() and not registry.locked():
        warnings.warn(message, RuntimeWarning, stacklevel=3)
