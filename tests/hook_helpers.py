"""Helpers of the core tests: hooks that log their calls, a declared event, where a hook is."""

from __future__ import annotations

from typing import Any, Callable, List

from hookbus import Event, EventBus


def recorder(log: List[Any], label: Any) -> Any:
    def hook(*args: Any, **kwargs: Any) -> Any:
        log.append((label, args, kwargs))
        return label

    return hook


def labels(log: List[Any]) -> List[Any]:
    return [entry[0] for entry in log]


def line_of(fn: Callable[..., Any]) -> str:
    return f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"


def declare_user_created(bus: EventBus, name: str = "user.created") -> Event[Any]:
    @bus.event(name)
    def user_created(user: str, *, admin: bool = False) -> None:
        """Emitted after a user row is committed."""

    return user_created
