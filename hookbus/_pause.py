"""Pauses: the context manager of :meth:`EventBus.paused`, and the names a bus has paused."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional

from ._names import Matcher, is_pattern, matcher_for

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._bus import EventBus

__all__ = ["NO_PAUSES", "Pause", "Pauses"]


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


class Pauses:
    """The names a bus has paused, each with its count of open pauses (``None``: all).

    Never changed in place: :meth:`changed` returns a new one, so a registry's
    snapshot keeps the one it saw.

    Example:
        >>> from hookbus._pause import NO_PAUSES
        >>> pauses = NO_PAUSES.changed("train.*", +1).changed("eval", +1)
        >>> pauses.covers("train.step"), pauses.covers("eval"), pauses.covers("test")
        (True, True, False)
        >>> bool(pauses.changed("train.*", -1).changed("eval", -1))
        False
    """

    __slots__ = ("_counts", "_matchers")

    def __init__(self, counts: Dict[Optional[str], int], matchers: Dict[str, Matcher]) -> None:
        self._counts = counts
        self._matchers = matchers  # of the paused patterns

    def changed(self, name: Optional[str], delta: int) -> Pauses:
        """These pauses with ``delta`` (+1 or -1) more pauses of ``name``."""
        counts, matchers = dict(self._counts), dict(self._matchers)
        count = counts.get(name, 0) + delta
        if count:
            counts[name] = count
            if name is not None and is_pattern(name):
                matchers[name] = matcher_for(name)
        else:
            counts.pop(name, None)
            matchers.pop(name or "", None)
        return Pauses(counts, matchers)

    def covers(self, name: str) -> bool:
        """Whether a dispatch of ``name`` is paused: by name, by pattern, or all of them."""
        if None in self._counts or name in self._counts:
            return True
        return any(match(name) for match in self._matchers.values())

    def __bool__(self) -> bool:
        return bool(self._counts)


NO_PAUSES = Pauses({}, {})
"""Nothing paused."""
