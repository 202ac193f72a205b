"""Helpers of the core tests: hooks and listeners that log their calls, a declared event, where
a hook is, and a thorough garbage collection."""

from __future__ import annotations

import gc
from typing import Any, Callable, List

from hookbus import CallContext, Event, EventBus


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


class Listener:
    def __init__(self, log: List[str]) -> None:
        self.log = log

    def on_event(self, *args: Any) -> None:
        self.log.append("listener")

    def on_call(self, ctx: CallContext) -> None:
        self.log.append(f"listener {ctx.phase}")


def collect_garbage() -> None:
    for _ in range(3):  # PyPy-style generations and cycles: be thorough
        gc.collect()
