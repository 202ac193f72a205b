"""The live hook points of one registry: kept weakly, by name, guarded by its lock."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence

if TYPE_CHECKING:
    from ._handle import Handle
    from ._names import Matcher
    from ._plan import Point

__all__ = ["PointTable", "async_hook_error", "notify", "sync_point_error"]


class PointTable:
    """Hook points by name, held weakly: a point dies with its wrapper or module.

    Only its :class:`~hookbus._registry.Registry` uses it, with the registry's
    lock held; so none of its methods locks, or calls a point.

    Example:
        >>> import hookbus
        >>> from hookbus._names import matcher_for
        >>> from hookbus._points import PointTable
        >>> bus = hookbus.EventBus()
        >>> point = bus.wrap(len, "len").__hookbus_point__
        >>> table = PointTable()
        >>> table.add(point, []) is None
        True
        >>> table.named("len") == [point], table.affected("l*", matcher_for("l*")) == [point]
        (True, True)
    """

    __slots__ = ("_by_name", "_sweep_at")

    def __init__(self) -> None:
        self._by_name: Dict[str, weakref.WeakSet[Point]] = {}
        self._sweep_at = 64

    def add(self, point: Point, handles: Iterable[Handle]) -> Optional[Handle]:
        """Keep ``point``, unless it is sync and one of ``handles`` (all hooks) is async.

        Returns that async handle, keeping nothing, for the caller to raise about
        once it released its lock (a handle's repr reads the user's callable).
        """
        if not point.is_async:
            for handle in handles:
                if (
                    handle.is_async
                    and handle.kind in point.kinds
                    and handle.applies_to(point.name)
                ):
                    return handle
        by_name = self._by_name
        if point.name not in by_name and len(by_name) >= self._sweep_at:
            # Forget names left with no point, or wrapping under ever-new names
            # would leak (amortized: at most once per doubling).
            for name in [name for name, points in by_name.items() if not points]:
                del by_name[name]
            self._sweep_at = 2 * len(by_name) + 64
        by_name.setdefault(point.name, weakref.WeakSet()).add(point)
        return None

    def discard(self, point: Point) -> None:
        """Forget ``point`` (idempotent)."""
        points = self._by_name.get(point.name)
        if points is not None:
            points.discard(point)
            if not points:
                del self._by_name[point.name]

    def named(self, name: str) -> List[Point]:
        """The live points named ``name``."""
        return list(self._by_name.get(name, ()))

    def affected(self, name: str, match: Optional[Matcher]) -> List[Point]:
        """The points a change of hooks for ``name`` reaches (``match``: it is a pattern)."""
        if match is None:
            return list(self._by_name.get(name, ()))
        return [p for point_name, ps in self._by_name.items() if match(point_name) for p in ps]

    def all(self) -> List[Point]:
        """Every live point."""
        return [point for points in self._by_name.values() for point in points]

    def async_conflict(self, handle: Handle) -> Optional[str]:
        """The name of a sync point that the async ``handle`` would apply to, if any."""
        for point_name, points in self._by_name.items():
            if handle.applies_to(point_name) and any(not p.is_async for p in points):
                return point_name
        return None


def notify(points: Sequence[Point]) -> None:
    """Tell ``points`` that their hooks changed (no lock held: they may run any code)."""
    for point in points:
        point.invalidate()


def async_hook_error(handle: Handle, point_name: str) -> TypeError:
    """The error for an async hook registered where a sync point would run it."""
    return TypeError(
        f"async {handle.kind} hook {handle!r} matches the sync hook point {point_name!r}; "
        f"async hooks need an async hook point (an 'async def' function). Use a plain "
        f"'def' hook there."
    )


def sync_point_error(point_name: str, handle: Handle) -> TypeError:
    """The error for a sync point made where an async hook would match it."""
    return TypeError(
        f"the sync hook point {point_name!r} matches the async hook {handle!r}; async hooks "
        f"need an async hook point (an 'async def' function)"
    )
