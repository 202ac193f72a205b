"""``Subset``, what ``bus.without(...)`` returns: a bus's emissions that leave some hooks
out, as pluggy's ``subset_hook_caller``. The bus hands it its full emissions (every
emission but ``emit``'s fast loop), which take the hooks to leave out."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, FrozenSet, List

from ._handle import Handle

__all__ = ["Subset"]


class Subset:
    """The bus's emissions, leaving some hooks out: what :meth:`EventBus.without` returns.

    pluggy's ``subset_hook_caller``. Each method is the bus's own, for the same event,
    except that the hooks left out don't run (event hooks and around hooks alike).
    Nothing is changed on the bus: every other emission, in any thread, runs them.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> csv = bus.on("formats", lambda: "csv")
        >>> _ = bus.on("formats", lambda: "json")
        >>> bus.without(csv).collect("formats"), bus.collect("formats")
        (['json'], ['csv', 'json'])
    """

    __slots__ = ("_bus", "_emit", "_emit_async", "_left_out")

    def __init__(
        self,
        bus: object,
        emit: Callable[..., Any],
        emit_async: Callable[..., Awaitable[Any]],
        left_out: FrozenSet[Handle],
    ) -> None:
        """``emit`` and ``emit_async``: the bus's full emissions, which take the event,
        its arguments, where to collect results and the hooks to leave out."""
        self._bus = bus  # for the repr
        self._emit = emit
        self._emit_async = emit_async
        self._left_out = left_out

    def emit(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """:meth:`EventBus.emit`, without the hooks left out."""
        self._emit(event, args, kwargs, None, left_out=self._left_out)

    def collect(self, event: str, /, *args: Any, **kwargs: Any) -> List[Any]:
        """:meth:`EventBus.collect`, without the hooks left out."""
        return self._emit(event, args, kwargs, [], left_out=self._left_out)  # type: ignore[no-any-return]

    def first(self, event: str, /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`EventBus.first`, without the hooks left out."""
        return self._emit(event, args, kwargs, [], first=True, left_out=self._left_out)

    async def emit_async(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """:meth:`EventBus.emit_async`, without the hooks left out."""
        await self._emit_async(event, args, kwargs, None, left_out=self._left_out)

    async def collect_async(self, event: str, /, *args: Any, **kwargs: Any) -> List[Any]:
        """:meth:`EventBus.collect_async`, without the hooks left out."""
        return await self._emit_async(  # type: ignore[no-any-return]
            event, args, kwargs, [], left_out=self._left_out
        )

    def __repr__(self) -> str:
        count = len(self._left_out)
        return f"<{self._bus!r} without {count} hook{'' if count == 1 else 's'}>"
