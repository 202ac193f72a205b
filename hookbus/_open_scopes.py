"""The scopes open in this thread or task: what a registration joins.

``with bus.scope():`` (:class:`~hookbus.Scope`, in ``_scope.py``) opens one here, and
the registry adds each new handle to the innermost open scope of its own bus.
Kept apart from ``Scope``, which registers through the registry: the registry
reads this module, and ``Scope`` sits above both.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, List, Optional, Set, Tuple

from typing_extensions import Protocol

if TYPE_CHECKING:
    from ._handle import Handle

__all__ = ["OpenScope", "enter", "innermost_scope", "leave", "open_scopes", "opened_anywhere"]


class OpenScope(Protocol):
    """What registration needs of an open scope: whose it is, and to take a handle."""

    @property
    def registry(self) -> object:
        """The registry of the bus whose registrations join the scope."""
        ...

    def add(self, handle: Handle) -> None:
        """Take a handle registered while the scope is open."""
        ...


# One ``with scope:`` in the context that entered it: a cell holding the scope,
# emptied (None) on exit, wherever that is. A scope may be exited in another thread
# or task, whose context can't reset the one it was entered in: the cell stays
# there, empty, and registration skips it. (A list: cheaper to make than an object.)
Opening = List[Optional[OpenScope]]

Token = contextvars.Token[Tuple[Opening, ...]]

open_scopes: contextvars.ContextVar[Tuple[Opening, ...]] = contextvars.ContextVar(
    "hookbus_open_scopes", default=()
)
"""The scopes open in this thread or task, innermost last."""

opened_anywhere: Set[int] = set()
"""The scopes open now in any thread or task (``id`` of their cell). Registration
reads this before :data:`open_scopes`: while it is empty, every cell in every context
is empty, and one test of a set spares a ``ContextVar`` lookup, a twentieth of a
register + remove. ``set.add`` and ``set.discard`` are atomic: no lock is needed."""


def enter(scope: OpenScope) -> Tuple[Opening, Token]:
    """Open ``scope`` in this context; return what :func:`leave` needs to close it."""
    opening: Opening = [scope]
    opened_anywhere.add(id(opening))  # before the context sees it: never read as empty
    current = open_scopes.get()
    if current and not all(each[0] for each in current):  # drop those closed elsewhere
        current = tuple(each for each in current if each[0] is not None)
    return opening, open_scopes.set((*current, opening))


def leave(opening: Opening, token: Token) -> None:
    """Close the scope that :func:`enter` opened, from any thread or task."""
    opening[0] = None  # first: from now on nothing joins it, in any context
    opened_anywhere.discard(id(opening))
    current = open_scopes.get()
    if current and current[-1] is opening:
        try:  # noqa: SIM105 - suppress() would cost a context manager per exit
            open_scopes.reset(token)
        except ValueError:  # entered in another thread or task: stays there, skipped
            pass
    elif any(each is opening for each in current):  # left before an inner one
        open_scopes.set(tuple(each for each in current if each[0] is not None))


def innermost_scope(registry: object) -> Optional[OpenScope]:
    """The innermost scope of ``registry``'s bus open in this context, if any."""
    for (scope,) in reversed(open_scopes.get()):
        if scope is not None and scope.registry is registry:
            return scope
    return None
