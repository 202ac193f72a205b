"""Error policies: what the bus does when a hook raises."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, List, Literal

if TYPE_CHECKING:
    from ._handle import Handle

if sys.version_info >= (3, 11):
    from builtins import ExceptionGroup
else:  # pragma: no cover - exercised on 3.9 and 3.10 only
    from exceptiongroup import ExceptionGroup

__all__ = [
    "ERROR_POLICIES",
    "ErrorPolicy",
    "ExceptionGroup",
    "HookError",
    "check_policy",
]

ErrorPolicy = Literal["raise", "collect", "log"]
"""``"raise"``: the first error propagates at once (the default).
``"collect"``: every hook runs, then one ``ExceptionGroup`` holds all errors.
``"log"``: each error is logged on the ``"hookbus"`` logger and dispatch goes on."""

ERROR_POLICIES = ("raise", "collect", "log")

logger = logging.getLogger("hookbus")


class HookError(ExceptionGroup):  # type: ignore[type-arg,misc,unused-ignore]
    """The ``ExceptionGroup`` that the ``"collect"`` policy raises.

    It holds every error raised by the hooks of one dispatch, each with a note
    naming its hook. Catch it as ``HookError``, or with ``except*``.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus(errors="collect")
        >>> _ = bus.on("e", lambda: 1 / 0)
        >>> _ = bus.on("e", lambda: [][0])
        >>> try:
        ...     bus.emit("e")
        ... except hookbus.HookError as group:
        ...     print([type(error).__name__ for error in group.exceptions])
        ['ZeroDivisionError', 'IndexError']
    """


def check_policy(errors: object) -> ErrorPolicy:
    """Return ``errors`` if it is a known policy, else raise saying which are."""
    if errors not in ERROR_POLICIES:
        raise ValueError(f"unknown error policy {errors!r}; accepted: {', '.join(ERROR_POLICIES)}")
    return errors  # type: ignore[return-value]


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` unless ``error`` has that note already; before Python 3.11,
    its ``__notes__`` equivalent.

    Once: one exception object is often raised again and again through the same hook
    (a sentinel error, a retry loop, ``future.result()``), and a note per dispatch
    would grow it without end.

    Example:
        >>> error = ValueError("offline")
        >>> for _ in range(3):
        ...     add_note(error, "hookbus: raised by a hook")
        >>> error.__notes__
        ['hookbus: raised by a hook']
    """
    existing_notes: Any = getattr(error, "__notes__", None)
    if isinstance(existing_notes, list) and note in existing_notes:
        return
    if sys.version_info >= (3, 11):
        error.add_note(note)
    else:  # pragma: no cover - exercised on 3.9 and 3.10 only
        existing: Any = getattr(error, "__notes__", None)
        notes: List[str] = existing if isinstance(existing, list) else []  # pyright: ignore[reportUnknownVariableType]
        if notes is not existing:
            try:
                error.__notes__ = notes  # type: ignore[attr-defined]
            except (AttributeError, TypeError):
                return
        notes.append(note)


def describe(handle: Handle, where: str) -> str:
    """The note attached to an error: which hook, defined where, on which name."""
    what = "event" if handle.kind == "event" else f"{handle.kind} hook point"
    return f"hookbus: raised by {handle!r} ({handle.where}) on {what} {where!r}"


def handle_error(
    policy: ErrorPolicy, error: Exception, handle: Handle, where: str, errors: List[Exception]
) -> None:
    """Apply a non-raising policy to one hook's error (the caller re-raises for "raise")."""
    add_note(error, describe(handle, where))
    if policy == "collect":
        errors.append(error)
    else:
        logger.error(
            "hook %r on %r raised; going on with the next hook",
            handle,
            where,
            exc_info=(type(error), error, error.__traceback__),
        )


def raise_collected(errors: List[Exception], where: str) -> Any:
    """Raise the ``"collect"`` policy's group, if any hook raised.

    The list is emptied: it is a local of the dispatch loop, whose frame each
    error's traceback holds, so keeping the errors in it would make reference
    cycles that keep the dispatch's arguments alive until the garbage collector runs.
    """
    if errors:
        try:
            raise HookError(f"{len(errors)} hook(s) raised on {where!r}", errors)
        finally:
            errors.clear()
