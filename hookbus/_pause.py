"""``Pause``: the context manager of ``bus.paused(name)``, which stops a name's hooks
(or the whole bus's) from running while it is open; pauses nest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ._registry import Registry
from ._scope import warn_never_entered

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Pause"]


class Pause:
    """The context manager returned by :meth:`EventBus.paused`; pauses nest.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> _ = bus.on("tick", print)
        >>> with bus.paused("tick") as pause:
        ...     bus.emit("tick", "muted")
        >>> pause  # doctest: +ELLIPSIS
        <paused 'tick' on <EventBus 'bus-...' ...>>
    """

    __slots__ = ("_entered", "_name", "_registry")

    def __init__(self, registry: Registry, name: Optional[str]) -> None:
        self._registry = registry
        self._name = name
        self._entered = False

    def __enter__(self) -> Self:
        self._registry.pause(self._name, +1)
        self._entered = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._registry.pause(self._name, -1)

    def __repr__(self) -> str:
        return f"<paused {self._name or 'whole bus'!r} on {self._registry.bus!r}>"

    def __del__(self) -> None:
        if not self._entered:  # bus.paused(...) without ``with``: it paused nothing
            warn_never_entered(
                self._registry,
                f"{self!r} was never entered, so it paused nothing: write 'with bus.paused(...):'",
            )
