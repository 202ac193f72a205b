"""The hooks of one registry: exact names and patterns, by kind, in registration order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from ._names import is_pattern

if TYPE_CHECKING:
    from ._handle import Handle

__all__ = ["HookStore", "StoredHooks"]

# A copy of a store's hooks, for Registry.snapshot: (exact, patterns).
StoredHooks = Tuple[Dict[str, Dict[str, List["Handle"]]], Dict[str, List["Handle"]]]

_NO_NAMES: Dict[str, List[Handle]] = {}


def _order(handle: Handle) -> Tuple[int, int]:
    return (-handle.priority, handle.seq)


class HookStore:
    """Hooks by kind: exact names by name, patterns in one list; each in registration order.

    Only its :class:`~hookbus._registry.Registry` uses it, with the registry's lock
    held, so none of its methods locks or calls a hook. The registry adds and drops
    hooks in ``exact`` and ``patterns`` itself, inline: that is the hot path of
    register and remove. Nested dicts rather than (kind, name) keys: a tuple key
    would cost 56 bytes more per name.

    Example:
        >>> import hookbus
        >>> from hookbus._store import HookStore
        >>> bus = hookbus.EventBus()
        >>> store = HookStore()
        >>> late, early = bus.on("a", print), bus.on("a.*", print, priority=5)
        >>> store.exact["event"] = {"a": [late]}
        >>> store.patterns["event"] = [early]
        >>> store.matching("event", "a.b", literal=False) == (early,), store.all() == [late, early]
        (True, True)
    """

    __slots__ = ("exact", "patterns")

    def __init__(self) -> None:
        self.exact: Dict[str, Dict[str, List[Handle]]] = {}
        self.patterns: Dict[str, List[Handle]] = {}

    def all(self) -> List[Handle]:
        """Every hook: the exact ones, then the patterns."""
        handles = [h for names in self.exact.values() for bucket in names.values() for h in bucket]
        handles += [h for bucket in self.patterns.values() for h in bucket]
        return handles

    def matching(self, kind: str, name: str, literal: bool) -> Tuple[Handle, ...]:
        """The hooks of ``kind`` for ``name``, exact and by pattern, in dispatch order.

        A ``name`` with glob characters asks for that pattern's own hooks, unless it is
        ``literal`` (a torch module may be called ``"a[0]"``).
        """
        bucket = self.exact.get(kind, _NO_NAMES).get(name, ())
        patterns = self.patterns.get(kind)
        if not patterns and len(bucket) < 2:  # the common case: one check per kind, for
            return tuple(bucket)  # points that ask for all their kinds at each change
        if not literal and is_pattern(name):  # introspection of a pattern: its own hooks
            own = [handle for handle in patterns or () if handle.name == name]
            return tuple(sorted(own, key=_order))
        if not patterns:
            return tuple(sorted(bucket, key=_order))
        handles = [*bucket, *(handle for handle in patterns if handle.match(name))]  # type: ignore[misc]
        handles.sort(key=_order)
        return tuple(handles)

    def listing(self, name: Optional[str]) -> List[Handle]:
        """All hooks by kind, name and order; or, kind by kind, those that run for ``name``."""
        if name is None:
            return sorted(self.all(), key=lambda h: (h.kind, h.name, -h.priority, h.seq))
        kinds = sorted({h.kind for h in self.all()})
        return [handle for kind in kinds for handle in self.matching(kind, name, False)]

    def copy(self) -> StoredHooks:
        """The hooks as they are now, for :meth:`restore`."""
        exact = {
            kind: {n: list(b) for n, b in names.items()} for kind, names in self.exact.items()
        }
        return exact, {kind: list(bucket) for kind, bucket in self.patterns.items()}

    def restore(self, stored: StoredHooks) -> None:
        """Put the hooks back as :meth:`copy` saw them, but for weak ones whose object died.

        The dicts stay the same objects: the registry's hot path holds them.
        """
        exact, patterns = stored
        for handle in self.all():
            handle._registered = False
        for bucket in [
            *(b for names in exact.values() for b in names.values()),
            *patterns.values(),
        ]:
            bucket[:] = [h for h in bucket if not h.weak or h.hook is not None]
            for handle in bucket:
                handle._registered = True
        self.exact.clear()
        self.exact.update(
            {kind: {n: b for n, b in names.items() if b} for kind, names in exact.items()}
        )
        self.patterns.clear()
        self.patterns.update({kind: bucket for kind, bucket in patterns.items() if bucket})
