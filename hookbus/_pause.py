"""Pauses: the context manager of :meth:`EventBus.paused`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._bus import EventBus

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

    __slots__ = ("_bus", "_name")

    def __init__(self, bus: EventBus, name: Optional[str]) -> None:
        self._bus = bus
        self._name = name

    def __enter__(self) -> Self:
        self._bus.registry.pause(self._name, +1)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._bus.registry.pause(self._name, -1)

    def __repr__(self) -> str:
        return f"<paused {self._name or 'whole bus'!r} on {self._bus!r}>"
