"""The live hook points of one registry, by name, held weakly.

A hook change tells the points of its name (``Registry``'s invalidation), so reading
a name's points is on the path of every registration and removal of a point's hook.
A name keeps a tuple of weak references, read in a short loop; a ``WeakSet`` per name
would run a generator with an iteration guard at each read (about a third of the
cost of a registration plus a removal on a hooked point).

A point that dies leaves a dead reference behind until its name changes again or the
names are swept: it references nothing, and costs a test where its name is read.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Tuple

if TYPE_CHECKING:
    from ._names import Matcher
    from ._plan import Point

__all__ = ["LivePoints", "PointRefs"]

PointRefs = Tuple["weakref.ref[Point]", ...]


class LivePoints:
    """Each name's live hook points, held weakly, in the order they were added.

    Not thread-safe by itself: the registry reads and changes it under its lock.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> double = bus.wrap(lambda x: 2 * x, "double")
        >>> points = LivePoints()
        >>> points.add(double.__hookbus_point__)
        >>> points.named("double") == [double.__hookbus_point__], points.has("other")
        (True, False)
        >>> points.discard(double.__hookbus_point__)
        >>> points.named("double"), points.names()
        ([], [])
    """

    __slots__ = ("_refs", "_sweep_at", "refs_or")

    def __init__(self) -> None:
        self._refs: Dict[str, PointRefs] = {}
        self._sweep_at = 64
        # refs(), without its frame: ``refs_or(name, ())``, the dict's own get (it is
        # never replaced). A hook added and removed around each call reads it twice.
        self.refs_or: Callable[[str, PointRefs], PointRefs] = self._refs.get

    def refs(self, name: str) -> PointRefs:
        """The weak references to the points named ``name`` (some may be dead): the
        hot path's read, a tuple kept as is until the name's points change."""
        return self._refs.get(name, ())

    def add(self, point: Point) -> None:
        """Keep ``point`` under its name (once: adding it again changes nothing)."""
        name = point.name
        refs = self._refs.get(name)
        if refs is None:
            if len(self._refs) >= self._sweep_at:
                # Forget names left with no point, or wrapping under ever-new names
                # would leak (amortized: at most once per doubling).
                self._sweep()
            self._refs[name] = (weakref.ref(point),)
            return
        live = tuple(ref for ref in refs if ref() is not None)
        if any(ref() is point for ref in live):
            return
        self._refs[name] = (*live, weakref.ref(point))

    def discard(self, point: Point) -> None:
        """Forget ``point`` (a point not kept is ignored)."""
        name = point.name
        refs = self._refs.get(name)
        if refs is None:
            return
        kept = tuple(ref for ref in refs if ref() is not None and ref() is not point)
        if kept:
            self._refs[name] = kept
        else:
            del self._refs[name]

    def named(self, name: str) -> List[Point]:
        """The live points named ``name``."""
        return _alive(self._refs.get(name, ()))

    def has(self, name: str) -> bool:
        """Whether a live point is named ``name``."""
        return _any_alive(self._refs.get(name, ()))

    def names(self) -> List[str]:
        """The names that have a live point."""
        return [name for name, refs in self._refs.items() if _any_alive(refs)]

    def matching(self, match: Matcher) -> List[Point]:
        """The live points whose name ``match`` accepts."""
        return [point for name, points in self.items() if match(name) for point in points]

    def items(self) -> Iterator[Tuple[str, List[Point]]]:
        """Each name that has a live point, with its live points."""
        for name, refs in list(self._refs.items()):
            points = _alive(refs)
            if points:
                yield name, points

    def every(self) -> List[Point]:
        """Every live point."""
        return [point for _, points in self.items() for point in points]

    def _sweep(self) -> None:
        refs = self._refs
        for name in [name for name, each in refs.items() if not _any_alive(each)]:
            del refs[name]
        self._sweep_at = 2 * len(refs) + 64


def _any_alive(refs: PointRefs) -> bool:
    return any(ref() is not None for ref in refs)


def _alive(refs: PointRefs) -> List[Point]:
    points: List[Point] = []
    for ref in refs:
        point: Optional[Point] = ref()
        if point is not None:
            points.append(point)
    return points
